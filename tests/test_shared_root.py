"""A worker whose jobs root does not hold a job that Airflow knows fails clearly, starts nothing.

The job is launched and checked under one jobs root (its state Variable is
written); then the connection points at another, empty root, as on a worker
that does not share the first one.
"""

from __future__ import annotations

import json

import pytest

from tests.airflow_support import run_dag
from tests.job_processes import is_alive, rank_pids

pytestmark = pytest.mark.airflow

SENTENCE = "the jobs root must be shared by every worker that launches or checks the job"
ALTERNATIVE = (
    "or delete the Variable elasticgrid_scale_state__elsewhere if the job's files are gone for good"
)


def _use_jobs_root(monkeypatch: pytest.MonkeyPatch, root) -> None:
    root.mkdir()
    monkeypatch.setenv(
        "AIRFLOW_CONN_ELASTICGRID_DEFAULT",
        json.dumps({"conn_type": "elasticgrid", "extra": {"jobs_root": str(root)}}),
    )


def test_a_worker_without_the_jobs_files_fails_and_never_starts_a_second_copy(
    airflow_db, jobs_root, tmp_path, monkeypatch, capfd
):
    run_dag("launch_sleeping", {"job_name": "elsewhere", "nodes": 2})
    checked = run_dag("scale_check_patient", {"job_name": "elsewhere"})  # writes the Variable
    assert checked.task_states == {"scale_check": "skipped"}
    pids = rank_pids(jobs_root, "elsewhere--onprem")
    other_root = tmp_path / "other-worker-jobs"
    _use_jobs_root(monkeypatch, other_root)
    capfd.readouterr()

    launch = run_dag("launch_sleeping", {"job_name": "elsewhere", "nodes": 2})
    assert launch.task_states["launch"] == "failed"
    output = capfd.readouterr().out
    assert SENTENCE in output
    assert ALTERNATIVE in output
    assert not (other_root / "elsewhere--onprem").exists()  # nothing was started here
    assert not (other_root / "elsewhere" / "manifest.json").exists()
    assert all(is_alive(pid) for pid in pids)  # the job keeps running where it was launched

    check = run_dag("scale_check_any", {"job_name": "elsewhere"})
    assert check.task_states == {"scale_check": "failed"}
    output = capfd.readouterr().out
    assert SENTENCE in output
    assert ALTERNATIVE in output


def test_a_new_job_without_state_launches_normally(airflow_db, jobs_root):
    result = run_dag("launch_sleeping", {"job_name": "brand-new", "nodes": 1})
    assert result.task_states["launch"] == "success"
    assert all(is_alive(pid) for pid in rank_pids(jobs_root, "brand-new--onprem"))
