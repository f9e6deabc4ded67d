"""Two jobs on one grid of 4 ``local`` nodes: fleet-aware plans, real tasks, real rank processes.

Two ``airflow dags test`` processes are started at the same instant; the test samples
the real rank processes of both jobs all along: never more than 4 at once.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from tests.airflow_support import (
    read_run,
    read_xcom,
    run_dag,
    sigterm_when,
    start_dags_test,
)
from tests.job_processes import _session_ranks, job_ranks

pytestmark = [pytest.mark.airflow, pytest.mark.long]

GRID_NODES = 4


def _run_id(dag_id: str, job: str) -> str:
    """The run of ``dag_id`` whose conf names ``job``."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        runs = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id)).all()
        matching = [run.run_id for run in runs if (run.conf or {}).get("job_name") == job]
    assert len(matching) == 1, f"runs of {dag_id} for {job}: {matching}"
    return matching[0]


def _task_states(dag_id: str, job: str) -> dict[str, str]:
    return read_run(dag_id, _run_id(dag_id, job)).task_states


def _ranks_now(jobs: list[str]) -> dict[tuple[str, str, bytes], str]:
    """The live ranks of ``jobs``, each once: (launch id, part, runner command line) -> job.

    A runner starting its rank's program forks first: until the child execs, it is a
    second process with the runner's command line and environment, so a rank is counted
    by what it is, not by its processes.
    """
    return {
        (v.get("ELASTICGRID_LAUNCH_ID", ""), v.get("ELASTICGRID_PART", ""), command): job
        for _, command, v in _session_ranks()
        if (job := v.get("ELASTICGRID_JOB", "")) in jobs
    }


def _write_dags_to_db() -> None:
    """Write the DAG folder's DAGs to the metadata DB as ``dag.test()`` does first: two
    ``airflow dags test`` processes that both write a DAG new to the DB would collide."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        sync_bag_to_db(bag, bundle.name, bundle.version)


def _run_two_at_once(
    tmp_path: Path, dag_id: str, confs: list[dict[str, Any]], timeout: float = 240.0
) -> tuple[list[dict[tuple[str, str, bytes], str]], list[str]]:
    """Start one ``airflow dags test`` per conf at the same instant (a barrier); sample every
    job's ranks until all ended. Returns the samples (:func:`_ranks_now`) and the outputs."""
    _write_dags_to_db()
    barrier = threading.Barrier(len(confs))
    processes: list[subprocess.Popen[str] | None] = [None] * len(confs)
    logs = [(tmp_path / f"dags-test-{i}.log").open("w+") for i in range(len(confs))]

    def start(index: int) -> None:
        barrier.wait()
        processes[index] = start_dags_test(
            "fleet_dags.py",
            dag_id,
            confs[index],
            logical_date=f"2026-0{index + 1}-0{index + 1}T00:00:00+00:00",
            output=logs[index],
        )

    starters = [threading.Thread(target=start, args=(i,)) for i in range(len(confs))]
    for starter in starters:
        starter.start()
    for starter in starters:
        starter.join()
    jobs = [conf["job_name"] for conf in confs]
    samples: list[dict[tuple[str, str, bytes], str]] = []
    deadline = time.monotonic() + timeout
    try:
        while any(p is not None and p.poll() is None for p in processes):
            assert time.monotonic() < deadline, "the two runs did not end in time"
            samples.append(_ranks_now(jobs))
            time.sleep(0.1)
    finally:
        for process in processes:
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    return samples, outputs


def _ledger(jobs_root: Path) -> Any:
    return GridLedgerStore(jobs_root).snapshot().ledger


def test_the_second_of_two_simultaneous_plans_waits_and_runs_after_the_first(
    airflow_db, jobs_root, tmp_path
):
    confs = [{"job_name": name, "nodes": 3, "seconds": 12} for name in ("left", "right")]
    samples, outputs = _run_two_at_once(tmp_path, "fleet_wait", confs)

    for job in ("left", "right"):
        states = _task_states("fleet_wait", job)
        assert states == {"plan": "success", "launch": "success"}, "\n".join(outputs)[-6000:]
    assert max(len(sample) for sample in samples) <= GRID_NODES
    assert not [s for s in samples if set(s.values()) == {"left", "right"}], "they overlapped"
    for job in ("left", "right"):
        assert any(list(s.values()).count(job) == 3 for s in samples), f"{job} never ran 3 ranks"
    waited = [o for o in outputs if "place 1 in the grid queue; the grid is held by" in o]
    assert len(waited) == 1, "exactly one plan waited"
    first = "left" if "right" in waited[0].split("place 1 in the grid queue")[0] else "right"
    assert f"the grid is held by {first!r} (3 nodes) on local" in waited[0]
    assert _ledger(jobs_root).holdings == ()  # both ended and gave their nodes back


def test_take_what_fits_gives_the_second_plan_the_one_free_node(airflow_db, jobs_root, tmp_path):
    confs = [
        {"job_name": name, "nodes": 3, "min_nodes": 1, "seconds": 12} for name in ("big", "rest")
    ]
    samples, _ = _run_two_at_once(tmp_path, "fleet_take_what_fits", confs)

    assert max(len(sample) for sample in samples) <= GRID_NODES
    sizes = {}
    for job in ("big", "rest"):
        run_id = _run_id("fleet_take_what_fits", job)
        reservation = read_xcom("fleet_take_what_fits", run_id, "plan", "reservation")
        assert reservation["job"] == job
        sizes[job] = reservation["nodes"]["local"]
        assert _task_states("fleet_take_what_fits", job) == {
            "plan": "success",
            "launch": "success",
        }
    assert sorted(sizes.values()) == [1, 3]
    assert any(len(sample) == GRID_NODES for sample in samples), "never ran side by side"


