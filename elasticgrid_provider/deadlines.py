"""Which deadline a scale check works to, and how sure we are of it.

Airflow 3 replaced task SLAs with DAG-level ``deadline=DeadlineAlert(...)``. A task sees the
alerts as authored (``context["dag"].deadline``, one or a list) and its DAG run
(``logical_date``, ``run_after``; no ``queued_at``), so some references can only be
approximated or skipped. The rules: docs/sensor.md ("The deadline").
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pendulum
from pendulum.parsing.exceptions import ParserError

from elasticgrid_provider.core.errors import ElasticGridError


@dataclass(frozen=True)
class ResolvedDeadline:
    """The deadline used (or None), where it came from, and what could not be used."""

    at: pendulum.DateTime | None
    source: str
    exact: bool = True
    warnings: tuple[str, ...] = ()

    @property
    def timestamp(self) -> float | None:
        """Epoch seconds, as the scheduler takes it."""
        return None if self.at is None else self.at.timestamp()

    def describe(self, now: float) -> str:
        """One line for the task log: which deadline and how much time is left."""
        if self.at is None:
            return f"No deadline ({self.source})."
        left = self.at.timestamp() - now
        quality = "" if self.exact else " (approximate)"
        return f"Deadline {self.at.isoformat()} from {self.source}{quality}: {left:.0f}s left."


def parse_deadline(value: Any) -> pendulum.DateTime:
    """A datetime or ISO-8601 string as an aware pendulum time (naive means UTC)."""
    if isinstance(value, datetime):
        return pendulum.instance(value)
    if not isinstance(value, str) or not value.strip():
        raise ElasticGridError(f"deadline must be a datetime or an ISO-8601 string, got {value!r}")
    parsed = None
    with suppress(ValueError, ParserError):
        parsed = pendulum.parse(value.strip())
    if not isinstance(parsed, pendulum.DateTime):
        raise ElasticGridError(f"deadline must be an ISO-8601 datetime, got {value!r}")
    return parsed


def _interval(alert: Any) -> timedelta:
    interval = alert.interval
    if isinstance(interval, timedelta):
        return interval
    key = getattr(interval, "key", None)
    if key is None:
        raise ElasticGridError(f"deadline alert interval {interval!r} is not a timedelta")
    from elasticgrid_provider.hooks.state_store import read_variable

    value = read_variable(key)
    try:
        return timedelta(seconds=int(value if value is not None else ""))
    except (TypeError, ValueError):
        raise ElasticGridError(
            f"deadline alert interval Variable {key!r} must hold whole seconds, got {value!r}"
        ) from None


def _reference_time(reference: Any, dag_run: Any) -> tuple[pendulum.DateTime, str, bool]:
    """(reference time, label, exact) for a reference a task can evaluate; raises otherwise."""
    kind = type(reference).__name__
    if kind == "FixedDatetimeDeadline":
        moment = pendulum.from_timestamp(reference.serialize_reference()["datetime"])
        return moment, f"FIXED_DATETIME({moment.isoformat()})", True
    if kind == "DagRunLogicalDateDeadline":
        if getattr(dag_run, "logical_date", None) is None:
            raise ElasticGridError("DAGRUN_LOGICAL_DATE: this run has no logical date")
        return pendulum.instance(dag_run.logical_date), "DAGRUN_LOGICAL_DATE", True
    if kind == "DagRunQueuedAtDeadline":
        label = "DAGRUN_QUEUED_AT (approximated by run_after)"
        return pendulum.instance(dag_run.run_after), label, False
    raise ElasticGridError(f"{kind} cannot be evaluated from a task")


def resolve_deadline(explicit: Any, dag: Any, dag_run: Any) -> ResolvedDeadline:
    """Apply the rules of docs/sensor.md ("The deadline"), in order."""
    if explicit not in (None, ""):
        return ResolvedDeadline(parse_deadline(explicit), "the deadline argument")
    alerts = getattr(dag, "deadline", None)
    if alerts is None:
        return ResolvedDeadline(None, "no deadline argument and no DAG deadline alert")
    if not isinstance(alerts, (list, tuple)):
        alerts = [alerts]
    candidates: list[tuple[pendulum.DateTime, str, bool]] = []
    warnings: list[str] = []
    for alert in alerts:
        name = getattr(alert, "name", None) or type(alert.reference).__name__
        try:
            moment, label, exact = _reference_time(alert.reference, dag_run)
            interval = _interval(alert)
        except ElasticGridError as exc:
            warnings.append(f"DAG deadline alert {name!r} ignored: {exc}")
            continue
        candidates.append((moment + interval, f"DAG deadline alert {label} + {interval}", exact))
    no_deadline = (None, "no DAG deadline alert a task can evaluate", True)
    at, source, exact = min(candidates, key=lambda candidate: candidate[0], default=no_deadline)
    return ResolvedDeadline(at, source, exact, tuple(warnings))
