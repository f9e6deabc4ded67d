"""Three plan -> launch runs at once on a grid that fits two: a plan that said yes is honoured.

Each plan reserves what it places under the grid's lock and its launch takes exactly that
reservation, so two launch, the third waits in the grid's queue and launches when one of
them ends: no launch is refused, no run fails, the grid is never over-subscribed, and the
Fleet view shows the third queued while the first two hold the grid. The ranks wait at a
gate until the view shows that, so the runs meet on the grid however slowly a busy machine
starts them. Two runs of ``it_fleet_w1`` (worker w1, waiting in the worker) and one of
``it_fleet_w2`` (worker w2, deferred to the triggerer), triggered back to back, on the 4-node
fleet grid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from integration.deployment import Deployment
from integration.test_fleet import RUN_TIMEOUT_S, W1, W2, Watch, fleet_conf, fleet_jobs, gate

__all__ = ["fleet_jobs", "gate"]  # the fixtures, used below


def test_three_plans_on_a_grid_that_fits_two_two_launch_and_the_third_waits_its_turn(
    deployment: Deployment, fleet_jobs: list[str], gate: Path
):
    jobs = {"queue-1": W1, "queue-2": W1, "queue-3": W2}
    fleet_jobs.extend(jobs)
    size = {"nodes": 2, "min_nodes": 2, "max_nodes": 2, "steps": 100}  # 3 x 2 > 4
    watch = Watch(deployment)

    def two_hold_and_one_queued(view: dict[str, Any]) -> bool:
        holding = {job for job in jobs if watch.holdings(view).get(job) == 2}
        queued = {row["job"] for row in view["queue"] if row["nodes"] == 2}
        return len(holding) == 2 and set(jobs) - holding <= queued

    with watch.running():
        runs = {
            job: (dag_id, deployment.trigger(dag_id, fleet_conf(job, gate=str(gate), **size)))
            for job, dag_id in jobs.items()
        }
        # the ranks start once two jobs hold the grid and the third waits in its queue, so
        # the first two cannot end before the third has planned, however slowly runs start
        watch.open_when(gate, two_hold_and_one_queued)
        for job, (dag_id, run_id) in runs.items():
            state = deployment.wait_for_run(dag_id, run_id, timeout=RUN_TIMEOUT_S)
            assert state == "success", (
                job,
                deployment.task_instances(dag_id, run_id),
                deployment.diagnostics(),
            )
    watch.check_grid_never_oversubscribed()
    seen = {job: watch.seen(job) for job in jobs}
    assert all(seen.values()), watch.report()
    assert all(watch.most(job) == 2 for job in jobs), watch.report()
    *first_two, third = sorted(jobs, key=lambda job: seen[job][0])
    # the third started only once one of the first two had ended
    assert seen[third][0] > min(seen[job][1] for job in first_two), watch.report()
    for job, (dag_id, run_id) in runs.items():
        launch = deployment.task_instances(dag_id, run_id)["launch"]
        assert launch["try_number"] == 1, (job, launch)  # never refused, never retried
        assert deployment.xcom(dag_id, run_id, "launch", key="job")["nodes"] == 2
    # the Fleet view showed the third in the queue while the first two held the grid
    assert watch.any_view(
        lambda view: (
            all(watch.holdings(view).get(job) == 2 for job in first_two)
            and any(r["job"] == third and r["nodes"] == 2 for r in view["queue"])
        )
    ), watch.report()
