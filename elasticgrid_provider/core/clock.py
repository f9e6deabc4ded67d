"""The one wall clock: every timestamp the provider writes or shows is UTC.

Rules:

* Timestamps are read here and nowhere else: :func:`epoch_now` (epoch
  seconds), :func:`utc_now` (an aware ``datetime``), :func:`utc_iso_now`.
* Never a naive or local time: a ``datetime`` without a zone is refused
  rather than guessed at, so a launch id cannot carry the local time.
* Only the wall clock lives here: a timeout or a grace period keeps its own
  timer. Pure: standard library only, no I/O.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from elasticgrid_provider.core.errors import ElasticGridError


def epoch_now() -> float:
    """Seconds since the epoch (UTC), as decisions, samples and records store them."""
    return time.time()


def utc_now() -> datetime:
    """The current time as an aware UTC ``datetime``."""
    return datetime.now(timezone.utc)


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive ``datetime`` (no zone) is refused, never taken as local."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ElasticGridError(f"a time must carry its time zone, got the naive {moment!r}")
    return moment.astimezone(timezone.utc)


def utc_iso_now() -> str:
    """The current time as ISO 8601 in UTC to the second, e.g. ``2026-12-03T00:15:00+00:00``."""
    return utc_now().isoformat(timespec="seconds")
