"""JobStore: the job lock across processes, and the scale state Variables it reads and writes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from elasticgrid_provider.core.state import ScaleState
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.hooks.state_store import (
    read_variable,
    scale_state_exists,
)

pytestmark = pytest.mark.airflow


# The probe answers only after it has let the lock go again ("held, released"), so when
# the test reads the answer the lock is free: no race between its release and the test.
LOCK_PROBE = """
import sys
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

store = ElasticGridHook(jobs_root=sys.argv[1]).job_store
for _ in sys.stdin:
    with store.job_lock("locked", timeout=0) as held:
        answer = "held, released" if held else "busy"
    print(answer, flush=True)
"""


def test_the_job_lock_is_exclusive_across_processes(tmp_path):
    store = ElasticGridHook(jobs_root=str(tmp_path)).job_store
    probe = subprocess.Popen(
        [sys.executable, "-c", LOCK_PROBE, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def ask() -> str:
        assert probe.stdin is not None and probe.stdout is not None
        probe.stdin.write("try\n")
        probe.stdin.flush()
        return probe.stdout.readline().strip()

    try:
        with store.job_lock("locked") as held:
            assert held is True
            assert (tmp_path / "locked" / ".lock").exists()
            assert ask() == "busy"
            assert ask() == "busy"
        assert ask() == "held, released"
        # and the other way round: the probe has released it, so this process gets it at once
        with store.job_lock("locked", timeout=0) as held:
            assert held is True
            assert ask() == "busy"
        assert ask() == "held, released"
    finally:
        _, errors = probe.communicate(timeout=30)
    assert probe.returncode == 0, errors


def test_variables_are_read_through_the_state_store_and_the_job_store(monkeypatch, tmp_path):
    # outside a task the SDK reads Variables from the secrets backends: here the environment
    state = ScaleState(job_name="found").model_dump()
    monkeypatch.setenv("AIRFLOW_VAR_ELASTICGRID_SCALE_STATE__FOUND", json.dumps(state))
    monkeypatch.setenv("AIRFLOW_VAR_INTERVAL_S", "3600")
    assert scale_state_exists("found") is True
    assert scale_state_exists("never-checked") is False
    assert read_variable("interval_s") == "3600"
    assert read_variable("absent") is None
    store = ElasticGridHook(jobs_root=str(tmp_path)).job_store
    assert store.read_scale_state("found").model_dump() == state
    assert (
        store.read_scale_state("never-checked").model_dump()
        == ScaleState(job_name="never-checked").model_dump()
    )


def test_a_manifest_of_a_newer_major_is_refused_and_left_where_it_is(tmp_path, caplog):
    """A worker of this release meets a manifest a newer one wrote: one sentence, the file
    untouched, and the grid ledger keeps the job's nodes (its record cannot be read)."""
    from elasticgrid_provider.core.errors import NewerRecordError
    from elasticgrid_provider.hooks.grid_ledger import read_launch_records
    from tests.conftest import PROJECT

    fixture = PROJECT / "tests" / "fixtures" / "records" / "job-manifest.json"
    folder = tmp_path / "llm"
    folder.mkdir()
    path = folder / "manifest.json"
    path.write_text(json.dumps({**json.loads(fixture.read_text()), "schema_version": 2}))
    before = path.read_bytes()
    store = ElasticGridHook(jobs_root=str(tmp_path)).job_store
    with pytest.raises(NewerRecordError, match=r"^job manifest schema_version 2 was written by"):
        store.job_snapshot("llm")
    records, unreadable = read_launch_records(tmp_path)
    assert (records, unreadable) == ({}, {"llm"})
    assert path.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json"]
