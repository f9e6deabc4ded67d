"""A checkpoint in a folder and under an ``s3://`` prefix (a real moto S3 server) behaves the
same: resume from the last commit, one state kept, a replaced launch fenced, the step line
replayed, an unreadable progress named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from elasticgrid_provider.core.errors import CheckpointFencedError
from elasticgrid_provider.runtime import (
    OWNER_FILE,
    PROGRESS_FILE,
    Checkpoint,
    DistributedContext,
    distributed_context,
)
from tests.moto_server import S3_BUCKET, aws_env


@pytest.fixture(params=["folder", "s3"])
def location(request, tmp_path, monkeypatch) -> str:
    """Where the checkpoint lives: a folder, or a fresh prefix of the moto bucket (reached
    the way a rank on an instance reaches S3: boto3's environment)."""
    if request.param == "folder":
        return str(tmp_path / "checkpoint")
    for name, value in aws_env(request.getfixturevalue("s3_endpoint")).items():
        monkeypatch.setenv(name, value)
    return f"s3://{S3_BUCKET}/{tmp_path.name}/job"


def context(location: str, rank: int = 0, launch_id: str | None = None) -> DistributedContext:
    env = {"ELASTICGRID_CHECKPOINT_DIR": location, "RANK": str(rank), "WORLD_SIZE": "2"}
    env["ELASTICGRID_WORLD_SIZE"] = "2"
    if launch_id:
        env["ELASTICGRID_LAUNCH_ID"] = launch_id
    return distributed_context(env)


def test_a_checkpoint_resumes_from_the_last_commit_and_keeps_one_state(location):
    rank_zero = Checkpoint(context(location))
    assert rank_zero.location == location
    expected_folder = None if location.startswith("s3://") else Path(location)
    assert rank_zero.folder == expected_folder
    assert rank_zero.load() == (0, None)
    assert rank_zero.save(3, b"after step 2", loss=0.5) is True
    assert rank_zero.save(4, b"after step 3") is True
    other = Checkpoint(context(location, rank=1))
    assert other.load() == (4, b"after step 3")
    assert other.save(5, b"not rank 0") is False
    assert rank_zero.store is not None
    assert sorted(rank_zero.store.names("")) == [PROGRESS_FILE, "state-4.bin"]
    progress = json.loads(rank_zero.store.read(PROGRESS_FILE) or b"{}")
    assert (progress["completed_steps"], progress["world_size"]) == (4, 2)
    rank_zero.store.write(PROGRESS_FILE, b"{not json")
    unreadable = rf"checkpoint {re.escape(location)}/progress\.json is unreadable"
    with pytest.raises(ValueError, match=unreadable):
        other.load()


def test_a_rank_of_a_replaced_launch_cannot_commit_over_the_new_one(location):
    old = Checkpoint(context(location, launch_id="L1"))
    assert old.load() == (0, None)
    assert old.save(5, b"old at 5") is True
    new = Checkpoint(context(location, launch_id="L2"))
    assert new.load() == (5, b"old at 5")
    assert new.store is not None
    assert json.loads(new.store.read(OWNER_FILE) or b"{}")["launch_id"] == "L2"
    fenced = rf"checkpoint {re.escape(location)} now belongs to launch L2; .* launch L1 was"
    with pytest.raises(CheckpointFencedError, match=fenced):
        old.save(6, b"old at 6")
    assert new.load() == (5, b"old at 5")  # the fenced rank wrote nothing
    assert new.save(6, b"new at 6") is True
    assert Checkpoint(context(location, launch_id="L3")).load() == (6, b"new at 6")


def test_the_commits_step_line_is_replayed_from_either_store(location, tmp_path):
    checkpoint = Checkpoint(context(location))
    assert checkpoint.pending_line() is None
    line = {"step": 7, "duration_s": 0.5, "nodes": 2}
    log = tmp_path / "steps.jsonl"
    assert checkpoint.save(8, b"state", step_record=line, step_log=log)
    assert Checkpoint(context(location, rank=1)).pending_line() == (log.resolve(), line)
