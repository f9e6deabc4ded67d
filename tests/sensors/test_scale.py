"""ElasticScaleSensor on a real metadata DB, checking real local iroh-tinker jobs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from elasticgrid_provider.core.state import state_variable_key
from elasticgrid_provider.sensors.scale import MIN_RESCHEDULE_S
from elasticgrid_provider.triggers.job import MIN_DEFERRAL_S
from tests.airflow_support import read_variable, run_dag, start_dags_test
from tests.job_processes import wait_for_lines

pytestmark = pytest.mark.airflow


def _state(job: str) -> dict:
    return read_variable(state_variable_key(job))


def test_a_queue_bound_job_is_scaled_up_and_relaunched_larger(airflow_db, jobs_root):
    launch = run_dag("launch_queue_bound", {"job_name": "grow-check", "nodes": 2})
    assert launch.task_states["launch"] == "success"
    result = run_dag("scale_up_then_resize", {"job_name": "grow-check"})
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
    state = _state("grow-check")
    assert state["schema_version"] == 2
    assert state["history"][-1]["action"] == "scale_up"
    assert state["cooldown"]["last_action"] == "scale_up"


def test_an_idle_job_is_scaled_down(airflow_db, jobs_root):
    # The samples are handed in: how a real job's short steps read (closed loop or
    # waiting for work) depends on the machine's load, and this test is about the rule.
    run_dag("launch_sleeping", {"job_name": "idle", "nodes": 2})
    t0 = time.time() - 60.0
    samples = [  # one-second steps back to back (a closed loop), nothing queued
        {
            "step": step,
            "duration_s": 1.0,
            "queue_s": 0.0,
            "nodes": 2,
            "tokens": 100.0,
            "time": t0 + step + 1.0,
        }
        for step in range(5)
    ]
    result = run_dag("policy_single_check", {"job_name": "idle", "samples": samples})
    assert result.task_states == {"scale_check": "success"}
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_down",
        2,
        1,
    )
    assert decision["rule"] == "idle"  # short steps (1 s against target_step_s 30), no queue
    assert decision["signals"]["queue_fraction"] == 0.0


def test_the_cooldown_is_honoured_across_two_dag_runs(airflow_db, jobs_root):
    run_dag("launch_queue_bound", {"job_name": "cool", "nodes": 2})
    first = run_dag("scale_check_cooldown", {"job_name": "cool"})
    assert first.task_states == {"scale_check": "success"}
    decided_at = first.xcom("scale_check")["decided_at"]
    second = run_dag("scale_check_cooldown", {"job_name": "cool"})
    assert second.task_states == {"scale_check": "skipped"}  # held until its timeout
    held = second.xcom("scale_check")  # one record per check: a hold too
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
    assert list(state["cursors"]) == [str(step_log)]
    assert state["cursors"][str(step_log)]["offset"] == step_log.stat().st_size
    assert state["cursors"][str(step_log)]["inode"] == step_log.stat().st_ino
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
    assert state["cursors"][str(step_log)]["offset"] == step_log.stat().st_size - len(half_line)

    with step_log.open("a") as handle:
        handle.write('ion_s": 1.0, "nodes": 1}\n')
    run_dag("scale_check_patient", {"job_name": "inc"})
    assert "Read 1 new line(s)" in capfd.readouterr().out
    state = _state("inc")
    assert [s["step"] for s in state["window"]["samples"]][-1] == 7
    assert state["cursors"][str(step_log)]["offset"] == step_log.stat().st_size


def test_a_finished_job_ends_the_check_with_a_record(airflow_db, jobs_root):
    run_dag("launch_and_wait", {"job_name": "finished", "nodes": 2, "steps": 3})
    result = run_dag("scale_check_patient", {"job_name": "finished"})
    assert result.task_states == {"scale_check": "skipped"}
    record = result.xcom("scale_check")
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
    # its ranks died within the launch's grace period: the launch recorded it down
    assert "job 'broken' is down, so there is nothing to scale: its launch " in (
        output.out + output.err
    )
    assert "boom: corrupt batch" in output.out + output.err


def test_a_job_whose_launch_is_confirmed_down_fails_the_check_with_the_reason(
    airflow_db, jobs_root, capfd, caplog
):
    # the "dies at once" drill of tests/operators/test_launch.py: the launch is recorded down
    launch = run_dag("launch_dies_at_once", {"job_name": "down-check", "nodes": 2})
    assert launch.task_states == {"plan": "success", "launch": "failed"}
    manifest = json.loads((jobs_root / "down-check" / "manifest.json").read_text())
    assert manifest["state"] == "down"
    capfd.readouterr()
    caplog.clear()

    result = run_dag("scale_check_patient", {"job_name": "down-check"})

    assert result.task_states == {"scale_check": "failed"}
    output = capfd.readouterr()
    text = output.out + output.err + caplog.text
    assert (
        f"job 'down-check' is down, so there is nothing to scale: its launch "
        f"{manifest['launch_id']} was confirmed dead ({manifest['down_reason']}); "
        "launch it again with LaunchOperator"
    ) in text
    assert result.xcom("scale_check") is None  # no decision recorded
    assert read_variable(state_variable_key("down-check")) is None


def test_a_job_that_was_never_launched_fails_the_check(airflow_db, jobs_root, capfd):
    result = run_dag("scale_check_patient", {"job_name": "ghost"})
    assert result.task_states == {"scale_check": "failed"}
    output = capfd.readouterr()
    assert "job 'ghost' has no manifest" in output.out + output.err


def _write_samples_after_the_first_check(job: str, step_log: Path):
    """Write 3 queue-bound samples once the first check of ``job`` is in its history.

    On a thread (returned started): the first check holds for want of samples
    whatever the machine's speed, and the next one finds them.
    """
    import threading

    lines = "".join(
        json.dumps({"step": step, "duration_s": 1.0, "queue_s": 0.6, "nodes": 2}) + "\n"
        for step in range(3)
    )

    def write_after_the_first_check() -> None:
        deadline = time.monotonic() + 120
        while not (_state(job) or {}).get("history") and time.monotonic() < deadline:
            time.sleep(0.1)
        step_log.write_text(lines)

    writer = threading.Thread(target=write_after_the_first_check)
    writer.start()
    return writer


@pytest.mark.long
def test_deferrable_checks_wait_in_the_trigger_between_checks(airflow_db, jobs_root, capfd, caplog):
    run_dag("launch_sleeping", {"job_name": "deferred-check", "nodes": 2})
    step_log = jobs_root / "deferred-check--onprem" / "steps.jsonl"
    # the samples arrive only after the first check has held and deferred
    writer = _write_samples_after_the_first_check("deferred-check", step_log)
    started = time.monotonic()
    try:
        result = run_dag("scale_check_deferred", {"job_name": "deferred-check"})
    finally:
        writer.join()
    assert result.task_states == {"scale_check": "success"}
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["target_nodes"]) == ("scale_up", 4)
    output = capfd.readouterr()
    text = output.out + output.err + caplog.text  # Airflow's lines may land in caplog
    assert f"next check of job deferred-check in {MIN_DEFERRAL_S:.0f}s (in the triggerer)" in text
    assert text.count("[DAG TEST] Trigger completed") >= 1
    # the trigger held its event back for MIN_DEFERRAL_S after the deferral
    assert time.monotonic() - started >= MIN_DEFERRAL_S


def test_deferrable_check_below_the_safe_deferral_checks_in_the_worker(
    airflow_db, jobs_root, capfd, caplog
):
    run_dag("launch_sleeping", {"job_name": "undeferred", "nodes": 2})
    step_log = jobs_root / "undeferred--onprem" / "steps.jsonl"
    writer = _write_samples_after_the_first_check("undeferred", step_log)
    try:
        result = run_dag("scale_check_deferrable", {"job_name": "undeferred"})
    finally:
        writer.join()
    assert result.task_states == {"scale_check": "success"}
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["target_nodes"]) == ("scale_up", 4)
    output = capfd.readouterr()
    text = output.out + output.err + caplog.text
    assert "poke_interval 2s is below the 15s a deferral must last" in text
    assert "checking job undeferred in the worker instead" in text
    assert "in the triggerer" not in text
    assert "[DAG TEST] Trigger completed" not in text


def _reschedules(dag_id: str, run_id: str) -> int:
    """How many times the scheduler was asked to reschedule a task of this run."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        query = (
            select(func.count())
            .select_from(TaskReschedule)
            .join(TaskInstance, TaskInstance.id == TaskReschedule.ti_id)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        )
        return int(session.scalar(query) or 0)


