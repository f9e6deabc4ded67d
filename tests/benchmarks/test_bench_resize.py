"""The resize benchmark's bare baseline on a real two-part job launched by the provider.

Once a launch's ranks start, its spec files read ``***`` for every ``envs``
value; a bare restart relaunching them started ranks without their global
rank or world size, which never logged a step. The baseline renders specs of
its own, checked against the launch's fingerprints, and fails saying why when
its ranks do not run.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import time
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import bench_resize
from benchmarks.report import BenchmarkFailed
from benchmarks.restarts import read_steps
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from tests.dag_settings import PYTHON, TRAIN, TWO_LOCAL_PROVIDERS
from tests.job_processes import rank_pids

JOB = "bench"
RUN = shlex.join(
    [PYTHON, str(TRAIN), "--steps", "5000", "--global-batch", "2", "--microbatch-seconds", "0.05"]
)
OPTIONS = LaunchOptions(run=RUN, recovery={"mode": "none"}, envs={"BENCH_TOKEN": "s3cret"})
ONE_EACH = Placement.model_validate(
    {"assignments": [{**provider, "nodes": 1} for provider in TWO_LOCAL_PROVIDERS]}
)


def launched_job(jobs_root: Path) -> dict:
    """Launch the job through the provider at 1 + 1 nodes and wait for steps; its manifest."""
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager(JOB)
    manager.launch(ONE_EACH, OPTIONS, startup_grace_s=1)
    deadline = time.monotonic() + 60
    while len(read_steps(jobs_root, JOB)) < 3:
        assert time.monotonic() < deadline, "the provider's launch logged no steps"
        time.sleep(0.05)
    return json.loads((jobs_root / JOB / "manifest.json").read_text())


def test_the_bare_restart_relaunches_the_job_in_the_launch_environment(jobs_root):
    manifest = launched_job(jobs_root)
    for part in manifest["parts"]:  # what the old baseline relaunched
        assert set(json.loads(Path(part["spec_path"]).read_text())["envs"].values()) == {"***"}

    gap = bench_resize.bare_restart(jobs_root, JOB, OPTIONS, dict(os.environ))

    assert 0 < gap < 30
    for part in manifest["parts"]:  # the ranks now running are the bare launch's, fully set up
        for pid in rank_pids(jobs_root, part["name"]):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert {b"BENCH_TOKEN=s3cret", b"ELASTICGRID_WORLD_SIZE=2"} <= set(environ)
            assert any(item.startswith(b"ELASTICGRID_LAUNCH_ID=bare-") for item in environ)
    steps = read_steps(jobs_root, JOB)
    pauses = [after["time"] - before["time"] for before, after in itertools.pairwise(steps)]
    restart = pauses.index(max(pauses))
    assert max(pauses) == pytest.approx(gap)  # the gap is the restart's pause in the step log
    assert steps[restart + 1]["step"] in (steps[restart]["step"] + 1, steps[restart]["step"] + 2)


def test_a_bare_restart_that_is_not_the_launch_or_cannot_start_fails_saying_why(jobs_root):
    launched_job(jobs_root)
    other_envs = replace(OPTIONS, envs={"BENCH_TOKEN": "another"})
    with pytest.raises(BenchmarkFailed) as different:
        bench_resize.bare_restart(jobs_root, JOB, other_envs, dict(os.environ))
    assert str(different.value) == (
        "error: the bare restart would not relaunch what the provider launched: its envs "
        "differ from the job's manifest"
    )
    broken = {**os.environ, "PYTHONHOME": "/nonexistent"}  # no interpreter starts

    with pytest.raises(BenchmarkFailed) as failure:
        bench_resize.bare_restart(jobs_root, JOB, OPTIONS, broken)

    message = str(failure.value)
    assert message.startswith("error: the bare restart did not really run: it logged no step")
    assert f"{JOB}--onprem rank_0:" in message and "No module named 'encodings'" in message
