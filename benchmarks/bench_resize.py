"""Resize gap on a real deployment: the provider's resize vs a bare iroh-tinker restart.

``make bench-resize`` starts the integration deployment (Postgres, Redis,
scheduler, dag-processor, triggerer, api-server, two Celery workers; see
``integration/deployment.py``) and, per round (``--rounds``; ``--quick``: one):

1. **provider**: triggers ``elastic_rescale_check`` with ``{"launch": true}``
   (the queue-bound example job at 2 nodes), waits for its first steps, then
   triggers a check run, which decides ``scale_up`` 2 -> 4, re-plans and
   resizes the job. The job trains on while the check, the re-plan and the
   resize task are scheduled; only the resize task's stop + start interrupts it.
2. **bare**: on that same job (now 4 nodes, 2 parts), stops every part with
   iroh-tinker's ``JobManager.stop`` and launches it again with
   ``JobManager.launch``: the least a restart can cost. The specs are written
   for the purpose, before the clock starts, exactly as the provider renders
   them (the DAG's ``resize`` task's options, the job's placement, a fresh
   rendezvous, the same shared checkpoint folder), and launched in the
   environment of the worker that ran the resize. Never from the job's own
   spec files: once the ranks start, their ``envs`` values read ``***``.

The gap is read from the job's step log (``time`` of each step, written by
global rank 0): seconds from the last step before the interruption to the
first step after it. Each side must resume from the checkpoint at the new
size, or the benchmark fails quoting the ranks' logs. Printed: the gaps and
the ratio provider / bare (target: <= 1.5).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import statistics
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report import Report, Table, arguments, check, ratio, seconds_range  # noqa: E402
from benchmarks.restarts import (  # noqa: E402
    check_same_launch,
    launch_bare,
    read_steps,
    resumed_gap,
    wait_for_step,
    write_bare_specs,
)
from integration.deployment import Deployment, wait_until  # noqa: E402

if TYPE_CHECKING:
    from elasticgrid_provider.core.launch_spec import LaunchOptions

DAG_ID = "elastic_rescale_check"
DAG_FILE = ROOT / "example_dags" / f"{DAG_ID}.py"


def provider_resize(deployment: Deployment, job: str) -> tuple[float, str]:
    """Launch at 2 nodes, let a scheduled check resize to 4; the gap, and the worker that did."""
    jobs_root = deployment.jobs_root
    started = deployment.trigger(DAG_ID, {"job_name": job, "launch": True})
    check(deployment.wait_for_run(DAG_ID, started, timeout=300) == "success",
          f"the launch run of {job} failed: {deployment.task_states(DAG_ID, started)}")  # fmt: skip
    wait_until("the job's first steps", lambda: len(read_steps(jobs_root, job)) >= 5, 180)
    checked = deployment.trigger(DAG_ID, {"job_name": job})
    check(deployment.wait_for_run(DAG_ID, checked, timeout=600) == "success",
          f"the check run of {job} failed: {deployment.task_states(DAG_ID, checked)}")  # fmt: skip
    resized = deployment.xcom(DAG_ID, checked, "resize")
    check(resized["nodes"] == 4, f"the provider resized {job} to {resized['nodes']} nodes, not 4")
    manifest = json.loads((jobs_root / job / "manifest.json").read_text())
    parts = [part["name"] for part in manifest["parts"]]
    steps = wait_for_step(
        "the provider's resize", jobs_root, job, parts, lambda step: step["nodes"] == 4
    )
    last_old = max(s["time"] for s in steps if s["nodes"] == 2)
    worker = deployment.task_instances(DAG_ID, checked)["resize"]["hostname"]
    return resumed_gap(steps, last_old, 4, "the provider's resize"), worker


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """This process's environment is ``env`` inside the block (the local engine passes it on)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def resize_options() -> LaunchOptions:
    """The options the DAG's ``resize`` task launches with (rendezvous and launch id unset;
    ``run`` as rendered here, not on the worker)."""
    from elasticgrid_provider.core.launch_spec import LaunchOptions

    resize = runpy.run_path(str(DAG_FILE))["dag"].get_task("resize")
    return LaunchOptions(
        run=resize.run,
        workdir=resize.workdir,
        procs_per_node=resize.procs_per_node,
        backend=resize.backend,
        envs=resize.envs,
        setup=resize.setup,
        rendezvous=resize.rendezvous,
        recovery=resize.recovery,
        checkpoint=resize.checkpoint,
    )


