"""Faults around a check's state, on a real metadata DB and real local jobs.

* A failed read of the state is an error, never "no state": the metadata DB
  (this session's SQLite) refuses the read of the state Variable's value with
  SQLite's own authorizer, a real database error on exactly that query, while
  the write would go through. The check fails with one sentence and the stored
  state (revision, history, cooldown) is kept. The same rule against a real
  Postgres with its connection cut during the read: ``integration/test_state_outage.py``.
* A state reported missing for a job whose folder records that one was written
  is a failed read too, until a person deletes that record.
* A read-only jobs folder (a real read-only tmpfs) fails the check with one
  sentence naming the folder, and nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticgrid_provider.core.state import state_variable_key
from elasticgrid_provider.hooks.state_store import STATE_RECORD_NAME
from tests.airflow_support import read_variable, run_dag
from tests.read_only import read_only_mount

pytestmark = pytest.mark.airflow


def _sample_line(step: int) -> str:
    return json.dumps({"step": step, "duration_s": 1.0, "queue_s": 0.1, "nodes": 1}) + "\n"


def _sleeping_job(job: str, jobs_root: Path, steps: int = 4) -> Path:
    """A real one-node job with ``steps`` samples in its step log; returns the log's path."""
    launched = run_dag("launch_sleeping", {"job_name": job, "nodes": 1})
    assert launched.task_states["launch"] == "success"
    step_log = jobs_root / f"{job}--onprem" / "steps.jsonl"
    step_log.write_text("".join(_sample_line(step) for step in range(steps)))
    return step_log


