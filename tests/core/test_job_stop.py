"""JobStopReport: what a stop says it stopped, as text and as plain JSON (pure)."""

from __future__ import annotations

import json

from elasticgrid_provider.core.job import JobManifest, PartRecord
from elasticgrid_provider.core.job_stop import JobStopReport, StoppedPart
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.providers import Provider

ONPREM = Provider("onprem", max_nodes=4, cost_per_node_hour=0.0, spot=False, engine="ssh-pool")
CLOUD = Provider("cloud", max_nodes=8, cost_per_node_hour=1.0, engine="module=pkg.mod:Engine")
MANIFEST = JobManifest(
    job_name="llm",
    launch_id="20260101T000000Z-abc123",
    launched_at="2026-01-01T00:00:00+00:00",
    placement=Placement((Assignment(ONPREM, 2), Assignment(CLOUD, 3))),
    world_size=10,
    procs_per_node=2,
    rendezvous="dir:/r",
    run="python train.py",
    parts=(
        PartRecord("llm--onprem", "onprem", "ssh-pool", 2, 0, "/s/onprem.json"),
        PartRecord("llm--cloud", "cloud", "module=pkg.mod:Engine", 3, 4, "/s/cloud.json"),
    ),
)


def test_a_stopped_part_names_its_engine_and_global_ranks():
    parts = [StoppedPart.of(MANIFEST, part) for part in MANIFEST.parts]
    assert [(p.engine, p.nodes, p.ranks) for p in parts] == [
        ("ssh-pool", 2, "0-3"),
        ("module=pkg.mod:Engine", 3, "4-9"),
    ]


def test_the_report_says_what_was_stopped_and_released():
    report = JobStopReport(
        job_name="llm",
        launch_id=MANIFEST.launch_id,
        launch_state="stopped",
        job_status="stopped",
        parts=tuple(StoppedPart.of(MANIFEST, part) for part in MANIFEST.parts),
        other_processes=1,
        released_nodes={"onprem": 2, "cloud": 3},
    )
    assert report.stopped
    assert report.text().splitlines() == [
        "Stopped job 'llm' (launch 20260101T000000Z-abc123, recorded stopped): 2 part(s), "
        "5 node(s) and 1 process(es) iroh-tinker had not recorded; released 5 node(s) on the "
        "grid (onprem 2, cloud 3).",
        "",
        "part         provider  engine                 nodes  ranks",
        "llm--onprem  onprem    ssh-pool                   2  0-3",
        "llm--cloud   cloud     module=pkg.mod:Engine      3  4-9",
    ]
    data = report.model_dump()
    assert json.loads(json.dumps(data)) == data  # plain JSON, as XCom keeps it
    assert data["parts"][1] == {
        "name": "llm--cloud",
        "provider": "cloud",
        "engine": "module=pkg.mod:Engine",
        "nodes": 3,
        "ranks": "4-9",
    }
    assert JobStopReport.model_validate(data) == report


def test_with_nothing_stopped_it_says_why_there_was_nothing_left():
    report = JobStopReport(
        job_name="llm",
        launch_id=MANIFEST.launch_id,
        launch_state="running",
        job_status="done",
        nothing_left="every part of its launch L had ended (done)",
    )
    assert not report.stopped
    assert report.text() == (
        "Job 'llm' has nothing left to stop: every part of its launch L had ended (done)."
    )
