"""JobStatusTrigger against real jobs: what it serializes, when it fires, what on_kill stops."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.triggers.job import JobStatusTrigger
from tests.airflow_support import run_dag
from tests.job_processes import is_alive, rank_pids, stop_job

pytestmark = pytest.mark.airflow


def _first_event(trigger: JobStatusTrigger, timeout: float = 60.0) -> dict:
    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout))


def test_serialize_rebuilds_the_same_trigger(tmp_path):
    trigger = JobStatusTrigger(
        "job",
        str(tmp_path),
        poll_interval=0.5,
        wake_after_s=3,
        payload={"started_at": 1.5},
        stop_on_kill=True,
        min_wait_s=15,
    )
    classpath, arguments = trigger.serialize()
    assert classpath == "elasticgrid_provider.triggers.job.JobStatusTrigger"
    assert JobStatusTrigger(**arguments).serialize() == (classpath, arguments)


def test_holds_its_event_back_for_min_wait_s_even_when_the_job_already_ended(tmp_path):
    started = time.monotonic()
    event = _first_event(JobStatusTrigger("ghost", str(tmp_path), poll_interval=0.1, min_wait_s=2))
    assert event["status"] == "missing"
    assert time.monotonic() - started >= 2


def test_fires_missing_for_a_job_that_was_never_launched(tmp_path):
    event = _first_event(JobStatusTrigger("ghost", str(tmp_path), poll_interval=0.1))
    assert event["status"] == "missing" and event["job"] is None


def test_wakes_after_the_interval_while_the_job_runs_and_carries_the_payload(airflow_db, jobs_root):
    run_dag("launch_sleeping", {"job_name": "awake", "nodes": 1})
    started = time.monotonic()
    event = _first_event(
        JobStatusTrigger(
            "awake",
            str(jobs_root),
            poll_interval=0.2,
            wake_after_s=1.0,
            payload={"started_at": 123.0},
        )
    )
    assert time.monotonic() - started >= 1.0
    assert (event["status"], event["woke"], event["started_at"]) == ("running", True, 123.0)
    assert event["job"]["parts"][0]["name"] == "awake--onprem"


def test_fires_with_the_failure_report_when_the_job_fails(airflow_db, jobs_root):
    run_dag("launch_failing_job_no_wait", {"job_name": "sinks", "nodes": 1})
    event = _first_event(JobStatusTrigger("sinks", str(jobs_root), poll_interval=0.2))
    assert event["status"] == "failed"
    assert "boom: corrupt batch" in event["failure_report"]


def test_on_kill_stops_the_job_only_when_the_trigger_owns_it(airflow_db, jobs_root):
    run_dag("launch_sleeping", {"job_name": "owned", "nodes": 1})
    pids = rank_pids(jobs_root, "owned--onprem")
    launch_id = json.loads((jobs_root / "owned" / "manifest.json").read_text())["launch_id"]
    asyncio.run(JobStatusTrigger("owned", str(jobs_root)).on_kill())  # a sensor's trigger
    assert all(is_alive(pid) for pid in pids)
    # a launch task's trigger for an earlier launch: that launch no longer runs, this one stays
    earlier = JobStatusTrigger("owned", str(jobs_root), stop_on_kill=True, launch_id="19700101")
    asyncio.run(earlier.on_kill())
    assert all(is_alive(pid) for pid in pids)
    owner = JobStatusTrigger("owned", str(jobs_root), stop_on_kill=True, launch_id=launch_id)
    assert owner.serialize()[1]["launch_id"] == launch_id
    asyncio.run(owner.on_kill())
    deadline = time.monotonic() + 10
    while any(is_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(is_alive(pid) for pid in pids)


def test_a_job_another_task_is_stopping_has_not_ended_until_that_task_is_done(
    airflow_db, jobs_root
):
    """A stop's first killed rank reads ``failed``: while the stopping task holds the job's
    lock, the wait goes on; once it is done, the event says ``stopped``, on purpose."""
    job = "halting"
    run_dag("launch_sleeping", {"job_name": job, "nodes": 1})
    store = ElasticGridHook(jobs_root=str(jobs_root)).job_store
    with store.job_lock(job) as held:
        assert held
        store.record(store.read_manifest(job), LaunchPhase.STOPPING, "stopped by a user")
        for pid in rank_pids(jobs_root, f"{job}--onprem"):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not store.job_snapshot(job).status.is_terminal:
            assert time.monotonic() < deadline, "the killed rank never read as ended"
            time.sleep(0.1)
        trigger = JobStatusTrigger(job, str(jobs_root), poll_interval=0.1, wake_after_s=1.0)
        event = _first_event(trigger)
        assert (event["status"], event["woke"]) == ("changing", True)
    stop_job(jobs_root, job, reason="stopped by a user")
    event = _first_event(JobStatusTrigger(job, str(jobs_root), poll_interval=0.1))
    assert event["status"] == "stopped"
    assert (event["job"]["launch_state"], event["job"]["down_reason"]) == (
        "stopped",
        "stopped by a user",
    )