def _check(job: str, capfd: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """One hold-only check of ``job``: its task's state and what it logged."""
    result = run_dag("scale_check_patient", {"job_name": job})
    captured = capfd.readouterr()
    return result.task_states["scale_check"], captured.out + captured.err


def _error_line(output: str, kind: str) -> str:
    assert f"{kind}: " in output, output[-3000:]
    return output.split(f"{kind}: ", 1)[1].splitlines()[0]


@contextlib.contextmanager
def refused_variable_reads(times: int = 1) -> Iterator[list[str]]:
    """The metadata DB refuses the next ``times`` reads of a Variable's value (SQLite's
    authorizer denies reading ``variable.val``: a real error on that one query; writes,
    which never read the value, go through). Yields the refusals made."""
    from airflow import settings
    from sqlalchemy import event

    refused: list[str] = []

    def authorizer(action: int, table: str | None, column: str | None, *_: object) -> int:
        reading = action == sqlite3.SQLITE_READ and (table, column) == ("variable", "val")
        if reading and len(refused) < times:
            refused.append(f"{table}.{column}")
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def on_checkout(dbapi_connection: sqlite3.Connection, *_: object) -> None:
        dbapi_connection.set_authorizer(authorizer)

    engine = settings.engine
    assert engine is not None and engine.dialect.name == "sqlite"
    event.listen(engine, "checkout", on_checkout)
    try:
        yield refused
    finally:
        event.remove(engine, "checkout", on_checkout)
        engine.dispose()  # no pooled connection keeps the authorizer


def test_a_failed_state_read_fails_the_check_and_keeps_the_state(airflow_db, jobs_root, capfd):
    _sleeping_job("blip", jobs_root)
    key = state_variable_key("blip")
    for _ in range(2):
        assert _check("blip", capfd)[0] == "skipped"  # a hold: min_samples is out of reach
    stored = read_variable(key)
    assert stored["revision"] == 2 and len(stored["history"]) == 1
    assert stored["history"][0]["hold_run"]["count"] == 2  # two holds folded into one entry

    with refused_variable_reads() as refused:
        state, output = _check("blip", capfd)
    assert refused == ["variable.val"]  # the fault hit the state read, once
    assert state == "failed"  # not skipped: a failed read never passes for a hold
    message = _error_line(output, "StateReadError")
    assert message.startswith(
        "job 'blip''s scale state could not be read, so the check decided and wrote nothing"
    ), message
    assert key in message
    assert read_variable(key) == stored  # revision, history and cursors kept

    assert _check("blip", capfd)[0] == "skipped"  # the DB is back: the check goes on
    resumed = read_variable(key)
    assert resumed["revision"] == 3 and resumed["history"][0]["hold_run"]["count"] == 3


def test_a_state_reported_missing_after_one_was_written_is_not_a_fresh_start(
    airflow_db, jobs_root, capfd
):
    from airflow.models.variable import Variable

    _sleeping_job("gone", jobs_root)
    assert _check("gone", capfd)[0] == "skipped"
    record = jobs_root / "gone" / STATE_RECORD_NAME
    assert json.loads(record.read_text())["revision"] == 1
    key = state_variable_key("gone")
    Variable.delete(key)  # what a metadata DB that lost or hides the row looks like

    state, output = _check("gone", capfd)
    assert state == "failed"
    message = _error_line(output, "StateReadError")
    assert message.startswith(f"job 'gone''s scale state Variable {key!r} was written (revision 1")
    assert str(record) in message and message.endswith("delete that record file too")
    assert read_variable(key) is None  # nothing was written

    record.unlink()  # a person confirms the state is gone: the next check starts afresh
    assert _check("gone", capfd)[0] == "skipped"
    assert read_variable(key)["revision"] == 1


def test_a_read_only_jobs_folder_fails_the_check_in_one_sentence(
    airflow_db, jobs_root, capfd, monkeypatch
):
    step_log = _sleeping_job("frozen", jobs_root)
    before = {
        path: path.read_bytes() for path in (jobs_root / "frozen").rglob("*") if path.is_file()
    }
    with read_only_mount(jobs_root) as read_only:
        connection = {"conn_type": "elasticgrid", "extra": {"jobs_root": str(read_only)}}
        monkeypatch.setenv("AIRFLOW_CONN_ELASTICGRID_DEFAULT", json.dumps(connection))
        with pytest.raises(OSError):  # the folder really refuses writes, even to root
            (read_only / "frozen" / "probe").write_text("x")
        state, output = _check("frozen", capfd)
    assert state == "failed"
    message = _error_line(output, "ElasticGridError")
    assert message.startswith(
        f"jobs folder {read_only / 'frozen'} cannot be written (Read-only file system), so job "
        "'frozen' cannot be locked and nothing was changed"
    ), message
    assert "OSError" not in output and "Errno" not in output
    assert read_variable(state_variable_key("frozen")) is None  # no state was written
    after = {
        path: path.read_bytes() for path in (jobs_root / "frozen").rglob("*") if path.is_file()
    }
    assert after == before
    assert step_log.exists()


# -- absurd samples: every field is bounded, times are checked against the check's clock ----


def test_absurd_step_log_lines_are_reported_once_and_never_enter_the_window(
    airflow_db, jobs_root, capfd
):
    import time

    step_log = _sleeping_job("absurd", jobs_root, steps=2)
    now = time.time()
    absurd = [
        {"step": 2, "duration_s": 1.0, "nodes": 1, "time": 1e300},
        {"step": 3, "duration_s": 1e308, "nodes": 1},
        {"step": 4, "duration_s": 1.0, "queue_s": 1e308, "nodes": 1},
        {"step": 5, "duration_s": 1.0, "nodes": 1, "time": now * 1e9},  # nanoseconds
        {"step": 6, "duration_s": 1.0, "nodes": 1, "time": 3.5},  # 1970
        {"step": 7, "duration_s": 1.0, "nodes": 1, "time": now + 3600.0},  # an hour ahead
    ]
    with step_log.open("a") as handle:
        handle.write("".join(json.dumps(line) + "\n" for line in absurd) + _sample_line(8))
    state, output = _check("absurd", capfd)
    assert state == "skipped"  # a hold, not a crash
    assert "OverflowError" not in output and "inf%" not in output
    skipped = [line for line in output.splitlines() if "Skipped a step-log line" in line]
    assert len(skipped) == 4
    for phrase, count in (
        ("time must be epoch seconds before 2100", 2),  # 1e300 and nanoseconds
        ("got 1e+300 (milliseconds or nanoseconds?)", 1),
        ("duration_s must be at most 604800, got 1e+308", 1),
        ("queue_s must be at most 604800, got 1e+308", 1),
    ):
        assert sum(phrase in line for line in skipped) == count, (phrase, skipped)
    left_out = [line for line in output.splitlines() if "Left out step" in line]
    assert len(left_out) == 2
    assert "Left out step 6" in left_out[0] and "days before the check's clock" in left_out[0]
    assert "Left out step 7" in left_out[1] and "after the check's clock" in left_out[1]
    stored = read_variable(state_variable_key("absurd"))
    assert [sample["step"] for sample in stored["window"]["samples"]] == [0, 1, 8]

    state, output = _check("absurd", capfd)  # reported once: the cursor moved past them
    assert state == "skipped"
    assert "Skipped a step-log line" not in output and "Left out step" not in output


def test_handed_in_samples_are_bounded_and_screened_too(airflow_db, jobs_root, capfd):
    import time

    run_dag("launch_sleeping", {"job_name": "handed", "nodes": 1})
    now = time.time()
    samples = [
        {"step": step, "duration_s": 1.0, "nodes": 1, "time": now - 10 + step} for step in range(4)
    ]
    samples[1]["time"] = now + 3600.0  # an hour ahead
    result = run_dag("policy_single_check", {"job_name": "handed", "samples": samples})
    assert result.task_states == {"scale_check": "skipped"}  # one hold
    output = "".join(capfd.readouterr())
    assert "Left out step 1: its time" in output
    window = read_variable(state_variable_key("handed"))["window"]["samples"]
    assert [sample["step"] for sample in window] == [0, 2, 3]

    samples.append({"step": 4, "duration_s": 1.0, "nodes": 1, "time": 1e300})
    result = run_dag("policy_single_check", {"job_name": "handed", "samples": samples})
    assert result.task_states == {"scale_check": "failed"}  # bad input: one sentence
    message = _error_line("".join(capfd.readouterr()), "ElasticGridError")
    assert message.startswith("samples entry 4 time must be epoch seconds before 2100"), message
