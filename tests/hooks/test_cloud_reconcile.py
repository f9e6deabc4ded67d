"""The reconcile against a real EC2 API (moto's server): instances of launches that are no
longer a job's current one are terminated, the current and newer ones are left."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from elasticgrid_provider.atomic_files import write_json
from elasticgrid_provider.core.job import JobManifest, PartRecord
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.policy.rules import EventRule
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.hooks.cloud_reconcile import reconcile_instances
from elasticgrid_provider.hooks.job_store import MANIFEST_NAME, JobStore
from elasticgrid_provider.hooks.remote_parts import sweep_remote_launch
from tests.engines.ec2_cloud import moto_ec2
from tests.engines.test_ec2_engine import JOB, PART, engine

OLD, CURRENT, NEWER = (
    "20260101T000000Z-aaaaaa",
    "20260102T000000Z-bbbbbb",
    "20260103T000000Z-cccccc",
)


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch):
    with moto_ec2(monkeypatch) as started:
        yield started
        assert started.not_terminated() == []


def start_launch(cloud, tmp_path: Path, store: JobStore, launch_id: str) -> list[str]:
    """Instances of ``launch_id`` as the engine starts them, and the launch's spec on disk."""
    part = engine(cloud, tmp_path, boot_timeout_s=60, launch_id=launch_id)
    folder = tmp_path / launch_id
    started = part.run_instances(folder, part.record_intent(folder))
    spec = {
        "name": PART,
        "resources": {"infra": [part.target], "params": part.spec.resources.params},
    }
    store.spec_folder(JOB, launch_id).mkdir(parents=True, exist_ok=True)
    write_json(store.spec_folder(JOB, launch_id) / f"{PART}.json", spec)
    return sorted(instance.instance_id for instance in started)


def write_manifest(store: JobStore, launch_id: str, state: LaunchPhase) -> None:
    aws = Provider("aws", max_nodes=4, cost_per_node_hour=1.0, engine="ec2")
    manifest = JobManifest(
        job_name=JOB,
        launch_id=launch_id,
        launched_at="2026-01-02T00:00:00+00:00",
        placement=Placement((Assignment(aws, 2),)),
        world_size=2,
        procs_per_node=1,
        rendezvous="dir:/srv/pool/r",
        run="python train.py",
        parts=(PartRecord(PART, "aws", "ec2", 2, 0, str(store.spec_folder(JOB, launch_id))),),
        state=state,
    )
    store.job_folder(JOB).mkdir(parents=True, exist_ok=True)
    write_json(store.job_folder(JOB) / MANIFEST_NAME, manifest.model_dump())


class Lines:
    """A log that keeps its lines (what the hook's logger would print)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _keep(self, message: str, *args: object) -> None:
        self.lines.append(message % args)

    info = warning = error = _keep


def alive(cloud) -> list[str]:
    return sorted(cloud.not_terminated())


def test_instances_of_launches_no_longer_current_are_terminated_and_logged(cloud, tmp_path):
    log = Lines()
    store = JobStore(tmp_path / "jobs", log)
    old = start_launch(cloud, tmp_path, store, OLD)
    current = start_launch(cloud, tmp_path, store, CURRENT)
    newer = start_launch(cloud, tmp_path, store, NEWER)  # being written by another task
    write_manifest(store, CURRENT, LaunchPhase.RUNNING)
    assert sorted(reconcile_instances(store)) == old
    assert alive(cloud) == sorted(current + newer)
    assert log.lines == [
        f"Reconcile: terminating instance(s) {', '.join(old)} of job {JOB} launch {OLD} (its "
        f"current launch is {CURRENT})."
    ]
    assert reconcile_instances(store) == []  # nothing left to do
    write_manifest(store, CURRENT, LaunchPhase.DOWN)  # the current launch is over
    assert sorted(reconcile_instances(store)) == current
    assert alive(cloud) == newer
    # a stop's sweep of a launch terminates its ec2 part's instances by tag
    spec = store.spec_files(JOB, NEWER)
    assert sorted(sweep_remote_launch(JOB, NEWER, spec)) == newer
    assert alive(cloud) == []


def test_a_job_without_ec2_parts_or_manifest_is_left_alone(cloud, tmp_path):
    store = JobStore(tmp_path / "jobs", Lines())
    ids = start_launch(cloud, tmp_path, store, OLD)  # no manifest: never a current launch
    assert reconcile_instances(store) == [] and alive(cloud) == ids
    sweep_remote_launch(JOB, OLD, store.spec_files(JOB, OLD))
    assert alive(cloud) == []
    assert json.loads((tmp_path / OLD / "ec2-launch.json").read_text())["launch_id"] == OLD


def test_the_history_records_instances_started_terminated_and_reclaimed_once(tmp_path):
    from elasticgrid_provider.core.job import JobSnapshot
    from elasticgrid_provider.core.state import ScaleState
    from elasticgrid_provider.hooks.cloud_events import instance_entries

    folder = tmp_path / PART
    folder.mkdir()

    def machines(*states: tuple[str, str, str | None]) -> None:
        instances = [
            {
                "instance_id": instance_id,
                "instance_type": "t3.micro",
                "market": "spot",
                "zone": "us-east-1a",
                "state": state,
                "launched_at": "2026-01-01T00:00:00+00:00",
                "address": "192.0.2.4",
                "state_reason": reason,
            }
            for instance_id, state, reason in states
        ]
        write_json(
            folder / "machines.json", {"part": PART, "launch_id": CURRENT, "instances": instances}
        )

    store = JobStore(tmp_path / "jobs", Lines())
    write_manifest(store, CURRENT, LaunchPhase.RUNNING)
    manifest = store.read_manifest(JOB)
    assert manifest is not None
    part = replace(manifest.parts[0], job_dir=str(folder))
    snapshot = JobSnapshot(manifest=manifest, parts=(part,))
    machines(("i-1", "running", None), ("i-2", "pending", None))
    (entry,), said = instance_entries(snapshot, 100.0)
    assert entry["rule"] == EventRule.INSTANCES and entry["action"] == "hold"
    assert entry["reason"] == (
        f"part {PART} of job {JOB!r}: instances started i-1 (t3.micro, spot), i-2 (t3.micro, spot)"
    )
    said()
    assert instance_entries(snapshot, 101.0)[0] == []  # said once
    spot_end = "Server.SpotInstanceTermination: Spot instance termination"
    machines(("i-1", "terminated", spot_end), ("i-2", "terminated", "Client.UserInitiated: x"))
    (entry,), said = instance_entries(snapshot, 102.0)
    assert entry["context"]["instances"] == {"i-1": "reclaimed", "i-2": "terminated"}
    assert "terminated i-2 (t3.micro, spot); reclaimed by the cloud i-1" in entry["reason"]
    state = ScaleState(job_name=JOB).remember_event(entry, 102.0)
    assert ScaleState.model_validate(state.model_dump()).history[-1]["rule"] == EventRule.INSTANCES
