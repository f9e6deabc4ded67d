"""LaunchOperator on a real metadata DB with real local iroh-tinker jobs."""

from __future__ import annotations

import json
import time

import pytest

from tests.airflow_support import run_dag
from tests.job_processes import is_alive, rank_pids

pytestmark = pytest.mark.airflow


def test_launch_runs_a_two_part_job_to_completion(airflow_db, jobs_root):
    result = run_dag("launch_and_wait", {"job_name": "two-parts", "nodes": 3, "steps": 4})
    assert result.task_states == {"plan": "success", "launch": "success"}
    pushed = result.xcom("launch", "job")
    assert pushed["status"] == "running"  # pushed right after the launch
    assert [(part["name"], part["nodes"], part["rank_offset"]) for part in pushed["parts"]] == [
        ("two-parts--onprem", 2, 0),
        ("two-parts--cloud", 1, 2),
    ]
    assert pushed["world_size"] == 3
    finished = result.xcom("launch")
    assert finished["status"] == "done"
    assert {part["status"] for part in finished["parts"]} == {"done"}
    step_log = jobs_root / "two-parts--onprem" / "steps.jsonl"
    steps = [json.loads(line) for line in step_log.read_text().splitlines()]
    assert [sample["step"] for sample in steps] == [0, 1, 2, 3]
    assert {sample["nodes"] for sample in steps} == {3}


def test_a_second_run_attaches_to_the_running_job_and_starts_nothing(airflow_db, jobs_root, capfd):
    conf = {"job_name": "retry", "nodes": 2, "steps": 2000}
    first = run_dag("launch_no_wait", conf)
    first_job = first.xcom("launch", "job")
    pids = rank_pids(jobs_root, "retry--onprem")
    second = run_dag("launch_no_wait", conf)
    assert second.task_states["launch"] == "success"
    second_job = second.xcom("launch", "job")
    assert second_job["launch_id"] == first_job["launch_id"]
    assert rank_pids(jobs_root, "retry--onprem") == pids
    assert all(is_alive(pid) for pid in pids)
    assert "already running at this placement" in capfd.readouterr().out


def test_a_run_at_another_placement_resizes_the_job(airflow_db, jobs_root, capfd):
    first = run_dag("launch_no_wait", {"job_name": "grow", "nodes": 2, "steps": 2000})
    old_pids = rank_pids(jobs_root, "grow--onprem")
    second = run_dag("launch_no_wait", {"job_name": "grow", "nodes": 3, "steps": 2000})
    assert second.task_states["launch"] == "success"
    old, new = first.xcom("launch", "job"), second.xcom("launch", "job")
    assert new["launch_id"] != old["launch_id"]
    assert new["nodes"] == 3 and new["status"] == "running"
    assert [part["name"] for part in new["parts"]] == ["grow--onprem", "grow--cloud"]
    assert not any(is_alive(pid) for pid in old_pids)
    assert "resized from 2 nodes" in capfd.readouterr().out


def test_waiting_on_a_failing_job_fails_the_task_with_the_log_tail(airflow_db, jobs_root, capfd):
    result = run_dag("launch_failing_job", {"job_name": "fails", "nodes": 2})
    assert result.task_states["launch"] == "failed"
    output = capfd.readouterr()
    text = output.out + output.err
    assert "job 'fails' failed" in text
    assert "boom: corrupt batch" in text


def test_a_provider_that_cannot_provision_leaves_no_orphaned_parts(airflow_db, jobs_root, capfd):
    result = run_dag("launch_provider_fails", {"job_name": "orphans", "nodes": 3})
    assert result.task_states["launch"] == "failed"
    text = capfd.readouterr().out
    assert "provider 'fullcloud'" in text and "no capacity for 1 nodes" in text
    state = json.loads((jobs_root / "orphans--onprem" / "job.json").read_text())
    assert state["status"] == "stopped"
    assert not any(is_alive(pid) for pid in rank_pids(jobs_root, "orphans--onprem"))


def test_deferrable_wait_goes_through_the_trigger(airflow_db, jobs_root, capfd, caplog):
    result = run_dag("launch_and_wait_deferrable", {"job_name": "deferred", "nodes": 2, "steps": 3})
    assert result.task_states["launch"] == "success"
    assert result.xcom("launch")["status"] == "done"
    output = capfd.readouterr()
    # Airflow's own line; pytest routes it to stdout or to caplog depending on the session
    assert "[DAG TEST] Trigger completed" in output.out + output.err + caplog.text


def test_a_job_with_a_failed_part_is_relaunched_whole(airflow_db, jobs_root, capfd):
    from iroh_tinker.cloud import JobManager

    conf = {"job_name": "half", "nodes": 3}
    first = run_dag("launch_half_failing", conf)
    manager = JobManager(root=jobs_root)
    deadline = time.monotonic() + 30
    while manager.status("half--cloud").status == "running":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert manager.status("half--cloud").status == "failed"
    survivors = rank_pids(jobs_root, "half--onprem")
    assert all(is_alive(pid) for pid in survivors)

    second = run_dag("launch_half_failing", conf)
    assert second.task_states["launch"] == "success"
    relaunched = second.xcom("launch", "job")
    assert relaunched["launch_id"] != first.xcom("launch", "job")["launch_id"]
    assert not any(is_alive(pid) for pid in survivors)  # stopped, not launched over
    assert "already running" not in capfd.readouterr().out


def test_a_retry_does_not_attach_to_a_job_with_a_part_down(airflow_db, jobs_root):
    from iroh_tinker.cloud import JobManager

    conf = {"job_name": "partial", "nodes": 3, "steps": 2000}
    first = run_dag("launch_no_wait", conf)
    JobManager(root=jobs_root).stop("partial--cloud")  # as if its node went away
    second = run_dag("launch_no_wait", conf)
    job = second.xcom("launch", "job")
    assert job["launch_id"] != first.xcom("launch", "job")["launch_id"]
    assert [part["status"] for part in job["parts"]] == ["running", "running"]
