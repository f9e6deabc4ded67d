"""ElasticScaleSensor on a real metadata DB, checking real local iroh-tinker jobs."""

from __future__ import annotations

import json
import time

import pytest

from elasticgrid_provider.core.state import state_variable_key
from tests.airflow_support import read_variable, run_dag
from tests.job_processes import wait_for_lines

pytestmark = pytest.mark.airflow


def _state(job: str) -> dict:
    return read_variable(state_variable_key(job))


def test_a_queue_bound_job_is_scaled_up_and_relaunched_larger(airflow_db, jobs_root):
    launch = run_dag("launch_queue_bound", {"job_name": "grow", "nodes": 2})
    assert launch.task_states["launch"] == "success"
    result = run_dag("scale_up_then_resize", {"job_name": "grow"})
    assert result.task_states == {"scale_check": "success", "plan": "success", "resize": "success"}
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up",
        2,
        4,
    )
    assert decision["rule"] == "queue_bound"
    assert decision["signals"]["queue_fraction"] >= 0.2
    assert "waiting for a worker" in decision["reason"]
    assert decision["context"]["proposed_cost_per_hour"] == 3.0
    resized = result.xcom("resize")
    assert resized["nodes"] == 4
    assert [(part["provider"], part["nodes"]) for part in resized["parts"]] == [
        ("onprem", 2),
        ("cloud", 2),
    ]
    state = _state("grow")
    assert state["schema_version"] == 2
    assert state["history"][-1]["action"] == "scale_up"
    assert state["cooldown"]["last_action"] == "scale_up"


def test_an_idle_job_is_scaled_down(airflow_db, jobs_root):
    run_dag("launch_no_wait", {"job_name": "idle", "nodes": 2, "steps": 4000})
    wait_for_lines(jobs_root / "idle--onprem" / "steps.jsonl", 3)
    result = run_dag("scale_check_idle", {"job_name": "idle"})
    assert result.task_states == {"scale_check": "success"}
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_down",
        2,
        1,
    )
    # short steps and nothing queued: "idle"; when the time between steps (the per-step
    # checkpoint) outweighs the steps, the job reads as waiting for work: "demand"
    assert decision["rule"] in ("idle", "demand")
    assert decision["signals"]["queue_fraction"] <= 0.05


def test_the_cooldown_is_honoured_across_two_dag_runs(airflow_db, jobs_root):
    run_dag("launch_queue_bound", {"job_name": "cool", "nodes": 2})
    first = run_dag("scale_check_cooldown", {"job_name": "cool"})
    assert first.task_states == {"scale_check": "success"}
    decided_at = first.xcom("scale_check")["decided_at"]
    second = run_dag("scale_check_cooldown", {"job_name": "cool"})
    assert second.task_states == {"scale_check": "skipped"}  # held until its timeout
    held = second.xcom("scale_check", "decision")
    assert held["action"] == "hold" and held["rule"] == "queue_bound"
    assert [entry["rule"] for entry in held["held_by"]] == ["cooldown"]
    state = _state("cool")
    decisions = [(entry["action"], entry["rule"]) for entry in state["history"]]
    # before it: at most a hold for want of samples, while the job's first steps ran
    assert decisions[-2:] == [("scale_up", "queue_bound"), ("hold", "queue_bound")]
    assert set(decisions[:-2]) <= {("hold", "min_samples")}
    assert state["cooldown"]["last_change_at"] == decided_at


