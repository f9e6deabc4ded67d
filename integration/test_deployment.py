"""The provider on a real deployment: scheduler, triggerer, Postgres, two Celery workers.

Every DAG run is triggered and read through the REST API v2 with a JWT
(``integration/deployment.py``). The workers share only the jobs root.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path

import psycopg2
import pytest

from elasticgrid_provider.triggers.job import MIN_DEFERRAL_S
from integration.deployment import Deployment, processes_under, wait_until


def _steps(deployment: Deployment, part: str) -> int:
    path = deployment.jobs_root / part / "steps.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _recorded_rank_pids(deployment: Deployment, part: str) -> set[int]:
    state = json.loads((deployment.jobs_root / part / "job.json").read_text())
    return {int(pid) for pid in state["pids"].values()}


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return False


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_elastic_training_scales_its_job_up_from_2_to_4_nodes_and_finishes(deployment: Deployment):
    run_id = deployment.trigger("elastic_training", {"job_name": "it-training"})
    state = deployment.wait_for_run("elastic_training", run_id, timeout=480)
    states = deployment.task_states("elastic_training", run_id)
    assert state == "success", (states, deployment.diagnostics())
    assert set(states.values()) == {"success"}
    decision = deployment.xcom("elastic_training", run_id, "scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up",
        2,
        4,
    )
    finished = deployment.xcom("elastic_training", run_id, "relaunch")
    assert finished["status"] == "done" and finished["nodes"] == 4
    # the teardown ran after the job finished: nothing was left to stop, nothing rewritten
    teardown = deployment.xcom("elastic_training", run_id, "stop")
    assert (teardown["parts"], teardown["job_status"]) == ([], "done")
    assert teardown["nothing_left"].startswith(f"every part of its launch {finished['launch_id']}")


def test_a_deferrable_launch_waits_in_the_triggerer_and_succeeds_without_a_retry(
    deployment: Deployment,
):
    conf = {"job_name": "it-deferred-launch", "nodes": 1, "steps": 5}
    run_id = deployment.trigger("it_deferrable_launch", conf)
    state = deployment.wait_for_run("it_deferrable_launch", run_id, timeout=300)
    assert state == "success", deployment.task_instances("it_deferrable_launch", run_id)
    launch = deployment.task_instances("it_deferrable_launch", run_id)["launch"]
    assert launch["try_number"] == 1  # resumed after the trigger, not retried
    assert deployment.xcom("it_deferrable_launch", run_id, "launch")["status"] == "done"
    # the wait ran in the triggerer: it wrote the trigger's log beside the task's
    trigger_logs = list(
        (deployment.home / "airflow" / "logs").glob(
            f"dag_id=it_deferrable_launch/run_id={run_id}/task_id=launch/attempt=1.log.trigger.*"
        )
    )
    assert trigger_logs and "trigger it_deferrable_launch/" in trigger_logs[0].read_text()


def test_a_deferrable_sensor_below_the_deferral_minimum_decides_in_the_worker(
    deployment: Deployment,
):
    conf = {"job_name": "it-deferred-check", "nodes": 2, "steps": 300}
    run_id = deployment.trigger("it_deferrable_sensor", conf)
    state = deployment.wait_for_run("it_deferrable_sensor", run_id, timeout=300)
    instances = deployment.task_instances("it_deferrable_sensor", run_id)
    assert state == "success", instances
    assert instances["scale_check"]["try_number"] == 1
    decision = deployment.xcom("it_deferrable_sensor", run_id, "scale_check")
    assert (decision["action"], decision["target_nodes"]) == ("scale_up", 4)
    stop_job(deployment, "it-deferred-check")


def test_a_deferrable_sensor_defers_to_the_triggerer_and_resumes_to_a_decision(
    deployment: Deployment,
):
    dag_id, job = "it_deferred_sensor", "it-deferral"
    run_id = deployment.trigger(dag_id, {"job_name": job, "nodes": 2, "sleep_s": 600})
    # the job writes no samples: the first check holds and defers
    wait_until(
        "the scale check to defer",
        lambda: deployment.task_states(dag_id, run_id).get("scale_check") == "deferred",
        timeout=240,
    )
    # while it waits in the triggerer, three queue-bound steps arrive
    (deployment.jobs_root / f"{job}--onprem" / "steps.jsonl").write_text(
        "".join(
            json.dumps({"step": step, "duration_s": 1.0, "queue_s": 0.6, "nodes": 2}) + "\n"
            for step in range(3)
        )
    )
    state = deployment.wait_for_run(dag_id, run_id, timeout=240)
    instances = deployment.task_instances(dag_id, run_id)
    assert state == "success", (instances, deployment.diagnostics())
    assert instances["scale_check"]["try_number"] == 1  # resumed after the trigger, not retried
    decision = deployment.xcom(dag_id, run_id, "scale_check")
    assert (decision["action"], decision["target_nodes"]) == ("scale_up", 4)
    log = _task_log(deployment, "w1", dag_id, run_id, "scale_check", 1).read_text(errors="replace")
    assert f"next check of job {job} in {MIN_DEFERRAL_S:.0f}s (in the triggerer)" in log
    assert "in the worker instead" not in log
    # the resumed check (execute_complete) decided: the decision is in the same attempt's log
    assert f"Decision for job {job}: scale_up 2 -> 4" in log
    trigger_logs = list(
        (deployment.home / "airflow" / "logs").glob(
            f"dag_id={dag_id}/run_id={run_id}/task_id=scale_check/attempt=1.log.trigger.*"
        )
    )
    assert trigger_logs and f"trigger {dag_id}/" in trigger_logs[0].read_text()
    stop_job(deployment, job)


def test_elastic_rescale_check_skips_idle_then_starts_and_resizes_its_job(deployment: Deployment):
    dag_id = "elastic_rescale_check"
    # unpausing it scheduled a run for its default job, which nobody launched: skipped
    scheduled = wait_until(
        "the scheduled run of elastic_rescale_check",
        lambda: [
            run
            for run in deployment.api("GET", f"dags/{dag_id}/dagRuns")["dag_runs"]
            if run["run_type"] == "scheduled"
        ],
        timeout=120,
        interval=2,
    )[0]
    assert deployment.wait_for_run(dag_id, scheduled["dag_run_id"], timeout=240) == "success"
    assert set(deployment.task_states(dag_id, scheduled["dag_run_id"]).values()) == {"skipped"}

    job = "it-rescale"
    started = deployment.trigger(dag_id, {"job_name": job, "launch": True})
    assert deployment.wait_for_run(dag_id, started, timeout=240) == "success"
    assert deployment.task_states(dag_id, started)["start"] == "success"
    wait_until("the job's first steps", lambda: _steps(deployment, f"{job}--onprem") >= 3, 120)

    checked = deployment.trigger(dag_id, {"job_name": job})
    state = deployment.wait_for_run(dag_id, checked, timeout=300)
    states = deployment.task_states(dag_id, checked)
    assert state == "success", states
    assert states["resize"] == "success" and states["start"] == "skipped"
    decision = deployment.xcom(dag_id, checked, "scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up",
        2,
        4,
    )
    resized = deployment.xcom(dag_id, checked, "resize")
    assert resized["nodes"] == 4 and resized["status"] == "running"
    stop_job(deployment, job)


def test_a_retry_after_kill_9_of_the_worker_attaches_and_a_check_on_the_other_worker_reads_the_job(
    deployment: Deployment,
):
    job, part = "it-killed", "it-killed--onprem"
    conf = {"job_name": job, "nodes": 2, "steps": 3000, "microbatch_seconds": 0.05}
    run_id = deployment.trigger("it_launch_on_w1", conf)

    def launched_and_waiting() -> bool:
        launch = deployment.task_instances("it_launch_on_w1", run_id)["launch"]
        return (
            launch["state"] == "running"
            and (deployment.jobs_root / part / "job.json").exists()
            and len(_recorded_rank_pids(deployment, part)) == 2
            and _steps(deployment, part) >= 3
        )

    wait_until("the launch on w1 waiting on its running job", launched_and_waiting, 240, 1)
    launch = deployment.task_instances("it_launch_on_w1", run_id)["launch"]
    assert launch["hostname"] == "w1" and launch["try_number"] == 1
    ranks = _recorded_rank_pids(deployment, part)  # iroh-tinker's runner per rank
    processes = set(processes_under(deployment.jobs_root / part))  # the rank processes
    assert len(processes) == 2 and all(_alive(pid) for pid in ranks)

    deployment.kill_group("worker-w1")  # kill -9 the worker and its task processes
    deployment.processes["stopped-worker-w1"] = deployment.processes.pop("worker-w1")
    deployment.start_worker("w1")

    def retried() -> dict | None:
        ti = deployment.task_instances("it_launch_on_w1", run_id)["launch"]
        return ti if ti["try_number"] >= 2 and ti["state"] == "running" else None

    retry = wait_until("the launch's retry", retried, timeout=300, interval=2)
    retry_log = _task_log(
        deployment, "w1", "it_launch_on_w1", run_id, "launch", retry["try_number"]
    )
    wait_until(
        "the retry to attach",
        lambda: "attached, started nothing" in retry_log.read_text(errors="replace"),
        timeout=120,
    )
    # the same ranks, alive, and no other process of the job: no second copy
    assert _recorded_rank_pids(deployment, part) == ranks
    assert all(_alive(pid) for pid in ranks)
    assert set(processes_under(deployment.jobs_root / part)) == processes

    # a check on w2 reads the state of the job launched (and waited on) on w1
    check = deployment.trigger("it_check_on_w2", {"job_name": job})
    state = deployment.wait_for_run("it_check_on_w2", check, timeout=300)
    instance = deployment.task_instances("it_check_on_w2", check)["scale_check"]
    assert state == "success", instance
    assert instance["hostname"] == "w2"
    decision = deployment.xcom("it_check_on_w2", check, "scale_check")
    assert (
        decision["context"]["launch_id"]
        == deployment.xcom("it_launch_on_w1", run_id, "launch", key="job")["launch_id"]
    )
    assert (decision["action"], decision["current_nodes"]) == ("scale_up", 2)
    # a stop on request ends the waiting retry for good: failed, and no further try
    stop_job(deployment, job)

    def launch_ended() -> dict | None:
        ti = deployment.task_instances("it_launch_on_w1", run_id)["launch"]
        return ti if ti["state"] in ("failed", "success", "up_for_retry") else None

    ended = wait_until("the waiting launch to end", launch_ended, timeout=120, interval=1)
    log = retry_log.read_text(errors="replace")
    assert (ended["state"], ended["try_number"]) == ("failed", retry["try_number"]), log[-3000:]
    assert "so this task fails without a retry" in log, log[-3000:]


def test_ranks_inherit_no_task_descriptor_and_a_non_waiting_launch_frees_its_worker(
    deployment: Deployment,
):
    """A rank inherits none of the task process's sockets or pipes, under a real Celery worker."""
    job, part = "it-descriptors", "it-descriptors--onprem"
    probe_file = deployment.home / "descriptor-probe.json"
    conf = {"job_name": job, "nodes": 1, "sleep_s": 240, "probe_file": str(probe_file)}
    run_id = deployment.trigger("it_descriptor_probe", conf)
    assert deployment.wait_for_run("it_descriptor_probe", run_id, timeout=240) == "success"
    launch = deployment.task_instances("it_descriptor_probe", run_id)["launch"]
    task_ended = _when(launch["end_date"])

    # 1. no rank process holds a socket or pipe the task process had open
    task = json.loads(probe_file.read_text())
    channels = {
        target
        for target in task["descriptors"].values()
        if target.startswith(("socket:", "pipe:", "anon_inode:"))
    }
    assert channels, task  # the task talks to its supervisor over sockets
    ranks = set(processes_under(deployment.jobs_root / part)) | _recorded_rank_pids(
        deployment, part
    )
    assert len(ranks) == 2  # the runner and its rank
    shared = {}
    for pid in ranks:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in channels:
                shared.setdefault(pid, []).append(f"fd {fd} -> {target}")

    # 2. the executor hears that the launch finished within seconds, while the job runs on
    reported = _celery_task_done_at(deployment, "it_descriptor_probe", run_id, "launch")
    job_still_running = all(_alive(pid) for pid in ranks)
    delay = (reported - task_ended).total_seconds()
    assert not shared, (
        f"rank processes hold the task's descriptors {shared}; the worker reported the task "
        f"finished {delay:.0f}s after it ended"
    )
    assert job_still_running
    assert delay < 10, f"the worker reported the launch finished {delay:.0f}s after it ended"
    stop_job(deployment, job)


