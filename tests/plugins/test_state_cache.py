"""The pages' reader of the state Variables: from the metadata DB, parsed once per change."""

from __future__ import annotations

import json

import pytest

from elasticgrid_provider.core.state import ScaleState, state_variable_key
from elasticgrid_provider.plugins import state_cache
from elasticgrid_provider.plugins.state_cache import read_scale_states
from tests.plugins.recorded import audited_job

pytestmark = pytest.mark.airflow


def _set(key: str, value: str, encrypted: bool = True) -> None:
    """Set a Variable as Airflow stores it: encrypted with the session's fernet key, or as it
    is (as without a fernet key)."""
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import update

    Variable.set(key, value)
    if not encrypted:
        with create_session() as session:
            session.execute(
                update(Variable).where(Variable.key == key).values(val=value, is_encrypted=False)
            )


def _delete(*keys: str) -> None:
    from airflow.models.variable import Variable

    for key in keys:
        Variable.delete(key)


def test_the_ui_lists_the_state_variables_from_the_metadata_db(airflow_db):
    state = ScaleState(job_name="listed").model_dump()
    _set(state_variable_key("listed"), json.dumps(state))
    _set("unrelated", "1")
    try:
        every = {stored.variable_key: stored for stored in read_scale_states()}
        assert "unrelated" not in every  # only state Variables (other tests' may be there too)
        assert every[state_variable_key("listed")].data == state
        assert [s.job_name for s in read_scale_states("listed")] == ["listed"]
        assert read_scale_states("never-checked") == []
    finally:
        _delete(state_variable_key("listed"), "unrelated")


@pytest.mark.parametrize("fernet", [True, False], ids=["encrypted", "plain"])
def test_a_state_is_parsed_again_only_when_its_variable_changed(airflow_db, monkeypatch, fernet):
    key = state_variable_key("cached")
    state_cache.forget()
    parsed: list[str] = []
    real = state_cache._parsed
    monkeypatch.setattr(state_cache, "_parsed", lambda k, text: parsed.append(k) or real(k, text))
    first = audited_job("cached").model_dump()
    _set(key, json.dumps(first), fernet)
    try:
        (one,) = read_scale_states("cached")
        (again,) = read_scale_states("cached")
        assert again is one and parsed == [key]  # unchanged: not parsed again
        assert "inputs" not in one.history[-1]  # what no page reads is not kept
        assert "readable" not in one.history[-1]["context"]
        changed = {**first, "revision": first["revision"] + 1}
        changed["history"] = first["history"][:-1]
        _set(key, json.dumps(changed), fernet)
        (newer,) = read_scale_states("cached")
        assert parsed == [key, key] and len(newer.history) == len(one.history) - 1
        _set(
            key, json.dumps(changed), fernet
        )  # the same text written again: read as a change or not,
        (same,) = read_scale_states("cached")  # never as another state
        assert same.data == newer.data
    finally:
        _delete(key)
        state_cache.forget()


def test_the_cache_keeps_a_bounded_number_of_decisions(airflow_db, monkeypatch):
    monkeypatch.setattr(state_cache, "MAX_CACHED_ENTRIES", 7)
    state_cache.forget()
    keys = []
    try:
        for name in ("lru-a", "lru-b", "lru-c"):
            keys.append(state_variable_key(name))
            _set(keys[-1], json.dumps(audited_job(name).model_dump()))  # 3 entries each
            read_scale_states(name)
        assert list(state_cache._cache) == keys[1:]  # the least recently read went first
    finally:
        _delete(*keys)
        state_cache.forget()


@pytest.mark.parametrize("stored", ["compact", "indented"])
def test_the_fast_parse_keeps_all_the_slow_one_keeps(stored):
    """Each entry's fields but ``inputs`` and ``context.readable``, unknown ones too, from a
    state as the check stores it (compact, no readable) or as older releases did (indented)."""
    from elasticgrid_provider.hooks.state_store import state_text
    from elasticgrid_provider.plugins.jobs import parse_state
    from tests.plugins.recorded import long_history

    data = long_history(30, "fast")
    data["history"][3]["from_a_newer_minor"] = {"kept": [1, 2]}
    text = state_text(data) if stored == "compact" else json.dumps(data, indent=2)
    key = state_variable_key("fast")

    fast = state_cache._parsed(key, text)

    slow = state_cache._slim(parse_state(key, text))
    assert fast.error is None and fast.data == slow.data
    assert fast.history[3]["from_a_newer_minor"] == {"kept": [1, 2]}
    assert all("inputs" not in entry for entry in fast.history)
    assert all("readable" not in entry["context"] for entry in fast.history)
    assert len(fast.history) == 30


@pytest.mark.parametrize(
    "text", ["{not json", "[]", '{"job_name": "odd", "history": [1, 2]}', '"text"']
)
def test_a_document_the_fast_parse_cannot_read_is_reported_as_the_slow_one_reports_it(text):
    from elasticgrid_provider.plugins.jobs import parse_state

    key = state_variable_key("odd")
    assert state_cache._parsed(key, text) == state_cache._slim(parse_state(key, text))


def test_the_state_is_stored_compact_without_the_derived_readable_part():
    from elasticgrid_provider.hooks.state_store import state_text
    from tests.plugins.recorded import long_history

    data = long_history(10, "small")
    text = state_text(data)

    stored = json.loads(text)
    assert text == json.dumps(stored, separators=(",", ":"))  # no blank between tokens
    assert all("readable" not in entry["context"] for entry in stored["history"])
    for kept, entry in zip(stored["history"], data["history"], strict=True):
        context = {k: v for k, v in entry["context"].items() if k != "readable"}
        assert kept == {**entry, "context": context}
    assert len(text) < len(json.dumps(data, indent=2)) / 2