def test_each_check_reads_only_the_new_lines(airflow_db, jobs_root, capfd):
    run_dag("launch_sleeping", {"job_name": "inc", "nodes": 1})
    step_log = jobs_root / "inc--onprem" / "steps.jsonl"

    def sample(step: int) -> str:
        return json.dumps({"step": step, "duration_s": 1.0, "queue_s": 0.1, "nodes": 1}) + "\n"

    step_log.write_text("".join(sample(step) for step in range(3)))
    run_dag("scale_check_patient", {"job_name": "inc"})
    assert "Read 3 new line(s)" in capfd.readouterr().out
    state = _state("inc")
    assert state["cursors"] == {str(step_log): step_log.stat().st_size}
    assert [s["step"] for s in state["window"]["samples"]] == [0, 1, 2]

    half_line = '{"step": 7, "durat'
    with step_log.open("a") as handle:
        handle.write(sample(3) + "not json at all\n" + sample(4))
        handle.write(json.dumps({"step": 5, "duration_s": -1.0, "nodes": 1}) + "\n")
        handle.write(half_line)
    run_dag("scale_check_patient", {"job_name": "inc"})
    output = capfd.readouterr().out
    assert "Read 4 new line(s)" in output
    assert output.count("Skipped a step-log line") == 2
    assert "duration_s must be at least 0" in output
    state = _state("inc")
    assert state["skipped_lines"] == 2
    assert [s["step"] for s in state["window"]["samples"]] == [0, 1, 2, 3, 4]
    assert state["cursors"][str(step_log)] == step_log.stat().st_size - len(half_line)

    with step_log.open("a") as handle:
        handle.write('ion_s": 1.0, "nodes": 1}\n')
    run_dag("scale_check_patient", {"job_name": "inc"})
    assert "Read 1 new line(s)" in capfd.readouterr().out
    state = _state("inc")
    assert [s["step"] for s in state["window"]["samples"]][-1] == 7
    assert state["cursors"][str(step_log)] == step_log.stat().st_size


def test_a_finished_job_ends_the_check_with_a_record(airflow_db, jobs_root):
    run_dag("launch_and_wait", {"job_name": "finished", "nodes": 2, "steps": 3})
    result = run_dag("scale_check_patient", {"job_name": "finished"})
    assert result.task_states == {"scale_check": "skipped"}
    record = result.xcom("scale_check", "decision")
    assert record["rule"] == "job_ended"
    assert record["context"]["job_status"] == "done"


def test_a_failed_job_fails_the_check_with_its_error(airflow_db, jobs_root, capfd):
    from iroh_tinker.cloud import JobManager

    run_dag("launch_failing_job_no_wait", {"job_name": "broken", "nodes": 1})
    manager = JobManager(root=jobs_root)
    deadline = time.monotonic() + 30
    while manager.status("broken--onprem").status == "running":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    capfd.readouterr()
    result = run_dag("scale_check_patient", {"job_name": "broken"})
    assert result.task_states == {"scale_check": "failed"}
    output = capfd.readouterr()
    assert "job 'broken' failed" in output.out + output.err
    assert "boom: corrupt batch" in output.out + output.err


def test_a_job_that_was_never_launched_fails_the_check(airflow_db, jobs_root, capfd):
    result = run_dag("scale_check_patient", {"job_name": "ghost"})
    assert result.task_states == {"scale_check": "failed"}
    output = capfd.readouterr()
    assert "job 'ghost' has no manifest" in output.out + output.err


def test_deferrable_checks_wait_in_the_trigger_between_checks(airflow_db, jobs_root, capfd, caplog):
    import threading

    run_dag("launch_sleeping", {"job_name": "deferred", "nodes": 2})
    step_log = jobs_root / "deferred--onprem" / "steps.jsonl"
    lines = "".join(
        json.dumps({"step": step, "duration_s": 1.0, "queue_s": 0.6, "nodes": 2}) + "\n"
        for step in range(3)
    )
    # the samples arrive only after the first check has held and deferred
    writer = threading.Timer(3.0, lambda: step_log.write_text(lines))
    writer.start()
    try:
        result = run_dag("scale_check_deferrable", {"job_name": "deferred"})
    finally:
        writer.join()
    assert result.task_states == {"scale_check": "success"}
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["target_nodes"]) == ("scale_up", 4)
    output = capfd.readouterr()
    text = output.out + output.err + caplog.text  # Airflow's lines may land in caplog
    assert "next check of job deferred in 2s (in the triggerer)" in text
    assert text.count("[DAG TEST] Trigger completed") >= 1


