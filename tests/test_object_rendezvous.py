"""Ranks that share no folder meet through an ``s3://`` rendezvous (a real moto S3 server):
two rank processes build iroh-tinker's socket transport and exchange a buffer."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from elasticgrid_provider.object_rendezvous import mirrored_rendezvous
from tests.moto_server import S3_BUCKET, aws_env, s3_client

RANK = """
import numpy as np
from elasticgrid_provider.runtime import training_client
client = training_client(base_model="tiny", backend="numpy")
peer = 1 - client.rank
got = client.transport.sendrecv(peer, np.full(4, client.rank + 1, dtype=np.float32))
print("rank", client.rank, "got", int(got[0]), flush=True)
client.transport.close()  # what it sent is flushed before the process exits
"""


def test_two_ranks_with_no_shared_folder_meet_through_s3(s3_endpoint, tmp_path):
    prefix = f"{tmp_path.name}/launch-1"
    ranks = []
    for rank in (0, 1):
        env = {
            **os.environ,
            **aws_env(s3_endpoint),
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "IROH_TINKER_RENDEZVOUS": f"s3://{S3_BUCKET}/{prefix}",
        }
        folder = tmp_path / f"rank{rank}"  # each rank starts in a folder of its own
        folder.mkdir()
        command = [sys.executable, "-c", RANK]
        ranks.append(subprocess.Popen(command, env=env, cwd=folder, stdout=subprocess.PIPE))
    outputs = [rank.communicate(timeout=120)[0].decode() for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    assert "rank 0 got 2" in outputs[0] and "rank 1 got 1" in outputs[1]
    # the addresses were published in S3; the ranks' private copies are gone
    listed = s3_client(s3_endpoint).list_objects_v2(Bucket=S3_BUCKET, Prefix=f"{prefix}/")
    assert listed["KeyCount"] >= 1
    assert not [path for path in tmp_path.rglob("*.json") if "rank" in path.name]


def test_a_multi_rank_run_without_a_rendezvous_it_can_use_says_why():
    from elasticgrid_provider.runtime import distributed_context, training_client

    context = distributed_context(
        {"RANK": "0", "WORLD_SIZE": "2", "IROH_TINKER_RENDEZVOUS": "gs://bucket/x"}
    )
    with pytest.raises(ValueError, match=r"needs a dir: or s3:// rendezvous .*'gs://bucket/x'"):
        training_client(context, base_model="tiny", backend="numpy")


def test_a_rendezvous_on_an_unreachable_s3_is_named_when_the_ranks_cannot_meet(monkeypatch):
    for name, value in aws_env("http://127.0.0.1:9").items():  # nothing listens on port 9
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    reached = r"rendezvous s3://b/p could not be reached \(.+\), so the ranks could not meet"
    with pytest.raises(RuntimeError, match=reached), mirrored_rendezvous("s3://b/p") as folder:
        with open(os.path.join(folder, "rank-0.json"), "w") as address:
            address.write("{}")
        time.sleep(0.5)  # the mirror tries to put it
        raise TimeoutError("peers [1] did not publish their address")
