"""Forward-compatible records (core/records.py): what another release wrote is read safely.

The fixtures in ``tests/fixtures/records`` were written by main before the record rule
(``written_by_main.py`` says how). A fuzz adds fields a newer minor might have added, at
random, to every object of each record that keeps them: reading and writing back keeps
each one where it was, and nothing is refused; a higher major is refused in one sentence.
"""

from __future__ import annotations

import copy
import json
import string
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticgrid_provider.core.errors import ElasticGridError, NewerRecordError
from elasticgrid_provider.core.fleet.ledger import (
    REQUEST_LAYOUT,
    CapacityRequest,
    GridLedger,
    renew,
)
from elasticgrid_provider.core.job import JobManifest
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.records import RecordLayout
from elasticgrid_provider.core.state import DecisionRecord, ScaleState
from elasticgrid_provider.core.step_log import LogCursor

FIXTURES = Path(__file__).parents[1] / "fixtures" / "records"
VERSION_KEYS = ("schema_version", "schema_minor")


def _fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


class Kind:
    """One record: its fixture, how it is read, the objects that keep unknown fields (paths,
    ``*`` for every entry), and a rewrite that changes it in place, as a worker would."""

    def __init__(
        self,
        fixture: str,
        load: Callable[[Any], Any],
        objects: list[tuple[str, ...]],
        rewrite: Callable[[Any], Any] = lambda record: record,
        layout: RecordLayout | None = None,
    ) -> None:
        self.fixture, self.load, self.objects = fixture, load, objects
        self.rewrite, self.layout = rewrite, layout

    def paths(self, doc: Any) -> Iterator[tuple[Any, ...]]:
        """Every object of ``doc`` that keeps unknown fields."""
        for pattern in self.objects:
            yield from _expand(doc, pattern, ())


def _expand(doc: Any, pattern: tuple[str, ...], at: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
    if not pattern:
        if isinstance(doc, dict):
            yield at
        return
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        items = doc.items() if isinstance(doc, dict) else enumerate(doc or ())
        for key, value in items:
            yield from _expand(value, rest, (*at, key))
    elif isinstance(doc, dict) and doc.get(head) is not None:
        yield from _expand(doc[head], rest, (*at, head))


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


KINDS = {
    "scale state": Kind(
        "scale-state.json",
        ScaleState.model_validate,
        [
            (),
            ("cooldown",),
            ("capacity",),
            ("capacity", "sizes", "*"),
            ("recent", "*"),
            ("recovery",),
            ("recovery", "quarantine", "*"),
            ("recovery", "recoveries", "*"),
            ("cursors", "*"),
            ("history", "*"),
        ],
        lambda state: state.with_cursor("/jobs/other/steps.jsonl", LogCursor(12)),
        ScaleState.LAYOUT,
    ),
    "decision": Kind(
        "decision.json",
        DecisionRecord.model_validate,
        [
            (),
            ("cooldown",),
            ("context",),
            ("inputs",),
            ("inputs", "cooldown"),
            ("inputs", "capacity"),
            ("inputs", "capacity", "sizes", "*"),
            ("inputs", "recent", "*"),
        ],
    ),
    "grid ledger": Kind(
        "grid-ledger.json",
        GridLedger.model_validate,
        [(), ("holdings", "*"), ("queue", "*"), ("shrinks", "*"), ("pools", "*")],
        lambda ledger: renew(ledger, "c", now=1_800_000_100.0),
        GridLedger.LAYOUT,
    ),
    "job manifest": Kind(
        "job-manifest.json",
        JobManifest.model_validate,
        [(), ("parts", "*")],
        lambda manifest: replace(manifest, state=LaunchPhase.STOPPING, down_reason="resized"),
        JobManifest.LAYOUT,
    ),
    "capacity request": Kind(
        "capacity-request.json",
        CapacityRequest.model_validate,
        [()],
        layout=REQUEST_LAYOUT,
    ),
}
# policy parameters added since the fixtures were written: read as their defaults, so a
# rewrite adds them (and nothing else) to what main wrote
_NEW_PARAMETERS = {"stream_band", "peak_window_s", "stream_window_restarts"}
ADDED_SINCE_FIXTURES = {
    "decision": {("thresholds",): _NEW_PARAMETERS, ("inputs", "scheduler"): _NEW_PARAMETERS},
    # ledger 2.1: the running jobs' standing, the audited rounds, a queued claim's slack;
    # 2.2: a queued claim's end
    "grid ledger": {
        (): {"schema_minor", "standing", "rounds"},
        ("queue", 0): {"slack_s", "ends_in_s"},
    },
}


def _without_added(kind: str, written: dict[str, Any]) -> dict[str, Any]:
    """``written`` less the fields this release adds with their defaults (each must be there)."""
    for path, names in ADDED_SINCE_FIXTURES.get(kind, {}).items():
        target = _at(written, path)
        assert names <= set(target), (path, names - set(target))
        for name in names:
            del target[name]
    return written


# names a reader gives a meaning of its own beside the objects' fields
RESERVED = {(): {"hold_run", "standing", "rounds", *VERSION_KEYS}, ("context",): {"readable"}}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
field_names = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=12)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_records_written_by_main_still_load_and_are_written_back_unchanged(kind: str) -> None:
    """Minor 0 is main's layout: what a worker of main would read back (never refused)."""
    doc = _fixture(KINDS[kind].fixture)
    written = _without_added(kind, _json(KINDS[kind].load(doc).model_dump()))
    if kind == "capacity request":  # main's request had no version (its reader ignores it)
        assert written.pop("schema_version") == 1
    assert written == doc


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fields_of_a_newer_minor_survive_a_read_and_a_rewrite(kind: str, data: Any) -> None:
    record_kind = KINDS[kind]
    doc = _fixture(record_kind.fixture)
    paths = list(record_kind.paths(doc))
    chosen = data.draw(st.lists(st.sampled_from(paths), min_size=1, max_size=5), label="objects")
    added = []
    for path in chosen:
        target = _at(doc, path)
        taken = set(target) | RESERVED.get(path, set()) | ({"extras"} if path == () else set())
        name = data.draw(field_names.filter(lambda name, taken=taken: name not in taken))
        value = data.draw(json_values, label=f"{path}.{name}")
        target[name] = value
        added.append((path, name, value))
    if record_kind.layout is not None:
        doc["schema_minor"] = data.draw(st.integers(1, 999), label="schema_minor")
    stored = copy.deepcopy(doc)

    record = record_kind.load(doc)  # nothing is refused
    assert doc == stored  # reading changes nothing it was given
    written = _without_added(kind, _json(record.model_dump()))
    expected = {key: value for key, value in stored.items() if key != "schema_minor"}
    if record_kind.layout is not None:  # this release's version, whatever it read
        expected["schema_version"] = record_kind.layout.major
    assert written == _json(expected)
    reread = _json(record_kind.load(written).model_dump())
    assert _without_added(kind, reread) == written  # and again

    rewritten = _json(record_kind.rewrite(record).model_dump())
    for path, name, value in added:
        assert _at(rewritten, path)[name] == _json(value), (path, name)


