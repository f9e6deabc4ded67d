"""Bad SSH params and unreachable hosts: one sentence, and nothing stopped or half-written."""

from __future__ import annotations

import json

import pytest

from tests.airflow_support import run_dag
from tests.remote.conftest import use_grid

pytestmark = pytest.mark.airflow


def _grid(params: dict, max_nodes: int = 2) -> list[dict]:
    return [
        {
            "name": "onprem",
            "engine": "ssh",
            "max_nodes": max_nodes,
            "cost_per_node_hour": 0.0,
            "spot": False,
            "params": params,
        }
    ]


def _failure(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, kind: str) -> str:
    captured = capfd.readouterr()
    output = captured.out + captured.err + caplog.text
    assert f"{kind}: " in output, output[-3000:]
    return output.split(f"{kind}: ", 1)[1].splitlines()[0]


BAD_PARAMS = [
    (
        {"hosts": ["gpu@10.0.0.11", "gpu@10.0.0.12", "gpu@10.0.0.13"]},
        4,
        "provider 'onprem' params.hosts must carry max_nodes=4 evenly, got 3 hosts: list one "
        "host per node (repeat a host to give it more nodes)",
    ),
    (
        {"hosts": ["gpu@10.0.0.11"], "colour": "blue"},
        1,
        "provider 'onprem' params has an unknown field 'colour' (known: hosts, ssh_port, ssh_key, ssh_conn_id, "
        "ssh_opts, remote_dir, known_hosts, connect_timeout_s, python, shared_dir)",
    ),
    (
        {"hosts": ["gpu@10.0.0.11"], "ssh_key": "/nonexistent/id_ed25519"},
        1,
        "provider 'onprem' params.ssh_key names a file that cannot be read: '/nonexistent/id_ed25519'",
    ),
]


@pytest.mark.parametrize(
    ("params", "max_nodes", "sentence"), BAD_PARAMS, ids=["hosts", "key", "file"]
)
def test_bad_ssh_params_fail_the_plan_in_one_sentence(
    airflow_db, jobs_root, monkeypatch, capfd, caplog, params, max_nodes, sentence
):
    use_grid(monkeypatch, jobs_root, _grid(params, max_nodes))
    result = run_dag("ssh_plan")
    assert result.task_states == {"plan": "failed"}
    failure = _failure(capfd, caplog, "AirflowFailException")
    assert failure == f"connection 'elasticgrid_ssh' field providers: {sentence}"


@pytest.mark.parametrize(
    ("params", "max_nodes", "sentence"), BAD_PARAMS, ids=["hosts", "key", "file"]
)
def test_bad_ssh_params_in_a_placement_fail_the_launch_and_write_nothing(
    airflow_db, jobs_root, monkeypatch, capfd, caplog, params, max_nodes, sentence
):
    use_grid(monkeypatch, jobs_root, [])
    (provider,) = _grid(params, max_nodes)
    placement = {"assignments": [{**provider, "provider": provider.pop("name"), "nodes": 1}]}
    result = run_dag("ssh_launch_placement", {"job_name": "bad", "placement": placement})
    assert result.task_states == {"launch": "failed"}
    assert _failure(capfd, caplog, "AirflowFailException") == sentence
    assert list(jobs_root.iterdir()) == []


@pytest.mark.long
def test_a_resize_onto_an_unreachable_host_fails_naming_it_and_leaves_the_job_running(
    airflow_db, jobs_root, ssh_pool, capfd, caplog
):
    conf = {"job_name": "steady", "steps": 100000, "nodes": 1}
    first = run_dag("ssh_launch", conf)
    assert first.task_states == {"plan": "success", "launch": "success"}
    launch_id = first.xcom("launch", "job")["launch_id"]
    capfd.readouterr()
    caplog.clear()
    ssh_pool.cut(1)

    resized = run_dag("ssh_launch", {**conf, "nodes": 2})

    assert resized.task_states == {"plan": "success", "launch": "failed"}
    failure = _failure(capfd, caplog, "AirflowException")
    assert failure.startswith("provider 'onprem' cannot be used now: ")
    assert ssh_pool.hosts[1] in failure
    manifest = json.loads((jobs_root / "steady" / "manifest.json").read_text())
    assert (manifest["launch_id"], manifest["state"]) == (launch_id, "running")
    from iroh_tinker.cloud import JobManager

    assert JobManager(root=jobs_root).status("steady--onprem").status == "running"
    ssh_pool.restore(1)