def test_fail_mode_fails_with_one_sentence_naming_the_holder(airflow_db, jobs_root, capfd):
    holder = run_dag("fleet_hold", {"job_name": "holder", "nodes": 3, "seconds": 600})
    assert holder.task_states == {"plan": "success", "launch": "success"}
    assert holder.xcom("plan", "reservation")["nodes"] == {"local": 3}
    capfd.readouterr()

    late = run_dag("fleet_fail", {"job_name": "late", "nodes": 2})

    assert late.task_states == {"plan": "failed", "launch": "upstream_failed"}
    output = capfd.readouterr()
    assert (
        "job 'late' wants 2 more nodes but 1 is free: 'holder' holds 3 on local"
        in output.out + output.err
    )
    ledger = _ledger(jobs_root)
    assert ledger.jobs == ("holder",) and ledger.queue == ()
    assert job_ranks("late") == {}
    assert len(job_ranks("holder")) == 3


def test_a_timeout_leaves_the_queue_and_fails_naming_the_holder(airflow_db, jobs_root, capfd):
    run_dag("fleet_hold", {"job_name": "holder", "nodes": 3, "seconds": 600})
    capfd.readouterr()

    late = run_dag("fleet_wait_briefly", {"job_name": "patient", "nodes": 2})

    assert late.task_states == {"plan": "failed", "launch": "upstream_failed"}
    output = capfd.readouterr()
    assert (
        "job 'patient' waited capacity_timeout 3 seconds for nodes in vain and left the grid "
        "queue; the grid is held by 'holder' (3 nodes) on local" in output.out + output.err
    )
    assert _ledger(jobs_root).queue == ()


@pytest.mark.parametrize(
    ("conf", "sentence"),
    [
        ({"priority": "nan"}, "priority must be a finite number, got nan"),
        ({"priority": -1}, "priority must be at least 0, got -1"),
        ({"priority": "high"}, "priority must be a number, got 'high'"),
        ({"nodes": 3, "min_nodes": 5}, "min_nodes 5 must not be above nodes 3"),
        ({"min_nodes": 0}, "min_nodes must be at least 1, got 0"),
        (
            {"on_shortfall": "maybe"},
            "on_shortfall must be one of 'wait', 'take_what_fits', 'fail', got 'maybe'",
        ),
        ({"capacity_timeout": -5}, "capacity_timeout must be greater than 0, got -5.0"),
        ({"capacity_timeout": "inf"}, "capacity_timeout must be a finite number, got inf"),
    ],
)
def test_bad_fleet_arguments_fail_in_one_sentence_and_write_nothing(
    airflow_db, jobs_root, capfd, conf, sentence
):
    result = run_dag("fleet_bad_arguments", {"job_name": "bad", **conf})

    assert result.task_states == {"plan": "failed", "launch": "upstream_failed"}
    output = capfd.readouterr()
    assert f"AirflowFailException: {sentence}" in output.out + output.err
    assert not (jobs_root / ".grid").exists()  # the ledger was never touched


def test_a_deferred_plan_waits_in_the_triggerer_and_launches_when_the_holder_ends(
    airflow_db, jobs_root, capfd
):
    release = jobs_root / "release-holder"
    run_dag(
        "fleet_hold", {"job_name": "holder", "nodes": 3, "seconds": 600, "release": str(release)}
    )
    # the holder ends on its own once the waiter is queued behind it, however slow the start
    releaser = threading.Thread(
        target=_release_when_queued, args=(jobs_root, "waiter", release), daemon=True
    )
    releaser.start()

    waiter = run_dag("fleet_wait_deferrable", {"job_name": "waiter", "nodes": 2, "seconds": 1})
    releaser.join(timeout=5)

    assert waiter.task_states == {"plan": "success", "launch": "success"}
    assert waiter.xcom("plan", "reservation")["nodes"] == {"local": 2}
    output = capfd.readouterr()
    assert "Job waiter waits for 2 nodes (at least 2, priority 0): place 1 in the grid queue" in (
        output.out + output.err
    )
    assert job_ranks("holder") == {}  # it ended on its own; nobody released it but the ledger


def _release_when_queued(jobs_root: Path, job: str, release: Path, timeout: float = 240) -> None:
    """Create ``release`` once ``job`` is in the grid queue (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the ledger may not exist yet
            if [request for request in _ledger(jobs_root).queue if request.job == job]:
                break
        time.sleep(0.1)
    release.touch()


def test_killing_a_plan_while_it_waits_takes_it_out_of_the_queue(airflow_db, jobs_root, tmp_path):
    run_dag("fleet_hold", {"job_name": "holder", "nodes": 3, "seconds": 600})
    log_path = tmp_path / "dags-test.log"
    with log_path.open("w+") as log:
        process = start_dags_test(
            "fleet_dags.py", "fleet_wait", {"job_name": "killed", "nodes": 2}, output=log
        )
        output = sigterm_when(
            process,
            log,
            lambda: [r for r in _ledger(jobs_root).queue if r.job == "killed"],
            "queued plan",
            timeout=120,
            grace=60,
        )

    assert "Task killed: job killed no longer waits for nodes." in output
    assert "the task was killed while job 'killed' waited for nodes; it left the grid queue" in (
        output
    )
    assert read_run("fleet_wait").task_states == {"plan": "failed", "launch": "upstream_failed"}
    assert _ledger(jobs_root).queue == ()
    stored = json.loads((jobs_root / ".grid" / "ledger.json").read_text())
    assert stored["queue"] == []
    assert job_ranks("killed") == {}
