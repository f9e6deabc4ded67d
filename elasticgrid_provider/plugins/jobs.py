"""What the "Scale decisions" pages show, built from the jobs' state Variables.

:func:`read_scale_states` is the one reader (through
:meth:`ElasticGridHook.stored_scale_states`, on the API server); a state that
does not load as a :class:`ScaleState` is listed with its error instead of
breaking the page. :func:`job_view` turns one state into the plain JSON that
the JSON route serves and the HTML pages render; it reads every decision field
with ``.get``, so records from before a field existed (or after) still render.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from elasticgrid_provider.core.clock import utc_now
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.formatting import (
    decision_summary,
    held_text,
    iso_time,
    number_text,
    rounded,
    rule_text,
    seconds_text,
)
from elasticgrid_provider.core.recovery import RECOVER_RULE, RecoveryMemory
from elasticgrid_provider.core.state import JOB_ENDED_RULE, ScaleState, hold_run, state_variable_key

STATE_PREFIX = state_variable_key("")
# words that mark the demand/capacity figures a policy may add to a decision
DEMAND_WORDS = ("demand", "capacity", "arrival", "utilisation", "utilization")
RUN_KEYS = ("dag_id", "run_id", "task_id")


@dataclass(frozen=True)
class StoredState:
    """One job's state Variable: its JSON (None when unreadable) and why it did not load."""

    job_name: str
    variable_key: str
    data: dict[str, Any] | None
    error: str | None = None

    @property
    def history(self) -> list[dict[str, Any]]:
        """The history entries that are JSON objects (oldest first)."""
        return _objects((self.data or {}).get("history"))

    @property
    def dag_ids(self) -> list[str]:
        """The DAGs whose tasks recorded this job's decisions."""
        found = {(entry.get("context") or {}).get("dag_id") for entry in self.history}
        return sorted(dag_id for dag_id in found if isinstance(dag_id, str) and dag_id)


def parse_state(variable_key: str, text: str | None) -> StoredState:
    """A state Variable's value, checked; errors become ``StoredState.error``."""
    job_name = variable_key[len(STATE_PREFIX) :]
    try:
        data = json.loads(text or "")
    except ValueError as exc:
        return StoredState(job_name, variable_key, None, f"the state is not valid JSON ({exc})")
    error = None
    try:
        ScaleState.from_dict(data)
    except ElasticGridError as exc:
        error = str(exc)
    return StoredState(job_name, variable_key, data if isinstance(data, dict) else None, error)


def read_scale_states(job_name: str | None = None) -> list[StoredState]:
    """Every job's state Variable (or just ``job_name``'s), sorted by job name."""
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook  # on the API server only

    rows = ElasticGridHook.stored_scale_states(job_name)
    return sorted((parse_state(key, value) for key, value in rows), key=lambda s: s.job_name)


def _objects(items: Any) -> list[dict[str, Any]]:
    """The JSON objects of a list (a history, lost parts, holds); the rest is skipped."""
    return [item for item in items or () if isinstance(item, dict)]


def _clock(*epochs: Any) -> str:
    """``14:05 UTC``, or a run of holds ``14:00-14:55 UTC``; dated when not today or over days."""
    moments = [datetime.fromisoformat(iso) for iso in map(iso_time, epochs) if iso is not None]
    if not moments:
        return "-"
    begin, finish = moments[0], moments[-1]
    if begin.date() != finish.date():
        return f"{begin:%Y-%m-%d %H:%M}-{finish:%Y-%m-%d %H:%M} UTC"
    day = "" if begin.date() == utc_now().date() else f"{begin:%Y-%m-%d} "
    until = f"-{finish:%H:%M}" if len(moments) > 1 else ""
    return f"{day}{begin:%H:%M}{until} UTC"


def _context(entry: dict[str, Any]) -> dict[str, Any]:
    return context if isinstance(context := entry.get("context"), dict) else {}


def _number(value: Any) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)