def test_a_reschedule_below_the_safe_interval_checks_in_poke_mode(
    airflow_db, jobs_root, capfd, caplog
):
    run_dag("launch_sleeping", {"job_name": "quick-resched", "nodes": 2})
    step_log = jobs_root / "quick-resched--onprem" / "steps.jsonl"
    writer = _write_samples_after_the_first_check("quick-resched", step_log)
    try:
        result = run_dag("scale_check_quick_reschedule", {"job_name": "quick-resched"})
    finally:
        writer.join()
    assert result.task_states == {"scale_check": "success"}
    assert result.xcom("scale_check")["action"] == "scale_up"
    assert len(_state("quick-resched")["history"]) >= 2  # it held, then decided
    # the hold was waited out in the worker: the task was never rescheduled
    assert _reschedules("scale_check_quick_reschedule", result.run_id) == 0
    output = capfd.readouterr()
    text = output.out + output.err + caplog.text
    assert f"poke_interval 1s is below the {MIN_RESCHEDULE_S:.0f}s a reschedule must wait" in text
    assert "checking job quick-resched in poke mode" in text


@pytest.mark.long
def test_a_reschedule_at_the_safe_interval_frees_the_worker_between_checks(
    airflow_db, jobs_root, capfd, caplog
):
    run_dag("launch_sleeping", {"job_name": "safe-resched", "nodes": 2})
    step_log = jobs_root / "safe-resched--onprem" / "steps.jsonl"
    writer = _write_samples_after_the_first_check("safe-resched", step_log)
    try:
        result = run_dag("scale_check_safe_reschedule", {"job_name": "safe-resched"})
    finally:
        writer.join()
    assert result.task_states == {"scale_check": "success"}
    assert result.xcom("scale_check")["action"] == "scale_up"
    assert _reschedules("scale_check_safe_reschedule", result.run_id) >= 1
    output = capfd.readouterr()
    assert "in poke mode" not in output.out + output.err + caplog.text


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


