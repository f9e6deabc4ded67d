"""The training-script helper: global rank from iroh's and elasticgrid's variables, the step log."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from elasticgrid_provider.runtime import (
    STEP_LOG_NAME,
    Checkpoint,
    DistributedContext,
    StepReporter,
    distributed_context,
)


def part_env(tmp_path, rank: int, *, offset: int = 3, world: int = 5, local_world: int = 2) -> dict:
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(local_world),
        "IROH_TINKER_JOB_DIR": str(tmp_path / "job"),
        "IROH_TINKER_RENDEZVOUS": f"dir:{tmp_path / 'rdv'}",
        "ELASTICGRID_JOB": "llm",
        "ELASTICGRID_PART": "llm--gcp",
        "ELASTICGRID_RANK_OFFSET": str(offset),
        "ELASTICGRID_WORLD_SIZE": str(world),
        "ELASTICGRID_PROCS_PER_NODE": "1",
    }


def test_context_of_a_rank_in_a_part(tmp_path):
    ctx = distributed_context(part_env(tmp_path, 1))
    assert ctx == DistributedContext(
        rank=4,
        world_size=5,
        local_rank=1,
        local_world_size=2,
        procs_per_node=1,
        job_name="llm",
        part_name="llm--gcp",
        job_dir=str(tmp_path / "job"),
        rendezvous_dir=str(tmp_path / "rdv"),
        rendezvous_uri=f"dir:{tmp_path / 'rdv'}",
    )
    assert not ctx.is_rank_zero


def test_context_without_parts_uses_iroh_world_size():
    ctx = distributed_context({"RANK": "2", "WORLD_SIZE": "4", "IROH_TINKER_RENDEZVOUS": "/r"})
    assert (ctx.rank, ctx.world_size, ctx.local_rank) == (2, 4, 2)
    assert ctx.rendezvous_dir == "/r"
    assert ctx.job_name is None and ctx.part_name is None and ctx.job_dir is None


def test_context_of_a_process_started_by_hand():
    ctx = distributed_context({})
    assert (ctx.rank, ctx.world_size, ctx.rendezvous_dir) == (0, 1, None)
    assert ctx.is_rank_zero


@pytest.mark.parametrize("uri", ["s3://bucket/rdv", "gs://bucket/rdv"])
def test_object_store_rendezvous_has_no_directory(uri):
    assert distributed_context({"IROH_TINKER_RENDEZVOUS": uri}).rendezvous_dir is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"RANK": "one"}, "RANK must be a whole number, got 'one'"),
        ({"RANK": "-1"}, "RANK must be at least 0, got '-1'"),
        ({"RANK": "2"}, "RANK must be below WORLD_SIZE"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE must be at least 1, got '0'"),
        (
            {"ELASTICGRID_RANK_OFFSET": "1.5"},
            "ELASTICGRID_RANK_OFFSET must be a whole number, got '1.5'",
        ),
        ({"ELASTICGRID_WORLD_SIZE": "4"}, "ELASTICGRID_WORLD_SIZE must be at least .* got '4'"),
        ({"IROH_TINKER_RENDEZVOUS": "http://x"}, "IROH_TINKER_RENDEZVOUS .* got 'http://x'"),
    ],
)
def test_context_rejects_bad_values_naming_the_variable(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        distributed_context({**part_env(tmp_path, 0), **changes})


def test_step_reporter_writes_whole_lines_on_global_rank_zero_only(tmp_path):
    rank_zero = distributed_context(part_env(tmp_path, 0, offset=0))
    rank_one = distributed_context(part_env(tmp_path, 1, offset=0))
    writer = StepReporter(rank_zero)
    silent = StepReporter(rank_one)

    assert writer.path == tmp_path / "job" / STEP_LOG_NAME
    record = writer.record(0, duration_s=2.0, queue_s=0.5, tokens=64)
    assert silent.record(0, duration_s=2.0) is None
    writer.record(1, duration_s=1.5, nodes=3)

    text = writer.path.read_text()
    assert text.endswith("\n")
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0] == record
    assert [(line["step"], line["nodes"]) for line in lines] == [(0, 5), (1, 3)]
    assert set(lines[0]) == {"step", "duration_s", "queue_s", "nodes", "tokens", "time"}
    assert lines[1]["queue_s"] == 0.0 and lines[1]["tokens"] == 0.0


def test_step_reporter_on_a_part_without_global_rank_zero_writes_nothing(tmp_path):
    ctx = distributed_context(part_env(tmp_path, 0, offset=3))
    assert StepReporter(ctx).record(0, duration_s=1.0) is None
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"step": -1, "duration_s": 1.0}, "step must be at least 0"),
        ({"step": 0, "duration_s": float("nan")}, "duration_s must be a finite number"),
        ({"step": 0, "duration_s": 1.0, "queue_s": -0.1}, "queue_s must be at least 0"),
        ({"step": 0, "duration_s": 1.0, "nodes": 0}, "nodes must be at least 1"),
        ({"step": 0, "duration_s": 1.0, "tokens": True}, "tokens must be a number"),
    ],
)
def test_step_reporter_rejects_bad_numbers_and_writes_nothing(tmp_path, kwargs, message):
    reporter = StepReporter(distributed_context({}), tmp_path / "steps.jsonl")
    with pytest.raises(ValueError, match=message):
        reporter.record(**kwargs)
    assert not (tmp_path / "steps.jsonl").exists()


def test_step_reporter_needs_a_path_on_rank_zero():
    with pytest.raises(ValueError, match="IROH_TINKER_JOB_DIR"):
        StepReporter(distributed_context({}))
    # Other ranks never write, so they need no path.
    assert StepReporter(distributed_context({"RANK": "1", "WORLD_SIZE": "2"})).path is None


def test_step_reporter_with_all_ranks_writes_on_a_rank_other_than_zero(tmp_path):
    ctx = distributed_context({"RANK": "1", "WORLD_SIZE": "2"})
    reporter = StepReporter(ctx, tmp_path / "r1.jsonl", all_ranks=True)
    reporter.record(3, duration_s=1.0)
    assert json.loads((tmp_path / "r1.jsonl").read_text())["step"] == 3


def test_the_reporter_counts_nodes_not_processes(tmp_path):
    from elasticgrid_provider.runtime import StepReporter, distributed_context

    context = distributed_context(
        {
            "RANK": "0",
            "WORLD_SIZE": "2",
            "ELASTICGRID_RANK_OFFSET": "0",
            "ELASTICGRID_WORLD_SIZE": "4",
            "ELASTICGRID_PROCS_PER_NODE": "2",
            "IROH_TINKER_JOB_DIR": str(tmp_path),
        }
    )
    assert context.nodes == 2
    assert StepReporter(context).record(0, duration_s=1.0)["nodes"] == 2


def test_a_checkpoint_resumes_where_the_last_commit_left_off(tmp_path):
    from elasticgrid_provider.runtime import PROGRESS_FILE, Checkpoint, distributed_context

    shared = tmp_path / "shared"
    rank_zero = distributed_context({"ELASTICGRID_SHARED_DIR": str(shared)})
    checkpoint = Checkpoint(rank_zero)
    assert checkpoint.load() == (0, None)
    assert checkpoint.save(3, b"after step 2", loss=0.5) is True
    assert checkpoint.save(4, b"after step 3") is True
    # a relaunch at another size, another rank: it reads what rank 0 committed last
    other = distributed_context(
        {
            "ELASTICGRID_SHARED_DIR": str(shared),
            "RANK": "1",
            "WORLD_SIZE": "2",
            "ELASTICGRID_WORLD_SIZE": "2",
        }
    )
    assert Checkpoint(other).load() == (4, b"after step 3")
    assert Checkpoint(other).save(5, b"not rank 0") is False
    assert sorted(path.name for path in (shared / "checkpoint").iterdir()) == [
        PROGRESS_FILE,
        "state-4.bin",
    ]
    (shared / "checkpoint" / PROGRESS_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=r"progress\.json is unreadable"):
        Checkpoint(other).load()
    assert Checkpoint(distributed_context({})).save(1, b"x") is False  # nowhere to write


def test_a_rank_of_a_replaced_launch_cannot_commit_over_the_new_launch(tmp_path):
    """A host cut off and recovered elsewhere keeps its ranks running: once the new launch
    loaded the checkpoint, the old launch's rank 0 fails its next commit and writes nothing."""
    from elasticgrid_provider.core.errors import CheckpointFencedError
    from elasticgrid_provider.runtime import PROGRESS_FILE, Checkpoint, distributed_context

    shared = tmp_path / "shared"

    def launch(launch_id: str) -> Checkpoint:
        env = {"ELASTICGRID_SHARED_DIR": str(shared), "ELASTICGRID_LAUNCH_ID": launch_id}
        return Checkpoint(distributed_context(env))

    old = launch("L1")
    assert old.load() == (0, None)
    assert old.save(5, b"old at 5") is True
    new = launch("L2")
    assert new.load() == (5, b"old at 5")  # the new launch resumes, and takes the checkpoint
    with pytest.raises(CheckpointFencedError, match=r"now belongs to launch L2; .* launch L1"):
        old.save(6, b"old at 6")
    assert json.loads((shared / "checkpoint" / PROGRESS_FILE).read_text())["completed_steps"] == 5
    assert new.save(6, b"new at 6") is True
    assert launch("L3").load() == (6, b"new at 6")
    # a rank started by hand (no launch id) neither claims nor is fenced
    by_hand = Checkpoint(distributed_context({"ELASTICGRID_SHARED_DIR": str(shared)}))
    assert by_hand.save(7, b"by hand") is True


