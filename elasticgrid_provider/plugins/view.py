"""What one job's page shows, as plain JSON: the JSON route serves it, :mod:`.pages` renders it.

:func:`job_view` joins three sources, each labelled on the page: now (the launch record and
iroh-tinker, :mod:`.live`), the last decision (its conditions rendered as recorded, never
recomputed here) and the history. Every section is built on its own, so one that cannot be
read still leaves the rest of the page. The rules: docs/ui-audit.md ("A job's page").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timezone, tzinfo
from functools import partial
from typing import Any

from elasticgrid_provider.core.formatting import (
    decision_summary,
    held_text,
    number_text,
    rounded,
    seconds_text,
)
from elasticgrid_provider.core.policy.conditions import ConditionType
from elasticgrid_provider.core.policy.rules import EventRule
from elasticgrid_provider.core.recovery import RecoveryMemory
from elasticgrid_provider.core.state import hold_run
from elasticgrid_provider.plugins.chart import thin_points
from elasticgrid_provider.plugins.jobs import (
    TERMINAL,
    StoredState,
    as_count,
    as_dict,
    as_number,
    as_objects,
    as_text,
    context_of,
    last_decision,
    one_line,
)
from elasticgrid_provider.plugins.machines import machine_rows
from elasticgrid_provider.plugins.timeline import (
    find_entry,
    fold,
    folded_row,
    timeline_page,
    timeline_row,
)
from elasticgrid_provider.plugins.times import epoch_or_none, moment

RECOVERIES_SHOWN = 20


def recovery_rows(history: list[dict[str, Any]], now: float, zone: tzinfo) -> list[dict[str, Any]]:
    """The newest :data:`RECOVERIES_SHOWN` recoveries (newest first): when, what was lost and
    why, the quarantine, the placement (the timeline has them all)."""
    recoveries = [entry for entry in history if entry.get("rule") == EventRule.RECOVER]
    return [
        {
            "at": moment(entry.get("decided_at"), now, zone),
            "action": entry.get("action"),
            "from_nodes": entry.get("current_nodes"),
            "to_nodes": entry.get("target_nodes"),
            "lost": [
                f"{p.get('part')} on {p.get('provider')}: {p.get('cause')}"
                for p in as_objects(entry.get("lost"))
            ],
            "quarantine": [
                f"{q.get('provider')} until {(moment(q.get('until'), now, zone) or {}).get('absolute')}"
                for q in as_objects(entry.get("quarantine"))
            ],
            "relaunched_on": ", ".join(
                f"{a.get('provider')} {a.get('nodes')}"
                for a in as_objects(as_dict(entry.get("placement")).get("assignments"))
            ),
            "reason": entry.get("reason"),
        }
        for entry in recoveries[-RECOVERIES_SHOWN:][::-1]
    ]


def active_quarantine(data: dict[str, Any], now: float, zone: tzinfo) -> list[dict[str, Any]]:
    """The providers quarantined at ``now`` in the state's recovery memory."""
    memory = RecoveryMemory.model_validate(data.get("recovery"))
    return [
        {**entry.model_dump(mode="json"), "until": moment(entry.until, now, zone)}
        for entry in memory.active_quarantine(now)
    ]