def test_the_task_log_masks_the_secret_envs_values_only(deployment: Deployment):
    """The supervisor's log file of a real Celery task: the job's name and folders as they
    are, the non-secret values readable, the token and the passwords never (issue 33)."""
    dag_id, job = "it_printing_envs", "chaos-resize"
    token, password = f"hf_{secrets.token_hex(12)}", f"s3cr3t-{secrets.token_hex(4)}"
    signature = f"sig-{secrets.token_hex(6)}"
    conf = {
        "job_name": job,
        "nodes": 2,
        "hf_token": token,
        "data_url": f"https://reader:{password}@data.example/shard-17",
        "signature": signature,
    }
    run_id = deployment.trigger(dag_id, conf)
    assert deployment.wait_for_run(dag_id, run_id, timeout=300) == "failed"
    launch = deployment.task_instances(dag_id, run_id)["launch"]
    assert launch["state"] == "failed"
    path = _task_log(deployment, "w1", dag_id, run_id, "launch", 1)

    def failure_logged() -> str | None:
        text = path.read_text(errors="replace")
        return text if f"job '{job}' failed." in text else None

    log = wait_until("the failure in the task log", failure_logged, timeout=60)
    for secret in (token, password, signature, "u:pw@h"):
        assert secret not in log
    assert (
        "MODE=train CHAOS_ITER=resize HF_TOKEN=*** DB_URL=***/db "
        "DATA_URL=https://reader:***@data.example/shard-17 RUN_SIGNATURE=***"
    ) in log
    part_logs = deployment.jobs_root / f"{job}--onprem" / "logs"
    assert f"Launched job {job}: 2 nodes" in log
    assert f"Part {job}--onprem: 2 node(s) on local, logs in {part_logs}" in log
    assert f"job '{job}' failed." in log
    envs = ("MODE", "CHAOS_ITER", "HF_TOKEN", "DB_URL", "DATA_URL", "RUN_SIGNATURE")
    assert launch["rendered_fields"]["envs"] == dict.fromkeys(envs, "***")


