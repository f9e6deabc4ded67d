"""Helpers shared by the ``elasticgrid`` command's tests: run ``main`` in-process, write samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from elasticgrid_provider.cli import main

REPO = Path(__file__).resolve().parents[2]
QUEUE_BOUND_EXAMPLE = REPO / "example_dags" / "samples" / "queue_bound.jsonl"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
PLACEMENT_KEYS_0_1_0 = {
    "assignments",
    "total_nodes",
    "cost_per_hour",
    "spot_fraction",
    "infra_refs",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``main(argv)``: exit status, stdout, stderr."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code, out, err = run(capsys, *argv, "--json")
    assert err == ""
    return code, json.loads(out)


def sample(
    step: int, duration_s: float, queue_s: float = 0.0, nodes: int = 8, **extra: Any
) -> dict[str, Any]:
    return {"step": step, "duration_s": duration_s, "queue_s": queue_s, "nodes": nodes, **extra}


def write_jsonl(path: Path, entries: list[Any]) -> str:
    path.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return str(path)


def queue_bound(count: int, *, nodes: int = 8, step_s: float = 40.0) -> list[dict[str, Any]]:
    """``count`` steps of which 75% is queue: queue-bound, no ``time`` field."""
    return [sample(step, step_s, 0.75 * step_s, nodes, tokens=1000) for step in range(1, count + 1)]


def assert_one_line_error(code: int, out: str, err: str, *phrases: str) -> None:
    assert code == 2
    assert out == ""
    assert err.startswith("error: ")
    assert err.count("\n") == 1 and err.endswith("\n")
    assert "Traceback" not in err
    for phrase in phrases:
        assert phrase in err, err
