"""The chart and the times: one point or a thousand, y ticks, step lines, titles, markers."""

from __future__ import annotations

import re
from datetime import timezone
from xml.etree import ElementTree

from elasticgrid_provider.plugins.chart import chart_svg, thin_points, time_ticks
from elasticgrid_provider.plugins.times import moment, relative_text, zone_named
from tests.plugins.recorded import T0

SVG = "{http://www.w3.org/2000/svg}"


def _parsed(svg: str) -> ElementTree.Element:
    return ElementTree.fromstring(svg)  # well-formed, or this raises


def _lines(svg: ElementTree.Element) -> list[str]:
    return [p.get("d", "") for p in svg.iter(f"{SVG}path") if p.get("class") == "line"]


def test_one_decision_draws_a_visible_line_and_ticks():
    # a single decision still draws a line, and the y axis has ticks
    points = [{"at": T0, "nodes": 4, "queue_fraction": 0.5, "cost_per_hour": 6.0}]
    svg = _parsed(chart_svg(points, until=T0 + 600))
    lines = _lines(svg)
    assert len(lines) == 3
    for path in lines:  # a move to the point, then a horizontal run to "now"
        start, run = re.fullmatch(r"M([\d.]+),[\d.]+H([\d.]+)", path).groups()
        assert float(run) - float(start) > 100
    labels = [t.text for t in svg.iter(f"{SVG}text")]
    for tick in ("0", "2", "4", "0.25", "0.5", "3", "6"):
        assert tick in labels, tick
    titles = [t.text for t in svg.iter(f"{SVG}title")]
    assert "2026-01-01 00:00:00 UTC: nodes 4" in titles
    assert "time (UTC)" in labels


def test_a_thousand_decisions_stay_readable_with_markers():
    points = [
        {"at": T0 + 60 * i, "nodes": 2 + (i // 250) * 2, "queue_fraction": (i % 10) / 10}
        for i in range(1000)
    ]
    markers = [
        {"at": T0 + 60 * 250, "kind": "resize", "label": "scale_up 2 -> 4"},
        {"at": T0 + 60 * 600, "kind": "recovery", "label": "recovery 6 -> 6"},
    ]
    text = chart_svg(points, markers, zone=zone_named("Europe/Paris"))
    svg = _parsed(text)
    nodes_line = _lines(svg)[0]
    assert nodes_line.count("H") == 4  # a step per change of value (and on to the end)
    assert _lines(svg)[1].count("H") == 1000  # the queue fraction changes at every point
    circles = list(svg.iter(f"{SVG}circle"))
    assert 0 < len(circles) <= 300  # only the changes are dotted, each with its title
    assert all(c.find(f"{SVG}title") is not None for c in circles)
    marks = [line for line in svg.iter(f"{SVG}line") if "marker" in (line.get("class") or "")]
    assert [m.get("class") for m in marks] == ["marker resize", "marker recovery"]
    assert marks[0].find(f"{SVG}title").text == "2026-01-01 05:10:00 CET: scale_up 2 -> 4"
    assert "cost $/h" in text and "not recorded" in text  # no cost in these points
    assert len(text) < 400_000


def test_times_are_relative_with_the_absolute_time_in_the_zone():
    assert relative_text(2) == "just now"
    assert relative_text(45) == "45s ago"
    assert relative_text(190) == "3m ago"
    assert relative_text(7300) == "2h ago"
    assert relative_text(-120) == "in 2m"
    when = moment(T0, T0 + 180, zone_named("Asia/Tokyo"))
    assert when == {
        "iso": "2026-01-01T00:00:00+00:00",
        "relative": "3m ago",
        "absolute": "2026-01-01 09:00:00 JST",
    }
    assert zone_named("Not/AZone") is timezone.utc
    assert moment("x", T0, timezone.utc) is None and moment(1e308, T0, timezone.utc) is None


def _labels(svg: ElementTree.Element) -> list[str]:
    """The time axis' tick labels (the text under the last panel, left of the zone)."""
    texts = [t for t in svg.iter(f"{SVG}text") if not (t.text or "").startswith("time (")]
    bottom = max(float(t.get("y", 0)) for t in texts)
    return [t.text or "" for t in texts if float(t.get("y", 0)) == bottom]


def test_the_time_axis_never_repeats_a_label_whatever_the_span():
    # five evenly spread ticks of a 3-minute span all read "09:00" or "09:01"; round steps
    # chosen by the span never repeat one, from a minute to a year, in any zone
    zone = zone_named("Asia/Kolkata")  # half-hour offset: ticks still fall on round times
    for span in (0, 45, 180, 1_000, 5_000, 30_000, 80_000, 200_000, 3_000_000, 40_000_000):
        points = [{"at": T0 + 7, "nodes": 2}, {"at": T0 + 7 + span, "nodes": 4}]
        labels = _labels(_parsed(chart_svg(points, zone=zone)))
        assert len(labels) >= 2, (span, labels)
        assert len(set(labels)) == len(labels), (span, labels)
    # a 3-minute span: ticks a minute apart (seconds only for steps under a minute)
    assert [label for _, label in time_ticks(T0, T0 + 180, timezone.utc)] == [
        "00:00",
        "00:01",
        "00:02",
        "00:03",
    ]
    assert [label for _, label in time_ticks(T0, T0 + 100, timezone.utc)][:2] == [
        "00:00:00",
        "00:00:30",
    ]


def test_ten_thousand_decisions_chart_in_few_bytes_and_keep_their_shape():
    points = [
        {"at": T0 + 60 * i, "nodes": 2 + (i // 2500) * 2, "queue_fraction": (i % 97) / 97,
         "cost_per_hour": 1.5 * (2 + (i // 2500) * 2)}
        for i in range(10_000)
    ]  # fmt: skip
    thin = thin_points(points)
    assert 240 < len(thin) < 2_000 and thin[0] == points[0] and thin[-1] == points[-1]
    assert {p["nodes"] for p in thin} == {2, 4, 6, 8}
    assert (
        min(p["queue_fraction"] for p in thin) == 0
        and max(p["queue_fraction"] for p in thin) == 96 / 97
    )
    markers = [
        {"at": T0 + 60 * i, "kind": "resize", "label": f"scale_up {i}"} for i in range(0, 10_000, 5)
    ]
    text = chart_svg(thin, markers, zone=timezone.utc)
    svg = _parsed(text)
    marks = [line for line in svg.iter(f"{SVG}line") if "marker" in (line.get("class") or "")]
    assert 100 < len(marks) <= 240  # one per 4 px: 2,000 resizes would blacken the chart
    assert " and " in marks[0].find(f"{SVG}title").text
    assert len(text) < 100_000
