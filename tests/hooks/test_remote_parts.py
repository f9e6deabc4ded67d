"""The hook's remote-part helpers on real SSH hosts: step-log pulls, the sweep, down ranks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from iroh_tinker.cloud import JobManager

from elasticgrid_provider.core.ssh_params import SshParams
from elasticgrid_provider.core.step_log import LogCursor, read_step_log
from elasticgrid_provider.hooks.remote_parts import (
    FIRST_PULL_BYTES,
    is_ssh_target,
    pull_step_log,
    remote_down_ranks,
    spec_params,
    sweep_remote_launch,
)
from tests.engines.ssh_engines import LostAfterStartSshEngine
from tests.engines.test_ssh import write_spec
from tests.remote.conftest import job_processes
from tests.ssh_hosts import SshTestHosts

PART = "pulled--onprem"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory):
    with SshTestHosts(1, hide=[tmp_path_factory.getbasetemp()]) as hosts:
        yield hosts


def _line(step: int) -> str:
    return json.dumps({"step": step, "duration_s": 1.0, "queue_s": 0.0, "nodes": 1}) + "\n"


def _append_remotely(host: SshTestHosts, path: str, steps: range) -> None:
    text = "".join(_line(step) for step in steps).replace("'", "'\\''")
    done = host.run(0, f"mkdir -p $(dirname {path}) && printf '%s' '{text}' >> {path}")
    assert done.returncode == 0, done.stderr


def _read(mirror: Path, cursor: LogCursor | None) -> tuple[list[int], LogCursor]:
    chunk = read_step_log(mirror, cursor)
    return [sample.step for sample in chunk.samples], chunk.cursor


def test_pulls_mirror_only_what_the_remote_log_gained_and_each_step_is_read_once(host, tmp_path):
    params = host.params()
    remote = f"{SshParams.parse(params).remote_job_dir(PART)}/steps.jsonl"
    host.run(0, f"rm -rf {remote}")
    mirror = tmp_path / "steps.jsonl"
    pull_step_log(params, PART, mirror)
    assert not mirror.exists()  # nothing logged yet: nothing mirrored

    _append_remotely(host, remote, range(0, 3))
    pull_step_log(params, PART, mirror)
    steps, cursor = _read(mirror, None)
    assert steps == [0, 1, 2]

    _append_remotely(host, remote, range(3, 5))
    pull_step_log(params, PART, mirror)
    pull_step_log(params, PART, mirror)  # nothing new: nothing appended twice
    steps, cursor = _read(mirror, cursor)
    assert steps == [3, 4]
    assert mirror.read_text() == "".join(_line(step) for step in range(5))

    # rotated on the host: the new file's steps are read, none of the old ones again
    host.run(0, f"mv {remote} {remote}.1")
    _append_remotely(host, remote, range(4, 7))
    pull_step_log(params, PART, mirror)
    steps, cursor = _read(mirror, cursor)
    assert steps == [5, 6]


def test_the_first_pull_of_a_long_log_takes_only_its_end_from_a_line_start(host, tmp_path):
    params = host.params()
    remote = f"{SshParams.parse(params).remote_job_dir('long--onprem')}/steps.jsonl"
    host.run(0, f"rm -rf {remote}")
    count = 2 * FIRST_PULL_BYTES // len(_line(10000)) + 1000
    data = "".join(_line(step) for step in range(count)).encode()
    command = f"mkdir -p $(dirname {remote}) && cat > {remote}"
    made = subprocess.run([*host.ssh_command(0), command], input=data, capture_output=True)
    assert made.returncode == 0, made.stderr
    mirror = tmp_path / "steps.jsonl"
    pull_step_log(params, "long--onprem", mirror)
    data = mirror.read_bytes()
    assert 0 < len(data) <= FIRST_PULL_BYTES
    first = json.loads(data.split(b"\n", 1)[0])  # a whole line
    steps, _ = _read(mirror, None)
    assert steps[0] == first["step"] > 0 and steps[-1] == count - 1
    assert steps == list(range(steps[0], count))


def test_the_sweep_stops_the_unrecorded_ranks_of_one_launch_only(host, tmp_path):
    manager = JobManager(root=tmp_path / "jobs")
    params = host.params()
    ours = {"ELASTICGRID_JOB": "swept", "ELASTICGRID_LAUNCH_ID": "L1", "SLEEP": "300"}
    lost = write_spec(
        tmp_path, "swept--a", params, infra=LostAfterStartSshEngine.name, num_nodes=1, envs=ours
    )
    with pytest.raises(RuntimeError, match="lost after starting"):
        manager.launch(lost)
    kept = write_spec(
        tmp_path, "swept--b", params, num_nodes=1, envs={**ours, "ELASTICGRID_LAUNCH_ID": "L2"}
    )
    manager.launch(kept)
    assert set(job_processes(host, 0, "swept").values()) == {"L1", "L2"}
    assert spec_params(lost) == params and is_ssh_target(LostAfterStartSshEngine.name)

    killed = sweep_remote_launch("swept", "L1", [str(lost), str(kept)])

    assert killed and all(entry.startswith(f"{host.hosts[0]}:") for entry in killed)
    assert set(job_processes(host, 0, "swept").values()) == {"L2"}
    manager.stop("swept--b")
    assert job_processes(host, 0, "swept") == {}


def test_remote_down_ranks_names_unreachable_hosts_and_skips_finished_ranks(tmp_path):
    probe = {
        "checked_at": 0,
        "ranks": {"0": "running", "1": "stopped", "2": "unreachable", "3": "stopped"},
    }
    (tmp_path / "remote-status.json").write_text(
        json.dumps({**probe, "unreachable_hosts": ["gpu@b"]})
    )
    (tmp_path / "done_3").write_text("0")
    assert remote_down_ranks(tmp_path) == "host(s) gpu@b unreachable; down ranks: [1, 2]"
    (tmp_path / "remote-status.json").write_text(json.dumps({"ranks": {"0": "running"}}))
    assert remote_down_ranks(tmp_path) is None
    (tmp_path / "remote-status.json").write_text("{not json")
    assert remote_down_ranks(tmp_path) is None
