"""Times as the pages show them: "3m ago", with the full time in the UI's zone on hover.

The zone is ``[api] default_ui_timezone`` (Airflow's own setting for the UI; ``system``
is the API server's zone). A user's own choice in the UI lives in the browser, where a
script-free page cannot read it. A bad value falls back to UTC.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone, tzinfo
from typing import Any

UTC_NAMES = ("utc", "z", "")


def zone_named(name: Any) -> tzinfo:
    """The zone called ``name`` (an IANA name, ``UTC`` or ``system``); UTC when unknown."""
    text = str(name or "").strip()
    if text.lower() in UTC_NAMES:
        return timezone.utc
    if text.lower() == "system":
        local = datetime.now().astimezone().tzinfo
        return local or timezone.utc
    try:
        from zoneinfo import ZoneInfo

        return ZoneInfo(text)
    except (ValueError, KeyError, OSError):  # ZoneInfoNotFoundError is a KeyError
        return timezone.utc


def ui_zone() -> tzinfo:
    """The UI's zone from ``[api] default_ui_timezone`` (on the API server; UTC by default)."""
    try:
        from airflow.configuration import conf

        return zone_named(conf.get("api", "default_ui_timezone", fallback="UTC"))
    except Exception:  # a page never fails on its clock
        return timezone.utc


def epoch_or_none(value: Any) -> float | None:
    """A finite epoch time on the calendar, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    if not math.isfinite(value) or not -6e10 < value < 2.5e11:  # years ~100 to ~9900
        return None
    return value


def relative_text(seconds: float) -> str:
    """``just now``, ``45s ago``, ``3m ago``, ``2h ago``, ``5d ago``; ``in 3m`` ahead."""
    ahead = seconds < 0
    size = abs(seconds)
    if size < 5:
        return "just now"
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if size >= length or unit == "s":
            amount = f"{int(size // length)}{unit}"
            return f"in {amount}" if ahead else f"{amount} ago"
    raise AssertionError("unreachable")  # pragma: no cover


def absolute_text(epoch: float, zone: tzinfo) -> str:
    """``2026-12-03 14:01:48 CET`` in ``zone``."""
    moment = datetime.fromtimestamp(epoch, timezone.utc).astimezone(zone)
    name = moment.tzname() or moment.strftime("%z")
    return f"{moment:%Y-%m-%d %H:%M:%S} {name}"


def moment(value: Any, now: float, zone: tzinfo) -> dict[str, str] | None:
    """An epoch time as ``{"iso", "relative", "absolute"}``; None when it is no time."""
    epoch = epoch_or_none(value)
    if epoch is None:
        return None
    iso = datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")
    return {
        "iso": iso,
        "relative": relative_text(now - epoch),
        "absolute": absolute_text(epoch, zone),
    }