def bare_restart(
    jobs_root: Path, job: str, options: LaunchOptions, env: Mapping[str, str]
) -> float:
    """Stop every part of the running job and launch it again with iroh-tinker alone; the gap.

    The specs are written for the purpose before the clock starts
    (:func:`write_bare_specs`): ``options`` with the command the job's manifest
    records (the worker rendered it from its own copy of the DAG), at the job's
    placement, launched in ``env``. Fails, quoting the ranks' logs, unless the
    job resumes at its size.
    """
    from iroh_tinker.cloud import JobManager

    from elasticgrid_provider.core.launch_record import new_launch_id
    from elasticgrid_provider.core.placement import Placement

    manifest = json.loads((jobs_root / job / "manifest.json").read_text())
    options = replace(options, run=manifest["run"])
    check_same_launch(options, manifest, "the bare restart")
    placement = Placement.model_validate(manifest["placement"])
    specs = write_bare_specs(jobs_root, job, placement, options, f"bare-{new_launch_id()}")
    count = len(read_steps(jobs_root, job))
    wait_until("more steps", lambda: len(read_steps(jobs_root, job)) >= count + 3, 120)
    manager = JobManager(root=jobs_root)
    for part in manifest["parts"]:
        manager.stop(part["name"])
    stopped_at = time.time()
    with environment(env):
        running = launch_bare(jobs_root, specs)
    nodes = placement.total_nodes
    steps = wait_for_step(
        "the bare restart",
        jobs_root,
        job,
        [name for name, _ in specs],
        lambda step: step["time"] > stopped_at and step["nodes"] == nodes,
        running=running,
    )
    check(running(), "the bare restart's ranks exited right after their first step")
    return resumed_gap(steps, stopped_at, nodes, "the bare restart")


def main() -> None:
    """Start the deployment, measure both gaps per round, report them and the ratio."""
    parser = arguments(__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="jobs to resize (default 2)")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    began = time.monotonic()
    deployment = Deployment.start()
    os.environ.update(deployment.env)  # Airflow imported here reads the deployment's settings
    provider: list[float] = []
    bare: list[float] = []
    try:
        deployment.wait_for_dags([DAG_ID])
        print(f"deployment up in {time.monotonic() - began:.0f}s", flush=True)
        for number in range(rounds):
            job = f"bench-resize-{number}"
            gap, worker = provider_resize(deployment, job)
            provider.append(gap)
            env = deployment.worker_env(worker)
            bare.append(bare_restart(deployment.jobs_root, job, resize_options(), env))
            print(
                f"round {number + 1}: provider resize gap {provider[-1]:.2f}s, "
                f"bare stop + launch gap {bare[-1]:.2f}s",
                flush=True,
            )
            from tests.job_processes import stop_job

            stop_job(deployment.jobs_root, job)
    finally:
        deployment.stop()
    report = Report(
        "resize",
        "Resize gap on a real deployment against a bare iroh-tinker restart",
        "The gap is the time from the last step at the old size to the first at the new one, "
        "read from the job's step log. Provider: a scheduled check decides scale_up 2 -> 4 "
        "nodes, re-plans and resizes the job (Postgres, Redis, two Celery workers); the job "
        "trains on until the resize task stops it. Baseline, in the same run on the same job: "
        "iroh-tinker's own stop + launch of its 4 nodes, from specs rendered as the provider "
        "renders them, in the worker's environment. Both must resume from the checkpoint.",
        quick=args.quick,
        settings=f"{rounds} round(s), medians (range)",
    )
    median_provider, median_bare = statistics.median(provider), statistics.median(bare)
    rows = [
        ["provider: scheduled check -> re-plan -> resize 2 -> 4 nodes", seconds_range(provider),
         ratio(median_provider, median_bare)],
        ["bare iroh-tinker stop + launch of the same job", seconds_range(bare), "1.00"],
    ]  # fmt: skip
    report.tables.append(Table(["restart", "gap (s)", "ratio to the bare restart"], rows))
    report.notes.append(
        "Target: provider / bare <= 1.5. Both are dominated by process start-up (Python, "
        "numpy, the rendezvous), so the seconds move with the machine's load; the ratio less."
    )
    report.publish(args.json)


if __name__ == "__main__":
    main()
