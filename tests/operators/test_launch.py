"""LaunchOperator on a real metadata DB with real local iroh-tinker jobs."""

from __future__ import annotations

import json
import secrets
import stat
import time
from pathlib import Path

import pytest

from tests.airflow_support import run_dag
from tests.job_processes import is_alive, job_ranks, rank_pids, stop_job_processes

pytestmark = pytest.mark.airflow


def test_launch_runs_a_two_part_job_to_completion(airflow_db, jobs_root):
    result = run_dag("launch_and_wait", {"job_name": "two-parts", "nodes": 3, "steps": 4})
    assert result.task_states == {"plan": "success", "launch": "success"}
    pushed = result.xcom("launch", "job")
    # pushed right after the launch was confirmed (a 4-step job may be done by then)
    assert pushed["status"] in ("running", "done")
    assert pushed["launch_state"] == "running"
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
    result = run_dag("launch_late_failing_job", {"job_name": "fails", "nodes": 2})
    assert result.task_states["launch"] == "failed"
    assert result.xcom("launch", "job")["launch_state"] == "running"  # it did start
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


@pytest.mark.long
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


# -- the five-step resize: nothing is stopped before the new launch is known to work ------


def _manifest(jobs_root: Path, job: str) -> dict:
    return json.loads((jobs_root / job / "manifest.json").read_text())