def _demand_row(last: dict[str, Any]) -> tuple[str, str, str] | None:
    """Demand against capacity in units, the utilisation and the threshold that acts on it."""
    projection = as_dict(last.get("projection"))
    limits = as_dict(last.get("thresholds"))
    if "demand_per_s" not in projection and "capacity_per_s" not in projection:
        return None
    basis = as_text(projection.get("demand_basis")) or as_text(projection.get("basis")) or "work"
    demand, capacity = projection.get("demand_per_s"), as_number(projection.get("capacity_per_s"))
    utilisation = projection.get("utilisation")
    nodes = number_text(projection.get("current_nodes", last.get("current_nodes")))
    demand_text = "unbounded" if demand is None else f"{number_text(demand)} {basis}/s"
    current = (
        f"demand {demand_text} against a capacity of {number_text(capacity)} {basis}/s at "
        f"{nodes} nodes: utilisation {'unbounded' if utilisation is None else number_text(utilisation)}"
    )
    if projection.get("loop") == "open":
        tolerance = as_number(limits.get("tolerance")) or 0.0
        # a stream's band (older records: the fixed headroom), as the policy recorded it
        name = "band" if "band" in projection else "headroom"
        headroom = as_number(projection.get(name))
        headroom = as_number(limits.get("headroom")) if headroom is None else headroom
        threshold = (1.0 + tolerance) / (1.0 + (headroom or 0.0))
        rule = f"{name} {number_text(headroom)}, tolerance {number_text(tolerance)}"
    else:
        queue = as_number(limits.get("target_queue_fraction"))
        threshold = 1.0 / (1.0 - queue) if queue is not None and queue < 1 else 1.0
        rule = f"queue fraction {number_text(queue)}"
    used = as_number(utilisation)
    over = (utilisation is None and demand is None) or (used is not None and used > threshold)
    verdict = "over capacity" if over else "capacity covers demand"
    return ("demand vs capacity", current, f"{verdict}: scale up above {threshold:.2f} ({rule})")


def signal_rows(last: dict[str, Any], now: float, zone: tzinfo) -> Iterator[tuple[str, str, str]]:
    """The last decision's signals against their targets (kubectl's Metrics block)."""
    signals = as_dict(last.get("signals"))
    limits = as_dict(last.get("thresholds"))
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
    target_step = as_number(limits.get("target_step_s"))
    idle_fraction = as_number(limits.get("idle_step_fraction"))
    idle_step = "-" if target_step is None or idle_fraction is None else target_step * idle_fraction
    yield (
        "mean step",
        f"{number_text(signals.get('mean_step_s'))}s",
        f"target {number_text(target_step)}s; idle at <= {number_text(idle_step)}s",
    )
    if (demand := _demand_row(last)) is not None:
        yield demand
    projection = as_dict(last.get("projection"))
    deadline = moment(last.get("deadline_at"), now, zone)
    time_left = projection.get("time_left_s", last.get("time_left_s"))
    deadline_text = (
        f"deadline {deadline['absolute']}, {seconds_text(time_left)} left" if deadline else ""
    )
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


_CONDITION_TYPES = frozenset(kind.value for kind in ConditionType)


def condition_rows(
    history: list[dict[str, Any]], finished: str | None, live_note: str | None
) -> list[dict[str, Any]]:
    """The conditions the policy recorded with the last decision, each with its health;
    a finished job shows ``JobRunning False`` instead of conditions that no longer apply."""
    if finished is not None:
        return [_condition("JobRunning", False, finished.capitalize(), live_note, healthy=None)]
    last = last_decision(history)
    if last is None:
        return [_condition("AbleToScale", False, "NoDecision", "no decision recorded yet")]
    rows = [
        _condition(
            str(c.get("type")),
            c.get("status") is True,
            str(c.get("reason")),
            str(c.get("message")),
        )
        for c in as_objects(last.get("conditions"))
        if c.get("type") in _CONDITION_TYPES
    ]
    if not rows:
        note = "this decision was recorded before the policy recorded its conditions"
        rows.append(_condition("ScalingActive", True, "NotRecorded", note, healthy=None))
    projection = as_dict(last.get("projection"))
    if isinstance(projection.get("meets_deadline"), bool):
        meets = projection["meets_deadline"]
        verb = "meets" if meets else "misses"
        reason = "OnTrack" if meets else "DeadlineMissed"
        rows.append(
            _condition("MeetsDeadline", meets, reason, f"the projected finish {verb} the deadline")
        )
    return rows


def _condition(
    kind: str, status: bool, reason: str, message: Any, healthy: bool | None = True
) -> dict[str, Any]:
    """A condition row; ``tone`` ok/warn/neutral by whether ``status`` is the healthy one."""
    wanted = ConditionType(kind).healthy_status if kind in _CONDITION_TYPES else healthy
    tone = "neutral" if wanted is None else ("ok" if status == wanted else "warn")
    return {"type": kind, "status": status, "reason": reason, "message": message, "tone": tone}


