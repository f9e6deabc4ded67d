"""A stream's load for the stream DAG runs (tests/test_stream_dag.py): a rate
file the ranks of ``train_elastic.py --arrivals`` read,
a driver that raises and lowers the rate as the job is served at each size, and the checks
of the two decisions."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# batches per second; 2 ranks serve about 1.3 (0.6 s of service and the step's overhead),
# 4 ranks about 2: LOW keeps 2 ranks mostly idle, HIGH piles work up even at 4 ranks
LOW, HIGH = 0.4, 3.0
WAIT_S = 240.0


def set_rate(path: Path, rate: float) -> None:
    """From now on, batches arrive at ``rate`` per second (0: the stream ends)."""
    with path.open("a") as handle:
        handle.write(f"{time.time()} {rate}\n")


def served_at(jobs_root: Path, job: str) -> list[int]:
    """The node count of every batch served so far, in order (the job's step logs)."""
    lines = []
    for log in jobs_root.glob(f"{job}--*/steps.jsonl"):
        for line in log.read_text().splitlines():
            if line.endswith("}"):
                lines.append(json.loads(line))
    return [line["nodes"] for line in sorted(lines, key=lambda line: line["time"])]


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.2)


def _drive(jobs_root: Path, job: str, rates: Path, failures: list[str]) -> None:
    """Low until 4 batches were served at 2 nodes, high until 6 were at 4, low until 3
    more were at 2, then the stream ends (so the last relaunch's wait ends)."""
    try:
        _wait_until(lambda: served_at(jobs_root, job).count(2) >= 4, "4 batches served at 2")
        set_rate(rates, HIGH)
        _wait_until(lambda: served_at(jobs_root, job).count(4) >= 6, "6 batches served at 4")
        set_rate(rates, LOW)

        def shrunk() -> bool:
            nodes = served_at(jobs_root, job)
            return 4 in nodes and nodes[nodes.index(4) :].count(2) >= 3

        _wait_until(shrunk, "3 batches served at 2 nodes after 4")
    except AssertionError as exc:
        failures.append(str(exc))
    finally:
        set_rate(rates, 0.0)


@contextlib.contextmanager
def changing_load(jobs_root: Path, job: str, rates: Path) -> Iterator[list[str]]:
    """Starts the stream at ``LOW`` and drives it (:func:`_drive`) while the block runs the
    DAG; ends the stream on the way out. Yields the driver's failures (empty: all done)."""
    set_rate(rates, LOW)
    failures: list[str] = []
    driver = threading.Thread(target=_drive, args=(jobs_root, job, rates, failures), daemon=True)
    driver.start()
    try:
        yield failures
    finally:
        set_rate(rates, 0.0)
        driver.join(timeout=10)


def check_decisions(grew: dict[str, Any], shrank: dict[str, Any], nodes: list[int]) -> None:
    """The job grew 2 -> 4 on the rise and shrank 4 -> 2 after the fall, each resize
    explained by its DemandCovered condition and its restart trade-off."""
    assert (grew["action"], grew["current_nodes"], grew["target_nodes"]) == ("scale_up", 2, 4)
    assert (shrank["action"], shrank["current_nodes"], shrank["target_nodes"]) == (
        "scale_down",
        4,
        2,
    )
    messages = {}
    for name, decision in (("grew", grew), ("shrank", shrank)):
        covered = [c for c in decision["conditions"] if c["type"] == "DemandCovered"]
        assert len(covered) == 1, decision["reason"]
        messages[name] = covered[0]["message"]
        projection = decision["projection"]
        assert projection["loop"] == "open"
        assert projection["restart_price_node_s"] > 0
        assert projection["demand_peak_per_s"] >= projection["demand_rate_per_s"] > 0
    # the rise: demand above what 2 nodes serve; the fall: 2 nodes cover the new peak
    up = grew["projection"]
    assert up["demand_per_s"] > up["capacity_per_s"], grew["reason"]
    assert "scaling up 2 -> 4" in grew["reason"]
    assert "paid to keep up" in messages["grew"]
    down = shrank["projection"]
    assert down["covering_nodes"] <= 2 and down["utilisation"] < 0.5, shrank["reason"]
    assert down["saving_node_s"] >= 2 * down["restart_price_node_s"]
    assert "restart trade-off" in messages["shrank"]
    assert "scaling down 4 -> 2" in shrank["reason"]
    assert nodes[0] == 2 and 4 in nodes and nodes[-1] == 2, nodes
