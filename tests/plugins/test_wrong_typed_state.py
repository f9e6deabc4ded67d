"""A fuzzed state: every field of a real state replaced by values of the wrong type.

Whatever a state Variable holds, its row in the list, its view and its page are built
without an exception (a section that cannot be read says so in one line), so one bad
state never answers 500 for the list or for another job (the HTTP side is in
``test_app.py``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from elasticgrid_provider.plugins.jobs import job_row, parse_state
from elasticgrid_provider.plugins.pages import job_page, jobs_page
from elasticgrid_provider.plugins.view import job_view
from tests.plugins.recorded import T0, deadline_job

WRONG_VALUES: tuple[Any, ...] = ("n/a", ["x"], {"x": 1}, None, True, -1, 1e308, 10**30, "")
Path = tuple[Any, ...]


def field_paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every key of every object in ``value`` (a list's first item stands for the rest,
    except the history, whose entries differ), as paths."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from field_paths(item, (*prefix, key))
    elif isinstance(value, list) and value:
        indexes = range(len(value)) if prefix == ("history",) else (0,)
        for index in indexes:
            yield (*prefix, index)
            yield from field_paths(value[index], (*prefix, index))


def replaced(data: dict[str, Any], path: Path, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(data)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return changed


STATE = deadline_job("fuzzed").model_dump()
PATHS = [path for path in field_paths(STATE) if "inputs" not in path]


def test_the_fuzz_covers_every_field_the_pages_read():
    names = {path[-1] for path in PATHS if isinstance(path[-1], str)}
    for name in (
        "history",
        "current_nodes",
        "cost_per_hour",
        "projection",
        "conditions",
        "thresholds",
        "held_by",
        "hold_run",
        "decided_at",
        "recommended_nodes",
        "signals",
        "cooldown",
        "recovery",
        "window",
    ):
        assert name in names, name
    assert len(PATHS) > 200


@pytest.mark.parametrize("wrong", WRONG_VALUES, ids=repr)
def test_every_field_of_the_wrong_type_still_renders_the_row_view_and_page(wrong):
    failures = []
    for path in PATHS:
        data = replaced(STATE, path, wrong)
        stored = parse_state("elasticgrid_scale_state__fuzzed", json.dumps(data))
        try:
            row = job_row(stored)
            listing = jobs_page([row], "", T0)
            opened = {"dag_id": "audit_dag", "run_id": "grow"}
            live = {"status": "running", "nodes": 4}
            view = job_view(stored, T0 + 1600, live=live, highlight=opened)
            page = job_page(view, opened, now=T0 + 1600)
        except Exception as exc:  # collected: every path is tried
            failures.append(f"{path}: {type(exc).__name__}: {exc}")
            continue
        if "fuzzed" not in listing or "Scale decisions: fuzzed" not in page:
            failures.append(f"{path}: the job is missing from its row or page")
    assert not failures, "\n".join(failures[:20])


def test_a_state_that_is_no_object_at_all_still_renders():
    for text in ("[]", "null", '"x"', "3", "{not json"):
        stored = parse_state("elasticgrid_scale_state__odd", text)
        assert stored.error
        assert job_row(stored)["status"] == "unreadable"
        assert "This state does not load" in job_page(job_view(stored, T0))
