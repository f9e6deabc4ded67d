"""The grid ledger store: real processes racing for one grid, kills, lost and corrupt files."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from elasticgrid_provider.core.errors import ElasticGridError, GridCapacityError
from elasticgrid_provider.core.fleet.ledger import (
    LEDGER_LAYOUT,
    GridLedger,
    HoldingPhase,
    confirm,
    free_nodes,
    job_usage,
    reserve,
    used_nodes,
)
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.hooks.grid_ledger import (
    GRID_FOLDER,
    GRID_LOCK_NAME,
    LEDGER_NAME,
    GridLedgerStore,
    LedgerTransaction,
)
from tests.conftest import PROJECT
from tests.core.fleet.test_ledger import NEW_LAUNCH, OLD_LAUNCH, manifest

CAPACITIES = {"local": 4}
RACERS = 6


def write_manifest(root: Path, job: str, launch_id: str, shares: dict[str, int], **kw: Any) -> None:
    """A job's launch record on disk, where the hook keeps it."""
    folder = root / job
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(
        json.dumps(manifest(job, launch_id, shares, **kw).model_dump())
    )


def reserve_in(
    txn: LedgerTransaction,
    job: str,
    shares: dict[str, int],
    launch_id: str = NEW_LAUNCH,
    capacities: dict[str, int] = CAPACITIES,
    **kw: Any,
) -> None:
    """Reserve ``shares`` for ``job`` in the open transaction ``txn``."""
    txn.ledger = reserve(
        txn.ledger, job, shares, launch_id=launch_id, now=txn.now, capacities=capacities, **kw
    )


def _race(root: str, job: str, barrier: Any, answers: Any) -> None:
    """One racer: wait for all, then reserve 2 local nodes in one transaction."""
    store = GridLedgerStore(root)
    barrier.wait()
    try:
        with store.transaction(timeout=60) as txn:
            reserve_in(txn, job, {"local": 2})
        answers.put((job, "reserved"))
    except GridCapacityError as exc:
        answers.put((job, f"refused: {exc}"))


