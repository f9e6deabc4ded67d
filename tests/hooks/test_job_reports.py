"""Job reports: the step logs a check reads, lost parts and failure reports."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from elasticgrid_provider.core.job import JobManifest, JobSnapshot, JobStatus, PartRecord
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.core.state import ScaleState
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.hooks.job_reports import failure_report, lost_parts, read_step_logs
from elasticgrid_provider.hooks.launch_manager import LaunchManager
from elasticgrid_provider.hooks.remote_parts import with_down_ranks
from elasticgrid_provider.runtime import STEP_LOG_NAME
from tests.dag_settings import SLEEPING_RUN, TWO_LOCAL_PROVIDERS
from tests.job_processes import is_alive, rank_pids

pytestmark = pytest.mark.airflow

PLANNER = GridPlanner(providers=providers_from_dicts(TWO_LOCAL_PROVIDERS))
SLEEPING = LaunchOptions(run=SLEEPING_RUN, recovery={"mode": "none"})


def _wait_for(condition, what: str, timeout=90.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.1)


def _snapshot_with_part(job_dir: Path, nodes: int = 2) -> JobSnapshot:
    """A running one-part job whose part folder (and so its step log) is ``job_dir``."""
    placement = GridPlanner(providers=providers_from_dicts(TWO_LOCAL_PROVIDERS)).plan(nodes)
    manifest = JobManifest.model_validate(
        {
            "job_name": "logged",
            "launch_id": "20261202T000000Z-abcdef",
            "launched_at": "2026-12-02T00:00:00+00:00",
            "placement": placement.model_dump(),
            "world_size": nodes,
            "procs_per_node": 1,
            "rendezvous": "",
            "run": "python train.py",
            "parts": [],
        }
    )
    part = PartRecord.model_validate(
        {
            "name": "logged--onprem",
            "provider": "onprem",
            "engine_target": "local",
            "nodes": nodes,
            "rank_offset": 0,
            "spec_path": str(job_dir / "spec.json"),
            "status": "running",
            "job_dir": str(job_dir),
            "last_error": None,
        }
    )
    return JobSnapshot(manifest=manifest, parts=(part,))


def _append_steps(log: Path, steps: range, nodes: int = 2) -> None:
    with log.open("a") as handle:
        for step in steps:
            handle.write(json.dumps({"step": step, "duration_s": 1.0, "nodes": nodes}) + "\n")


def test_each_step_log_is_read_from_the_states_cursor(tmp_path):
    job_dir = tmp_path / "logged--onprem"
    job_dir.mkdir()
    log = job_dir / STEP_LOG_NAME
    _append_steps(log, range(8))
    store = ElasticGridHook(jobs_root=str(tmp_path)).job_store
    snapshot = _snapshot_with_part(job_dir)
    state = ScaleState(job_name="logged")

    [first] = read_step_logs(store, snapshot, state, tail=3)
    assert first.source == str(log)
    assert [sample.step for sample in first.samples] == [5, 6, 7]  # a first read: the tail
    state = state.with_cursor(first.source, first.cursor)
    _append_steps(log, range(8, 10))
    [second] = read_step_logs(store, snapshot, state, tail=3)
    assert [sample.step for sample in second.samples] == [8, 9]  # only what is new


@pytest.mark.long
def test_a_lost_part_with_no_notice_is_named_by_down_ranks_and_global_ranks(jobs_root):
    """A part whose ranks vanish without a word: the cause is iroh-tinker's ``down ranks``,
    and the ranks are named globally (part rank + the part's rank offset)."""
    store = ElasticGridHook(jobs_root=str(jobs_root)).job_store
    LaunchManager(store, "quiet").launch(PLANNER.plan(4), SLEEPING, startup_grace_s=1)
    cloud = rank_pids(jobs_root, "quiet--cloud")
    for pid in cloud:  # both at once: iroh-tinker records the part failed, with no error
        os.killpg(pid, signal.SIGKILL)
    _wait_for(lambda: not any(is_alive(pid) for pid in cloud), "the cloud ranks to go")

    def both_lost() -> bool:
        # a killed rank reads as running until it is reaped (a zombie answers kill -0): poll
        # the job as a check would, until iroh-tinker sees both ranks gone
        snapshot = store.job_snapshot("quiet")
        return snapshot is not None and [len(p.ranks) for p in lost_parts(store, snapshot)] == [2]

    _wait_for(both_lost, "both cloud ranks reported lost")
    snapshot = store.job_snapshot("quiet")
    assert snapshot is not None
    [lost] = lost_parts(store, snapshot)

    assert (lost.part, lost.provider, lost.ranks) == ("quiet--cloud", "cloud", (2, 3))
    assert lost.cause == "its ranks stopped (down ranks: [0, 1])"
    report = failure_report(store, snapshot)
    assert "part quiet--cloud rank 0 (global rank 2) failed" in report
    assert "part quiet--cloud rank 1 (global rank 3) failed" in report


@pytest.mark.parametrize(
    ("recorded", "cause"),
    [
        # iroh-tinker saw rank 0 still running (a rank half-way down), then the part failed
        ("down ranks: [1]", "its ranks stopped (down ranks: [0, 1])"),
        (None, "its ranks stopped (down ranks: [0, 1])"),
        (
            "host(s) gpu@b unreachable; down ranks: [0]",
            "its ranks stopped (host(s) gpu@b unreachable; down ranks: [0, 1])",
        ),
        (
            "preempted: spot capacity reclaimed",
            "its ranks stopped (preempted: spot capacity reclaimed)",
        ),
    ],
)
def test_a_failed_part_is_reported_with_every_rank_down_whatever_iroh_tinker_saw_last(
    tmp_path, recorded, cause
):
    """iroh-tinker keeps the ``down ranks`` words of the refresh before the part failed: a
    report lists the ranks down when it is made, and keeps the rest of the words."""
    job_dir = tmp_path / "logged--onprem"
    job_dir.mkdir()
    store = ElasticGridHook(jobs_root=str(tmp_path)).job_store
    snapshot = _snapshot_with_part(job_dir)
    [part] = snapshot.parts
    failed = replace(part, status=JobStatus.FAILED, last_error=recorded)
    snapshot = replace(snapshot, parts=(failed,))

    [lost] = lost_parts(store, snapshot, confirmed_only=False)

    assert (lost.ranks, lost.cause) == ((0, 1), cause)
    report = failure_report(store, snapshot)
    words = cause.removeprefix("its ranks stopped (").removesuffix(")")
    assert f"part logged--onprem rank 0 (global rank 0) failed ({words}); " in report
    assert f"part logged--onprem rank 1 (global rank 1) failed ({words}); " in report


def test_a_rank_that_finished_is_not_named_down():
    assert with_down_ranks("down ranks: [0, 1]", [1]) == "down ranks: [1]"
    assert with_down_ranks("down ranks: [0]", []) == "down ranks: [0]"  # nothing lost: as is
    assert with_down_ranks(None, []) is None
