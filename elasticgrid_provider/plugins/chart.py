"""The job page's chart: size, queue fraction and cost over time, as inline SVG (no script).

Three stacked step charts share one time axis. Each has y-axis ticks (0, half, top) with
grid lines; the line holds each value until the next point (a running job's last value
until now). A point where the value changes carries a hover title (time and value); the
resizes and recoveries are dashed vertical markers across all three, with titles, and
the time axis has labelled ticks in the UI's zone. One point, or a thousand, both read.
"""

from __future__ import annotations

import html
import math
from datetime import timezone, tzinfo
from typing import Any

from elasticgrid_provider.core.formatting import number_text
from elasticgrid_provider.plugins.jobs import as_number
from elasticgrid_provider.plugins.times import absolute_text, epoch_or_none, short_text

PANELS = (
    ("nodes", "nodes", "#1f6feb"),
    ("queue_fraction", "queue fraction", "#b35900"),
    ("cost_per_hour", "cost $/h", "#1c7c3a"),
)
MARKER_COLOURS = {"resize": "#6e40c9", "recovery": "#c62828"}
MAX_DOTS = 150  # per panel: beyond it only the changes of value are dotted
TIME_TICKS = 5
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
        for number, (at, value) in enumerate(known):
            x, y = x_of(at), y_of(value)
            path.append(f"M{x:.1f},{y:.1f}" if number == 0 else f"H{x:.1f}V{y:.1f}")
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
    for marker in markers:
        x = x_of(float(marker["at"]))
        colour = MARKER_COLOURS.get(str(marker.get("kind")), "#6e40c9")
        title = f"{absolute_text(float(marker['at']), zone)}: {marker.get('label')}"
        parts.append(
            f'<line class="marker {marker.get("kind")}" x1="{x:.1f}" x2="{x:.1f}" y1="22" '
            f'y2="{bottom + 4}" stroke="{colour}" stroke-width="2" stroke-dasharray="4 3">'
            f"{_title(title)}</line>"
        )
    with_date = end - start > 20 * 3600
    for tick in range(TIME_TICKS):
        at = start + (end - start) * tick / (TIME_TICKS - 1)
        x = x_of(at)
        anchor = ' text-anchor="middle"' if 0 < tick < TIME_TICKS - 1 else ""
        anchor = ' text-anchor="end"' if tick == TIME_TICKS - 1 else anchor
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 5}" stroke="#5f6b76"/>'
        )
        parts.append(_text(x, bottom + 17, short_text(at, zone, with_date), anchor))
    zone_name = absolute_text(start, zone).rsplit(" ", 1)[-1]
    parts.append(_text(left + plot, bottom + 31, f"time ({zone_name})", ' text-anchor="end"'))
    height = bottom + 36
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="size, queue fraction and cost over time">{"".join(parts)}</svg>'
    )