@pytest.mark.long
def test_two_concurrent_checks_lead_to_one_resize(airflow_db, jobs_root, tmp_path):
    """Two DAG runs in two processes check the same job at the same moment.

    The job's lock serialises the checks: one decides ``scale_up`` and resizes;
    the other waits for the lock and then either sees the cooldown the first
    started, or (when it comes after the resize) a fresh window at 4 nodes, and
    holds until its timeout (skipped). Either way: one resize, no lost write.
    """
    run_dag("launch_queue_bound", {"job_name": "race", "nodes": 2})
    wait_for_lines(jobs_root / "race--onprem" / "steps.jsonl", 4)
    logs = [(tmp_path / f"check-{index}.log").open("w+") for index in (0, 1)]
    checks = [
        start_dags_test(
            "scale_dags.py",
            "scale_check_concurrent",
            {"job_name": "race"},
            logical_date=logical_date,
            output=log,
        )
        for log, logical_date in zip(
            logs, ("2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"), strict=True
        )
    ]
    for check in checks:
        check.wait(timeout=180)
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
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


# -- step logs: truncation, rotation, long logs, huge bad values ----------------------


def _sample_line(step: int, nodes: int = 1) -> str:
    return json.dumps({"step": step, "duration_s": 1.0, "queue_s": 0.1, "nodes": nodes}) + "\n"


def _sleeping_job(job: str, jobs_root) -> Path:
    """A real one-node job whose step log the test writes; returns that log's path."""
    run_dag("launch_sleeping", {"job_name": job, "nodes": 1})
    return jobs_root / f"{job}--onprem" / "steps.jsonl"


def _check(job: str, capfd) -> str:
    """One hold-only check of ``job``; what it logged."""
    result = run_dag("scale_check_patient", {"job_name": job})
    assert result.task_states == {"scale_check": "skipped"}  # held until its timeout
    captured = capfd.readouterr()
    return captured.out + captured.err


def _window_steps(job: str) -> list[int]:
    return [sample["step"] for sample in _state(job)["window"]["samples"]]