def test_a_recorded_decision_replays_to_the_same_decision(airflow_db, jobs_root, tmp_path):
    import subprocess
    import sys

    run_dag("launch_queue_bound", {"job_name": "replay", "nodes": 2})
    result = run_dag("scale_check_idle", {"job_name": "replay"})
    decision = result.xcom("scale_check")
    variable_file = tmp_path / "variable.json"
    variable_file.write_text(json.dumps({state_variable_key("replay"): _state("replay")}))
    replay = subprocess.run(
        [
            sys.executable,
            "-m",
            "elasticgrid_provider",
            "--json",
            "simulate",
            "--state",
            str(variable_file),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    replayed = json.loads(replay.stdout)
    assert replayed["replay"]["matches"] is True
    for field in ("action", "current_nodes", "target_nodes", "rule", "reason"):
        assert replayed["decision"][field] == decision[field]


def test_two_concurrent_checks_lead_to_one_resize(airflow_db, jobs_root):
    """Two DAG runs in two processes check the same job at the same moment.

    The job's lock serialises the checks: one decides ``scale_up`` and resizes;
    the other waits for the lock and then either sees the cooldown the first
    started, or (when it comes after the resize) a fresh window at 4 nodes, and
    holds until its timeout (skipped). Either way: one resize, no lost write.
    """
    import os
    import subprocess

    from tests.conftest import TESTS, airflow_command

    run_dag("launch_queue_bound", {"job_name": "race", "nodes": 2})
    wait_for_lines(jobs_root / "race--onprem" / "steps.jsonl", 4)
    environment = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    conf = json.dumps({"job_name": "race"})
    checks = [
        subprocess.Popen(
            [
                *airflow_command(),
                "dags",
                "test",
                "scale_check_concurrent",
                logical_date,
                "--conf",
                conf,
                "--dagfile-path",
                str(TESTS / "dags" / "scale_dags.py"),
            ],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for logical_date in ("2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00")
    ]
    outputs = [check.communicate(timeout=180)[0] for check in checks]
    assert all(check.returncode == 0 for check in checks), "\n".join(outputs)

    state = _state("race")
    assert [entry["action"] for entry in state["history"]].count("scale_up") == 1
    # no lost write: every check incremented the revision it read, under the lock
    checks = sum(output.count("Decision for job race:") for output in outputs)
    assert state["revision"] == checks
    launches = sorted(path.name for path in (jobs_root / "race" / "specs").iterdir())
    assert len(launches) == 2  # the first launch and exactly one resize
    manifest = json.loads((jobs_root / "race" / "manifest.json").read_text())
    assert manifest["placement"]["total_nodes"] == 4
    resized = [output for output in outputs if "resized from 2 nodes" in output]
    assert len(resized) == 1


def test_samples_count_nodes_not_processes(airflow_db, jobs_root):
    run_dag("launch_queue_bound_two_procs", {"job_name": "wide", "nodes": 1})
    wait_for_lines(jobs_root / "wide--onprem" / "steps.jsonl", 3)
    first = json.loads((jobs_root / "wide--onprem" / "steps.jsonl").read_text().splitlines()[0])
    assert first["nodes"] == 1  # 1 node running 2 processes
    result = run_dag("scale_check_any", {"job_name": "wide"})
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["current_nodes"]) == ("scale_up", 1)


def test_handed_in_samples_are_taken_once_across_runs(airflow_db, jobs_root):
    run_dag("launch_sleeping", {"job_name": "handed", "nodes": 2})

    def samples(steps: range) -> list[dict]:
        return [{"step": s, "duration_s": 10.0, "queue_s": 6.0, "nodes": 2} for s in steps]

    first = run_dag("scale_check_handed_in", {"job_name": "handed", "samples": samples(range(4))})
    assert first.xcom("scale_check")["action"] == "scale_up"
    run_dag("scale_check_handed_in", {"job_name": "handed", "samples": samples(range(2, 6))})
    state = _state("handed")
    assert [s["step"] for s in state["window"]["samples"]] == [0, 1, 2, 3, 4, 5]
    assert state["cursors"]["samples argument"] == 6
