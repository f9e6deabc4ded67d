"""The record a launch keeps of itself: its id, its phase and what it runs.

Every launch follows *record intent -> act -> confirm*:

1. the job's manifest is written with ``state="starting"`` and the new
   launch id **before** anything starts;
2. the parts are started, every rank carrying ``ELASTICGRID_JOB`` and
   ``ELASTICGRID_LAUNCH_ID`` in its environment;
3. after a short grace period the ranks are checked, and the manifest is
   rewritten with ``state="running"`` (confirmed) or ``state="down"`` and
   the reason.

A manifest still in ``starting`` was cut short (a kill, a crash): its
launch id is what a retry uses to find and stop every process of that
launch, tracked by iroh-tinker or not, before it starts exactly once.

What a launch runs (``run``, ``envs``, ``setup``) is kept as salted
fingerprints, never as values, so attach can tell "same job" from "changed
job" without keeping secrets at rest.

Pure: no Airflow, no iroh-tinker, no I/O.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping
from datetime import datetime

from elasticgrid_provider.core.clock import as_utc, utc_now

LAUNCH_STARTING = "starting"
LAUNCH_RUNNING = "running"
LAUNCH_DOWN = "down"
LAUNCH_STATES = (LAUNCH_STARTING, LAUNCH_RUNNING, LAUNCH_DOWN)  # the phases a manifest records
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