def test_a_log_truncated_to_its_first_lines_counts_no_step_twice(airflow_db, jobs_root, capfd):
    step_log = _sleeping_job("trunc", jobs_root)
    step_log.write_text("".join(_sample_line(step) for step in range(6)))
    _check("trunc", capfd)
    assert _window_steps("trunc") == [0, 1, 2, 3, 4, 5]
    with step_log.open("r+") as handle:  # cut back to its first two lines, same file
        handle.truncate(len(_sample_line(0)) + len(_sample_line(1)))
    output = _check("trunc", capfd)
    assert "was truncated to" in output
    with step_log.open("a") as handle:
        handle.write(_sample_line(6) + _sample_line(7))
    _check("trunc", capfd)
    assert _window_steps("trunc") == [0, 1, 2, 3, 4, 5, 6, 7]


def test_a_rotated_log_loses_no_step(airflow_db, jobs_root, capfd):
    step_log = _sleeping_job("rotate", jobs_root)
    step_log.write_text("".join(_sample_line(step) for step in range(3)))
    _check("rotate", capfd)
    with step_log.open("a") as handle:  # written after that check, before the rotation
        handle.write(_sample_line(3) + _sample_line(4))
    step_log.rename(step_log.with_name("steps.jsonl.1"))
    step_log.write_text(_sample_line(5) + _sample_line(6))
    output = _check("rotate", capfd)
    assert "was rotated; read the rest of the previous file" in output
    assert _window_steps("rotate") == [0, 1, 2, 3, 4, 5, 6]


def test_a_rotated_log_whose_old_file_is_gone_says_what_was_lost(airflow_db, jobs_root, capfd):
    step_log = _sleeping_job("rotate-lost", jobs_root)
    step_log.write_text("".join(_sample_line(step) for step in range(3)))
    _check("rotate-lost", capfd)
    step_log.rename(step_log.with_name("steps.old"))  # a name the check cannot know
    step_log.write_text(_sample_line(5))
    output = _check("rotate-lost", capfd)
    assert "are lost" in output and "after step 2" in output
    assert _window_steps("rotate-lost") == [0, 1, 2, 5]


def test_the_first_check_of_a_long_log_reads_only_its_tail(airflow_db, jobs_root, capfd):
    step_log = _sleeping_job("long", jobs_root)
    step_log.write_text("".join(_sample_line(step) for step in range(5000)))
    output = _check("long", capfd)
    assert "Read 10 new line(s)" in output and "first check: from its end" in output
    assert _window_steps("long") == list(range(4990, 5000))
    assert _state("long")["cursors"][str(step_log)]["offset"] == step_log.stat().st_size
    with step_log.open("a") as handle:
        handle.write(_sample_line(5000))
    assert "Read 1 new line(s)" in _check("long", capfd)


def test_a_huge_bad_value_is_reported_cut_short(airflow_db, jobs_root, capfd):
    step_log = _sleeping_job("huge", jobs_root)
    huge = json.dumps({"step": 0, "duration_s": "x" * 10_000_000, "nodes": 1})
    step_log.write_text(huge + "\n" + _sample_line(1) + "not json\n" * 6)
    output = _check("huge", capfd)
    reports = [line for line in output.splitlines() if "Skipped a step-log line" in line]
    assert len(reports) == 5  # one by one up to five per log and check, then a count
    assert "Skipped 2 more bad line(s)" in output
    assert "duration_s must be a number" in reports[0] and "characters in all" in reports[0]
    assert len(reports[0]) < 600
    assert "x" * 1000 not in output
    assert _window_steps("huge") == [1]
    assert _state("huge")["skipped_lines"] == 7


# -- the state Variable: corrupt or foreign states are refused, never overwritten -----


def _set_raw_variable(key: str, text: str) -> None:
    from airflow.models.variable import Variable

    Variable.set(key, text)


def _raw_variable(key: str) -> str | None:
    from airflow.models.variable import Variable as VariableModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(select(VariableModel).where(VariableModel.key == key)).first()
        return None if row is None else row.val


def _stored_state(job_name: str, **fields: object) -> str:
    state = {
        "schema_version": 1,
        "job_name": job_name,
        "revision": 3,
        "current_nodes": 1,
        "window": {"size": 10, "samples": []},
        "cursors": {},
        "cooldown": {"last_change_at": 1.0, "last_action": "scale_up"},
        "history": [],
        **fields,
    }
    return json.dumps(state)


