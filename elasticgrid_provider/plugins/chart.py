"""The job page's chart: size, queue fraction and cost over time, as inline SVG (no script).

Three stacked step charts share one time axis. Each has y-axis ticks (0, half, top) with
grid lines; the line holds each value until the next point (a running job's last value
until now). A point where the value changes carries a hover title (time and value); the
resizes and recoveries are dashed vertical markers across all three, with titles, and
the time axis has ticks at round times of the UI's zone, one step chosen by the span, so no
two labels read alike (:func:`time_ticks`). One point, or a thousand, both read.
"""

from __future__ import annotations

import html
import math
from datetime import datetime, timezone, tzinfo
from typing import Any

from elasticgrid_provider.core.formatting import number_text
from elasticgrid_provider.plugins.jobs import as_number
from elasticgrid_provider.plugins.times import absolute_text, epoch_or_none

PANELS = (
    ("nodes", "nodes", "#1f6feb"),
    ("queue_fraction", "queue fraction", "#b35900"),
    ("cost_per_hour", "cost $/h", "#1c7c3a"),
)
MARKER_COLOURS = {"resize": "#6e40c9", "recovery": "#c62828"}
MARKER_SLOT_PX = 4
MAX_DOTS = 150  # per panel: beyond it only the changes of value are dotted
MAX_TIME_TICKS = 6
TICK_STEPS_S = (
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
    86400, 2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400, 91 * 86400, 182 * 86400, 365 * 86400,
)  # fmt: skip
MIN_SPAN_S = 120.0  # a single point is drawn on a two-minute axis


