"""The job page's timeline: one row per decision, repeated holds folded, a page at a time.

* **Folding.** A run of consecutive holds at the same size for the same rule (whatever held
  each back) is one row: "held 1,200 times by cooldown, restart_cost", from its first check
  to its last, linked to the run itself (``?run=<first>-<last>``: its decisions one by one).
  The state already folds a hold that repeats the previous one exactly (``hold_run``); a
  run that alternates between the rules holding it back is folded here.
* **Paging.** Newest first, :data:`ROWS_PER_PAGE` rows a page (``?page=N``); the page of a
  highlighted decision (the check the page was opened for) by default. Only the rows shown
  are built, so a page costs the same for 20 decisions or 10,000.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import tzinfo
from typing import Any
from urllib.parse import quote

from elasticgrid_provider.core.formatting import decision_summary, held_text, rule_text
from elasticgrid_provider.core.policy.rules import EventRule
from elasticgrid_provider.core.state import hold_run
from elasticgrid_provider.plugins.jobs import (
    RUN_KEYS,
    as_dict,
    as_number,
    as_objects,
    context_of,
    map_index_of,
    shared_grid_of,
)
from elasticgrid_provider.plugins.times import moment

ROWS_PER_PAGE = 50
NOT_FOLDED = (EventRule.JOB_ENDED, EventRule.RECOVER, EventRule.INSTANCES)


def run_links(airflow_root: str, context: dict[str, Any]) -> dict[str, str | None]:
    """Links to the DAG run and the task instance in the Airflow UI (None when unknown)."""
    dag_id, run_id, task_id = (context.get(k) for k in RUN_KEYS)
    if not isinstance(dag_id, str) or not isinstance(run_id, str):
        return {"run": None, "task": None}
    run = f"{airflow_root}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"
    task = f"{run}/tasks/{quote(task_id, safe='')}" if isinstance(task_id, str) else None
    index = map_index_of(context)
    if task is not None and index >= 0:
        task += f"/mapped/{index}"
    return {"run": run, "task": task}


def _launch_followed(history: list[dict[str, Any]], position: int, live_id: str | None) -> Any:
    """The launch id that followed the scale change at ``position``: the first newer record
    naming another launch, else the live launch when it differs."""
    before = context_of(history[position]).get("launch_id")
    for entry in history[position + 1 :]:
        launch_id = context_of(entry).get("launch_id")
        if isinstance(launch_id, str) and launch_id != before:
            return launch_id
    return live_id if live_id and live_id != before else None


def timeline_row(
    history: list[dict[str, Any]],
    position: int,
    now: float,
    zone: tzinfo,
    airflow_root: str,
    launches: dict[str, dict[str, Any]],
    live_id: str | None,
) -> dict[str, Any]:
    """One history entry as a timeline row; a run of holds reads "held N times by ..."."""
    entry = history[position]
    context = context_of(entry)
    run = hold_run(entry)
    count = run.get("count", 1)
    held = ""
    if isinstance(count, int) and count > 1:
        why = " and ".join(str(hold.get("rule")) for hold in as_objects(entry.get("held_by")))
        held = f"held {count} times by {why or entry.get('rule')}"
    cost_before = as_number(context.get("cost_per_hour"))
    cost_after = as_number(context.get("proposed_cost_per_hour"))
    if cost_after is None and entry.get("action") == "hold":
        cost_after = cost_before
    action = entry.get("action")
    launch = None
    if action in ("scale_up", "scale_down") or entry.get("rule") == EventRule.RECOVER:
        launch_id = _launch_followed(history, position, live_id)
        if launch_id is not None:
            task = launches.get(launch_id) or {}
            launch = {"launch_id": launch_id, "task": run_links(airflow_root, task)["task"]}
    return {
        "position": position,
        "held": held,
        "at": moment(entry.get("decided_at"), now, zone),
        "first_at": moment(run.get("first_at"), now, zone) if held else None,
        "last_at": moment(run.get("last_at"), now, zone) if held else None,
        "count": count,
        "action": action,
        "from_nodes": entry.get("current_nodes"),
        "to_nodes": entry.get("target_nodes"),
        "rule": rule_text(str(entry.get("rule")), as_dict(entry.get("thresholds"))),
        "held_by": held_text({**entry, "held_by": as_objects(entry.get("held_by"))}),
        "reason": entry.get("reason"),
        "summary": decision_summary(entry),
        "cost_per_hour_before": cost_before,
        "cost_per_hour_after": cost_after,
        **{key: context.get(key) for key in (*RUN_KEYS, "try_number")},
        "map_index": map_index_of(context),
        "launch_id": context.get("launch_id"),
        "launch_after": launch,
        "links": run_links(airflow_root, context),
        "kind": "recovery" if entry.get("rule") == EventRule.RECOVER else "decision",
        "lost": as_objects(entry.get("lost")),
        "shared_grid": shared_grid_of(entry),
    }


def _fold_key(entry: dict[str, Any]) -> tuple[Any, ...] | None:
    """What makes consecutive holds one row (module docstring); None: a row of its own."""
    if entry.get("action") != "hold" or entry.get("rule") in NOT_FOLDED:
        return None
    return (str(entry.get("rule")), entry.get("current_nodes"), entry.get("target_nodes"))


def fold(history: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The rows of ``history`` as (first, last) positions, oldest first (module docstring)."""
    groups: list[tuple[int, int]] = []
    previous = None
    for position, entry in enumerate(history):
        key = _fold_key(entry)
        if key is not None and key == previous and groups:
            groups[-1] = (groups[-1][0], position)
        else:
            groups.append((position, position))
        previous = key
    return groups