@pytest.mark.parametrize("kind", sorted(name for name, kind in KINDS.items() if kind.layout))
@given(major=st.integers(1, 10**6), minor=st.integers(0, 99), extra=json_values)
@settings(max_examples=20, deadline=None)
def test_a_higher_major_is_refused_in_one_sentence(
    kind: str, major: int, minor: int, extra: Any
) -> None:
    record_kind = KINDS[kind]
    layout = record_kind.layout
    assert layout is not None
    doc = _fixture(record_kind.fixture)
    version = layout.major + major
    doc.update(schema_version=version, schema_minor=minor, renamed_field=extra)
    with pytest.raises(NewerRecordError) as refused:
        record_kind.load(doc)
    assert str(refused.value) == (
        f"{layout.name} schema_version {version} was written by a newer release of "
        f"elasticgrid-provider than this worker's, which reads {layout.version}: upgrade "
        f"elasticgrid-provider here; the {layout.name} is left as it is"
    )


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (None, "scale state schema_version must be 2 (or 1, which is migrated), got None"),
        (0, "scale state schema_version must be 2 (or 1, which is migrated), got 0"),
        ("2.1", "scale state schema_version must be a number, got '2.1'"),
        (2.5, "scale state schema_version must be a whole number, got 2.5"),
    ],
)
def test_an_unknown_older_or_malformed_version_is_refused_naming_it(
    version: Any, message: str
) -> None:
    doc = _fixture("scale-state.json")
    doc["schema_version"] = version
    with pytest.raises(ElasticGridError) as refused:
        ScaleState.model_validate(doc)
    assert not isinstance(refused.value, NewerRecordError)
    assert str(refused.value).startswith(message)


def test_a_bad_minor_is_refused_naming_it() -> None:
    doc = {**_fixture("grid-ledger.json"), "schema_minor": -1}
    with pytest.raises(ElasticGridError, match="grid ledger schema_minor must be at least 0"):
        GridLedger.model_validate(doc)


def test_the_json_schema_names_the_version_and_admits_a_newer_minor_s_fields() -> None:
    schema = ScaleState.model_json_schema()
    assert schema["properties"]["schema_version"]["const"] == 2
    assert "schema_version" in schema["required"]
    assert schema["additionalProperties"] is True
    assert "extras" not in schema["properties"]
