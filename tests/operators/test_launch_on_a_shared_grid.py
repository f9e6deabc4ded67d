"""A launch whose placement another job took after its plan: it plans again, waits or fails.

Real ``dag.test()`` runs of ``tests/dags/fleet_dags.py``'s ``fleet_taken_*`` DAGs on a real
jobs root: job A plans and reserves; its reservation lapses (dropped, as its lease ending
would) and job B plans and launches on those nodes; A's launch, with its plan's
``on_shortfall``, then finds its placement taken. The jobs' rank processes are sampled
all along: never more run than the grid has nodes.
"""

from __future__ import annotations

import threading
import time

import pytest

from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from tests.airflow_support import (
    DagRunResult,
    read_run,
    run_dag,
    sigterm_when,
    start_dags_test,
)
from tests.job_processes import job_ranks
from tests.operators.test_plan_on_a_shared_grid import _ranks_now

pytestmark = [pytest.mark.airflow, pytest.mark.long]

TAKEN = {"plan": "success", "lapse": "success", "plan_holder": "success", "take": "success"}


def _run_sampled(
    dag_id: str, conf: dict, jobs: list[str]
) -> tuple[DagRunResult, list[dict[tuple[str, str, bytes], str]]]:
    """Run the DAG while a thread samples the jobs' live ranks every 0.1 s."""
    samples: list[dict[tuple[str, str, bytes], str]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(_ranks_now(jobs))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = run_dag(dag_id, conf)
    finally:
        done.set()
        sampler.join(timeout=10)
    samples.append(_ranks_now(jobs))
    return result, samples


def _output(capfd, caplog) -> str:
    captured = capfd.readouterr()
    return captured.out + captured.err + caplog.text


def test_a_launch_whose_nodes_were_taken_plans_again_where_it_fits(
    airflow_db, jobs_root, capfd, caplog
):
    # onprem (2 free nodes) is taken by the holder; the cloud pool has 4 more
    conf = {"job_name": "moved", "holder": "taker", "nodes": 2, "holder_nodes": 2}
    result, samples = _run_sampled("fleet_taken_two", conf, ["moved", "taker"])

    assert result.task_states == {**TAKEN, "launch": "success"}
    assert result.xcom("plan", "reservation")["nodes"] == {"onprem": 2}
    job = result.xcom("launch", "job")
    assert [(part["provider"], part["nodes"]) for part in job["parts"]] == [("cloud", 2)]
    text = _output(capfd, caplog)
    assert "provider 'onprem' has 0 free nodes but job 'moved' asked for 2" in text
    assert "Its plan's placement no longer fits the grid: planning job moved again" in text
    assert max(len(sample) for sample in samples) <= 6
    onprem = [s for s in samples if sum("onprem" in key[1] for key in s) > 2]
    assert not onprem, "more than 2 ranks on onprem"
    usage = GridLedgerStore(jobs_root).snapshot().ledger
    held = {h.job: (h.provider, h.nodes) for h in usage.holdings}
    assert held == {"moved": ("cloud", 2), "taker": ("onprem", 2)}


@pytest.mark.parametrize("dag_id", ["fleet_taken_four", "fleet_taken_four_deferrable"])
def test_a_launch_whose_nodes_were_taken_waits_and_launches_when_the_holder_ends(
    airflow_db, jobs_root, capfd, caplog, dag_id
):
    # the grid has 4 nodes; the holder takes 3 of them for 6 s; the launch needs 3
    conf = {"job_name": "patient", "holder": "holder", "nodes": 3, "holder_seconds": 6}
    result, samples = _run_sampled(dag_id, conf, ["patient", "holder"])

    assert result.task_states == {**TAKEN, "launch": "success"}
    assert result.xcom("launch", "job")["nodes"] == 3
    text = _output(capfd, caplog)
    assert "Job patient waits for 3 nodes (at least 3, priority 0): place 1 in the grid" in text
    assert "the grid is held by 'holder' (3 nodes) on local" in text
    assert max(len(sample) for sample in samples) <= 4
    assert not [s for s in samples if set(s.values()) == {"patient", "holder"}], "overlapped"
    assert any(list(s.values()).count("holder") == 3 for s in samples)
    assert job_ranks("holder") == {}
    assert GridLedgerStore(jobs_root).snapshot().ledger.queue == ()


def test_a_launch_whose_nodes_were_taken_fails_in_one_sentence_with_on_shortfall_fail(
    airflow_db, jobs_root, capfd, caplog
):
    conf = {"job_name": "strict", "holder": "holder", "nodes": 3, "on_shortfall": "fail"}
    result, samples = _run_sampled("fleet_taken_four", conf, ["strict", "holder"])

    assert result.task_states == {**TAKEN, "launch": "failed"}
    assert (
        "AirflowFailException: job 'strict' was not launched: its plan's placement no longer "
        "fits the grid and on_shortfall is 'fail' (job 'strict' wants 3 more nodes but 1 is "
        "free: 'holder' holds 3 on local)" in _output(capfd, caplog)
    )
    assert job_ranks("strict") == {}
    assert len(job_ranks("holder")) == 3
    ledger = GridLedgerStore(jobs_root).snapshot().ledger
    assert ledger.jobs == ("holder",) and ledger.queue == ()
    assert max(len(sample) for sample in samples) <= 4


def test_a_launch_whose_nodes_were_taken_takes_what_fits(airflow_db, jobs_root, capfd, caplog):
    conf = {
        "job_name": "modest",
        "holder": "holder",
        "nodes": 3,
        "min_nodes": 1,
        "on_shortfall": "take_what_fits",
    }
    result, samples = _run_sampled("fleet_taken_four", conf, ["modest", "holder"])

    assert result.task_states == {**TAKEN, "launch": "success"}
    assert result.xcom("launch", "job")["nodes"] == 1
    assert "reserved 1 of its 3 nodes" in _output(capfd, caplog)
    assert max(len(sample) for sample in samples) <= 4
    held = {h.job: h.nodes for h in GridLedgerStore(jobs_root).snapshot().ledger.holdings}
    assert held == {"modest": 1, "holder": 3}


def test_killing_a_launch_while_it_waits_for_nodes_takes_it_out_of_the_queue(
    airflow_db, jobs_root, tmp_path
):
    conf = {"job_name": "killed", "holder": "holder", "nodes": 3}
    log_path = tmp_path / "dags-test.log"
    with log_path.open("w+") as log:
        process = start_dags_test("fleet_dags.py", "fleet_taken_four", conf, output=log)
        output = sigterm_when(
            process,
            log,
            lambda: [r for r in _queue(jobs_root) if r.job == "killed"],
            "queued launch",
            timeout=180,
            grace=60,
        )

    assert "the task was killed while job 'killed' waited for nodes; it left the grid queue" in (
        output
    )
    assert read_run("fleet_taken_four").task_states["launch"] == "failed"
    assert _queue(jobs_root) == ()
    assert job_ranks("killed") == {}
    assert len(job_ranks("holder")) == 3


def _queue(jobs_root) -> tuple:
    try:
        return GridLedgerStore(jobs_root).snapshot().ledger.queue
    except FileNotFoundError:  # no ledger yet
        return ()
