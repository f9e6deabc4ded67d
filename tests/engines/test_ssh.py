"""The ssh engine on real SSH hosts (network namespaces with their own sshd), driven by
iroh-tinker's real ``JobManager`` from spec files, with the jobs root hidden from the hosts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from iroh_tinker.cloud import JobManager
from iroh_tinker.cloud.spec import load_spec

from elasticgrid_provider.core.ssh_params import SshParams
from elasticgrid_provider.engines.ssh import (
    ENGINE_REF,
    STATUS_FILE,
    RemoteRead,
    read_remote_file,
    sweep_launch,
)
from tests.engines.ssh_engines import CutBeforeStartSshEngine, LostAfterStartSshEngine
from tests.ssh_hosts import SshTestHosts

TRAIN = """\
import os, subprocess, sys, time
secret = os.environ.get("SECRET")
print(f"rank={os.environ['RANK']} cwd={os.getcwd()} host={os.environ['ELASTICGRID_HOST']} "
      f"secret_length={len(secret) if secret else 0}", flush=True)
if os.environ.get("CHILD"):
    subprocess.Popen(["sleep", "300"])
time.sleep(float(os.environ.get("SLEEP", "0")))
"""
SECRET = "hunter2-s3cr3t-value"
JOB_WORDS = ("iroh_tinker/cloud/runner.py", "iroh_tinker.cloud.runner", "train.py", "sleep 300")


def write_spec(
    tmp_path: Path,
    name: str,
    params: dict[str, Any],
    *,
    infra: str = ENGINE_REF,
    envs: dict[str, str] | None = None,
    **fields: Any,
) -> Path:
    """A spec file for job ``name`` running ``train.py`` (relative: it runs in ``remote_dir``)."""
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    (workdir / "train.py").write_text(TRAIN)
    spec = {
        "name": name,
        "run": f"{sys.executable} train.py",
        "workdir": str(workdir),
        "envs": {"IROH_TINKER_RESTART_BACKOFF": "0", **(envs or {})},
        "recovery": {"mode": "none"},
        "resources": {"infra": [infra], "params": params},
        **fields,
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(spec))
    return path


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout}s")


def job_processes(hosts: SshTestHosts, index: int) -> list[str]:
    """Command lines of the job's processes (runners, ranks, their children) on a host."""
    result = hosts.run(index, "ps -eo args")
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if any(w in line for w in JOB_WORDS)]


@pytest.fixture
def manager(tmp_path: Path) -> JobManager:
    root = tmp_path / "jobs"
    root.mkdir()
    return JobManager(root=root)


def test_ranks_start_in_remote_dir_and_their_logs_reach_job_manager(ssh_hosts, manager, tmp_path):
    spec = write_spec(tmp_path, "cwd", ssh_hosts.params(), num_nodes=2, envs={"SLEEP": "30"})
    state = manager.launch(spec)
    assert state.status == "running" and state.pids == {}  # no remote pid for a local os.kill
    for rank, address in enumerate(ssh_hosts.addresses):
        line = wait_for(lambda rank=rank: manager.logs("cwd", rank), what=f"rank {rank}'s log")
        assert line == f"rank={rank} cwd=/root/elasticgrid/cwd host={address} secret_length=0"
    nodes = manager.load("cwd").nodes
    assert [node["host"] for node in nodes] == ssh_hosts.hosts
    assert all(int(node["env"]["pid"]) > 1 for node in nodes)
    manager.stop("cwd")


def test_four_ranks_on_two_hosts_reach_done_with_the_markers_mirrored(ssh_hosts, manager, tmp_path):
    spec = write_spec(tmp_path, "four", ssh_hosts.params(), num_nodes=2, procs_per_node=2)
    manager.launch(spec)
    wait_for(lambda: manager.status("four").status == "done", what="done")
    job_dir = manager.root / "four"
    assert sorted(path.name for path in job_dir.glob("done_*")) == [f"done_{r}" for r in range(4)]
    record = json.loads((job_dir / STATUS_FILE).read_text())
    assert record["ranks"] == dict.fromkeys("0123", "stopped")
    assert record["unreachable_hosts"] == []
    hosts = [node["host"] for node in manager.load("four").nodes]
    assert hosts == [ssh_hosts.hosts[0]] * 2 + [ssh_hosts.hosts[1]] * 2
    assert manager.logs("four", 3).startswith("rank=3 cwd=/root/elasticgrid/four")