def test_processes_reserving_at_the_same_instant_never_over_subscribe(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier, answers = context.Barrier(RACERS), context.Queue()
    racers = [
        context.Process(target=_race, args=(str(tmp_path), f"job-{i}", barrier, answers))
        for i in range(RACERS)
    ]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(120)
        assert racer.exitcode == 0
    got = dict(answers.get(timeout=10) for _ in racers)
    assert len(got) == RACERS  # every process got a definite answer
    winners = sorted(job for job, answer in got.items() if answer == "reserved")
    assert len(winners) == 2
    assert all(
        answer.startswith("refused: provider 'local' has 0 free nodes but job")
        for job, answer in got.items()
        if job not in winners
    )
    ledger = GridLedgerStore(tmp_path).snapshot().ledger
    assert used_nodes(ledger) == {"local": 4}
    assert sorted(ledger.jobs) == winners


HOLD_THE_LOCK = """
import sys, time
from elasticgrid_provider.core.fleet.ledger import reserve
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
store = GridLedgerStore(sys.argv[1])
with store.transaction() as txn:
    txn.ledger = reserve(txn.ledger, "killed", {"local": int(sys.argv[4])}, launch_id=sys.argv[2],
                         now=txn.now, capacities={"local": 4})
    if sys.argv[3] == "inside":
        print("locked", flush=True)
        time.sleep(600)
print("reserved", flush=True)
time.sleep(600)  # killed between reserve and confirm
"""


def _killed_at(root: Path, where: str, nodes: int = 4) -> None:
    """Run a process that reserves the whole grid, SIGKILL it at ``where``."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(HOLD_THE_LOCK),
            str(root),
            NEW_LAUNCH,
            where,
            str(nodes),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=PROJECT,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == ("locked" if where == "inside" else "reserved")
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    assert process.returncode == -signal.SIGKILL


def test_a_process_killed_holding_the_lock_changes_nothing_and_frees_the_lock(tmp_path):
    write_manifest(tmp_path, "running", OLD_LAUNCH, {"local": 1})
    _killed_at(tmp_path, "inside", nodes=2)
    store = GridLedgerStore(tmp_path)
    with store.transaction(timeout=30) as txn:  # the kernel dropped the dead process's lock
        assert txn.ledger.jobs == ("running",)  # its reservation was never written
        assert txn.note is not None and "rebuilt from the jobs' launch records" in txn.note


def test_a_process_killed_between_reserve_and_confirm_is_reconciled(tmp_path):
    _killed_at(tmp_path, "between")
    reserved_at = GridLedgerStore(tmp_path).snapshot().ledger.holdings[0].recorded_at
    within = GridLedgerStore(tmp_path, grace_s=300, clock=lambda: reserved_at + 10)
    with within.transaction(timeout=30) as txn:  # a launch in flight: its nodes stay reserved
        assert free_nodes(txn.ledger, CAPACITIES) == {"local": 0}
        with pytest.raises(GridCapacityError, match="held by 'killed' \\(4 nodes\\)"):
            reserve_in(txn, "next", {"local": 1}, OLD_LAUNCH)
    after = GridLedgerStore(tmp_path, grace_s=300, clock=lambda: reserved_at + 301)
    with after.transaction(timeout=30) as txn:  # no launch record confirmed it: dropped
        assert txn.ledger.holdings == ()
        reserve_in(txn, "next", {"local": 4}, OLD_LAUNCH)
    assert GridLedgerStore(tmp_path).snapshot().ledger.jobs == ("next",)


def test_a_reservation_its_launch_record_shows_is_confirmed_by_the_next_transaction(tmp_path):
    store = GridLedgerStore(tmp_path)
    with store.transaction() as txn:
        reserve_in(txn, "a", {"local": 3}, priority=2)
    write_manifest(tmp_path, "a", NEW_LAUNCH, {"local": 3})
    with store.transaction() as txn:
        assert [(h.phase, h.priority) for h in txn.ledger.holdings] == [(HoldingPhase.HELD, 2)]
    write_manifest(tmp_path, "a", NEW_LAUNCH, {"local": 3}, state=LaunchPhase.STOPPED)
    with store.transaction() as txn:  # the job was stopped: its nodes are back
        assert txn.ledger.holdings == ()


def test_a_corrupt_ledger_is_kept_aside_and_rebuilt_from_the_launch_records(tmp_path, caplog):
    write_manifest(tmp_path, "a", OLD_LAUNCH, {"local": 2})
    (tmp_path / GRID_FOLDER).mkdir()
    path = tmp_path / GRID_FOLDER / LEDGER_NAME
    path.write_text("{not json")
    store = GridLedgerStore(tmp_path)
    assert "cannot be read" in (store.snapshot().note or "")
    assert path.read_text() == "{not json"  # a snapshot never writes
    with store.transaction() as txn:
        assert job_usage(txn.ledger, "a") == {"local": 2}
    kept = list((tmp_path / GRID_FOLDER).glob(f"{LEDGER_NAME}.corrupt-*"))
    assert [p.read_text() for p in kept] == ["{not json"]
    assert "kept as" in caplog.text
    assert GridLedger.model_validate(json.loads(path.read_text())).jobs == ("a",)


def test_an_exception_in_the_block_writes_nothing(tmp_path):
    store = GridLedgerStore(tmp_path)
    with store.transaction() as txn:
        reserve_in(txn, "a", {"local": 1})
    before = (tmp_path / GRID_FOLDER / LEDGER_NAME).read_text()
    with pytest.raises(ElasticGridError), store.transaction() as txn:
        txn.ledger = confirm(txn.ledger, "a", NEW_LAUNCH, now=txn.now)
        raise ElasticGridError("the launch failed")
    assert (tmp_path / GRID_FOLDER / LEDGER_NAME).read_text() == before


def test_an_unreadable_manifest_keeps_the_jobs_holdings(tmp_path):
    store = GridLedgerStore(tmp_path, grace_s=0)
    with store.transaction() as txn:
        reserve_in(txn, "a", {"local": 2})
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "manifest.json").write_text("{}")
    later = GridLedgerStore(tmp_path, grace_s=0, clock=lambda: txn.now + 100)
    with later.transaction() as again:
        assert job_usage(again.ledger, "a") == {"local": 2}


def test_an_unwritable_jobs_root_is_one_sentence(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ElasticGridError) as caught, GridLedgerStore(blocker / "jobs").transaction():
        pass
    assert str(caught.value).startswith(f"jobs root {blocker / 'jobs'} cannot be written")
    assert "\n" not in str(caught.value)


def _ledger_of_another_release(root: Path, **fields: Any) -> Path:
    """The grid ledger of tests/fixtures/records, with ``fields`` a newer release wrote."""
    fixture = PROJECT / "tests" / "fixtures" / "records" / "grid-ledger.json"
    data = {**json.loads(fixture.read_text()), **fields}
    data["holdings"][0]["zone"] = "rack-7"  # an entry's field of a newer minor
    path = root / GRID_FOLDER / LEDGER_NAME
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    return path


def test_a_ledger_of_a_newer_minor_keeps_its_fields_through_a_transaction(tmp_path):
    path = _ledger_of_another_release(tmp_path, schema_minor=3, borrowed={"by": "x"})
    write_manifest(tmp_path, "a", OLD_LAUNCH, {"local": 2})  # the launch "a" holds
    with GridLedgerStore(tmp_path).transaction() as txn:
        reserve_in(txn, "e", {"local": 1}, capacities={"local": 4, "cloud": 8})
    written = json.loads(path.read_text())
    assert written["borrowed"] == {"by": "x"}
    assert [h.get("zone") for h in written["holdings"]][:1] == ["rack-7"]
    assert [h["job"] for h in written["holdings"]][-1] == "e"  # the transaction did write
    assert (written["schema_version"], written["schema_minor"]) == (2, LEDGER_LAYOUT.minor)
    assert not list(path.parent.glob(f"{LEDGER_NAME}.corrupt-*"))


def test_a_ledger_of_a_newer_major_is_refused_and_left_where_it_is(tmp_path):
    path = _ledger_of_another_release(tmp_path, schema_version=3, holdings_v3=[])
    before = path.read_bytes()
    store = GridLedgerStore(tmp_path)
    with pytest.raises(ElasticGridError) as refused, store.transaction():
        pytest.fail("the transaction must not start")  # pragma: no cover
    assert str(refused.value) == (
        f"the grid ledger {path}: grid ledger schema_version 3 was written by a newer release "
        f"of elasticgrid-provider than this worker's, which reads {LEDGER_LAYOUT.version}: upgrade "
        "elasticgrid-provider here; the grid ledger is left as it is"
    )
    view = store.snapshot()  # the views show what they can, and say why
    assert "cannot be read here" in (view.note or "")
    assert "shown rebuilt from the launch records" in (view.note or "")
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [GRID_LOCK_NAME, LEDGER_NAME]
