"""GridCapacityTrigger: real code reading a real ledger, next to a real local job.

The trigger's ``run()`` runs in an event loop here, as the triggerer runs it; the
holder is a real iroh-tinker job whose end nobody observes but the ledger.
"""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path

import pytest

from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.core.fleet.ledger import CapacityRequest
from elasticgrid_provider.core.fleet.sharing import ShortfallMode, Verdict
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.hooks.grid_capacity import GridCapacity
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from elasticgrid_provider.triggers.capacity import GridCapacityTrigger
from tests.dag_settings import PYTHON, SLEEPING_RUN
from tests.dags.fleet_dags import FOUR_LOCAL_NODES
from tests.job_processes import job_ranks
from tests.read_only import read_only_mount

PLANNER = GridPlanner(providers=providers_from_dicts(FOUR_LOCAL_NODES))
CAPACITIES = {"local": 4}
WAITER = CapacityRequest(job="waiter", nodes=3, min_nodes=3, priority=0, mode=ShortfallMode.WAIT)


def _hold(jobs_root: Path, job: str, nodes: int, run: str) -> None:
    """A real job of ``nodes`` ranks, launched (and reserved) as the LaunchOperator does."""
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager(job)
    options = LaunchOptions(run=run, recovery={"mode": "none"})
    manager.launch(PLANNER.plan(nodes), options, startup_grace_s=1)


def _queue(jobs_root: Path) -> GridCapacity:
    """The waiter's plan, under the lock: it does not fit and waits in the queue."""
    capacity = GridCapacity(GridLedgerStore(jobs_root))
    shared = capacity.plan(PLANNER, WAITER)
    assert (shared.decision.verdict, shared.decision.queue_position) == (Verdict.WAITING, 1)
    return capacity


async def _first_event(trigger: GridCapacityTrigger, timeout: float = 90.0) -> dict:
    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return await asyncio.wait_for(first(), timeout)


def test_serialize_round_trips_through_the_classpath(tmp_path):
    trigger = GridCapacityTrigger(
        jobs_root=str(tmp_path),
        request=WAITER.model_dump(),
        capacities=CAPACITIES,
        poll_interval=0.2,
        timeout_at=1_900_000_000.0,
        min_wait_s=15.0,
    )
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)

    assert rebuilt.serialize() == (classpath, kwargs)
    assert CapacityRequest.model_validate(kwargs["request"]) == WAITER
    assert kwargs["request"]["mode"] == "wait"


def test_a_request_of_a_newer_release_is_an_event_saying_so_never_an_exception(tmp_path):
    """A triggerer of an older release meets a request a newer worker wrote: one sentence."""
    newer = {**WAITER.model_dump(), "schema_version": 2, "reach": "rack-7"}
    trigger = GridCapacityTrigger(str(tmp_path), newer, CAPACITIES, poll_interval=0.2)

    event = asyncio.run(_first_event(trigger))

    assert event == {
        "status": "refused",
        "job": "waiter",
        "reason": "capacity request schema_version 2 was written by a newer release of "
        "elasticgrid-provider than this worker's, which reads 1.0: upgrade "
        "elasticgrid-provider here; the capacity request is left as it is",
    }
    minor = {**WAITER.model_dump(), "schema_minor": 1, "reach": "rack-7"}
    kept = CapacityRequest.model_validate(minor)  # a newer minor's field is kept
    assert kept.model_dump() == {**WAITER.model_dump(), "reach": "rack-7"}


@pytest.mark.long
def test_the_trigger_fires_when_the_holders_job_ends(jobs_root):
    _hold(jobs_root, "holder", 2, f'{PYTHON} -c "import time; time.sleep(4)"')
    capacity = _queue(jobs_root)
    trigger = GridCapacityTrigger(
        str(jobs_root), WAITER.model_dump(), CAPACITIES, poll_interval=0.2
    )

    event = asyncio.run(_first_event(trigger))

    assert event == {"status": "granted", "job": "waiter", "timeout_at": None}
    assert job_ranks("holder") == {}  # it fired once the holder's ranks were gone
    granted = capacity.plan(PLANNER, WAITER)  # the resumed task plans again under the lock
    assert granted.decision.verdict is Verdict.GRANTED
    assert granted.reservation["nodes"] == {"local": 3}


@pytest.mark.long
def test_a_timeout_is_an_event_naming_the_holders_never_an_exception(jobs_root):
    _hold(jobs_root, "holder", 2, SLEEPING_RUN)
    _queue(jobs_root)
    timeout_at = epoch_now() + 1.0
    trigger = GridCapacityTrigger(
        str(jobs_root), WAITER.model_dump(), CAPACITIES, poll_interval=0.2, timeout_at=timeout_at
    )

    event = asyncio.run(_first_event(trigger))

    assert event == {
        "status": "timeout",
        "job": "waiter",
        "holders": "'holder' (2 nodes) on local",
        "timeout_at": timeout_at,
    }
    assert len(job_ranks("holder")) == 2


@pytest.mark.long
def test_killing_the_deferred_task_takes_its_request_out_of_the_queue(jobs_root):
    _hold(jobs_root, "holder", 2, SLEEPING_RUN)
    _queue(jobs_root)
    store = GridLedgerStore(jobs_root)
    assert [r.job for r in store.snapshot().ledger.queue] == ["waiter"]
    trigger = GridCapacityTrigger(str(jobs_root), WAITER.model_dump(), CAPACITIES)

    asyncio.run(trigger.on_kill())

    assert store.snapshot().ledger.queue == ()


def _renewed_at(store: GridLedgerStore, job: str) -> float | None:
    return next(r.renewed_at for r in store.snapshot().ledger.queue if r.job == job)


def test_each_look_renews_the_lease_and_a_lapsed_request_is_queued_again(tmp_path, capsys):
    capacity = GridCapacity(GridLedgerStore(tmp_path))
    capacity.plan(PLANNER, CapacityRequest("holder", 4, 4))  # reserved: nothing frees up
    _queue(tmp_path)
    queued_at = _renewed_at(capacity.store, "waiter")
    trigger = GridCapacityTrigger(
        str(tmp_path), WAITER.model_dump(), CAPACITIES, poll_interval=0.2,
        timeout_at=epoch_now() + 1.0,
    )  # fmt: skip

    assert asyncio.run(_first_event(trigger))["status"] == "timeout"
    renewed_at = _renewed_at(capacity.store, "waiter")
    assert queued_at is not None and renewed_at is not None and renewed_at > queued_at

    capacity.dequeue("waiter")  # as if the lease lapsed while the triggerer was down
    trigger.timeout_at = epoch_now() + 0.5
    asyncio.run(_first_event(trigger))
    assert [r.job for r in capacity.store.snapshot().ledger.queue] == ["waiter"]
    assert "had lapsed from the grid queue" in capsys.readouterr().out  # the trigger's log


def test_a_triggerer_that_cannot_write_the_ledger_still_waits_and_fires(tmp_path, capsys):
    capacity = GridCapacity(GridLedgerStore(tmp_path))
    capacity.plan(PLANNER, CapacityRequest("holder", 4, 4))
    _queue(tmp_path)
    with read_only_mount(tmp_path) as read_only:
        trigger = GridCapacityTrigger(
            str(read_only), WAITER.model_dump(), CAPACITIES, poll_interval=0.2,
            timeout_at=epoch_now() + 0.5,
        )  # fmt: skip
        event = asyncio.run(_first_event(trigger))
    assert (event["status"], event["holders"]) == ("timeout", "'holder' (4 nodes) on local")
    assert "Could not renew job waiter's place in the grid queue" in capsys.readouterr().out
