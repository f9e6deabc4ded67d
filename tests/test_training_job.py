"""Real multi-part training jobs: the example script under iroh-tinker's JobManager.

Two providers map to iroh-tinker's ``local`` engine, so a placement over
both launches as two real iroh-tinker jobs (parts) on this machine whose
ranks form one socket allreduce group. No mocks: real processes, real
sockets, real files.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest
from iroh_tinker.cloud import JobManager

from elasticgrid_provider.core.launch_spec import LaunchOptions, LaunchPart, build_launch_parts
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.runtime import STEP_LOG_NAME

SCRIPT = Path(__file__).resolve().parents[1] / "example_dags" / "train_elastic.py"
CLOUD_A = Provider("cloud-a", max_nodes=4, cost_per_node_hour=0.0, spot=False, engine="local")
CLOUD_B = Provider("cloud-b", max_nodes=4, cost_per_node_hour=0.0, spot=False, engine="local")
JOB = "train"
TIMEOUT_S = 60.0


def placement(nodes_a: int, nodes_b: int) -> Placement:
    return Placement((Assignment(CLOUD_A, nodes_a), Assignment(CLOUD_B, nodes_b)))


class Launcher:
    """Launches parts through a real JobManager and stops whatever still runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.manager = JobManager(root=root / "jobs")
        self.launched: list[str] = []
        self.launches = 0

    def launch(self, layout: Placement, *script_args: str) -> tuple[LaunchPart, ...]:
        self.launches += 1
        run = shlex.join([sys.executable, str(SCRIPT), *script_args])
        options = LaunchOptions(
            run=run,
            # A fresh rendezvous for every launch: stale rank-<n>.json files break it.
            rendezvous=f"dir:{self.root / f'rendezvous-{self.launches}'}",
            recovery={"mode": "none"},
        )
        parts = build_launch_parts(layout, JOB, options)
        for part in parts:
            spec_file = part.write_spec(self.root / f"{part.part_name}-{self.launches}.json")
            self.manager.launch(spec_file)
            self.launched.append(part.part_name)
        return parts

    def job_dir(self, part: LaunchPart) -> Path:
        return self.root / "jobs" / part.part_name

    def wait(self, parts: tuple[LaunchPart, ...]) -> dict[str, str]:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            states = {part.part_name: self.manager.status(part.part_name).status for part in parts}
            if "running" not in states.values():
                return states
            time.sleep(0.05)
        logs = {part.part_name: self.manager.logs(part.part_name, 0) for part in parts}
        pytest.fail(f"parts still running after {TIMEOUT_S} s; rank 0 logs: {logs}")

    def stop_all(self) -> None:
        for name in dict.fromkeys(self.launched):
            if self.manager.status(name).status == "running":
                self.manager.stop(name)


@pytest.fixture
def launcher(tmp_path):
    launcher = Launcher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.stop_all()


def read_steps(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_two_part_job_trains_as_one_group(launcher, tmp_path):
    parts = launcher.launch(
        placement(2, 1),
        "--steps", "6",
        "--global-batch", "4",
        "--microbatch-seconds", "0.05",
        "--checkpoint-dir", str(tmp_path / "checkpoint"),
    )  # fmt: skip
    assert [(part.part_name, part.rank_offset, part.world_size) for part in parts] == [
        ("train--cloud-a", 0, 3),
        ("train--cloud-b", 2, 3),
    ]

    assert launcher.wait(parts) == {"train--cloud-a": "done", "train--cloud-b": "done"}

    holder, other = parts  # cloud-a holds global rank 0
    assert not (launcher.job_dir(other) / STEP_LOG_NAME).exists()
    steps = read_steps(launcher.job_dir(holder) / STEP_LOG_NAME)
    assert [record["step"] for record in steps] == list(range(6))
    for record in steps:
        assert record["nodes"] == 3
        assert record["tokens"] == 4 * 16
        assert record["duration_s"] > 0.1  # rank 0 runs two 0.05 s micro-batches
        # 4 micro-batches on 3 ranks: the 4th waits for a worker to free up.
        assert 0.04 < record["queue_s"] < record["duration_s"]
    assert (
        json.loads((tmp_path / "checkpoint" / "progress.json").read_text())["completed_steps"] == 6
    )
    # Every part ran its own ranks; global rank 2 lives in cloud-b as its local rank 0.
    assert "step 6/6 world=3" in launcher.manager.logs("train--cloud-a", 0)


def test_a_stopped_job_resumes_at_another_size_from_its_checkpoint(launcher, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    progress = checkpoint / "progress.json"
    script_args = (
        "--steps", "20",
        "--global-batch", "4",
        "--microbatch-seconds", "0.05",
        "--checkpoint-dir", str(checkpoint),
    )  # fmt: skip

    first = launcher.launch(placement(1, 1), *script_args)
    deadline = time.monotonic() + TIMEOUT_S
    while not (progress.exists() and json.loads(progress.read_text())["completed_steps"] >= 3):
        assert time.monotonic() < deadline, "the first launch never reached step 3"
        assert all(launcher.manager.status(p.part_name).status == "running" for p in first)
        time.sleep(0.02)
    for part in first:
        assert launcher.manager.stop(part.part_name).status == "stopped"
    resumed_from = json.loads(progress.read_text())["completed_steps"]
    assert 3 <= resumed_from < 20

    second = launcher.launch(placement(2, 1), *script_args)
    assert launcher.wait(second) == {"train--cloud-a": "done", "train--cloud-b": "done"}

    assert json.loads(progress.read_text())["completed_steps"] == 20
    steps = read_steps(launcher.job_dir(second[0]) / STEP_LOG_NAME)
    numbers = [record["step"] for record in steps]
    assert numbers == sorted(set(numbers)), "a step was run or logged twice"
    before = [record for record in steps if record["nodes"] == 2]
    after = [record for record in steps if record["nodes"] == 3]
    assert len(before) + len(after) == len(steps)
    assert before[0]["step"] == 0
    # Continued from the checkpoint, not from step 0, and ended exactly at 20 steps.
    assert [record["step"] for record in after] == list(range(resumed_from, 20))
    assert f"resuming at step {resumed_from}/20 with world size 3" in launcher.manager.logs(
        "train--cloud-a", 0, tail=200
    )


def test_run_outside_a_job_manager_it_writes_nothing_in_its_working_directory(tmp_path):
    """iroh-tinker creates .cache/iroh_tinker/checkpoints in the working directory; the
    script must keep it out of there (it once appeared in the project root after a test run)."""
    import os
    import subprocess

    working = tmp_path / "cwd"
    working.mkdir()
    step_log = tmp_path / "steps.jsonl"
    environment = {key: value for key, value in os.environ.items() if key != "IROH_TINKER_JOB_DIR"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "2", "--global-batch", "1",
         "--microbatch-seconds", "0", "--step-log", str(step_log)],
        cwd=working, env=environment, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert [record["step"] for record in read_steps(step_log)] == [0, 1]
    assert sorted(path.name for path in working.iterdir()) == []