def test_an_unreachable_host_fails_the_launch_within_the_timeout_naming_the_host(
    ssh_hosts, manager, tmp_path
):
    ssh_hosts.cut(1)
    spec = write_spec(tmp_path, "cut", ssh_hosts.params(), num_nodes=2, envs={"SLEEP": "30"})
    began = time.monotonic()
    with pytest.raises(RuntimeError, match=f"ssh host '{ssh_hosts.hosts[1]}' cannot be reached"):
        manager.launch(spec)
    assert time.monotonic() - began < SshParams.parse(ssh_hosts.params()).connect_timeout_s + 3
    assert job_processes(ssh_hosts, 0) == []


def test_a_host_lost_during_start_stops_the_ranks_started_on_the_others(
    ssh_hosts, manager, tmp_path, monkeypatch
):
    monkeypatch.setattr(CutBeforeStartSshEngine, "before_start", lambda: ssh_hosts.cut(1))
    params = ssh_hosts.params()
    spec = write_spec(tmp_path, "lost", params, infra=CutBeforeStartSshEngine.name, num_nodes=2)
    with pytest.raises(RuntimeError, match=f"ssh host '{ssh_hosts.hosts[1]}'"):
        manager.launch(spec)
    assert job_processes(ssh_hosts, 0) == []
    ssh_hosts.restore(1)
    assert job_processes(ssh_hosts, 1) == []


def test_envs_values_are_on_no_command_line_and_in_no_file_of_the_hosts(
    ssh_hosts, manager, tmp_path
):
    envs = {"SECRET": SECRET, "SLEEP": "30"}
    spec = write_spec(tmp_path, "envs", ssh_hosts.params(), num_nodes=2, envs=envs)
    manager.launch(spec)
    for rank in (0, 1):  # the ranks got the value
        log = wait_for(lambda rank=rank: manager.logs("envs", rank), what="log")
        assert log.endswith(f"secret_length={len(SECRET)}")
    for index in (0, 1):
        commands = ssh_hosts.run(index, "ps -eo args").stdout
        assert "train.py" in commands, commands
        assert SECRET not in commands
        # the host's own home (a tmpfs: remote_dir, logs, markers) and the pool folder
        found = ssh_hosts.run(index, f"grep -rl {SECRET} /root /srv/pool")
        assert found.returncode == 1 and found.stdout == "", found.stdout  # 1: nothing found
    manager.stop("envs")


def test_stop_leaves_no_process_of_the_job_and_the_runner_restarts_nothing(
    ssh_hosts, manager, tmp_path
):
    spec = write_spec(
        tmp_path,
        "stop",
        ssh_hosts.params(),
        num_nodes=2,
        envs={"SLEEP": "300", "CHILD": "1"},
        recovery={"mode": "restart", "max_restarts": 5, "signal_grace_s": 2},
    )
    manager.launch(spec)
    for index in (0, 1):
        wait_for(
            lambda index=index: any(
                "sleep 300" in line for line in job_processes(ssh_hosts, index)
            ),
            what="the rank's child",
        )
    began = time.monotonic()
    manager.stop("stop")
    assert time.monotonic() - began < 2 + 5
    time.sleep(1.0)  # a runner still alive would have restarted its rank by now (no backoff)
    assert job_processes(ssh_hosts, 0) == [] and job_processes(ssh_hosts, 1) == []
    assert manager.load("stop").status == "stopped"


def test_sweep_launch_kills_ranks_that_job_manager_never_recorded(ssh_hosts, manager, tmp_path):
    params = ssh_hosts.params()
    ours = {"ELASTICGRID_JOB": "sweep", "ELASTICGRID_LAUNCH_ID": "L1", "SLEEP": "300"}
    other = {**ours, "ELASTICGRID_LAUNCH_ID": "L2"}
    spec = write_spec(
        tmp_path, "sweep", params, infra=LostAfterStartSshEngine.name, num_nodes=2, envs=ours
    )
    with pytest.raises(RuntimeError, match="lost after starting"):
        manager.launch(spec)
    kept = write_spec(tmp_path, "kept", params, num_nodes=2, envs={**other, "CHILD": "1"})
    manager.launch(kept)
    for index in (0, 1):  # each host: a runner and a rank of L1, of L2 and L2's child
        wait_for(lambda index=index: len(job_processes(ssh_hosts, index)) == 5, what="ranks")
    killed = sweep_launch(params, "sweep", ["L1"])
    assert sorted(killed) == sorted(ssh_hosts.hosts)
    assert all(len(pids) == 2 for pids in killed.values())  # the runner and its rank
    for index in (0, 1):
        assert all("elasticgrid/sweep/" not in line for line in job_processes(ssh_hosts, index))
        assert len(job_processes(ssh_hosts, index)) == 3  # L2's runner, rank and child live on
    assert sweep_launch(params, "sweep", ["L1"]) == {host: [] for host in ssh_hosts.hosts}
    manager.stop("kept")
    assert job_processes(ssh_hosts, 0) == [] and job_processes(ssh_hosts, 1) == []


