"""``elasticgrid machines JOB`` on a real launch record: a real two-part local launch, with the
machines record the ec2 engine keeps written into one part's job folder (its documented
shape, elasticgrid_provider/core/machines.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticgrid_provider.atomic_files import write_json
from elasticgrid_provider.core.machines import MACHINES_FILE, SPOT_RECLAIM_CODE
from tests.cli.cli_support import assert_one_line_error, run, run_json
from tests.cli.test_stop import launch, manifest

RUNNING = {
    "instance_id": "i-0a1b2c3d4e5f60718",
    "instance_type": "g5.xlarge",
    "market": "spot",
    "zone": "us-east-1a",
    "state": "running",
    "launched_at": "2026-01-01T00:00:00+00:00",
    "address": "10.0.0.4",
    "state_reason": None,
}
RECLAIMED = {
    **RUNNING,
    "instance_id": "i-0ffffeeeedddd0001",
    "state": "terminated",
    "address": "10.0.0.5",
    "state_reason": f"{SPOT_RECLAIM_CODE}: Spot instance termination",
}


def record_machines(jobs_root: Path, job: str, part: str, instances: list[dict]) -> None:
    launch_id = manifest(jobs_root, job)["launch_id"]
    record = {"part": part, "launch_id": launch_id, "instances": instances}
    write_json(jobs_root / part / MACHINES_FILE, record)


@pytest.mark.airflow  # the jobs root comes from the elasticgrid_default connection
def test_machines_lists_each_parts_instances_and_says_which_were_reclaimed(jobs_root, capsys):
    launch(jobs_root, "viewed", 3)  # parts viewed--onprem (2 nodes) and viewed--cloud (1)
    record_machines(jobs_root, "viewed", "viewed--cloud", [RUNNING, RECLAIMED])
    capsys.readouterr()

    code, data = run_json(capsys, "machines", "viewed")

    assert code == 0
    assert data["parts"] == ["viewed--onprem", "viewed--cloud"]
    assert [row["instance_id"] for row in data["machines"]] == [
        RUNNING["instance_id"],
        RECLAIMED["instance_id"],
    ]
    assert data["machines"][0] == {"part": "viewed--cloud", **RUNNING, "reclaimed": False}
    assert data["machines"][1]["reclaimed"] is True
    assert data["errors"] == []

    code, text, err = run(capsys, "machines", "viewed", "--jobs-root", str(jobs_root))

    assert (code, err) == (0, "")
    lines = text.splitlines()
    assert lines[0].endswith(": 2 instance(s), 1 not terminated")
    assert lines[1].split() == ["PART", "INSTANCE", "TYPE", "MARKET", "ZONE", "STATE", "LAUNCHED"]
    assert lines[2].split() == [
        "viewed--cloud",
        RUNNING["instance_id"],
        "g5.xlarge",
        "spot",
        "us-east-1a",
        "running",
        "2026-01-01T00:00:00+00:00",
    ]
    assert "terminated (reclaimed by the cloud)" in lines[3]
    run(capsys, "stop", "viewed")


@pytest.mark.airflow
def test_machines_of_a_job_without_instances_and_a_corrupt_record(jobs_root, capsys):
    launch(jobs_root, "plain", 2)
    capsys.readouterr()
    code, text, _ = run(capsys, "machines", "plain")
    assert code == 0
    assert text.splitlines()[1] == "no cloud instances: its parts run on engines without machines"

    (jobs_root / "plain--onprem" / MACHINES_FILE).write_text("{not json")
    code, data = run_json(capsys, "machines", "plain")
    assert code == 0
    assert data["machines"] == []
    assert data["errors"] == [
        f"machines record {str(jobs_root / 'plain--onprem' / MACHINES_FILE)!r} is not JSON"
    ]
    run(capsys, "stop", "plain")


def test_machines_refuses_a_bad_name_and_an_unknown_job(tmp_path, capsys):
    assert_one_line_error(*run(capsys, "machines", "../x", "--jobs-root", str(tmp_path)), "job")
    code, _, err = run(capsys, "machines", "never", "--jobs-root", str(tmp_path))
    assert code == 2
    assert err == f"error: job 'never' has no launch record under {tmp_path}\n"
