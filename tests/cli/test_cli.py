"""The ``elasticgrid`` entry (``cli/__init__``): user errors (exit 2, one line), help, version.

Most tests call :func:`main` in-process; one test runs the installed console
script and ``python -m elasticgrid_provider`` to prove the entry points work.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import elasticgrid_provider
from elasticgrid_provider.get_provider_info import get_provider_info
from tests.cli.cli_support import (
    REPO,
    assert_one_line_error,
    run,
    sample,
    write_jsonl,
)

# -- user errors ----------------------------------------------------------------------


GOOD = [sample(1, 10.0), sample(2, 10.0)]


ERROR_CASES: list[tuple[dict[str, Any], list[str], list[str]]] = [
    (
        {},
        ["plan", "--nodes", "5", "--providers", "{tmp}/missing.json"],
        ["providers file", "missing.json does not exist"],
    ),
    (
        {"p.json": "[{"},
        ["plan", "--nodes", "5", "--providers", "{tmp}/p.json"],
        ["p.json is not valid JSON", "line 1 column 3"],
    ),
    (
        {"p.json": '[{"max_nodes": 3, "cost_per_node_hour": 1}]'},
        ["providers", "--providers", "{tmp}/p.json"],
        ["p.json: providers entry 0 is missing the field 'name'"],
    ),
    (
        {
            "p.json": '[{"name": "a", "max_nodes": 3, "cost_per_node_hour": 1},'
            ' {"name": "a", "max_nodes": 1, "cost_per_node_hour": 2}]'
        },
        ["plan", "--nodes", "1", "--providers", "{tmp}/p.json"],
        ["provider name 'a' appears more than once"],
    ),
    (
        {"p.json": '[{"name": "a", "max_nodes": "3", "cost_per_node_hour": 1}]'},
        ["plan", "--nodes", "1", "--providers", "{tmp}/p.json"],
        ["provider 'a' max_nodes must be a number, got '3'"],
    ),
    (
        {"p.json": '[{"name": "a", "max_nodes": 3, "cost_per_node_hour": NaN}]'},
        ["plan", "--nodes", "1", "--providers", "{tmp}/p.json"],
        ["cost_per_node_hour must be a finite number, got nan"],
    ),
    (
        {"p.json": '{"name": "a"}'},
        ["providers", "--providers", "{tmp}/p.json"],
        ["providers must be a JSON list"],
    ),
    ({}, ["plan", "--nodes", "169"], ["nodes 169 exceeds the grid's capacity of 168 nodes"]),
    ({}, ["spec", "--nodes", "500"], ["nodes 500 exceeds the grid's capacity of 168"]),
    ({}, ["plan", "--nodes", "-1"], ["nodes must be at least 1, got -1"]),
    ({}, ["plan", "--nodes", "0"], ["nodes must be at least 1, got 0"]),
    ({}, ["plan", "--nodes", "many"], ["argument --nodes: invalid int value: 'many'"]),
    ({}, ["plan"], ["the following arguments are required: --nodes"]),
    ({}, ["plan", "--nodes", "4", "--prefer", "fast"], ["invalid choice: 'fast'"]),
    (
        {},
        ["plan", "--nodes", "4", "--max-spot-fraction", "1.5"],
        ["max_spot_fraction must be at most 1, got 1.5"],
    ),
    (
        {},
        ["plan", "--nodes", "4", "--max-spot-fraction", "nan"],
        ["max_spot_fraction must be a finite number, got nan"],
    ),
    ({}, ["spec", "--nodes", "0"], ["nodes must be at least 1, got 0"]),
    ({}, ["spec", "--nodes", "4", "--name", "a--b"], ["job name must not contain '--'"]),
    ({}, ["spec", "--nodes", "4", "--rendezvous", "ftp://x"], ["rendezvous must be"]),
    ({}, ["frobnicate"], ["invalid choice: 'frobnicate'"]),
    ({}, [], ["the following arguments are required: COMMAND"]),
    (
        {},
        ["simulate", "--samples", "{tmp}/missing.jsonl"],
        ["samples file", "missing.jsonl does not exist"],
    ),
    ({}, ["simulate", "--samples", "{tmp}"], ["is a directory"]),
    ({"s.jsonl": ""}, ["simulate", "--samples", "{tmp}/s.jsonl"], ["holds no samples"]),
    (
        {"s.jsonl": '{"step": 1, "duration_s": 1}\n{"step": 2,\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["s.jsonl line 2: not valid JSON"],
    ),
    (
        {"s.json": '[{"step": 1, "duration_s": 1},'},
        ["simulate", "--samples", "{tmp}/s.json"],
        ["s.json is not valid JSON"],
    ),
    (
        {"s.jsonl": '{"step": 1, "duration_s": 1}\n\n{"step": 3, "duration_s": NaN}\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["s.jsonl line 3: sample duration_s must be a finite number, got nan"],
    ),
    (
        {"s.jsonl": '{"step": 1}\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["s.jsonl line 1: sample is missing the field 'duration_s'"],
    ),
    (
        {"s.json": '[{"step": 1, "duration_s": 1}, {"step": 2, "duration_s": "2"}]'},
        ["simulate", "--samples", "{tmp}/s.json"],
        ["s.json index 1: sample duration_s must be a number, got '2'"],
    ),
    (
        {"s.jsonl": '{"step": 1, "duration_s": 1, "nodes": true}\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["sample nodes must be a number, got True"],
    ),
    (
        {"s.jsonl": '{"step": 1, "duration_s": 1, "gpu": 3}\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["sample has an unknown field 'gpu'"],
    ),
    (
        {"s.jsonl": '{"step": 1, "duration_s": 1, "time": Infinity}\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["line 1: sample time must be a finite number, got inf"],
    ),
    (
        {"s.jsonl": '"hello"\n'},
        ["simulate", "--samples", "{tmp}/s.jsonl"],
        ["line 1: sample must be a JSON object"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--window-size", "0"],
        ["--window-size must be at least 1, got 0"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--nodes", "0"],
        ["--nodes must be at least 1, got 0"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--cooldown", "-1"],
        ["--cooldown must be at least 0, got -1.0"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--scale-up-factor", "1"],
        ["--scale-up-factor must be greater than 1"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--min-nodes", "8", "--max-nodes", "4"],
        ["--max-nodes must be at least 8, got 4"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--now", "nan"],
        ["--now must be a finite number, got nan"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--remaining-steps", "9"],
        ["--remaining-steps only counts toward a deadline; it needs --deadline-in"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--total-steps", "9"],
        ["--total-steps only counts toward a deadline; it needs --deadline-in"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--deadline-in", "9", "--total-steps", "inf"],
        ["--total-steps must be a finite number, got inf"],
    ),
    (
        {"s.jsonl": GOOD},
        [
            "simulate",
            "--samples",
            "{tmp}/s.jsonl",
            "--deadline-in",
            "9",
            "--remaining-steps",
            "-1",
        ],
        ["--remaining-steps must be at least 0, got -1.0"],
    ),
    (
        {"s.jsonl": GOOD},
        ["simulate", "--samples", "{tmp}/s.jsonl", "--decision", "0"],
        ["--decision picks a recorded decision; it needs --state FILE"],
    ),
    ({}, ["simulate"], ["simulate needs --samples FILE"]),
    (
        {"state.json": "nope"},
        ["simulate", "--state", "{tmp}/state.json"],
        ["state file", "is not valid JSON"],
    ),
]


@pytest.mark.parametrize(
    ("files", "argv", "phrases"),
    ERROR_CASES,
    ids=[" ".join(argv)[:60].replace("{tmp}/", "") or "no-args" for _, argv, _ in ERROR_CASES],
)
def test_user_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    files: dict[str, Any],
    argv: list[str],
    phrases: list[str],
) -> None:
    for name, content in files.items():
        if isinstance(content, list):
            write_jsonl(tmp_path / name, content)
        else:
            (tmp_path / name).write_text(content)
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    code, out, err = run(capsys, *argv)
    assert_one_line_error(code, out, err, *phrases)
    # with --json the same error is one JSON line on stdout
    code, out, err = run(capsys, "--json", *argv)
    assert code == 2 and err == ""
    assert out.count("\n") == 1
    assert set(json.loads(out)) == {"error"}
    for phrase in phrases:
        assert phrase in json.loads(out)["error"]


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", "--help")
    assert code == 0
    for flag in ("--window-size", "--timeline", "--state", "--decision", "--scale-down-cooldown"):
        assert flag in out


# -- the installed entry points ----------------------------------------------------------


def console_script() -> str:
    found = shutil.which("elasticgrid", path=os.path.dirname(sys.executable))
    found = found or shutil.which("elasticgrid")
    if found is None:
        pytest.fail("the elasticgrid console script is not installed next to the interpreter")
    return found


def test_console_script(tmp_path: Path) -> None:
    script = console_script()
    done = subprocess.run(
        [script, "plan", "--nodes", "100", "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cost_per_hour"] == 302.80

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "duration_s": NaN}\n')
    done = subprocess.run(
        [script, "simulate", "--samples", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"error: {bad} line 1: sample duration_s must be a finite number, got nan\n"
    )
    assert "Traceback" not in done.stderr

    done = subprocess.run(
        [sys.executable, "-m", "elasticgrid_provider", "plan", "--nodes", "8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "8 nodes on 1 provider, $0.00/h" in done.stdout


# -- the version -------------------------------------------------------------------------


def test_version_is_the_same_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    """``elasticgrid --version``, the provider info and the installed metadata agree."""
    code, out, err = run(capsys, "--version")
    assert (code, err) == (0, "")
    assert out == f"elasticgrid {elasticgrid_provider.__version__}\n"
    assert get_provider_info()["versions"] == [elasticgrid_provider.__version__]
    assert importlib.metadata.version("airflow-provider-elasticgrid") == (
        elasticgrid_provider.__version__
    )
    # and pyproject.toml does not write it a second time: setuptools reads __version__
    pyproject = (REPO / "pyproject.toml").read_text()
    project = pyproject.split("\n[project]\n", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^dynamic = \["version"\]', project, re.MULTILINE)
    assert not re.search(r"^version = ", project, re.MULTILINE)
    assert 'version = { attr = "elasticgrid_provider.__version__" }' in pyproject


def test_version_from_the_console_script() -> None:
    done = subprocess.run(
        [console_script(), "--version"], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"elasticgrid {elasticgrid_provider.__version__}\n"