def test_status_of_a_cut_off_host_answers_within_seconds_with_its_rank_unreachable(
    ssh_hosts, manager, tmp_path
):
    spec = write_spec(tmp_path, "probe", ssh_hosts.params(), num_nodes=2, envs={"SLEEP": "300"})
    manager.launch(spec)
    wait_for(lambda: manager.logs("probe", 1), what="rank 1's log")
    ssh_hosts.cut(1)
    began = time.monotonic()
    state = manager.status("probe")
    elapsed = time.monotonic() - began
    print(f"status of a cut-off host: {elapsed:.2f} s")
    assert elapsed < 10  # the probe's ssh gives up after ServerAliveInterval x CountMax (3 s)
    record = json.loads((manager.root / "probe" / STATUS_FILE).read_text())
    assert record["ranks"] == {"0": "running", "1": "unreachable"}
    assert record["unreachable_hosts"] == [ssh_hosts.hosts[1]]
    assert state.status == "running"  # one rank still runs
    assert manager.logs("probe", 1) == ""
    ssh_hosts.restore(1)
    manager.stop("probe")


def test_read_remote_file_reads_from_an_offset(ssh_hosts):
    params = ssh_hosts.params()
    host = ssh_hosts.hosts[0]
    assert ssh_hosts.run(0, "printf 'one\\ntwo\\nthree\\n' > /root/steps.jsonl").returncode == 0
    inode = int(ssh_hosts.run(0, "stat -c %i /root/steps.jsonl").stdout)
    assert read_remote_file(params, host, "~/steps.jsonl", 4, 100) == RemoteRead(
        inode, 14, b"two\nthree\n"
    )
    assert read_remote_file(params, host, "/root/steps.jsonl", 0, 3).data == b"one"
    assert read_remote_file(params, host, "/root/none.jsonl", 0, 10) == RemoteRead(0, 0, b"")


def test_host_keys_are_checked_and_ssh_opts_cannot_turn_the_check_off(ssh_hosts, tmp_path):
    from elasticgrid_provider.engines.ssh import SshEngine

    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    lax = ["-o", "StrictHostKeyChecking=no", "-o", f"UserKnownHostsFile={ssh_hosts.known_hosts}"]
    for params in (
        ssh_hosts.params(known_hosts=str(empty)),
        ssh_hosts.params(known_hosts=str(empty), ssh_opts=lax),
    ):
        spec = write_spec(tmp_path, "keys", params)
        engine = SshEngine(load_spec(spec))
        with pytest.raises(RuntimeError, match="Host key verification failed"):
            engine.check_hosts()
        assert empty.read_text() == ""  # nothing trusted on first use


def test_a_host_without_the_interpreter_fails_the_check_naming_host_and_python(ssh_hosts, tmp_path):
    from elasticgrid_provider.engines.ssh import SshEngine

    spec = write_spec(tmp_path, "nopython", ssh_hosts.params(python="/opt/none/bin/python"))
    with pytest.raises(RuntimeError) as raised:
        SshEngine(load_spec(spec)).check_hosts()
    message = str(raised.value)
    assert message.startswith(f"ssh host '{ssh_hosts.hosts[0]}': '/opt/none/bin/python' failed")
    assert "\n" not in message


def test_setup_runs_in_remote_dir_with_the_envs(ssh_hosts, manager, tmp_path):
    setup = 'test -f train.py && printf "%s" "${#SECRET}" > setup-ran'
    spec = write_spec(tmp_path, "setup", ssh_hosts.params(), num_nodes=2, setup=setup)
    spec_text = json.loads(spec.read_text())
    spec_text["envs"]["SECRET"] = SECRET
    spec.write_text(json.dumps(spec_text))
    manager.launch(spec)
    for index in (0, 1):
        ran = ssh_hosts.run(index, "cat /root/elasticgrid/setup/setup-ran")
        assert ran.stdout == str(len(SECRET)), ran.stderr
    failing = write_spec(
        tmp_path, "nosetup", ssh_hosts.params(), num_nodes=2, setup="echo broken; exit 3"
    )
    with pytest.raises(RuntimeError, match=r"setup on ssh host '.*' exited 3: broken"):
        manager.launch(failing)


def test_the_hooks_ssh_helpers_import_no_iroh_tinker():
    """The hook imports them, and Airflow imports the hook each time it parses a DAG."""
    code = (
        "import sys\n"
        "from elasticgrid_provider.engines.ssh_transport import read_remote_file, sweep_launch\n"
        "print(sorted({name.split('.')[0] for name in sys.modules} & {'iroh_tinker', 'numpy'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
