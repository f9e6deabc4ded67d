"""A launch reserves its placement in the grid ledger before it stops or starts anything.

Real local iroh-tinker jobs with real processes on a grid of 4 ``local`` nodes, through
the LaunchManager the LaunchOperator uses.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from elasticgrid_provider.core.errors import GridCapacityError, JobLaunchError
from elasticgrid_provider.core.fleet.ledger import HoldingPhase, job_usage
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from tests.dag_settings import PYTHON, SLEEPING_RUN
from tests.dags.fleet_dags import FOUR_LOCAL_NODES
from tests.job_processes import is_alive, job_ranks, rank_pids

pytestmark = [pytest.mark.airflow, pytest.mark.long]

PLANNER = GridPlanner(providers=providers_from_dicts(FOUR_LOCAL_NODES))
SLEEPING = LaunchOptions(run=SLEEPING_RUN, recovery={"mode": "none"})
SHORT = LaunchOptions(run=f'{PYTHON} -c "import time; time.sleep(3)"', recovery={"mode": "none"})


def _ledger(jobs_root: Path):
    return GridLedgerStore(jobs_root).snapshot().ledger


def test_a_refused_resize_leaves_the_running_job_alone(jobs_root):
    hook = ElasticGridHook(jobs_root=str(jobs_root))
    big, small = hook.launch_manager("big"), hook.launch_manager("small")
    big.launch(PLANNER.plan(3), SLEEPING, startup_grace_s=1)
    small.launch(PLANNER.plan(1), SLEEPING, startup_grace_s=1)
    pids = rank_pids(jobs_root, "small--local")
    manifest = (jobs_root / "small" / "manifest.json").read_text()

    with pytest.raises(GridCapacityError) as refused:
        hook.launch_manager("small").launch(PLANNER.plan(2), SLEEPING, startup_grace_s=1)

    assert str(refused.value) == (
        "job 'small' was not launched and nothing was stopped: provider 'local' has 1 free "
        "nodes but job 'small' asked for 2; held by 'big' (3 nodes)"
    )
    assert rank_pids(jobs_root, "small--local") == pids
    assert all(is_alive(pid) for pid in pids)
    assert (jobs_root / "small" / "manifest.json").read_text() == manifest
    assert len(list((jobs_root / "small" / "specs").iterdir())) == 1  # nothing written
    ledger = _ledger(jobs_root)
    assert job_usage(ledger, "small") == {"local": 1}
    assert {h.phase for h in ledger.holdings_of("small")} == {HoldingPhase.HELD}
    assert len(job_ranks("big")) == 3


def test_a_launch_confirms_its_reservation_and_a_stop_releases_it(jobs_root):
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager("owner")
    manager.launch(PLANNER.plan(2), SLEEPING, startup_grace_s=1)

    ledger = _ledger(jobs_root)
    (holding,) = ledger.holdings_of("owner")
    assert (holding.phase, holding.launch_id, holding.nodes) == (
        HoldingPhase.HELD,
        manager.launch_id,
        2,
    )
    stored = json.loads((jobs_root / ".grid" / "ledger.json").read_text())
    assert [h["phase"] for h in stored["holdings"]] == ["held"]  # confirmed on disk, not only
    # in the reconciled view

    manager.stop()

    assert job_ranks("owner") == {}
    assert _ledger(jobs_root).holdings_of("owner") == ()
    assert json.loads((jobs_root / ".grid" / "ledger.json").read_text())["holdings"] == []


def test_a_failed_start_gives_the_nodes_back(jobs_root):
    failing = LaunchOptions(run=f'{PYTHON} -c "import sys; sys.exit(3)"', recovery={"mode": "none"})
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager("broken")
    with pytest.raises(JobLaunchError, match="job 'broken' is down"):
        manager.launch(PLANNER.plan(3), failing, startup_grace_s=2)

    assert _ledger(jobs_root).holdings_of("broken") == ()
    stored = json.loads((jobs_root / ".grid" / "ledger.json").read_text())
    assert stored["holdings"] == []


def test_a_job_that_ends_on_its_own_holds_nothing_though_nobody_saw_it_end(jobs_root):
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager("brief")
    manager.launch(PLANNER.plan(3), SHORT, startup_grace_s=1)
    assert job_usage(_ledger(jobs_root), "brief") == {"local": 3}
    pids = rank_pids(jobs_root, "brief--local")

    deadline = time.monotonic() + 60
    while any(is_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, "the short job did not end within 60 s"
        time.sleep(0.2)

    part = json.loads((jobs_root / "brief--local" / "job.json").read_text())
    assert part["status"] == "running"  # nobody asked iroh-tinker since: unobserved
    manifest = json.loads((jobs_root / "brief" / "manifest.json").read_text())
    assert manifest["state"] == "running"
    assert _ledger(jobs_root).holdings_of("brief") == ()
    # and the next job gets the whole grid
    other = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager("next")
    other.launch(PLANNER.plan(4), SLEEPING, startup_grace_s=1)
    assert len(job_ranks("next")) == 4


def _shares(placement: dict) -> dict[str, int]:
    return {share["provider"]: share["nodes"] for share in placement["assignments"]}


def test_a_plan_without_job_name_learns_it_from_its_launch_and_avoids_held_nodes(
    airflow_db, jobs_root, capfd
):
    from tests.airflow_support import run_dag

    run_dag("fleet_hold_on_two", {"job_name": "holder", "nodes": 1, "seconds": 600})
    ranks = job_ranks("holder")
    assert job_usage(_ledger(jobs_root), "holder") == {"onprem": 1}
    capfd.readouterr()

    result = run_dag("fleet_unaware_plan", {"job_name": "blind", "nodes": 2})

    assert result.task_states == {"plan": "success", "launch": "success"}
    # the cheapest placement that fits beside the holder: the free on-prem node, one cloud
    assert _shares(result.xcom("plan")) == {"onprem": 1, "cloud": 1}
    reservation = result.xcom("plan", "reservation")
    assert reservation["job"] == "blind"
    assert reservation["nodes"] == {"onprem": 1, "cloud": 1}
    assert job_usage(_ledger(jobs_root), "blind") == {"onprem": 1, "cloud": 1}
    assert len(job_ranks("blind")) == 2 and job_ranks("holder") == ranks
    assert "Planning for job blind, which the launch of this placement starts" in (
        capfd.readouterr().out
    )


def test_a_plan_with_no_job_to_learn_places_around_held_nodes_and_says_it_reserves_nothing(
    airflow_db, jobs_root, capfd
):
    from tests.airflow_support import run_dag

    run_dag("fleet_hold_on_two", {"job_name": "holder", "nodes": 2, "seconds": 600})
    before = _ledger(jobs_root)
    capfd.readouterr()

    result = run_dag("fleet_plan_only", {"nodes": 2})

    assert result.task_states == {"plan": "success"}
    assert _shares(result.xcom("plan")) == {"cloud": 2}  # on-prem is held
    assert result.xcom("plan", "reservation") is None
    assert _ledger(jobs_root).holdings == before.holdings  # nothing reserved
    assert (
        "so it reserves nothing: it places around the nodes other jobs hold now (2 on onprem)"
        in (capfd.readouterr().out)
    )


def test_a_launch_that_fails_before_starting_gives_its_plans_nodes_back_at_once(
    airflow_db, jobs_root, capfd
):
    from tests.airflow_support import run_dag

    result = run_dag("fleet_bad_launch", {"job_name": "bad-launch", "nodes": 3})

    assert result.task_states == {"plan": "success", "launch": "failed"}
    assert result.xcom("plan", "reservation")["nodes"] == {"local": 3}
    assert job_usage(_ledger(jobs_root), "bad-launch") == {}  # not after the lease: now
    out = capfd.readouterr().out
    assert "secret_envs names 'MISSING', which is not a key of envs" in out
    assert "Gave back the nodes the plan reserved for job bad-launch" in out
    # another job's plan that asks for the whole grid, or fails, gets it
    other = run_dag("fleet_hold", {"job_name": "next", "nodes": 4, "seconds": 600})
    assert other.task_states == {"plan": "success", "launch": "success"}
    assert len(job_ranks("next")) == 4


def test_a_launch_whose_provider_name_means_another_pool_is_refused_before_anything(jobs_root):
    hook = ElasticGridHook(jobs_root=str(jobs_root))
    hook.launch_manager("a").launch(PLANNER.plan(2), SLEEPING, startup_grace_s=1)
    rack_two = [{**FOUR_LOCAL_NODES[0], "region": "rack-2"}]  # same name, another pool
    elsewhere = GridPlanner(providers=providers_from_dicts(rack_two))

    with pytest.raises(GridCapacityError) as refused:
        hook.launch_manager("b").launch(elsewhere.plan(1), SLEEPING, startup_grace_s=1)

    assert str(refused.value) == (
        "job 'b' was not launched and nothing was stopped: provider 'local' of job 'b' is not "
        "the pool that other jobs hold under that name on this grid (engine 'local/rack-2', not "
        "'local'); held by 'a' (2 nodes): give one of them another name, or both the same "
        "definition"
    )
    assert not (jobs_root / "b" / "manifest.json").exists()
    assert job_ranks("b") == {} and len(job_ranks("a")) == 2