def _records(keys: tuple[str, ...], rows: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows of values as JSON objects with ``keys``."""
    return [dict(zip(keys, row, strict=True)) for row in rows]


def _last_decision(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest entry that is a real decision (has thresholds), not the end of the job."""
    for entry in reversed(history):
        if entry.get("rule") != JOB_ENDED_RULE and isinstance(entry.get("thresholds"), dict):
            return entry
    return None


def run_links(airflow_root: str, context: dict[str, Any]) -> dict[str, str | None]:
    """Links to the DAG run and the task instance in the Airflow UI (None when unknown)."""
    dag_id, run_id, task_id = (context.get(k) for k in RUN_KEYS)
    if not isinstance(dag_id, str) or not isinstance(run_id, str):
        return {"run": None, "task": None}
    run = f"{airflow_root}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"
    task = f"{run}/tasks/{quote(task_id, safe='')}" if isinstance(task_id, str) else None
    return {"run": run, "task": task}


def timeline_row(entry: dict[str, Any], airflow_root: str) -> dict[str, Any]:
    """One history entry as a timeline row; a run of holds reads "held N times by ..."."""
    context = _context(entry)
    run = hold_run(entry)
    at = entry.get("decided_at")
    count = run.get("count", 1)
    if count > 1:
        why = " and ".join(str(hold.get("rule")) for hold in entry.get("held_by") or ())
        span = _clock(run.get("first_at"), run.get("last_at"))
        headline = f"held {count} times by {why or entry.get('rule')}, {span}"
    else:
        headline = iso_time(at) or "-"
    cost_before = _number(context.get("cost_per_hour"))
    cost_after = _number(context.get("proposed_cost_per_hour"))
    if cost_after is None and entry.get("action") == "hold":
        cost_after = cost_before
    return {
        "headline": headline,
        "decided_at": at,
        "decided_at_iso": iso_time(at),
        "first_at_iso": iso_time(run.get("first_at")),
        "last_at_iso": iso_time(run.get("last_at")),
        "count": count,
        "action": entry.get("action"),
        "from_nodes": entry.get("current_nodes"),
        "to_nodes": entry.get("target_nodes"),
        "rule": rule_text(str(entry.get("rule")), entry.get("thresholds")),
        "held_by": held_text(entry),
        "reason": entry.get("reason"),
        "summary": decision_summary(entry),
        "cost_per_hour_before": cost_before,
        "cost_per_hour_after": cost_after,
        **{key: context.get(key) for key in (*RUN_KEYS, "try_number")},
        "links": run_links(airflow_root, context),
        "kind": "recovery" if entry.get("rule") == RECOVER_RULE else "decision",
        "lost": _objects(entry.get("lost")),
        "quarantine": _objects(entry.get("quarantine")),
    }


def recovery_rows(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recoveries (newest first): when, what was lost and why, the quarantine, the placement."""
    return [
        {
            "decided_at_iso": iso_time(entry.get("decided_at")),
            "action": entry.get("action"),
            "from_nodes": entry.get("current_nodes"),
            "to_nodes": entry.get("target_nodes"),
            "lost": [
                f"{p.get('part')} on {p.get('provider')}: {p.get('cause')}"
                for p in _objects(entry.get("lost"))
            ],
            "quarantine": [
                f"{q.get('provider')} until {iso_time(q.get('until'))}"
                for q in _objects(entry.get("quarantine"))
            ],
            "relaunched_on": ", ".join(
                f"{a.get('provider')} {a.get('nodes')}"
                for a in _objects((entry.get("placement") or {}).get("assignments"))
            ),
            "reason": entry.get("reason"),
        }
        for entry in reversed(history)
        if entry.get("rule") == RECOVER_RULE
    ]


def active_quarantine(data: dict[str, Any], now: float) -> list[dict[str, Any]]:
    """The providers quarantined at ``now`` in the state's recovery memory."""
    try:
        memory = RecoveryMemory.from_dict(data.get("recovery"))
    except ElasticGridError:
        return []
    return [
        {**entry.model_dump(mode="json"), "until_iso": iso_time(entry.until)}
        for entry in memory.active_quarantine(now)
    ]


def _signals(last: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """The newest decision's signals against their targets (kubectl's Metrics block)."""
    signals = last.get("signals") or {}
    limits = last.get("thresholds") or {}
    yield (
        "samples in the window",
        number_text(signals.get("samples")),
        f"at least {number_text(limits.get('min_samples'))} to decide",
    )
    yield (
        "queue fraction",
        number_text(signals.get("queue_fraction")),
        f"scale up at >= {number_text(limits.get('target_queue_fraction'))}; "
        f"idle at <= {number_text(limits.get('idle_queue_fraction'))}",
    )
    target_step = _number(limits.get("target_step_s"))
    idle_fraction = _number(limits.get("idle_step_fraction"))
    idle_step = "-" if target_step is None or idle_fraction is None else target_step * idle_fraction
    yield (
        "mean step",
        f"{number_text(signals.get('mean_step_s'))}s",
        f"target {number_text(target_step)}s; idle at <= {number_text(idle_step)}s",
    )
    projection = last.get("projection") or {}
    deadline = iso_time(last.get("deadline_at"))
    time_left = projection.get("time_left_s", last.get("time_left_s"))
    deadline_text = f"deadline {deadline}, {seconds_text(time_left)} left" if deadline else ""
    if projection.get("current_finish_s") is not None:
        finish = (
            f"{seconds_text(projection['current_finish_s'])} at "
            f"{number_text(projection.get('current_nodes'))} nodes"
        )
        if projection.get("target_nodes") != projection.get("current_nodes"):
            finish += (
                f", {seconds_text(projection.get('target_finish_s'))} at "
                f"{number_text(projection.get('target_nodes'))} with the restart"
            )
        yield ("projected finish", finish, deadline_text or "no deadline")
    elif deadline:
        yield ("deadline", "no projection (remaining work unknown)", deadline_text)
    demand = {
        f"{where}{key}": value
        for where, block in (("", last), ("signals.", signals), ("projection.", projection))
        if isinstance(block, dict)
        for key, value in block.items()
        if any(word in key for word in DEMAND_WORDS) and not isinstance(value, (dict, list))
    }
    if demand:
        figures = (f"{k} {'unbounded' if v is None else number_text(v)}" for k, v in demand.items())
        yield ("demand vs capacity", ", ".join(figures), "capacity covers demand")


def _conditions(
    data: dict[str, Any], history: list[dict[str, Any]], now: float
) -> Iterator[tuple[str, bool, str]]:
    """kubectl-style conditions: can it scale now, what limits it, is there enough data."""
    newest = history[-1] if history else {}
    if newest.get("rule") == JOB_ENDED_RULE:
        yield ("JobRunning", False, str(newest.get("reason")))
    last = _last_decision(history)
    if last is None:
        yield ("AbleToScale", False, "no decision recorded yet")
        return
    limits = last.get("thresholds") or {}
    changed_at = _number((data.get("cooldown") or {}).get("last_change_at"))
    until = [
        (kind, changed_at + length)
        for kind, name in (("scale-up", "cooldown_s"), ("scale-down", "scale_down_cooldown_s"))
        if changed_at is not None
        and (length := _number(limits.get(name)))
        and changed_at + length > now
    ]
    holds = _objects(last.get("held_by"))
    held = [
        f"held by {rule_text(str(hold.get('rule')), limits)}: {hold.get('reason')}"
        for hold in holds
        if hold.get("rule") != "cooldown"
    ]
    if len({at for _, at in until}) == 1:
        held.append(f"held by cooldown until {_clock(until[0][1])}")
    else:
        held += [f"{kind} held by cooldown until {_clock(at)}" for kind, at in until]
    if changed_at is None and any(hold.get("rule") == "cooldown" for hold in holds):
        # no clock to say until when: the record's own words
        held.append(f"held by cooldown: {_hold_reason(holds, 'cooldown')}")
    yield ("AbleToScale", not held, "; ".join(held) or "able to scale")
    current = data.get("current_nodes")
    if not isinstance(current, int):
        current = last.get("current_nodes")
    rules = {str(hold.get("rule")) for hold in holds}
    maximum, minimum = limits.get("max_nodes"), limits.get("min_nodes")
    if "ceiling" in rules or (isinstance(current, int) and current >= (maximum or current + 1)):
        limited = f"limited by ceiling (max_nodes={number_text(maximum)})"
    elif "floor" in rules or (isinstance(current, int) and current <= (minimum or 0)):
        limited = f"limited by floor (min_nodes={number_text(minimum)})"
    elif pressing := [rule for rule in ("deadline", "final_stretch") if rule in rules]:
        rule = pressing[0]
        limited = f"limited by the {rule.replace('_', ' ')}: {_hold_reason(holds, rule)}"
    else:
        limited = None
    within = f"within bounds ({number_text(minimum)}-{number_text(maximum)} nodes)"
    yield ("ScalingLimited", limited is not None, limited or within)
    if last.get("rule") == "min_samples":
        yield ("EnoughSamples", False, str(last.get("reason")))
    projection = last.get("projection") or {}
    if "meets_deadline" in projection:
        meets = bool(projection.get("meets_deadline"))
        deadline = iso_time(last.get("deadline_at")) or ""
        verb = "meets" if meets else "misses"
        yield ("MeetsDeadline", meets, f"{verb} the deadline {deadline}".rstrip())


def _hold_reason(holds: list[dict[str, Any]], rule: str) -> str:
    """The reasons of the holds by ``rule``, joined."""
    return "; ".join(str(hold.get("reason")) for hold in holds if hold.get("rule") == rule)


def chart_points(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Size, queue fraction and cost over time: one point per decision (two per hold run)."""
    points = []  # at, at_iso, nodes, queue_fraction, cost_per_hour
    for entry in history:
        context = _context(entry)
        run = hold_run(entry)
        queue = _number((entry.get("signals") or {}).get("queue_fraction"))
        cost = _number(context.get("cost_per_hour"))
        at = entry.get("decided_at")
        times = [run.get("first_at"), run.get("last_at")] if run.get("count", 1) > 1 else []
        times = [t for t in times if _number(t) is not None] or [at]
        nodes = entry.get("current_nodes")
        points += [(t, iso_time(t), nodes, queue, cost) for t in times if _number(t) is not None]
        if entry.get("action") in ("scale_up", "scale_down") and _number(at):
            after = _number(context.get("proposed_cost_per_hour"))
            cost = after if after is not None else cost
            points.append((at, iso_time(at), entry.get("target_nodes"), queue, cost))
    keys = ("at", "at_iso", "nodes", "queue_fraction", "cost_per_hour")
    return sorted(rounded(_records(keys, points)), key=lambda point: point["at"])


def job_view(stored: StoredState, now: float, airflow_root: str = "") -> dict[str, Any]:
    """Everything one job's page shows, as plain JSON (module docstring)."""
    data = stored.data or {}
    history = stored.history
    newest = history[-1] if history else {}
    last = _last_decision(history)
    limits = (last or {}).get("thresholds") or {}
    newest_context = _context(newest)
    current = data.get("current_nodes")
    # the size the policy wants: its recommendation (before holds), else the decision's target
    desired = newest.get("recommended_nodes")
    return {
        "job_name": stored.job_name,
        "variable_key": stored.variable_key,
        "error": stored.error,
        "dag_ids": stored.dag_ids,
        "status": newest_context.get("job_status") or "-",
        "revision": data.get("revision"),
        "updated_at": data.get("updated_at"),
        "updated_at_iso": iso_time(data.get("updated_at")),
        "summary": {
            "current_nodes": current,
            "desired_nodes": newest.get("target_nodes", current) if desired is None else desired,
            "min_nodes": limits.get("min_nodes"),
            "max_nodes": limits.get("max_nodes"),
            "last_decision": decision_summary(newest) if newest else None,
            "last_decision_at_iso": iso_time(newest.get("decided_at")),
            "cost_per_hour": rounded(newest_context.get("cost_per_hour"), 2),
            "skipped_lines": data.get("skipped_lines"),
        },
        "signals": _records(("name", "current", "target"), _signals(last) if last else ()),
        "conditions": _records(("type", "status", "message"), _conditions(data, history, now)),
        "quarantine": active_quarantine(data, now),
        "recoveries": recovery_rows(history),
        "timeline": [timeline_row(entry, airflow_root) for entry in reversed(history)],
        "chart": chart_points(history),
    }


def job_row(stored: StoredState) -> dict[str, Any]:
    """One line of the jobs list: name, DAG(s), size, last decision, cost per hour, status."""
    newest = stored.history[-1] if stored.history else {}
    context = _context(newest)
    return {
        "job_name": stored.job_name,
        "dag_ids": stored.dag_ids,
        "current_nodes": (stored.data or {}).get("current_nodes"),
        "last_decision": (
            f"{newest.get('action')} {newest.get('current_nodes')} -> "
            f"{newest.get('target_nodes')} ({newest.get('rule')})"
            if newest
            else None
        ),
        "last_decision_at_iso": iso_time(newest.get("decided_at")),
        "cost_per_hour": rounded(context.get("cost_per_hour"), 2),
        "status": context.get("job_status") or ("unreadable" if stored.error else "-"),
        "error": stored.error,
    }


def find_task_decision(
    states: list[StoredState], dag_id: str, task_id: str, run_id: str
) -> tuple[StoredState, int] | None:
    """The job and history position of the newest decision made by this task instance."""
    wanted = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
    for stored in states:
        history = stored.history
        for position in reversed(range(len(history))):
            if all(_context(history[position]).get(k) == v for k, v in wanted.items()):
                return stored, position
    return None
