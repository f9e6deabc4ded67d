"""The CLI's timeline and successive real sensor checks make the same decisions (issue 8)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from elasticgrid_provider.cli import REPLAY_FIELDS, main
from elasticgrid_provider.core.state import state_variable_key
from tests.airflow_support import read_variable, run_dag
from tests.dags.policy_dags import POLICY_CHECK

pytestmark = [pytest.mark.airflow, pytest.mark.long]

# recent: the sensor leaves out samples far from its clock (core/samples.py screen_times)
T0 = float(int(time.time()) - 600)


def growing_stream() -> list[dict]:
    """Batches arriving every 5 s, served in 8 s on the job's 2 nodes: the queue grows."""
    samples = []
    for step in range(5):
        arrived = T0 + 5.0 * step
        wait = 3.0 * step
        samples.append(
            {
                "step": step,
                "duration_s": wait + 8.0,
                "queue_s": wait,
                "nodes": 2,
                "tokens": 1000.0,
                "time": arrived + wait + 8.0,
            }
        )
    return samples


def test_the_timeline_replays_what_the_sensor_decided(
    airflow_db, jobs_root, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = growing_stream()
    run_dag("launch_sleeping", {"job_name": "cli-vs-sensor", "nodes": 2})
    sensor_decisions = []
    for count in range(1, len(samples) + 1):
        result = run_dag(
            "policy_single_check", {"job_name": "cli-vs-sensor", "samples": samples[:count]}
        )
        sensor_decisions.append(result.xcom("scale_check"))
        if sensor_decisions[-1]["action"] != "hold":
            break  # the job was not resized, so the sensor's story ends here

    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    options = [f"--{name.replace('_', '-')}" for name in ("min_nodes", "max_nodes")]
    capsys.readouterr()  # drop what the DAG runs printed
    code = main(
        [
            "--json",
            "simulate",
            "--samples",
            str(path),
            "--timeline",
            "--nodes",
            "2",
            options[0],
            str(POLICY_CHECK["min_nodes"]),
            options[1],
            str(POLICY_CHECK["max_nodes"]),
            "--cooldown",
            "0",
        ]
    )
    assert code == 0
    timeline = [entry["decision"] for entry in json.loads(capsys.readouterr().out)["timeline"]]

    # min_samples twice, a first sign of growth held for confirmation, then the scale-up
    assert [d["rule"] for d in sensor_decisions] == [
        "min_samples",
        "min_samples",
        "demand",
        "demand",
    ]
    assert [d["action"] for d in sensor_decisions][-2:] == ["hold", "scale_up"]
    for sensed, simulated in zip(sensor_decisions, timeline, strict=False):
        assert {field: sensed[field] for field in REPLAY_FIELDS} == {
            field: simulated[field] for field in REPLAY_FIELDS
        }
        assert sensed["projection"] == simulated["projection"]
    state = read_variable(state_variable_key("cli-vs-sensor"))
    assert state["schema_version"] == 2
    assert [entry["nodes"] for entry in state["capacity"]["sizes"]] == [2]
