"""The record a launch keeps of itself: its id, its phase and what it runs.

Every action on a job follows *record intent -> act -> confirm*, and every destructive step is
preceded by a record that says what is about to happen, so no window exists in which the job is
gone and nothing says so: a launch's :class:`LaunchPhase` goes ``starting`` (before any part
starts), ``running`` (confirmed after the start-up grace), ``lost`` or ``down`` (with the
reason), and ``stopping`` -> ``stopped``. A record left ``starting`` or ``stopping`` was cut
short; the next task or check reconciles from it under the job's lock. What a launch runs is
kept as salted fingerprints, never as values. The phases and what follows each:
docs/recovery.md ("The launch record and its phases"). Pure: no Airflow, no iroh-tinker, no I/O.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping
from datetime import datetime

from elasticgrid_provider.core.clock import as_utc, utc_now
from elasticgrid_provider.core.validation import Choice


class LaunchPhase(Choice):
    """The phase a manifest records for its launch (``state``; docs/recovery.md)."""

    STARTING = "starting"  # recorded before any part starts
    RUNNING = "running"  # every rank was up after the start-up grace
    STOPPING = "stopping"  # recorded before the parts are stopped (a resize, a stop)
    STOPPED = "stopped"  # stopped on purpose, every part stopped
    DOWN = "down"  # confirmed dead (``down_reason``)
    LOST = "lost"  # lost capacity while starting, the rest stopped: a check may recover it

    @property
    def is_terminal(self) -> bool:
        """Whether the launch is over: nothing of it runs, and only a new launch changes that."""
        return self in (LaunchPhase.STOPPED, LaunchPhase.DOWN, LaunchPhase.LOST)

    @property
    def can_lose_capacity(self) -> bool:
        """Whether a check treats the launch's failed parts as lost capacity (recovery)."""
        return self in (LaunchPhase.RUNNING, LaunchPhase.LOST)

    @property
    def is_unfinished(self) -> bool:
        """Whether a task was cut short in this phase (no task holds the job's lock)."""
        return self in (LaunchPhase.STARTING, LaunchPhase.STOPPING)


FINGERPRINT_FIELDS = ("run", "envs", "setup")  # unchanged, or a task does not attach to the job


def new_launch_id(now: datetime | None = None) -> str:
    """A unique, sortable launch id: UTC time to the second plus 6 random hex digits; ``now``
    (default: the current time) must carry its zone, a naive time is refused."""
    moment = utc_now() if now is None else as_utc(now)
    return moment.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def new_salt() -> str:
    """A random salt for one launch's fingerprints."""
    return secrets.token_hex(16)


def launch_fingerprints(
    run: str, envs: Mapping[str, str], setup: str | None, salt: str
) -> dict[str, str]:
    """Salted SHA-256 of each field in :data:`FINGERPRINT_FIELDS`; values never leave here."""
    values: dict[str, object] = {"run": run, "envs": dict(sorted(envs.items())), "setup": setup}
    return {
        name: hashlib.sha256(
            (salt + "\0" + json.dumps(values[name], sort_keys=True)).encode()
        ).hexdigest()
        for name in FINGERPRINT_FIELDS
    }


def changed_fields(recorded: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """The fingerprinted fields that differ (a field missing from the record counts as changed)."""
    return [name for name in FINGERPRINT_FIELDS if recorded.get(name) != current.get(name)]