def _task_log(
    deployment: Deployment, worker: str, dag_id: str, run_id: str, task_id: str, attempt: int
) -> Path:
    """The task's log file in the worker's own logs folder (waits for it to appear)."""
    logs = deployment.worker_home(worker) / "airflow" / "logs"
    pattern = f"dag_id={dag_id}/run_id={run_id}/task_id={task_id}/attempt={attempt}.log"

    def found() -> Path | None:
        return next(iter(logs.glob(pattern)), None)

    return wait_until(f"{pattern} under {logs}", found, timeout=120)


def _celery_task_done_at(deployment: Deployment, dag_id: str, run_id: str, task_id: str):
    """When the Celery worker finished the task's workload (what the executor is told)."""
    connection = psycopg2.connect(
        host="127.0.0.1", port=deployment.ports["postgres"], user="airflow", dbname="airflow"
    )
    connection.autocommit = True

    def done_at() -> datetime | None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT m.date_done FROM task_instance t JOIN celery_taskmeta m "
                "ON m.task_id = t.external_executor_id "
                "WHERE t.dag_id = %s AND t.run_id = %s AND t.task_id = %s "
                "AND m.status = 'SUCCESS'",
                (dag_id, run_id, task_id),
            )
            row = cursor.fetchone()
        if row is None:
            return None
        done = row[0]
        return done if done.tzinfo else done.replace(tzinfo=timezone.utc)

    try:
        return wait_until("the Celery task's end", done_at, timeout=180, interval=0.5)
    finally:
        connection.close()


def stop_job(deployment: Deployment, job: str) -> None:
    """Stop a job the test no longer needs (two cores are shared by everything)."""
    from tests.job_processes import stop_job as stop_job_parts

    stop_job_parts(deployment.jobs_root, job)


@pytest.fixture(autouse=True)
def _time_each_test(request):
    started = time.monotonic()
    yield
    print(f"\n{request.node.name}: {time.monotonic() - started:.0f}s")
