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
    real = state_cache.parse_state
    monkeypatch.setattr(
        state_cache, "parse_state", lambda k, text: parsed.append(k) or real(k, text)
    )
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
