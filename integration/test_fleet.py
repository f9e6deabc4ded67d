"""Two jobs on one grid of 4 ``local`` nodes, on the real deployment's two Celery workers.

The ``elasticgrid_default`` connection names the grid (:data:`integration.conftest.FLEET_GRID`:
provider ``fleet``, 4 nodes on the local engine). ``it_fleet_w1`` runs on worker w1 and
``it_fleet_w2`` on w2 (``integration/dags/fleet_dags.py``); each is the elastic pipeline of
one job whose plans name the job, so they count what the other job holds.

While the runs go on, :class:`Watch` reads ``/proc`` every 0.2 s and counts the rank
processes of the grid's jobs (their ``IROH_TINKER_JOB_DIR`` is a ``<job>--fleet`` part
folder): never more than 4 at once. It also reads the Fleet view (``/elasticgrid/api/fleet``
on the API server) every 0.5 s: what the ledger says is used never exceeds the capacity
either, and the queue and the shrink requests show while they stand. The decisions are
then read on the job pages (``/elasticgrid/api/jobs/<job>`` and ``/elasticgrid/jobs/<job>``).
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from integration.conftest import FLEET_GRID, FLEET_PROVIDER
from integration.deployment import Deployment, wait_until

CAPACITY = FLEET_GRID[0]["max_nodes"]
PART_SUFFIX = f"--{FLEET_PROVIDER}"
RANK_EVERY_S = 0.2
VIEW_EVERY_S = 0.5
RUN_TIMEOUT_S = 300
GATE_TIMEOUT_S = 180
W1, W2 = "it_fleet_w1", "it_fleet_w2"


def rank_counts(jobs_root: Path) -> dict[str, int]:
    """The rank processes alive now, per job of the fleet grid: those whose
    ``IROH_TINKER_JOB_DIR`` is one of its part folders (``<jobs_root>/<job>--fleet``)."""
    prefix = f"IROH_TINKER_JOB_DIR={jobs_root}/".encode()
    counts: dict[str, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()  # empty for a zombie
        except OSError:  # exited meanwhile
            continue
        for item in environ.split(b"\0"):
            if item.startswith(prefix):
                part = item[len(prefix) :].decode(errors="replace").split("/")[0]
                if part.endswith(PART_SUFFIX):
                    job = part[: -len(PART_SUFFIX)]
                    counts[job] = counts.get(job, 0) + 1
                break
    return counts


def plugin_get(deployment: Deployment, path: str) -> httpx.Response:
    """GET ``/elasticgrid<path>`` on the API server as the admin (the JWT of the REST API)."""
    response = httpx.get(
        f"{deployment.api_url}/elasticgrid{path}",
        headers={"Authorization": f"Bearer {deployment.token()}"},
        timeout=30,
    )
    response.raise_for_status()
    return response


def page_text(page: str) -> str:
    """An HTML page's text: its style sheet and tags dropped, blanks folded."""
    body = re.sub(r"<style.*?</style>", " ", page, flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


@dataclass
class Watch:
    """Samples, in two threads until the block ends, the fleet grid's rank processes (every
    0.2 s) and the Fleet view (every 0.5 s), with the time of each sample."""

    deployment: Deployment
    ranks: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    views: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _loop(self, every: float, sample: Callable[[], None]) -> None:
        while not self._stop.is_set():
            try:
                sample()
            except Exception as exc:  # kept, and reported by the test
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(every)

    def _sample_ranks(self) -> None:
        self.ranks.append((time.monotonic(), rank_counts(self.deployment.jobs_root)))

    def _sample_view(self) -> None:
        view = plugin_get(self.deployment, "/api/fleet").json()
        if view.get("error"):
            raise RuntimeError(view["error"])
        self.views.append((time.monotonic(), view))

    @contextlib.contextmanager
    def running(self) -> Iterator[Watch]:
        """Sample while the block runs; both threads are stopped and joined at its end."""
        threads = [
            threading.Thread(target=self._loop, args=(RANK_EVERY_S, self._sample_ranks)),
            threading.Thread(target=self._loop, args=(VIEW_EVERY_S, self._sample_view)),
        ]
        for thread in threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in threads:
                thread.join(timeout=30)

    # -- what the samples show ---------------------------------------------------
    def peak(self) -> tuple[int, dict[str, int]]:
        """The most rank processes seen at once, and the sample that had them."""
        return max(((sum(c.values()), c) for _, c in self.ranks), key=lambda item: item[0])

    def most(self, job: str) -> int:
        """The most rank processes of ``job`` seen at once."""
        return max((counts.get(job, 0) for _, counts in self.ranks), default=0)

    def seen(self, job: str) -> tuple[float, float] | None:
        """When ranks of ``job`` were first and last seen (monotonic), or None."""
        times = [at for at, counts in self.ranks if counts.get(job)]
        return (times[0], times[-1]) if times else None

    def together(self, sizes: dict[str, int]) -> bool:
        """Whether one sample saw exactly ``sizes`` ranks of those jobs at once."""
        return any(all(c.get(j, 0) == n for j, n in sizes.items()) for _, c in self.ranks)

    def fleet(self, view: dict[str, Any]) -> dict[str, Any]:
        """The fleet provider's row of a view."""
        return next(row for row in view["providers"] if row["name"] == FLEET_PROVIDER)

    def used(self, view: dict[str, Any]) -> int:
        """The nodes the ledger counts as used on the fleet provider in ``view`` (per job,
        the larger of held and reserved)."""
        cells = self.fleet(view)["jobs"].values()
        return sum(max(cell["held"], cell["reserved"]) for cell in cells)

    def any_view(self, check: Callable[[dict[str, Any]], bool]) -> bool:
        """Whether some sampled view passes ``check``."""
        return any(check(view) for _, view in self.views)

    def open_when(self, gate: Path, check: Callable[[dict[str, Any]], bool]) -> None:
        """Open ``gate`` (the file the runs' ranks wait for) once a sampled view passes
        ``check``, or after ``GATE_TIMEOUT_S`` (the test's own assertion then fails)."""
        deadline = time.monotonic() + GATE_TIMEOUT_S
        while not self.any_view(check) and time.monotonic() < deadline:
            time.sleep(VIEW_EVERY_S)
        gate.touch()

    def holdings(self, view: dict[str, Any]) -> dict[str, int]:
        """Nodes held per job on the fleet provider in ``view``."""
        return {job: cell["held"] for job, cell in self.fleet(view)["jobs"].items()}

    def report(self) -> str:
        """What was seen, for a failing assertion: the rank changes and the last views."""
        changes, last = [], None
        for at, counts in self.ranks:
            if counts != last:
                changes.append(f"{at:.1f}: {counts}")
                last = counts
        views = [f"{at:.1f}: {view}" for at, view in self.views[-3:]]
        return "\n".join(["ranks:", *changes, "views:", *views, "errors:", *self.errors[-5:]])

    def check_grid_never_oversubscribed(self) -> None:
        """Never more than the capacity of ranks at once, nor of nodes used in the ledger;
        and both samplers really ran."""
        assert len(self.ranks) > 20 and len(self.views) > 5, self.report()
        most, sample = self.peak()
        assert most <= CAPACITY, f"{most} ranks at once: {sample}\n{self.report()}"
        for _, view in self.views:
            assert self.fleet(view)["capacity"] == CAPACITY, view
            assert self.used(view) <= CAPACITY, f"the ledger over-subscribes: {view}"
        print(f"\npeak ranks on the grid: {most} {sample}; {len(self.ranks)} samples")


@pytest.fixture
def fleet_jobs(deployment: Deployment) -> Iterator[list[str]]:
    """The test's job names; any still running at the end is stopped (a failed test's)."""
    from tests.job_processes import stop_job

    jobs: list[str] = []
    yield jobs
    alive = rank_counts(deployment.jobs_root)
    for job in jobs:
        if alive.get(job):
            stop_job(deployment.jobs_root, job)


@pytest.fixture
def gate(deployment: Deployment) -> Iterator[Path]:
    """A gate file for a test's runs (their conf's ``gate``): their ranks wait for it before
    their first step. Opened at the end whatever happened, so no rank waits on."""
    path = deployment.home / f"gate-{time.monotonic_ns()}"
    yield path
    path.touch()


def run_at_once(
    deployment: Deployment,
    jobs: dict[str, str],
    settings: dict[str, Any],
    gate: Path,
    open_when: Callable[[Watch, dict[str, Any]], bool],
) -> tuple[Watch, dict[str, str]]:
    """Trigger each DAG for its job with the same ``settings``, back to back; open ``gate``
    once a Fleet view passes ``open_when``, so the jobs meet on the grid however slowly
    the runs start; watch until every run succeeded and the grid was never over-subscribed.
    The watch and the run ids."""
    watch = Watch(deployment)
    with watch.running():
        runs = {
            dag_id: deployment.trigger(dag_id, fleet_conf(job, gate=str(gate), **settings))
            for dag_id, job in jobs.items()
        }
        watch.open_when(gate, lambda view: open_when(watch, view))
        wait_all(deployment, runs)
    watch.check_grid_never_oversubscribed()
    return watch, runs


def wait_all(deployment: Deployment, runs: dict[str, str]) -> None:
    """Wait for every run; each must succeed."""
    for dag_id, run_id in runs.items():
        state = deployment.wait_for_run(dag_id, run_id, timeout=RUN_TIMEOUT_S)
        assert state == "success", (
            dag_id,
            deployment.task_instances(dag_id, run_id),
            deployment.diagnostics(),
        )


def history(deployment: Deployment, job: str) -> list[dict[str, Any]]:
    """The job's decisions as its page's JSON gives them (oldest first)."""
    return list(plugin_get(deployment, f"/api/jobs/{job}").json()["history"])


def holds_for_capacity(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The holds whose ``held_by`` names the ``capacity`` rule."""
    return [
        record
        for record in records
        if record.get("action") == "hold"
        and any(hold.get("rule") == "capacity" for hold in record.get("held_by") or ())
    ]


def fleet_conf(job: str, **settings: Any) -> dict[str, Any]:
    """A fleet DAG's run conf (``integration/dags/fleet_dags.py`` lists the keys)."""
    return {"job_name": job, **settings}


def test_with_take_what_fits_the_second_starts_smaller_and_grows_when_the_first_ends(
    deployment: Deployment, fleet_jobs: list[str], gate: Path
):
    jobs = {W1: "fleet-fit-1", W2: "fleet-fit-2"}
    fleet_jobs.extend(jobs.values())
    # 12 micro-batches a step: 4 rounds at 3 ranks, 12 at 1, so the smaller job is still
    # running, and queue-bound, long after the larger one ended
    settings = {
        "nodes": 3,
        "min_nodes": 1,
        "on_shortfall": "take_what_fits",
        "steps": 200,
        "global_batch": 12,
        "microbatch_seconds": 0.02,
    }
    # the ranks start once both jobs hold the grid, one all it asked for, the other what was left
    watch, runs = run_at_once(
        deployment,
        jobs,
        settings,
        gate,
        lambda watch, view: (
            sorted(watch.holdings(view).get(job, 0) for job in jobs.values()) == [1, 3]
        ),
    )
    planned = {
        job: deployment.xcom(dag_id, runs[dag_id], "plan")["total_nodes"]
        for dag_id, job in jobs.items()
    }
    assert sorted(planned.values()) == [1, 3], planned
    first = next(job for job, nodes in planned.items() if nodes == 3)
    second = next(job for job, nodes in planned.items() if nodes == 1)
    second_dag = next(dag_id for dag_id, job in jobs.items() if job == second)
    # both ran at once on the whole grid, then the second alone at the size it asked for
    assert watch.together({first: 3, second: 1}), watch.report()
    assert watch.most(second) == 3, watch.report()
    assert watch.seen(second)[1] > watch.seen(first)[1], watch.report()
    decision = deployment.xcom(second_dag, runs[second_dag], "scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_up",
        1,
        3,
    )
    grown = deployment.xcom(second_dag, runs[second_dag], "relaunch")
    assert (grown["nodes"], grown["status"]) == (3, "done")
    # its page shows the scale-up held for capacity, naming the job that held it
    holds = holds_for_capacity(history(deployment, second))
    assert holds and any(first in hold["reason"] for hold in holds), history(deployment, second)
    assert "capacity" in page_text(plugin_get(deployment, f"/jobs/{second}").text)
    # the Fleet view showed both holding the whole grid, and the second's claim queued
    assert watch.any_view(
        lambda view: (
            watch.holdings(view) == {first: 3, second: 1} and watch.fleet(view)["free"] == 0
        )
    ), watch.report()
    assert watch.any_view(lambda view: any(r["job"] == second for r in view["queue"])), (
        watch.report()
    )


def test_a_higher_priority_job_shrinks_a_lower_one_and_both_finish(
    deployment: Deployment, fleet_jobs: list[str]
):
    low, high = "fleet-low", "fleet-high"
    fleet_jobs.extend([low, high])
    # 4 micro-batches a step: 2 rounds at 3 ranks and at 2, so the shrink costs the low
    # job only its restart
    low_conf = fleet_conf(low, nodes=3, min_nodes=2, priority=0, steps=500, microbatch_seconds=0.05)
    high_conf = fleet_conf(high, nodes=2, min_nodes=2, priority=10, steps=60)
    watch = Watch(deployment)
    with watch.running():
        low_run = deployment.trigger(W1, low_conf)
        wait_until("the low job on 3 nodes", lambda: watch.most(low) == 3, timeout=180)
        high_run = deployment.trigger(W2, high_conf)  # 2 wanted, 1 free
        wait_all(deployment, {W1: low_run, W2: high_run})
    watch.check_grid_never_oversubscribed()
    # the low job's check shrank it for the high one, to its min_nodes, and it finished
    decision = deployment.xcom(W1, low_run, "scale_check")
    assert (decision["action"], decision["current_nodes"], decision["target_nodes"]) == (
        "scale_down",
        3,
        2,
    ), decision
    assert decision["rule"] == "preempted" and decision["preempted_by"] == high, decision
    shrunk = deployment.xcom(W1, low_run, "relaunch")
    assert (shrunk["nodes"], shrunk["status"]) == (2, "done")
    assert deployment.xcom(W2, high_run, "launch", key="job")["nodes"] == 2
    # the high job ran beside the shrunk low one
    assert watch.together({low: 2, high: 2}), watch.report()
    # the Fleet view showed the high job queued and the shrink it asked for
    assert watch.any_view(
        lambda view: (
            any(r["job"] == high and r["priority"] == 10 for r in view["queue"])
            and any(
                (s["job"], s["to_nodes"], s["by_job"]) == (low, 2, high) for s in view["shrinks"]
            )
        )
    ), watch.report()
    # both pages show the decisions: the shrink, naming the job it made room for
    preempted = [r for r in history(deployment, low) if r.get("rule") == "preempted"]
    assert [r.get("preempted_by") for r in preempted] == [high], history(deployment, low)
    page = page_text(plugin_get(deployment, f"/jobs/{low}").text)
    assert "preempted" in page and high in page, page
    assert history(deployment, high), "the high job's checks are on its page"


def test_a_higher_priority_job_waits_rather_than_push_a_lower_one_past_its_deadline(
    deployment: Deployment, fleet_jobs: list[str]
):
    low, high = "fleet-due", "fleet-urgent"
    fleet_jobs.extend([low, high])
    # 12 micro-batches of 0.1 s a step: about 0.4 s a step at 3 ranks, 1.2 s at 1 (120 steps:
    # about 50 s and 145 s). From its first check the deadline leaves the low job about twice
    # what it needs at 3 nodes and too little at 1 node, so it is on track and a shrink to 1
    # would push it past the deadline; the high job (no deadline) wants 3 nodes, 1 is free.
    deadline_s = 150.0
    deadline_at = time.monotonic() + deadline_s
    due = datetime.now(timezone.utc) + timedelta(seconds=deadline_s)
    low_conf = fleet_conf(
        low,
        nodes=3,
        min_nodes=1,
        priority=0,
        steps=120,
        global_batch=12,
        microbatch_seconds=0.1,
        deadline=due.isoformat(),
    )
    high_conf = fleet_conf(high, nodes=3, min_nodes=3, priority=10, steps=40)
    watch = Watch(deployment)
    with watch.running():
        low_run = deployment.trigger(W1, low_conf)
        wait_until("the low job on 3 nodes", lambda: watch.most(low) == 3, timeout=180)
        # its claim on the grid carries its deadline once a check weighed it
        wait_until(
            "a check of the low job against its deadline",
            lambda: any(r.get("time_left_s") is not None for r in history(deployment, low)),
            timeout=120,
        )
        high_run = deployment.trigger(W2, high_conf)
        wait_all(deployment, {W1: low_run, W2: high_run})
    watch.check_grid_never_oversubscribed()
    checks = history(deployment, low)
    # its checks counted the time left to its deadline
    assert any(record.get("time_left_s") is not None for record in checks), checks
    # nobody shrank the low job: it ran on 3 nodes to its end, before its deadline
    assert not [r for r in checks if r.get("rule") == "preempted"], checks
    assert not watch.any_view(lambda view: any(s["job"] == low for s in view["shrinks"])), (
        watch.report()
    )
    low_seen, high_seen = watch.seen(low), watch.seen(high)
    assert low_seen is not None and high_seen is not None, watch.report()
    assert low_seen[1] < deadline_at, (deadline_at, watch.report())
    # the high job queued behind it, and ran on the whole 3 nodes it asked for once it ended
    assert watch.any_view(lambda view: any(r["job"] == high for r in view["queue"])), watch.report()
    assert high_seen[0] > low_seen[1], watch.report()
    assert watch.most(high) == 3, watch.report()
    assert deployment.xcom(W2, high_run, "launch", key="job")["nodes"] == 3