def _nice_top(value: float) -> float:
    """The axis top: a round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten)
    at or above ``value``."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if value <= step * power + 1e-12:
            return step * power
    return 10 * power  # pragma: no cover


def _text(x: float, y: float, text: str, extra: str = "") -> str:
    escaped = html.escape(text, quote=True)
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="11" fill="#5f6b76"{extra}>{escaped}</text>'


def _title(text: str) -> str:
    return f"<title>{html.escape(text, quote=True)}</title>"


CHART_BUCKETS = 240  # time slots of the chart's data: 4 px each at the page's width
SERIES = tuple(key for key, _, _ in PANELS)


def thin_points(points: list[dict[str, Any]], buckets: int = CHART_BUCKETS) -> list[dict[str, Any]]:
    """At most a few points per time slot, keeping each series' shape: per slot its first and
    last point and, for each series, the points of its lowest and highest value (a step line
    of 10,000 decisions draws alike from about 2,000 points)."""
    if len(points) <= 4 * buckets:
        return points
    start, end = float(points[0]["at"]), float(points[-1]["at"])
    width = max(end - start, 1e-9) / buckets
    kept: set[int] = set()
    slot: list[int] = []
    numbers = [[as_number(point.get(key)) for point in points] for key in SERIES]

    def close() -> None:
        if not slot:
            return
        kept.update((slot[0], slot[-1]))
        for series in numbers:
            known = [(value, i) for i in slot if (value := series[i]) is not None]
            if known:
                kept.add(min(known)[1])
                kept.add(max(known)[1])
        slot.clear()

    current = None
    for index, point in enumerate(points):
        number = int((float(point["at"]) - start) / width)
        if number != current:
            close()
            current = number
        slot.append(index)
    close()
    return [points[i] for i in sorted(kept)]


def time_ticks(start: float, end: float, zone: tzinfo) -> list[tuple[float, str]]:
    """The time axis' ticks: the smallest round step (:data:`TICK_STEPS_S`) that gives at most
    :data:`MAX_TIME_TICKS` ticks over the span, at round times of ``zone``, each labelled
    finely enough that no two labels read alike (seconds below a minute's step, the date
    once the span passes midnight, the date alone for steps of days)."""
    span = max(end - start, 1e-9)
    step = next((s for s in TICK_STEPS_S if span / s <= MAX_TIME_TICKS - 1), TICK_STEPS_S[-1])
    offset = datetime.fromtimestamp(start, timezone.utc).astimezone(zone).utcoffset()
    shift = offset.total_seconds() if offset else 0.0  # round in the zone's own clock
    first = math.ceil((start + shift) / step) * step - shift
    ticks = [first + step * n for n in range(int((end - first) // step) + 1)]
    days = {datetime.fromtimestamp(t, timezone.utc).astimezone(zone).date() for t in (start, end)}
    if step >= 86400:
        pattern = "%Y-%m-%d" if span > 300 * 86400 else "%m-%d"
    elif step < 60:
        pattern = "%H:%M:%S"
    else:
        pattern = "%m-%d %H:%M" if len(days) > 1 else "%H:%M"
    return [
        (at, datetime.fromtimestamp(at, timezone.utc).astimezone(zone).strftime(pattern))
        for at in ticks
    ]


def chart_svg(
    points: list[dict[str, Any]],
    markers: list[dict[str, Any]] | None = None,
    *,
    until: float | None = None,
    zone: tzinfo = timezone.utc,
    width: int = 960,
    panel_height: int = 70,
) -> str:
    """The chart of ``points`` (``at`` and the panels' keys), ``markers`` (``at``, ``kind``,
    ``label``); a running job's lines run on to ``until`` (now)."""
    points = [p for p in points if epoch_or_none(p.get("at")) is not None]
    if not points:
        return '<p class="muted">No decisions to chart yet.</p>'
    markers = [m for m in markers or () if epoch_or_none(m.get("at")) is not None]
    start = min(float(p["at"]) for p in points)
    end = max(float(p["at"]) for p in points)
    if until is not None and until > end:
        end = until
    if end - start < MIN_SPAN_S:
        middle = (start + end) / 2
        start, end = middle - MIN_SPAN_S / 2, middle + MIN_SPAN_S / 2
    left, right, gap = 56, 14, 34
    plot = width - left - right

    def x_of(at: float) -> float:
        return left + (at - start) / (end - start) * plot

    parts: list[str] = []
    for index, (key, label, colour) in enumerate(PANELS):
        top = index * (panel_height + gap) + 22
        values = [(float(p["at"]), as_number(p.get(key))) for p in points]
        known = [(at, v) for at, v in values if v is not None]
        high = _nice_top(max((v for _, v in known), default=1.0))

        def y_of(value: float, top: int = top, high: float = high) -> float:
            return top + panel_height - value / high * panel_height

        parts.append(
            f'<text x="{left}" y="{top - 7}" font-size="12" font-weight="600">{label}</text>'
        )
        parts.append(
            f'<rect x="{left}" y="{top}" width="{plot}" height="{panel_height}" '
            'fill="none" stroke="#dde2e6"/>'
        )
        for tick in (0.0, high / 2, high):  # y-axis ticks with grid lines
            y = y_of(tick)
            parts.append(
                f'<line x1="{left}" x2="{left + plot}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eef1f3"/>'
            )
            parts.append(_text(left - 6, y + 4, number_text(tick), ' text-anchor="end"'))
        if not known:
            parts.append(_text(left + 8, top + panel_height / 2, "not recorded"))
            continue
        path = []
        drawn = None
        for at, value in known:
            x, y = x_of(at), y_of(value)
            if drawn is None:
                path.append(f"M{x:.1f},{y:.1f}")
            elif f"{y:.1f}" != drawn:  # a step: along to here, then up or down
                path.append(f"H{x:.1f}V{y:.1f}")
            drawn = f"{y:.1f}"
        path.append(f"H{x_of(end):.1f}")
        parts.append(
            f'<path class="line" fill="none" stroke="{colour}" stroke-width="2" '
            f'd="{"".join(path)}"/>'
        )
        dotted = [
            (at, value)
            for number, (at, value) in enumerate(known)
            if len(known) <= MAX_DOTS or number == 0 or value != known[number - 1][1]
        ][-MAX_DOTS:]
        for at, value in dotted:
            parts.append(
                f'<circle cx="{x_of(at):.1f}" cy="{y_of(value):.1f}" r="3.5" fill="{colour}">'
                f"{_title(f'{absolute_text(at, zone)}: {label} {number_text(value)}')}</circle>"
            )
    bottom = len(PANELS) * (panel_height + gap) - gap + 22
    slots: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for marker in markers:  # one line per 4 px and kind, titled with what it stands for
        slot = (int(x_of(float(marker["at"])) // MARKER_SLOT_PX), str(marker.get("kind")))
        slots.setdefault(slot, []).append(marker)
    for group in slots.values():
        marker = group[0]
        x = x_of(float(marker["at"]))
        colour = MARKER_COLOURS.get(str(marker.get("kind")), "#6e40c9")
        title = f"{absolute_text(float(marker['at']), zone)}: {marker.get('label')}"
        if len(group) > 1:
            title += (
                f" and {len(group) - 1} more until {absolute_text(float(group[-1]['at']), zone)}"
            )
        parts.append(
            f'<line class="marker {marker.get("kind")}" x1="{x:.1f}" x2="{x:.1f}" y1="22" '
            f'y2="{bottom + 4}" stroke="{colour}" stroke-width="2" stroke-dasharray="4 3">'
            f"{_title(title)}</line>"
        )
    for at, label in time_ticks(start, end, zone):
        x = x_of(at)
        anchor = ' text-anchor="middle"'
        if x < left + 24:
            anchor = ""
        elif x > left + plot - 24:
            anchor = ' text-anchor="end"'
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 5}" stroke="#5f6b76"/>'
        )
        parts.append(_text(x, bottom + 17, label, anchor))
    zone_name = absolute_text(start, zone).rsplit(" ", 1)[-1]
    parts.append(_text(left + plot, bottom + 31, f"time ({zone_name})", ' text-anchor="end"'))
    height = bottom + 36
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="size, queue fraction and cost over time">{"".join(parts)}</svg>'
    )
