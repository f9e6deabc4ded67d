"""The jobs' state Variables as the "Scale decisions" pages read them.

:func:`~.state_cache.read_scale_states` is the one reader (from the metadata DB, on the
API server, parsed once per change); a state that does not load as a :class:`ScaleState`
is listed with its error (:func:`parse_state`) instead of breaking the page. Everything here reads the stored JSON as it is, whatever it
holds: :func:`job_row` and :func:`find_task_decision` never raise, and the
accessors (:func:`as_dict`, :func:`as_number`, ...) turn a value of the wrong type
into "missing", so one bad state never takes another job's page down.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.job import JobStatus
from elasticgrid_provider.core.policy.grid import holder_phrases
from elasticgrid_provider.core.policy.rules import EventRule
from elasticgrid_provider.core.state import ScaleState, state_variable_key

STATE_PREFIX = state_variable_key("")
RUN_KEYS = ("dag_id", "run_id", "task_id")
UNMAPPED = -1  # Airflow's map_index of a task that is not mapped
TERMINAL = tuple(status.value for status in JobStatus if status.is_terminal)


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_objects(value: Any) -> list[dict[str, Any]]:
    """The JSON objects of a list (a history, lost parts, holds); anything else is skipped."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def as_number(value: Any) -> float | None:
    """A finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def as_count(value: Any) -> int | None:
    """A whole number >= 0 (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def as_text(value: Any) -> str | None:
    """A non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def shared_grid_of(entry: dict[str, Any]) -> dict[str, Any]:
    """What the shared grid left a decision, as stored: ``room`` (None: no limit),
    ``holders`` (``'b' holds 3 on local`` lines) and ``preempted_by`` (the job whose shrink
    request it obeyed); ``{}`` for a decision of a job alone on its grid."""
    grid, preempted_by = as_dict(entry.get("grid")), as_text(entry.get("preempted_by"))
    if not grid and preempted_by is None:
        return {}
    holders = {
        str(job): {str(p): n for p, n in as_dict(by_provider).items() if as_count(n)}
        for job, by_provider in as_dict(grid.get("holders")).items()
    }
    return {
        "room": as_count(grid.get("max_nodes")),
        "holders": holder_phrases(holders),
        "preempted_by": preempted_by,
    }


def context_of(entry: dict[str, Any]) -> dict[str, Any]:
    """A history entry's ``context`` (the task, the job, the costs)."""
    return as_dict(entry.get("context"))


def map_index_of(context: dict[str, Any]) -> int:
    """The map index a record names (older records name none: an unmapped task)."""
    index = context.get("map_index")
    return index if isinstance(index, int) and not isinstance(index, bool) else UNMAPPED


def one_line(error: BaseException) -> str:
    """An exception as one line of a page."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


@dataclass(frozen=True)
class StoredState:
    """One job's state Variable: its JSON (None when unreadable) and why it did not load."""

    job_name: str
    variable_key: str
    data: dict[str, Any] | None
    error: str | None = None
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """What pages derive from the whole history (the chart): computed once per state, which
    the cache (:mod:`.state_cache`) keeps until the Variable changes."""

    def derived(self, name: str, build: Callable[[], Any]) -> Any:
        """``build()``, once per state (:attr:`memo`)."""
        if name not in self.memo:
            self.memo[name] = build()
        return self.memo[name]

    @cached_property
    def history(self) -> list[dict[str, Any]]:
        """The history entries that are JSON objects (oldest first)."""
        return as_objects((self.data or {}).get("history"))

    @cached_property
    def dag_ids(self) -> list[str]:
        """The DAGs whose tasks recorded this job's decisions."""
        found = (context_of(entry).get("dag_id") for entry in self.history)
        return sorted({dag_id for dag_id in found if isinstance(dag_id, str) and dag_id})


def parse_state(variable_key: str, text: str | None) -> StoredState:
    """A state Variable's value, checked; errors become ``StoredState.error``."""
    job_name = variable_key[len(STATE_PREFIX) :]
    try:
        data = json.loads(text or "")
    except ValueError as exc:
        return StoredState(job_name, variable_key, None, f"the state is not valid JSON ({exc})")
    return checked_state(variable_key, data)


def checked_state(variable_key: str, data: Any) -> StoredState:
    """A state Variable's parsed JSON, checked; errors become ``StoredState.error``."""
    job_name = variable_key[len(STATE_PREFIX) :]
    error = None
    try:
        ScaleState.model_validate(data)
    except ElasticGridError as exc:
        error = str(exc)
    except Exception as exc:  # whatever the document holds, list it with why
        error = one_line(exc)
    return StoredState(job_name, variable_key, data if isinstance(data, dict) else None, error)


def last_decision(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest entry that is a real decision (has thresholds), not the end of the job."""
    for entry in reversed(history):
        if entry.get("rule") != EventRule.JOB_ENDED and isinstance(entry.get("thresholds"), dict):
            return entry
    return None


def _row(stored: StoredState) -> dict[str, Any]:
    newest = stored.history[-1] if stored.history else {}
    context = context_of(newest)
    return {
        "job_name": stored.job_name,
        "dag_ids": stored.dag_ids,
        "current_nodes": as_count((stored.data or {}).get("current_nodes")),
        "last_decision": (
            f"{newest.get('action')} {newest.get('current_nodes')} -> "
            f"{newest.get('target_nodes')} ({newest.get('rule')})"
            if newest
            else None
        ),
        "last_decision_at": as_number(newest.get("decided_at")),
        "cost_per_hour": as_number(context.get("cost_per_hour")),
        "status": as_text(context.get("job_status")) or ("unreadable" if stored.error else "-"),
        "ended": newest.get("rule") == EventRule.JOB_ENDED,
        "error": stored.error,
    }


def job_row(stored: StoredState, live: dict[str, Any] | None = None) -> dict[str, Any]:
    """One line of the jobs list: name, DAG(s), size, last decision, cost, status (or why not);
    the status, size and cost are ``live``'s (:func:`.live.live_status`) when it has them."""
    try:
        row = _row(stored)
    except Exception as exc:  # one bad state is listed, never breaks the list
        return {
            "job_name": stored.job_name,
            "dag_ids": [],
            "current_nodes": None,
            "last_decision": None,
            "last_decision_at": None,
            "cost_per_hour": None,
            "status": "unreadable",
            "ended": False,
            "status_source": None,
            "error": f"this state cannot be shown: {one_line(exc)}",
        }
    live = live or {}
    status = live.get("status")
    row["status_source"] = "at the last check"
    if isinstance(status, str) and status:
        row.update(status=status, status_source="now", ended=status in TERMINAL)
        row["current_nodes"] = as_count(live.get("nodes"))
        cost = as_number(live.get("cost_per_hour"))
        row["cost_per_hour"] = row["cost_per_hour"] if cost is None else cost
    return row


def find_task_decision(
    states: list[StoredState],
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int = UNMAPPED,
    job_name: str | None = None,
) -> tuple[StoredState, int] | None:
    """The job and history position of the newest decision made by this task instance.

    ``job_name``: the job the task checked (its rendered ``job_name``), searched first, so
    a task that checked two jobs, or a job named earlier in the alphabet, never wins.
    """
    wanted = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
    for stored in states:
        if job_name is not None and stored.job_name != job_name:
            continue
        history = stored.history
        for position in reversed(range(len(history))):
            context = context_of(history[position])
            if (
                all(context.get(k) == v for k, v in wanted.items())
                and map_index_of(context) == map_index
            ):
                return stored, position
    return None