def parse_run(text: Any, size: int) -> tuple[int, int] | None:
    """``?run=first-last`` as positions inside a history of ``size`` entries, else None."""
    try:
        first, last = (int(part) for part in str(text).split("-", 1))
    except (TypeError, ValueError):
        return None
    return (first, last) if 0 <= first <= last < size else None


@dataclass(frozen=True)
class TimelinePage:
    """Which rows a page shows: (first, last) positions, newest first, and where it is."""

    groups: list[tuple[int, int]]
    page: int
    pages: int
    total_rows: int
    run: tuple[int, int] | None

    def info(self) -> dict[str, Any]:
        """The paging facts as plain JSON."""
        return {
            "page": self.page,
            "pages": self.pages,
            "rows_per_page": ROWS_PER_PAGE,
            "total_rows": self.total_rows,
            "run": list(self.run) if self.run else None,
        }


def timeline_page(
    history: list[dict[str, Any]],
    page: Any = None,
    run: Any = None,
    highlight: int | None = None,
    folded: list[tuple[int, int]] | None = None,
) -> TimelinePage:
    """The rows of page ``page`` (1-based; default: the page of position ``highlight``, else
    the first), of the whole history or of ``run`` ("first-last") unfolded; ``folded``: the
    history's :func:`fold`, when known."""
    shown = parse_run(run, len(history))
    if shown is None:
        groups = list(fold(history) if folded is None else folded)
    else:
        groups = [(p, p) for p in range(shown[0], shown[1] + 1)]
    groups.reverse()  # newest first
    pages = max(1, math.ceil(len(groups) / ROWS_PER_PAGE))
    try:
        number = int(page)
    except (TypeError, ValueError):
        number = 0
    if number < 1 and highlight is not None:
        found = next((i for i, (a, b) in enumerate(groups) if a <= highlight <= b), 0)
        number = found // ROWS_PER_PAGE + 1
    number = min(max(number, 1), pages)
    start = (number - 1) * ROWS_PER_PAGE
    return TimelinePage(groups[start : start + ROWS_PER_PAGE], number, pages, len(groups), shown)


def folded_row(
    history: list[dict[str, Any]],
    group: tuple[int, int],
    row: dict[str, Any],
    now: float,
    zone: tzinfo,
) -> dict[str, Any]:
    """The row of the newest decision of a folded run (``row``), made the run's: its checks,
    the rules that held it back, its first and last check, and a link to it."""
    first, last = group
    if first == last:
        return {**row, "run": None}
    entries = history[first : last + 1]
    checks = sum(int(hold_run(entry).get("count", 1) or 1) for entry in entries)
    held: list[str] = []
    for entry in entries:
        for hold in as_objects(entry.get("held_by")):
            if str(hold.get("rule")) not in held:
                held.append(str(hold.get("rule")))
    began = hold_run(entries[0]).get("first_at")
    ended = hold_run(entries[-1]).get("last_at")
    why = " and ".join(held) or str(entries[-1].get("rule"))
    texts: list[str] = []
    for entry in entries:
        text = held_text({**entry, "held_by": as_objects(entry.get("held_by"))})
        if text not in texts:
            texts.append(text)
    return {
        **row,
        "held": f"held {checks:,} times by {why}",
        "count": checks,
        "entries": last - first + 1,
        "first_at": moment(began, now, zone),
        "last_at": moment(ended, now, zone),
        "held_by": "; ".join(texts[:4])
        + (f"; and {len(texts) - 4} more" if len(texts) > 4 else ""),
        "run": [first, last],
    }


def find_entry(history: list[dict[str, Any]], wanted: dict[str, Any] | None) -> int | None:
    """The position of the newest decision made by the task instance ``wanted`` names
    (``dag_id``, ``run_id``, ``task_id``, ``map_index``: those given), else None."""
    if not wanted:
        return None
    keys = {key: value for key, value in wanted.items() if key != "map_index"}
    for position in reversed(range(len(history))):
        entry = history[position]
        context = context_of(entry)
        if all(context.get(key) == value for key, value in keys.items()) and (
            "map_index" not in wanted or map_index_of(context) == wanted["map_index"]
        ):
            return position
    return None


def positions_of(page: TimelinePage) -> list[int]:
    """Every history position the page's rows stand for, newest first."""
    return [p for first, last in page.groups for p in range(last, first - 1, -1)]
