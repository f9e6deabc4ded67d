"""A stream run for real: the DAG of elastic_training's shape with two checks
(tests/dags/stream_dags.py) launches ``train_elastic.py --arrivals`` (real ranks serving a
stream whose rate this test changes) at 2 nodes; the job grows when the rate rises and
shrinks after it falls, and each resize's record explains it (DemandCovered, the restart
trade-off)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.airflow_support import run_dag
from tests.job_processes import stop_job_processes

pytestmark = [pytest.mark.airflow, pytest.mark.long]

JOB = "stream-rate"
# batches per second; 2 ranks serve about 1.3 (0.6 s of service and the step's overhead),
# 4 ranks about 2: LOW keeps 2 ranks mostly idle, HIGH piles work up at 2 ranks
LOW, HIGH = 0.4, 3.0
WAIT_S = 240.0


def set_rate(path: Path, rate: float) -> None:
    """From now on, batches arrive at ``rate`` per second (0: the stream ends)."""
    with path.open("a") as handle:
        handle.write(f"{time.time()} {rate}\n")


def served_at(jobs_root: Path) -> list[int]:
    """The node count of every batch served so far, in order (the job's step logs)."""
    lines = []
    for log in jobs_root.glob(f"{JOB}--*/steps.jsonl"):
        for line in log.read_text().splitlines():
            if line.endswith("}"):
                lines.append(json.loads(line))
    return [line["nodes"] for line in sorted(lines, key=lambda line: line["time"])]


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.2)


def drive(jobs_root: Path, rates: Path, failures: list[str]) -> None:
    """The load: low until 4 batches were served at 2 nodes, high until 6 were at 4, low
    until 3 more were at 2, then the stream ends (so the last relaunch's wait ends)."""
    try:
        wait_until(lambda: served_at(jobs_root).count(2) >= 4, "4 batches served at 2 nodes")
        set_rate(rates, HIGH)
        wait_until(lambda: served_at(jobs_root).count(4) >= 6, "6 batches served at 4 nodes")
        set_rate(rates, LOW)

        def shrunk() -> bool:
            nodes = served_at(jobs_root)
            return 4 in nodes and nodes[nodes.index(4) :].count(2) >= 3

        wait_until(shrunk, "3 batches served at 2 nodes after 4")
    except AssertionError as exc:
        failures.append(str(exc))
    finally:
        set_rate(rates, 0.0)


def test_a_stream_grows_when_its_rate_rises_and_shrinks_after_it_falls(
    airflow_db, jobs_root, tmp_path
):
    rates = tmp_path / "rates"
    set_rate(rates, LOW)
    failures: list[str] = []
    driver = threading.Thread(target=drive, args=(jobs_root, rates, failures), daemon=True)
    driver.start()
    try:
        result = run_dag("stream_grows_and_shrinks", {"job_name": JOB, "arrivals": str(rates)})
    finally:
        set_rate(rates, 0.0)
        driver.join(timeout=10)
        stop_job_processes(JOB)
    assert not failures, failures
    assert set(result.task_states.values()) == {"success"}, result.task_states
    grew, shrank = result.xcom("grow_check"), result.xcom("shrink_check")
    assert (grew["action"], grew["current_nodes"], grew["target_nodes"]) == ("scale_up", 2, 4)
    assert (shrank["action"], shrank["current_nodes"], shrank["target_nodes"]) == (
        "scale_down",
        4,
        2,
    )
    for decision in (grew, shrank):
        covered = [c for c in decision["conditions"] if c["type"] == "DemandCovered"]
        assert len(covered) == 1, decision["reason"]
        projection = decision["projection"]
        assert projection["loop"] == "open"
        assert projection["restart_price_node_s"] > 0
        assert projection["demand_peak_per_s"] >= projection["demand_rate_per_s"] > 0
    # the rise: demand above what 2 nodes serve; the fall: 2 nodes cover the new peak
    up = grew["projection"]
    assert up["demand_per_s"] > up["capacity_per_s"], grew["reason"]
    assert "scaling up 2 -> 4" in grew["reason"]
    down = shrank["projection"]
    assert down["covering_nodes"] <= 2 and down["utilisation"] < 0.5, shrank["reason"]
    assert down["saving_node_s"] >= 2 * down["restart_price_node_s"]
    assert "restart trade-off" in covered[0]["message"]
    assert "scaling down 4 -> 2" in shrank["reason"]
    nodes = served_at(jobs_root)
    assert nodes[0] == 2 and 4 in nodes and nodes[-1] == 2, nodes
    assert result.xcom("shrink")["status"] == "done"
