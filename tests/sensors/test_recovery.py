"""Recovering from lost capacity, on real Airflow runs of real local iroh-tinker jobs.

The spot providers are :class:`tests.preemptible_engine.PreemptibleEngine`:
their ranks are SIGKILLed a set time after they start, behind the real
``JobManager``. The DAGs (``tests/dags/recovery_dags.py``) are the scaling
pipeline, check -> plan -> relaunch, with nothing added for recovery.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from elasticgrid_provider.core.state import state_variable_key
from tests.airflow_support import read_variable, run_dag, start_dags_test

pytestmark = [pytest.mark.airflow, pytest.mark.long]

RECOVERED = {"scale_check": "success", "plan": "success", "relaunch": "success"}
"""The task states of a check that decided ``recover``, its re-plan and its relaunch."""


def _state(job: str) -> dict:
    return read_variable(state_variable_key(job))


def _steps(jobs_root: Path, job: str) -> list[dict]:
    """Every step the job logged, from every part folder it ever had (global rank 0 logs)."""
    steps = []
    for log in sorted(jobs_root.glob(f"{job}--*/steps.jsonl")):
        steps += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return steps


def _wait_for(what: str, condition, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _manifest(jobs_root: Path, job: str) -> dict:
    return json.loads((jobs_root / job / "manifest.json").read_text())


def test_a_job_that_loses_its_spot_part_recovers_on_the_other_provider_and_finishes(
    airflow_db, jobs_root
):
    job = "lose-spot"
    # each step sleeps 0.05 s at least, so 200 steps outlast the preemption 7 s after the
    # ranks start however fast the machine is: spot is reclaimed in the middle of the run
    steps = 200
    conf = {"job_name": job, "nodes": 2, "steps": steps, "preempt": "spot=7"}
    launched = run_dag("recovery_launch", conf)
    assert launched.task_states == {"plan": "success", "launch": "success"}
    first = launched.xcom("launch")
    assert [(p["provider"], p["nodes"]) for p in first["parts"]] == [("onprem", 1), ("spot", 1)]

    result = run_dag("recovery_check_and_finish", conf)

    assert result.task_states == RECOVERED
    record = result.xcom("scale_check")
    assert (record["action"], record["rule"]) == ("recover", "recover")
    assert (record["current_nodes"], record["target_nodes"]) == (2, 2)
    assert record["launch_id"] == first["launch_id"]
    [lost] = record["lost"]
    assert (lost["part"], lost["provider"]) == (f"{job}--spot", "spot")
    assert lost["cause"].startswith("preempted: spot capacity reclaimed by module=")
    assert [entry["provider"] for entry in record["quarantine"]] == ["spot"]
    quarantine = record["quarantine"][0]
    assert quarantine["until"] - quarantine["since"] == 1800
    # the re-plan left the quarantined provider out and said why
    plan = result.xcom("plan")
    assert [(a["provider"], a["nodes"]) for a in plan["assignments"]] == [
        ("onprem", 1),
        ("backup", 1),
    ]
    assert [item["provider"] for item in plan["left_out"]] == ["spot"]
    assert plan["left_out"][0]["reason"].startswith("quarantined until ")
    relaunched = result.xcom("relaunch")
    assert relaunched["status"] == "done"
    assert [(p["provider"], p["status"]) for p in relaunched["parts"]] == [
        ("onprem", "done"),
        ("backup", "done"),
    ]
    # the audit: the recovery is its own kind of event in the history, with the quarantine
    state = _state(job)
    recoveries = [entry for entry in state["history"] if entry["action"] == "recover"]
    assert len(recoveries) == 1 and recoveries[0]["lost"][0]["provider"] == "spot"
    assert [entry["provider"] for entry in state["recovery"]["quarantine"]] == ["spot"]
    assert [past["launch_id"] for past in state["recovery"]["recoveries"]] == [first["launch_id"]]

    # no step before the last checkpoint was computed twice, and none is missing
    numbers = [step["step"] for step in _steps(jobs_root, job)]
    assert numbers == sorted(set(numbers)), f"a step was run or logged twice: {numbers}"
    assert len(set(range(steps)) - set(numbers)) <= 1, numbers  # a stop between commit and log
    assert numbers[-1] == steps - 1
    logged = _steps(jobs_root, job)
    before = [step["step"] for step in logged if step["time"] < record["decided_at"]]
    after = [step["step"] for step in logged if step["time"] > record["decided_at"]]
    assert before and after
    assert after[0] == before[-1] + 1  # resumed right after the last committed step
    progress = json.loads((jobs_root / job / "shared" / "checkpoint" / "progress.json").read_text())
    assert progress["completed_steps"] == steps


def test_a_second_loss_within_the_window_hits_max_recoveries_and_fails_clearly(
    airflow_db, jobs_root, capfd, caplog
):
    from tests.job_processes import job_ranks

    job = "lose-twice"
    conf = {"job_name": job, "nodes": 2, "steps": 600, "preempt": "spot=7,backup=7"}
    conf["max_recoveries"] = 1
    run_dag("recovery_launch", conf)
    first = run_dag("recovery_check", conf)
    assert first.task_states == RECOVERED
    assert first.xcom("scale_check")["action"] == "recover"
    relaunched = first.xcom("relaunch")
    assert [p["provider"] for p in relaunched["parts"]] == ["onprem", "backup"]
    capfd.readouterr()
    caplog.clear()

    second = run_dag("recovery_check", conf)  # backup is reclaimed 7 s after it started

    assert second.task_states == {
        "scale_check": "failed",
        "plan": "upstream_failed",
        "relaunch": "upstream_failed",
    }
    output = capfd.readouterr()
    text = output.out + output.err + caplog.text
    sentence = (
        f"job '{job}' lost part {job}--backup (provider 'backup', global rank 1: preempted: spot "
        "capacity reclaimed by module=tests.preemptible_engine:PreemptibleEngine) and already "
        "recovered 1 time(s) within the last 3600s (max_recoveries=1), so it is not recovered "
        "again; relaunch it with LaunchOperator once the capacity is back"
    )
    assert f"JobFailedError: {sentence}" in text
    assert f"JobFailedError: {sentence}\npart " not in text  # no log tail after the sentence
    assert (
        f"The lost ranks of job {job} logged last:\npart {job}--backup rank 0 (global rank 1)"
        in (text)
    )
    record = second.xcom("scale_check")
    assert (record["action"], record["target_nodes"]) == ("give_up", 0)
    events = [entry["action"] for entry in _state(job)["history"] if entry["action"] != "hold"]
    assert events == ["recover", "give_up"]
    # it never loops: what was left is stopped, the launch recorded down with the sentence
    manifest = _manifest(jobs_root, job)
    assert (manifest["launch_id"], manifest["state"]) == (relaunched["launch_id"], "down")
    assert manifest["down_reason"] == sentence
    _wait_for("the job's ranks to be gone", lambda: not job_ranks(job), 30)
    third = run_dag("recovery_check", conf)
    assert third.task_states["scale_check"] == "failed"
    assert [entry["action"] for entry in _state(job)["history"]].count("give_up") == 1


def test_a_quarantined_provider_is_used_again_once_its_quarantine_ends(airflow_db, jobs_root):
    job = "quarantine-ends"
    conf = {"job_name": job, "nodes": 2, "steps": 600, "preempt": "spot=7,backup=7"}
    conf["quarantine"] = 5  # seconds: over before backup is reclaimed, 7 s after it starts
    run_dag("recovery_launch", conf)
    first = run_dag("recovery_check", conf)
    record = first.xcom("scale_check")
    assert [entry["provider"] for entry in record["quarantine"]] == ["spot"]
    assert [a["provider"] for a in first.xcom("plan")["assignments"]] == ["onprem", "backup"]
    spot_free_at = record["quarantine"][0]["until"]

    second = run_dag("recovery_check", conf)

    assert second.task_states == RECOVERED
    record = second.xcom("scale_check")
    assert record["action"] == "recover" and record["decided_at"] > spot_free_at
    assert [part["provider"] for part in record["lost"]] == ["backup"]
    assert [entry["provider"] for entry in record["quarantine"]] == ["backup"]  # spot's ended
    plan = second.xcom("plan")
    assert [(a["provider"], a["nodes"]) for a in plan["assignments"]] == [
        ("onprem", 1),
        ("spot", 1),
    ]
    assert [item["provider"] for item in plan["left_out"]] == ["backup"]
    relaunched = second.xcom("relaunch")
    assert [(p["provider"], p["status"]) for p in relaunched["parts"]] == [
        ("onprem", "running"),
        ("spot", "running"),
    ]
    assert len(_state(job)["recovery"]["recoveries"]) == 2


def log_path_text(log) -> str:
    """What a ``start_dags_test`` process wrote to ``log`` so far (its last 3,000 characters)."""
    log.flush()
    log.seek(0)
    return log.read()[-3000:]


def test_a_check_during_the_relaunch_waits_on_the_lock_and_does_not_recover_twice(
    airflow_db, jobs_root, tmp_path
):
    """One process launches the job, sees spot reclaimed and relaunches it on a backup that
    takes 10 s to provision; a check started while that relaunch holds the lock (it gets there
    within a second or two) waits, then finds the relaunched job running and holds: one
    recovery, one relaunch."""
    job = "lock-race"
    conf = {"job_name": job, "nodes": 2, "steps": 600, "preempt": "spot=7", "provision_s": 10}
    specs = jobs_root / job / "specs"
    log = (tmp_path / "recovering.log").open("w+")
    recovering = start_dags_test(
        "recovery_dags.py",
        "recovery_launch_then_recover_slowly",
        conf,
        logical_date="2026-01-01T00:00:00+00:00",
        output=log,
    )
    try:
        # the relaunch holds the lock from the record of its launch to its confirmation
        _wait_for(
            "the relaunch to start",
            lambda: (
                (specs.exists() and len(list(specs.iterdir())) == 2)
                or recovering.poll() is not None
            ),
            timeout=240,
        )
        assert recovering.poll() is None, log_path_text(log)
        # the relaunch holds the lock: stopping the old launch (its spec folder is written
        # before the stop) or starting its own
        assert _manifest(jobs_root, job)["state"] in ("stopping", "starting")
        check_started = time.time()
        second = run_dag("recovery_check_only", conf)
        recovering.wait(timeout=240)
        output = log_path_text(log)
    finally:
        if recovering.poll() is None:
            recovering.kill()
            recovering.wait()
        log.close()
    assert recovering.returncode == 0, output[-3000:]
    manifest = _manifest(jobs_root, job)
    confirmed_at = (jobs_root / job / "manifest.json").stat().st_mtime
    assert manifest["state"] == "running"
    assert [part["provider"] for part in manifest["parts"]] == ["onprem", "backup"]
    assert second.task_states == {"scale_check": "skipped"}  # held until its timeout
    record = second.xcom("scale_check")
    # it waited for the lock, then saw the relaunched job running: a plain hold
    assert check_started < confirmed_at <= record["decided_at"]
    assert (record["action"], record["context"]["launch_id"]) == ("hold", manifest["launch_id"])
    history = _state(job)["history"]
    assert [entry["action"] for entry in history].count("recover") == 1
    assert len(list(specs.iterdir())) == 2  # the launch and exactly one relaunch


def _text(capfd, caplog) -> str:
    output = capfd.readouterr()
    return output.out + output.err + caplog.text


def test_a_loss_while_starting_is_recovered_by_the_next_check(airflow_db, jobs_root, capfd, caplog):
    """spot is reclaimed at the job's first step, inside the launch's grace, on a grid with
    no spare provider: the launch fails in one sentence naming the loss and is recorded
    ``lost``; the next check recovers it on what its grid has left."""
    job = "lose-at-start"
    conf = {"job_name": job, "nodes": 2, "steps": 600, "preempt": "spot=step"}
    launched = run_dag("recovery_launch_no_spare", conf)
    assert launched.task_states == {"plan": "success", "launch": "failed"}
    cause = (
        "preempted: spot capacity reclaimed by module=tests.preemptible_engine:PreemptibleEngine"
    )
    text = _text(capfd, caplog)
    assert f"(part {job}--spot (provider 'spot', global rank 1: {cause}))" in text
    assert f"job '{job}' lost part {job}--spot (provider 'spot', global rank 1: {cause}) " in text
    assert "while it started, and its 2 nodes do not fit on the grid without spot" in text
    lost = _manifest(jobs_root, job)
    assert lost["state"] == "lost"

    result = run_dag("recovery_check", conf)

    assert result.task_states == RECOVERED
    record = result.xcom("scale_check")
    assert (record["action"], record["launch_id"]) == ("recover", lost["launch_id"])
    assert [(p["part"], p["ranks"], p["cause"]) for p in record["lost"]] == [
        (f"{job}--spot", [1], cause)
    ]
    relaunched = result.xcom("relaunch")
    assert [p["provider"] for p in relaunched["parts"]] == ["onprem", "backup"]
    assert _manifest(jobs_root, job)["state"] == "running"


def test_a_loss_while_starting_without_recovery_budget_fails_the_check_saying_why(
    airflow_db, jobs_root, capfd, caplog
):
    job = "lose-at-start-off"
    # at the first step, once onprem's rank reached spot's: a loss that is spot's alone (at a
    # set time, a loaded machine's onprem rank could still be connecting to spot's, and fail)
    conf = {"job_name": job, "nodes": 2, "preempt": "spot=step", "max_recoveries": 0}
    assert run_dag("recovery_launch_no_spare", conf).task_states["launch"] == "failed"
    capfd.readouterr()

    result = run_dag("recovery_check", conf)

    assert result.task_states["scale_check"] == "failed"
    assert (
        f"JobFailedError: job '{job}' lost part {job}--spot (provider 'spot', global rank 1: "
        "preempted: spot capacity reclaimed by module=tests.preemptible_engine:PreemptibleEngine) "
        "and recovery is off (max_recoveries=0), so it is not recovered again"
        in _text(capfd, caplog)
    )
    assert _manifest(jobs_root, job)["state"] == "down"


def test_a_part_reclaimed_while_the_launch_starts_is_placed_again_without_its_provider(
    airflow_db, jobs_root, capfd
):
    # the spot part's ranks are killed 0.5 s after they start: within the 3 s start-up grace
    result = run_dag("recovery_startup_loss", {"job_name": "early-loss", "preempt": "spot=0.5"})

    assert result.task_states == {"plan": "success", "launch": "success"}
    job = result.xcom("launch", "job")
    assert job["nodes"] == 2
    assert sorted(part["provider"] for part in job["parts"]) == ["backup", "onprem"]
    manifest = json.loads((jobs_root / "early-loss" / "manifest.json").read_text())
    assert manifest["state"] == "running"
    left_out = manifest["placement"]["left_out"]
    assert [entry["provider"] for entry in left_out] == ["spot"]
    assert (
        "lost capacity while the launch started (preempted: spot capacity reclaimed"
        in (left_out[0]["reason"])
    )
    out = capfd.readouterr().out
    assert "Provider spot took part early-loss--spot away while it started (preempted:" in out
    assert "not all up" in out  # the first launch's loss is logged, then recovered


def test_a_provider_lost_at_start_up_stays_quarantined_for_the_jobs_later_replans(
    airflow_db, jobs_root, capfd
):
    """spot is reclaimed while the launch starts (placed again on onprem + backup), backup 8 s
    later: the check's recovery leaves out both, so the job goes on alone on onprem."""
    job = "lost-twice"
    conf = {"job_name": job, "nodes": 2, "steps": 600, "preempt": "spot=0.5,backup=8"}
    launched = run_dag("recovery_startup_loss", conf)
    assert launched.task_states == {"plan": "success", "launch": "success"}
    assert sorted(p["provider"] for p in launched.xcom("launch", "job")["parts"]) == [
        "backup",
        "onprem",
    ]
    quarantine = _state(job)["recovery"]["quarantine"]
    assert [entry["provider"] for entry in quarantine] == ["spot"]
    assert quarantine[0]["reason"].startswith(
        f"lost part {job}--spot while the launch started: preempted: spot capacity reclaimed"
    )
    assert quarantine[0]["until"] - quarantine[0]["since"] == 1800
    assert "Quarantined provider(s) spot for 1800s in job lost-twice's scale state" in (
        capfd.readouterr().out
    )

    result = run_dag("recovery_check", conf)

    assert result.task_states == RECOVERED
    record = result.xcom("scale_check")
    assert record["action"] == "recover"
    assert [p["provider"] for p in record["lost"]] == ["backup"]
    assert sorted(entry["provider"] for entry in record["quarantine"]) == ["backup", "spot"]
    relaunched = result.xcom("relaunch")
    assert [(p["provider"], p["nodes"]) for p in relaunched["parts"]] == [("onprem", 1)]