def chart_points(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Size, queue fraction and cost over time: one point per decision (two per hold run),
    in time order, unrounded (the chart rounds the points it keeps)."""
    points = []
    for entry in history:
        context = context_of(entry)
        run = hold_run(entry)
        queue = as_number(as_dict(entry.get("signals")).get("queue_fraction"))
        cost = as_number(context.get("cost_per_hour"))
        at = epoch_or_none(entry.get("decided_at"))
        times = [run.get("first_at"), run.get("last_at")] if run.get("count", 1) != 1 else []
        times = [t for t in map(epoch_or_none, times) if t is not None] or [at]
        nodes = as_number(entry.get("current_nodes"))
        points += [(t, nodes, queue, cost) for t in times if t is not None]
        if entry.get("action") in ("scale_up", "scale_down") and at is not None:
            after = as_number(context.get("proposed_cost_per_hour"))
            cost = after if after is not None else cost
            points.append((at, as_number(entry.get("target_nodes")), queue, cost))
    keys = ("at", "nodes", "queue_fraction", "cost_per_hour")
    points.sort(key=lambda point: point[0])
    return [dict(zip(keys, point, strict=True)) for point in points]


def chart_markers(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The resizes and recoveries on the time axis: when, what, and a label."""
    markers = []
    for entry in history:
        at, action = epoch_or_none(entry.get("decided_at")), entry.get("action")
        if at is None:
            continue
        sizes = f"{entry.get('current_nodes')} -> {entry.get('target_nodes')}"
        if entry.get("rule") == EventRule.RECOVER:
            markers.append({"at": at, "kind": "recovery", "label": f"recovery {sizes}"})
        elif action in ("scale_up", "scale_down"):
            markers.append({"at": at, "kind": "resize", "label": f"{action} {sizes}"})
    return markers


def _guarded(errors: list[str], what: str, build: Callable[[], Any], fallback: Any) -> Any:
    """``build()``, or ``fallback`` with a one-line entry in ``errors`` when the JSON defeats it."""
    try:
        return build()
    except Exception as exc:  # one section, never the page
        errors.append(f"{what} cannot be shown: {one_line(exc)}")
        return fallback


def _finished(live: dict[str, Any], newest: dict[str, Any]) -> str | None:
    """The terminal status of a job that ended ("done", "failed", "stopped"), else None."""
    status = live.get("status")
    if isinstance(status, str) and status:
        return status if status in TERMINAL else None
    if newest.get("rule") == EventRule.JOB_ENDED:
        word = context_of(newest).get("job_status")
        return word if isinstance(word, str) and word in TERMINAL else "done"
    return None


def job_view(
    stored: StoredState,
    now: float,
    airflow_root: str = "",
    *,
    live: dict[str, Any] | None = None,
    launches: dict[str, dict[str, Any]] | None = None,
    zone: tzinfo = timezone.utc,
    page: Any = None,
    run: Any = None,
    highlight: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything one job's page shows, as plain JSON (docs/ui-audit.md): the timeline's page
    ``page`` (of the whole history, or of the folded ``run``, :mod:`.timeline`) and, with
    ``highlight`` (``dag_id``, ``run_id``, ``task_id``, ``map_index``), that check's newest
    decision as ``this_check`` (its row; the page that holds it by default)."""
    live = live or {}
    errors: list[str] = [str(problem) for problem in live.get("machine_errors") or ()]
    data = stored.data or {}
    history = stored.history
    newest = history[-1] if history else {}
    last = last_decision(history) or {}
    limits = as_dict(last.get("thresholds"))
    recorded_status = as_text(context_of(newest).get("job_status"))
    finished = _finished(live, newest)
    live_nodes = as_count(live.get("nodes"))
    current = live_nodes if live_nodes is not None else as_count(data.get("current_nodes"))
    desired = None
    if finished is None and newest:
        recommended = as_count(newest.get("recommended_nodes"))
        desired = recommended if recommended is not None else as_count(newest.get("target_nodes"))
    live_cost = as_number(live.get("cost_per_hour")) if live.get("status") else None
    recorded_cost = as_number(context_of(newest).get("cost_per_hour"))
    cost = None if finished else (recorded_cost if live_cost is None else live_cost)
    live_id = as_text(live.get("launch_id"))
    ended_note = (
        as_text(newest.get("reason")) if newest.get("rule") == EventRule.JOB_ENDED else None
    )
    note = live.get("down_reason") or ended_note or f"the job is {finished}"
    row_of = partial(timeline_row, history, now=now, zone=zone, airflow_root=airflow_root,
                     launches=launches or {}, live_id=live_id)  # fmt: skip
    found = _guarded(errors, "this check's decision", lambda: find_entry(history, highlight), None)
    this_check = None
    if found is not None:
        this_check = _guarded(errors, f"history entry {found}", partial(row_of, found), None)
    folded = stored.derived("folded", lambda: fold(history))
    shown = timeline_page(history, page, run, found, folded)
    timeline = []
    for oldest, newest_of in shown.groups:
        row = _guarded(
            errors,
            f"history entry {newest_of}",
            partial(row_of, newest_of),
            {"position": newest_of, "error": True},
        )
        if not row.get("error"):
            fold_run = partial(folded_row, history, (oldest, newest_of), row, now, zone)
            row = _guarded(errors, f"history entries {oldest}-{newest_of}", fold_run, row)
        row["this_check"] = found is not None and oldest <= found <= newest_of
        timeline.append(row)
    return {
        "job_name": stored.job_name,
        "variable_key": stored.variable_key,
        "error": stored.error,
        "errors": errors,
        "dag_ids": stored.dag_ids,
        "status": finished or live.get("status") or recorded_status or "-",
        "status_source": "now" if live.get("status") else "at the last check",
        "finished": finished is not None,
        "live": live,
        "launched_at": moment(live.get("launched_at"), now, zone),
        "machines": _guarded(errors, "the machines", lambda: machine_rows(live, now, zone), []),
        "revision": data.get("revision"),
        "updated_at": moment(data.get("updated_at"), now, zone),
        "summary": {
            "current_nodes": current,
            "desired_nodes": desired,
            "desired_held_by": held_text(
                {
                    "held_by": as_objects(newest.get("held_by")),
                    "grid": newest.get("grid"),
                    "current_nodes": newest.get("current_nodes"),
                }
            )
            if desired is not None and desired != current and newest.get("action") == "hold"
            else None,
            "min_nodes": limits.get("min_nodes"),
            "max_nodes": limits.get("max_nodes"),
            "last_decision": _guarded(
                errors, "the last decision", lambda: decision_summary(newest), None
            )
            if newest
            else None,
            "last_decision_at": moment(newest.get("decided_at"), now, zone),
            "cost_per_hour": cost,
            "cost_source": "now" if live_cost is not None else "at the last check",
            "skipped_lines": data.get("skipped_lines"),
        },
        "signals": _guarded(
            errors,
            "the signals",
            lambda: [
                dict(zip(("name", "current", "target"), row, strict=True))
                for row in (signal_rows(last, now, zone) if last else ())
            ],
            [],
        ),
        "conditions": _guarded(
            errors, "the conditions", lambda: condition_rows(history, finished, note), []
        ),
        "quarantine": _guarded(
            errors, "the quarantine", lambda: active_quarantine(data, now, zone), []
        ),
        "recoveries": _guarded(
            errors, "the recoveries", lambda: recovery_rows(history, now, zone), []
        ),
        "timeline": timeline,
        "timeline_page": shown.info(),
        "this_check": this_check,
        "chart": _guarded(
            errors,
            "the chart",
            lambda: stored.derived("chart", lambda: rounded(thin_points(chart_points(history)))),
            [],
        ),
        "markers": _guarded(
            errors,
            "the chart's markers",
            lambda: stored.derived("markers", lambda: chart_markers(history)),
            [],
        ),
    }
