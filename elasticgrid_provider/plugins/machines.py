"""The job page's "Machines" section: each part's cloud instances, as the engine last saw them.

:func:`machine_rows` builds the rows of the page's view; the page
(:func:`~elasticgrid_provider.plugins.pages.job_page`) renders them when there are any. The
rows come from the live status (:func:`~elasticgrid_provider.hooks.job_machines.part_machines`
through :func:`.live.live_status`), the same rows ``elasticgrid machines JOB`` prints. A job
whose parts run on engines without instances (local, ssh) has no such section.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from elasticgrid_provider.hooks.job_machines import state_text
from elasticgrid_provider.plugins.jobs import as_objects
from elasticgrid_provider.plugins.times import moment

MACHINE_KEYS = ("part", "instance_id", "instance_type", "market", "zone", "address")
MACHINE_COLUMNS = {
    "part": "part",
    "instance": "instance_id",
    "type": "instance_type",
    "market": "market",
    "zone": "zone",
    "state": "state",
    "address": "address",
}
"""The section's columns (header -> row key); the page adds ``launched`` ("3m ago")."""


def machine_rows(live: dict[str, Any], now: float, zone: tzinfo) -> list[dict[str, Any]]:
    """The live status's machines as the page shows them: the state says when the cloud took
    the instance back, the launch time reads "3m ago" with the full time on hover."""
    rows = []
    for row in as_objects(live.get("machines")):
        try:
            launched = datetime.fromisoformat(str(row.get("launched_at"))).timestamp()
        except ValueError:
            launched = None
        shown = {key: row.get(key) for key in MACHINE_KEYS}
        rows.append({**shown, "state": state_text(row), "launched": moment(launched, now, zone)})
    return rows