def _text(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    captured = capfd.readouterr()
    return captured.out + captured.err + caplog.text


@pytest.mark.parametrize(
    ("dag_id", "message"),
    [
        ("launch_unknown_engine", "provider 'onprem' engine 'warp-drive' cannot be used: "),
        (
            "launch_missing_engine_module",
            "provider 'onprem' engine 'module=tests.fake_engines:NoSuchEngine' cannot be used: ",
        ),
        (
            "launch_missing_program",
            "run command's program '/nonexistent/bin/train' is not an executable on this machine",
        ),
    ],
    ids=["unknown-engine", "missing-engine-class", "missing-program"],
)
def test_a_resize_that_cannot_start_leaves_the_running_job_alone(
    airflow_db, jobs_root, capfd, caplog, dag_id, message
):
    run_dag("launch_sleeping", {"job_name": "keep", "nodes": 2})
    before = _manifest(jobs_root, "keep")
    ranks = job_ranks("keep")
    assert len(ranks) == 2
    capfd.readouterr()

    result = run_dag(dag_id, {"job_name": "keep", "nodes": 1})

    assert result.task_states == {"plan": "success", "launch": "failed"}
    assert message in _text(capfd, caplog)
    assert job_ranks("keep") == ranks  # the same processes, all alive
    assert _manifest(jobs_root, "keep") == before  # nothing written


def test_a_resize_whose_command_dies_at_once_fails_and_records_the_job_down(
    airflow_db, jobs_root, capfd, caplog
):
    run_dag("launch_sleeping", {"job_name": "dies", "nodes": 2})
    old_ranks = job_ranks("dies")
    capfd.readouterr()

    result = run_dag("launch_dies_at_once", {"job_name": "dies", "nodes": 3})

    assert result.task_states == {"plan": "success", "launch": "failed"}
    assert result.xcom("launch", "job") is None  # never reported as launched
    text = _text(capfd, caplog)
    assert (
        "AirflowException: job 'dies' is down: its ranks were not all up 8 s after the start "
        "(part dies--onprem (provider 'onprem', global ranks 0, 1: its ranks stopped "
        "(down ranks: [0, 1])); part dies--cloud (provider 'cloud', global rank 2: " in text
    )
    assert "boom: corrupt batch" in text  # the failing rank's log, in the task log
    assert "resized" not in text
    manifest = _manifest(jobs_root, "dies")
    assert manifest["state"] == "down"
    assert manifest["down_reason"].startswith("its ranks were not all up 8 s after the start")
    assert not any(is_alive(pid) for pid in old_ranks)  # stopped by step 2
    assert job_ranks("dies") == {}  # and nothing of the new launch runs


def test_a_launch_with_one_rank_down_fails_and_logs_that_ranks_output(
    airflow_db, jobs_root, capfd, caplog
):
    result = run_dag("launch_one_rank_failing", {"job_name": "one-down", "nodes": 2})

    assert result.task_states == {"plan": "success", "launch": "failed"}
    text = _text(capfd, caplog)
    assert (
        "its ranks were not all up 5 s after the start (part one-down--onprem "
        "(provider 'onprem', global rank 1: rank 1: out of memory))" in text
    )
    # the part still runs (rank 0 lives), yet the report has the dead rank's log tail
    assert (
        "part one-down--onprem rank 1 (global rank 1) failed (down ranks: [1]); "
        "last 20 log lines:" in text
    )
    assert "rank 1: out of memory" in text
    assert _manifest(jobs_root, "one-down")["state"] == "down"
    assert job_ranks("one-down") == {}


def test_an_engine_that_starts_some_ranks_then_raises_leaves_none_running(
    airflow_db, jobs_root, capfd, caplog
):
    result = run_dag("launch_partly_starting", {"job_name": "partly", "nodes": 2})

    assert result.task_states == {"plan": "success", "launch": "failed"}
    text = _text(capfd, caplog)
    assert "job 'partly' could not start: provider 'flaky' (part partly--flaky) failed: " in text
    assert "lost node 1 while starting its ranks" in text
    # the rank it started is named: iroh-tinker never recorded it
    assert "process(es) of this launch that iroh-tinker had not recorded (pids " in text
    assert job_ranks("partly") == {}
    assert _manifest(jobs_root, "partly")["state"] == "down"


def test_attach_needs_the_same_run_envs_and_setup(airflow_db, jobs_root, capfd, caplog):
    conf = {"job_name": "same", "nodes": 2}
    first = run_dag("launch_with_envs", conf)
    ranks = job_ranks("same")
    assert len(ranks) == 2
    capfd.readouterr()

    again = run_dag("launch_with_envs", conf)
    assert again.xcom("launch", "job")["launch_id"] == first.xcom("launch", "job")["launch_id"]
    assert job_ranks("same") == ranks
    assert "attached, started nothing" in _text(capfd, caplog)

    changes = (({"data_url": "https://data.example/v2"}, "envs"), ({"setup": "echo"}, "setup"))
    for changed, field in changes:
        conf = {**conf, **changed}
        before = job_ranks("same")
        result = run_dag("launch_with_envs", conf)
        assert result.task_states["launch"] == "success"
        text = _text(capfd, caplog)
        assert f"Not attaching to job same: its {field} changed; relaunching it." in text
        after = job_ranks("same")
        assert len(after) == 2 and not set(after) & set(before)
        assert not any(is_alive(pid) for pid in before)


def test_envs_values_are_masked_and_do_not_stay_at_rest(airflow_db, jobs_root, capfd, caplog):
    secret = "https://user:pa55w0rd@data.example/shard-17"
    result = run_dag("launch_with_envs", {"job_name": "secret", "nodes": 3, "data_url": secret})
    assert result.task_states["launch"] == "success"
    # the ranks have it
    rank = next(iter(job_ranks("secret")))
    assert f"TRAINING_DATA_URL={secret}".encode() in Path(f"/proc/{rank}/environ").read_bytes()
    # the task's log and its rendered fields do not, although the key does not sound secret
    assert secret not in _text(capfd, caplog)
    assert result.rendered_fields("launch")["envs"] == {"TRAINING_DATA_URL": "***"}
    # no file under the jobs root holds it once the job started
    files = [path for path in jobs_root.rglob("*") if path.is_file()]
    assert [path for path in files if secret.encode() in path.read_bytes()] == []
    launch_files = list((jobs_root / "secret" / "specs").rglob("*.json"))
    for path in launch_files:  # the launcher's request and result too
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    specs = [path for path in launch_files if path.name.startswith("secret--")]
    specs += list(jobs_root.glob("secret--*/spec.json"))
    assert len(specs) >= 4
    for spec in specs:
        assert stat.S_IMODE(spec.stat().st_mode) == 0o600, spec
        assert stat.S_IMODE(spec.parent.stat().st_mode) == 0o700, spec.parent
        assert json.loads(spec.read_text())["envs"]["TRAINING_DATA_URL"] == "***"


def test_only_secret_envs_values_are_masked_never_the_job_name_or_paths(
    airflow_db, jobs_root, capfd, caplog
):
    """A job named like an envs value (``chaos-resize``, ``CHAOS_ITER=resize``) whose ranks
    print their environment, then fail: the failure report carries their log's tail.

    The task runs in this process (``dag.test()``), so Airflow's secrets masker here holds
    what the task registered; applied to the task's output, it gives what the task log
    shows (a deployment's supervisor masks the log file the same way, which
    integration/test_deployment.py reads)."""
    from airflow.sdk._shared.secrets_masker import redact, reset_secrets_masker

    reset_secrets_masker()  # this process's masker: only what this task registers
    token, password = f"hf_{secrets.token_hex(12)}", f"s3cr3t-{secrets.token_hex(4)}"
    signature = f"sig-{secrets.token_hex(6)}"
    data_url = f"https://reader:{password}@data.example/shard-17"
    conf = {"job_name": "chaos-resize", "nodes": 2, "hf_token": token, "data_url": data_url}
    result = run_dag("launch_printing_envs", {**conf, "signature": signature})
    assert result.task_states == {"plan": "success", "launch": "failed"}
    output = _text(capfd, caplog)
    assert token in output and password in output  # printed, so masking has work to do
    log = str(redact(output))

    for secret in (token, password, signature, "u:pw@h"):
        assert secret not in log
    assert (
        "MODE=train CHAOS_ITER=resize HF_TOKEN=*** DB_URL=***/db "
        "DATA_URL=https://reader:***@data.example/shard-17 RUN_SIGNATURE=***"
    ) in log
    part_logs = jobs_root / "chaos-resize--onprem" / "logs"
    for line in (
        f"Launched job chaos-resize: 2 nodes, world size 2, 1 part(s) under {jobs_root}",
        f"Part chaos-resize--onprem: 2 node(s) on local, logs in {part_logs}",
        "job 'chaos-resize' failed.",
        "part chaos-resize--onprem rank 0 (global rank 0) failed",
    ):
        assert line in log, line
    rendered = result.rendered_fields("launch")
    envs = ("MODE", "CHAOS_ITER", "HF_TOKEN", "DB_URL", "DATA_URL", "RUN_SIGNATURE")
    assert rendered["envs"] == dict.fromkeys(envs, "***")
    assert rendered["secret_envs"] == ["***"]  # Airflow hides a field whose name sounds secret
    assert rendered["job_name"] == "chaos-resize"


def test_a_secret_envs_name_that_is_no_envs_key_fails_in_one_sentence(
    airflow_db, jobs_root, capfd, caplog
):
    """A typo in ``secret_envs`` fails the task before anything starts; meanwhile every
    value is masked (failing closed)."""
    from airflow.sdk._shared.secrets_masker import redact, reset_secrets_masker

    reset_secrets_masker()
    result = run_dag("launch_secret_typo", {"job_name": "typo", "nodes": 2})
    assert result.task_states == {"plan": "success", "launch": "failed"}
    assert (
        "secret_envs names 'HF_TOKN', which is not a key of envs (envs: HF_TOKEN, MODE)"
        in _text(capfd, caplog)
    )
    assert str(redact("MODE=train-all")) == "MODE=***"
    assert job_ranks("typo") == {}
    assert not (jobs_root / "typo" / "manifest.json").exists()


def test_launch_ids_are_utc_and_every_rank_carries_its_own(airflow_db, jobs_root):
    result = run_dag("launch_sleeping", {"job_name": "ids", "nodes": 3})
    launch_id = result.xcom("launch", "job")["launch_id"]
    stamp = launch_id.split("-", 1)[0]
    assert stamp.endswith("Z")
    assert (
        abs(time.mktime(time.strptime(stamp, "%Y%m%dT%H%M%SZ")) - time.mktime(time.gmtime())) < 300
    )
    assert sorted(job_ranks("ids").values()) == [launch_id] * 3


@pytest.fixture(autouse=True)
def _no_stray_ranks():
    """Ranks iroh-tinker never recorded are not stopped by the jobs_root fixture."""
    yield
    for job in ("keep", "dies", "partly", "same", "secret", "ids", "chaos-resize", "typo"):
        stop_job_processes(job)


def test_iroh_tinkers_own_cloud_engines_are_refused_and_nothing_is_written(
    airflow_db, jobs_root, capfd
):
    result = run_dag("launch_on_iroh_cloud_engines", {"job_name": "refused"})

    assert result.task_states == {
        "plan_gcp": "failed",  # the plan of a launch reserves nothing no launch can use
        "launch_gcp": "upstream_failed",
        "plan_aws": "failed",  # use ec2
        "launch_aws": "upstream_failed",
        "cost_gcp": "success",  # a cloud without a product engine stays plannable
        "plan_gcp_for_job": "failed",  # a plan for a job reserves nothing no launch can use
    }
    output = capfd.readouterr()
    text = output.out + output.err
    assert "Provider 'gcp' can be planned but not launched" in text  # the costing's warning
    assert "provider 'gcp' can be planned but not launched: GCP has no elasticgrid engine" in text
    assert "provider 'aws' would launch on iroh-tinker's own AWS engine" in text
    assert "set its engine to 'ec2'" in text
    assert "job 'refused-gcp' was not planned, and nothing was reserved: provider 'gcp'" in text
    # no job folder, spec or lock; the grid ledger (its lock alone) holds nothing
    assert [entry.name for entry in jobs_root.iterdir()] in ([], [".grid"])
    assert not (jobs_root / ".grid" / "ledger.json").exists()