CORRUPT_STATES = [
    ("", "it is empty"),
    ("   ", "it is empty"),
    ('{"schema_version": 1, "job_name": ', "it is not valid JSON (Expecting value"),
    ("null", "it holds null instead of a state object"),
    ("[1, 2]", "scale state must be a JSON object, got [1, 2]"),
    (
        _stored_state("corrupt", history="abc"),
        "scale state history must be a list of decisions, got 'abc'",
    ),
    (
        _stored_state("corrupt", history=["abc"]),
        "scale state history entry 0 must be a JSON object, got 'abc'",
    ),
    (
        _stored_state("corrupt", revision="many"),
        "scale state revision must be a number, got 'many'",
    ),
    (
        _stored_state("corrupt", cursors={"/x/steps.jsonl": {"offset": -5}}),
        "scale state cursor '/x/steps.jsonl' offset must be at least 0, got -5",
    ),
    (
        _stored_state("someone-else"),
        "scale state job_name must be 'corrupt' (the job checked), got 'someone-else'",
    ),
]


def test_a_corrupt_state_fails_the_check_in_one_sentence_and_is_left_alone(
    airflow_db, jobs_root, capfd, caplog
):
    step_log = _sleeping_job("corrupt", jobs_root)
    step_log.write_text("".join(_sample_line(step) for step in range(4)))
    key = state_variable_key("corrupt")
    for text, problem in CORRUPT_STATES:
        _set_raw_variable(key, text)
        capfd.readouterr()
        caplog.clear()
        result = run_dag("scale_check_patient", {"job_name": "corrupt"})
        assert result.task_states == {"scale_check": "failed"}, text  # not skipped
        captured = capfd.readouterr()
        output = captured.out + captured.err + caplog.text
        assert "CorruptStateError: " in output, output[-3000:]
        message = output.split("CorruptStateError: ", 1)[1].splitlines()[0]
        assert message.startswith(f"scale state Variable {key!r} cannot be used: {problem}"), (
            message
        )
        assert message.endswith("; fix or delete it (the check leaves it unchanged)")
        assert _raw_variable(key) == text  # never overwritten
        assert result.xcom("scale_check") is None
    # the state of the job named in the foreign document was not touched either
    assert _raw_variable(state_variable_key("someone-else")) is None


def test_a_state_of_another_release_is_refused_or_kept_whole(airflow_db, jobs_root, capfd, caplog):
    """A newer major fails the check in one sentence and stays as it is (never "corrupt");
    a newer minor's fields, at the top and in the cooldown, survive the check's rewrite."""
    step_log = _sleeping_job("other-release", jobs_root)
    step_log.write_text("".join(_sample_line(step) for step in range(4)))
    key = state_variable_key("other-release")
    newer = _stored_state("other-release", schema_version=3, autoscaler={"mode": "v3"})
    _set_raw_variable(key, newer)
    capfd.readouterr()
    result = run_dag("scale_check_patient", {"job_name": "other-release"})
    assert result.task_states == {"scale_check": "failed"}
    captured = capfd.readouterr()
    output = captured.out + captured.err + caplog.text
    assert (
        f"NewerRecordError: scale state Variable {key!r}: scale state schema_version 3 was "
        "written by a newer release of elasticgrid-provider than this worker's, which reads "
        "2.0: upgrade elasticgrid-provider here; the scale state is left as it is\n"
    ) in output
    assert "CorruptStateError" not in output
    assert _raw_variable(key) == newer

    cooldown = {"last_change_at": 1.0, "last_action": "scale_up", "by": "policy v2.4"}
    minor = {"schema_version": 2, "schema_minor": 4, "autoscaler": {"mode": "v2.4"}}
    _set_raw_variable(key, _stored_state("other-release", **minor, cooldown=cooldown))
    _check("other-release", capfd)
    state = _state("other-release")
    assert state["revision"] == 4  # the check wrote it
    assert (state["schema_version"], "schema_minor" in state) == (2, False)
    assert state["autoscaler"] == {"mode": "v2.4"}
    assert state["cooldown"] == cooldown