# a training loop in the documented pattern that stops forever at one instant of one step
KILLED_LOOP = """
import json, sys, time
from pathlib import Path
from elasticgrid_provider.runtime import Checkpoint, StepReporter, distributed_context

shared, job_dir, steps, pause_step, pause_where, marker = sys.argv[1:7]
ctx = distributed_context({"ELASTICGRID_SHARED_DIR": shared, "IROH_TINKER_JOB_DIR": job_dir})
checkpoint, reporter = Checkpoint(ctx), StepReporter(ctx)
completed, _ = checkpoint.load()
reporter.replay(checkpoint)
for step in range(completed, int(steps)):
    line = reporter.sample(step, duration_s=0.01)
    checkpoint.save(step + 1, b"state", step_record=line, step_log=reporter.path)
    if step == int(pause_step) and pause_where == "before_log":
        Path(marker).write_text("")
        time.sleep(600)
    reporter.write(line)
    if step == int(pause_step) and pause_where == "after_log":
        Path(marker).write_text("")
        time.sleep(600)
"""


@pytest.mark.parametrize("instant", ["before_log", "after_log"])
def test_a_kill_between_commit_and_log_leaves_every_committed_step_logged_once(tmp_path, instant):
    """SIGKILL a real process right after it committed step 3 (before or after its log line),
    resume it: steps 0-5 are each in the step log exactly once."""
    shared, job_dir, marker = tmp_path / "shared", tmp_path / "job", tmp_path / "paused"
    job_dir.mkdir()

    def run(pause_step: int) -> subprocess.Popen:
        arguments = [str(shared), str(job_dir), "6", str(pause_step), instant, str(marker)]
        return subprocess.Popen([sys.executable, "-c", KILLED_LOOP, *arguments])

    first = run(3)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    first.kill()
    first.wait()
    log = job_dir / "steps.jsonl"
    logged = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert logged == ([0, 1, 2] if instant == "before_log" else [0, 1, 2, 3])
    assert json.loads((shared / "checkpoint" / "progress.json").read_text())["completed_steps"] == 4

    assert run(-1).wait(timeout=60) == 0

    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == list(range(6))


def test_a_checkpoint_dir_the_engine_sets_is_where_the_checkpoint_lives(tmp_path):
    env = {**part_env(tmp_path, 0), "ELASTICGRID_CHECKPOINT_DIR": str(tmp_path / "ckpt" / "job")}
    context = distributed_context(env)
    assert context.checkpoint_dir == str(tmp_path / "ckpt" / "job")
    assert Checkpoint(context).location == str(tmp_path / "ckpt" / "job")
    plain = distributed_context(part_env(tmp_path, 0))
    assert plain.checkpoint_dir is None
    assert Checkpoint(plain).location != str(tmp_path / "ckpt" / "job")
