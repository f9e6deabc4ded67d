"""Resize gap on a real deployment: the provider's resize vs a bare iroh-tinker restart.

``make bench-resize`` starts the integration deployment (Postgres, Redis,
scheduler, dag-processor, triggerer, api-server, two Celery workers; see
``integration/deployment.py``) and, per round:

1. **provider**: triggers ``elastic_rescale_check`` with ``{"launch": true}``
   (the queue-bound example job at 2 nodes), waits for its first steps, then
   triggers a check run, which decides ``scale_up`` 2 -> 4, re-plans and
   resizes the job. The job trains on while the check, the re-plan and the
   resize task are scheduled; only the resize task's stop + start interrupts it.
2. **bare**: on that same job (now 4 nodes, 2 parts), stops every part with
   iroh-tinker's ``JobManager.stop`` and launches the same part specs again
   with ``JobManager.launch`` (fresh rendezvous, markers cleared): the least
   a restart can cost.

The gap is read from the job's step log (``time`` of each step, written by
global rank 0): seconds from the last step before the interruption to the
first step after it. Printed: each gap, and the ratio provider / bare
(target: <= 1.5).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from integration.deployment import Deployment, wait_until  # noqa: E402

DAG_ID = "elastic_rescale_check"


def read_steps(deployment: Deployment, job: str) -> list[dict]:
    """The job's step log (global rank 0 runs in the ``onprem`` part)."""
    path = deployment.jobs_root / f"{job}--onprem" / "steps.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def gap_between(steps: list[dict], before: float, after_nodes: int) -> float:
    """Seconds from the last step logged before ``before`` to the first one after it at the size."""
    old = [s for s in steps if s["time"] <= before]
    new = [s for s in steps if s["time"] > before and s["nodes"] == after_nodes]
    return new[0]["time"] - old[-1]["time"]


def provider_resize(deployment: Deployment, job: str) -> float:
    """Launch at 2 nodes, let a scheduled check resize to 4; the gap from the step log."""
    started = deployment.trigger(DAG_ID, {"job_name": job, "launch": True})
    assert deployment.wait_for_run(DAG_ID, started, timeout=300) == "success"
    wait_until("the job's first steps", lambda: len(read_steps(deployment, job)) >= 5, 180)
    checked = deployment.trigger(DAG_ID, {"job_name": job})
    assert deployment.wait_for_run(DAG_ID, checked, timeout=600) == "success"
    resized = deployment.xcom(DAG_ID, checked, "resize")
    assert resized["nodes"] == 4, resized
    wait_until(
        "a step at 4 nodes",
        lambda: any(s["nodes"] == 4 for s in read_steps(deployment, job)),
        timeout=180,
    )
    steps = read_steps(deployment, job)
    last_old = max(s["time"] for s in steps if s["nodes"] == 2)
    return gap_between(steps, last_old, 4)


def bare_restart(deployment: Deployment, job: str) -> float:
    """Stop every part of the job and launch the same specs again, with iroh-tinker alone."""
    from iroh_tinker.cloud import JobManager

    manager = JobManager(root=deployment.jobs_root)
    manifest = json.loads((deployment.jobs_root / job / "manifest.json").read_text())
    count = len(read_steps(deployment, job))
    wait_until("more steps", lambda: len(read_steps(deployment, job)) >= count + 3, 120)
    for part in manifest["parts"]:
        manager.stop(part["name"])
    stopped_at = time.time()
    rendezvous = Path(manifest["rendezvous"].removeprefix("dir:"))
    for stale in rendezvous.glob("*"):  # a restart needs a fresh rendezvous
        stale.unlink()
    for part in manifest["parts"]:
        for pattern in ("done_*", "attempt_*"):
            for marker in (deployment.jobs_root / part["name"]).glob(pattern):
                marker.unlink()
        manager.launch(part["spec_path"])
    nodes = manifest["placement"]["total_nodes"]
    wait_until(
        "a step after the restart",
        lambda: any(s["time"] > stopped_at for s in read_steps(deployment, job)),
        timeout=180,
    )
    return gap_between(read_steps(deployment, job), stopped_at, nodes)


def main() -> None:
    """Start the deployment, measure both gaps per round, print them and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="jobs to resize (default 2)")
    arguments = parser.parse_args()
    began = time.monotonic()
    deployment = Deployment.start()
    provider: list[float] = []
    bare: list[float] = []
    try:
        deployment.wait_for_dags([DAG_ID])
        print(f"deployment up in {time.monotonic() - began:.0f}s", flush=True)
        for round_number in range(arguments.rounds):
            job = f"bench-resize-{round_number}"
            provider.append(provider_resize(deployment, job))
            bare.append(bare_restart(deployment, job))
            print(
                f"round {round_number + 1}: provider resize gap {provider[-1]:.2f}s, "
                f"bare stop + launch gap {bare[-1]:.2f}s",
                flush=True,
            )
            from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

            ElasticGridHook(jobs_root=str(deployment.jobs_root)).stop_job(job)
    finally:
        deployment.stop()
    provider_median, bare_median = statistics.median(provider), statistics.median(bare)
    print()
    print("resize gap: seconds from the last step at the old size to the first at the new one")
    print(f"  provider (scheduled check -> re-plan -> resize task)  {provider_median:6.2f}s")
    print(f"  bare iroh-tinker stop + launch of the same job       {bare_median:6.2f}s")
    print(f"  ratio provider / bare                                 {provider_median / bare_median:6.2f}  (target <= 1.5)")  # fmt: skip
    print(f"medians of {len(provider)} round(s); total {time.monotonic() - began:.0f}s")


if __name__ == "__main__":
    main()
