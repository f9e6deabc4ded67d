"""Recovery gap: the provider's recover -> re-plan -> relaunch vs a bare iroh-tinker restart.

``make bench-recovery`` runs, in a temporary SQLite Airflow home (the test
DAGs of ``tests/dags/recovery_dags.py``, real task runs with ``dag.test()``)
and a temporary jobs root, per round:

1. **provider**: launches the 2-node training job as ``onprem 1 + spot 1``,
   where ``spot`` is :class:`tests.preemptible_engine.PreemptibleEngine`,
   reclaimed 8 s after it starts; then runs ``recovery_check`` (check every
   ``CHECK_INTERVAL_S`` -> plan -> relaunch), which decides ``recover`` and
   relaunches the job on ``onprem 1 + backup 1`` from its checkpoint.
2. **bare**: the same job and loss, recovered by hand with iroh-tinker
   alone: as soon as the loss is seen (polling the engine's marker every
   50 ms), ``JobManager.stop`` of the surviving part, then ``JobManager.launch``
   of the same ``onprem 1 + backup 1`` parts (rendered with
   :func:`build_launch_parts`, fresh rendezvous, the same shared checkpoint).

Measured from the job's step log (the ``time`` of each step, written by
global rank 0 after the step is committed to the checkpoint):

* the gap: from the last step before the loss to the first step after it;
  for the provider also minus the check interval (the most a check waits to
  see the loss) and the detection delay actually measured (decision time
  minus the loss time the engine wrote);
* steps lost: steps computed before the loss that were computed again after
  it (``last step before + 1 - first step after``; 0 means the job resumed
  exactly at its last checkpoint).

Target: provider gap minus the check interval <= 1.5 x the bare gap, and no
step lost beyond the last checkpoint.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHECK_INTERVAL_S = 1.0  # the poke_interval of recovery_check (tests/dags/recovery_dags.py)
PREEMPT = "spot=8"
STEPS = 2000


def setup_airflow(home: Path) -> Path:
    """A private Airflow home and jobs root, set before Airflow is imported; returns the root."""
    jobs_root = home / "iroh" / "jobs"  # iroh-tinker's default root under IROH_TINKER_HOME
    jobs_root.mkdir(parents=True)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "tests" / "dags"),
            "IROH_TINKER_HOME": str(home / "iroh"),
        }
    )
    os.environ.pop("AIRFLOW_CONN_ELASTICGRID_DEFAULT", None)
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True)
    return jobs_root


def run_dag(dag_id: str, conf: dict):
    """``dag.test()`` of a DAG in tests/dags (not through tests.conftest: it resets the env)."""
    from airflow.dag_processing.dagbag import DagBag

    from tests import airflow_support

    dag = DagBag(dag_folder=str(ROOT / "tests" / "dags")).get_dag(dag_id)
    return airflow_support.run_dag(dag_id, conf, dag=dag)


def read_steps(jobs_root: Path, job: str) -> list[dict]:
    """Every step the job logged (global rank 0 runs in the ``onprem`` part)."""
    path = jobs_root / f"{job}--onprem" / "steps.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_until(what: str, condition, timeout: float = 180.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(interval)


def loss_time(jobs_root: Path, job: str) -> float | None:
    """When the spot part was reclaimed (written by the preemptible engine), or None yet."""
    marker = jobs_root / f"{job}--spot" / "preempted"
    text = marker.read_text().strip() if marker.exists() else ""
    return float(text) if text else None


def measure(jobs_root: Path, job: str, restarted_at: float) -> dict[str, float]:
    """The gap and the steps redone around a loss, from the step log.

    No step can end between the loss and the restart (the survivors wait for
    the lost rank), so the last step before ``restarted_at`` is the last one
    before the loss.
    """
    wait_until(
        "a step after the recovery",
        lambda: any(s["time"] > restarted_at for s in read_steps(jobs_root, job)),
    )
    steps = read_steps(jobs_root, job)
    before = [s for s in steps if s["time"] <= restarted_at]
    after = [s for s in steps if s["time"] > restarted_at]
    return {
        "gap_s": after[0]["time"] - before[-1]["time"],
        "steps_lost": before[-1]["step"] + 1 - after[0]["step"],
    }


def stop(jobs_root: Path, job: str) -> None:
    from iroh_tinker.cloud import JobManager

    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

    ElasticGridHook(jobs_root=str(jobs_root)).stop_job(job)
    manager = JobManager(root=jobs_root)
    for state in manager.jobs():
        if state.name.startswith(f"{job}--") and manager.status(state.name).status == "running":
            manager.stop(state.name)


def provider_round(jobs_root: Path, job: str) -> dict[str, float]:
    """Launch, lose spot, let the scaling pipeline recover it; measure."""
    conf = {"job_name": job, "nodes": 2, "steps": STEPS, "preempt": PREEMPT}
    assert run_dag("recovery_launch", conf).task_states["launch"] == "success"
    result = run_dag("recovery_check", conf)
    assert result.task_states["relaunch"] == "success", result.task_states
    record = result.xcom("scale_check")
    assert record["action"] == "recover", record
    wait_until("the loss time", lambda: loss_time(jobs_root, job) is not None, timeout=30)
    lost_at = loss_time(jobs_root, job)
    assert lost_at is not None
    figures = measure(jobs_root, job, record["decided_at"])
    figures["detection_s"] = record["decided_at"] - lost_at
    stop(jobs_root, job)
    return figures


def bare_round(jobs_root: Path, job: str) -> dict[str, float]:
    """Launch, lose spot, stop + launch with iroh-tinker alone at once; measure."""
    from iroh_tinker.cloud import JobManager

    from elasticgrid_provider.core.launch_spec import LaunchOptions, build_launch_parts
    from elasticgrid_provider.core.placement import Placement
    from elasticgrid_provider.core.providers import providers_from_dicts
    from tests.dags.recovery_dags import RECOVERY_GRID

    conf = {"job_name": job, "nodes": 2, "steps": STEPS, "preempt": PREEMPT}
    launched = run_dag("recovery_launch", conf)
    assert launched.task_states["launch"] == "success"
    wait_until("the loss", lambda: loss_time(jobs_root, job) is not None, timeout=120)
    lost_at = loss_time(jobs_root, job)
    assert lost_at is not None
    manager = JobManager(root=jobs_root)
    restarted_at = time.time()
    manager.stop(f"{job}--onprem")
    onprem, _, backup = providers_from_dicts(RECOVERY_GRID)
    script = str(ROOT / "example_dags" / "train_elastic.py")
    arguments = ["--steps", str(STEPS), "--global-batch", "2", "--microbatch-seconds", "0.05"]
    run = shlex.join([sys.executable, script, *arguments])  # the RUN of the recovery DAGs
    folder = jobs_root / job
    options = LaunchOptions(
        run=run,
        rendezvous=f"dir:{folder / 'rendezvous' / 'bare'}",
        recovery={"mode": "none"},
        shared_dir=str(folder / "shared"),
        launch_id="bare",
    )
    (folder / "rendezvous" / "bare").mkdir(parents=True)
    placement = Placement.from_dict(
        {"assignments": [{**onprem.to_dict(), "nodes": 1}, {**backup.to_dict(), "nodes": 1}]}
    )
    for part in build_launch_parts(placement, job, options):
        for pattern in ("done_*", "attempt_*"):
            for marker in (jobs_root / part.part_name).glob(pattern):
                marker.unlink()
        manager.launch(part.write_spec(folder / f"bare-{part.part_name}.json"))
    figures = measure(jobs_root, job, restarted_at)
    figures["detection_s"] = restarted_at - lost_at
    stop(jobs_root, job)
    return figures


def main() -> None:
    """Run the rounds, print each and the medians with the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="losses per kind (default 3)")
    arguments = parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as home:
        jobs_root = setup_airflow(Path(home))
        provider: list[dict[str, float]] = []
        bare: list[dict[str, float]] = []
        for number in range(arguments.rounds):
            provider.append(provider_round(jobs_root, f"bench-recover-{number}"))
            bare.append(bare_round(jobs_root, f"bench-bare-{number}"))
            p, b = provider[-1], bare[-1]
            print(
                f"round {number + 1}: provider gap {p['gap_s']:.2f}s (detection "
                f"{p['detection_s']:.2f}s, steps lost {p['steps_lost']:.0f}); bare gap "
                f"{b['gap_s']:.2f}s (steps lost {b['steps_lost']:.0f})",
                flush=True,
            )

    def median(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    gap, bare_gap = median(provider, "gap_s"), median(bare, "gap_s")
    detection = median(provider, "detection_s")
    net = gap - CHECK_INTERVAL_S
    lost = max(row["steps_lost"] for row in provider)
    print()
    print("recovery gap: seconds from the last step before the loss to the first step after it")
    print(f"  provider: check -> re-plan -> relaunch                 {gap:6.2f}s")
    print(f"    minus the check interval ({CHECK_INTERVAL_S:g}s)                     {net:6.2f}s")
    print(f"    minus the measured detection delay ({detection:.2f}s)          {gap - detection:6.2f}s")  # fmt: skip
    print(f"  bare iroh-tinker stop + launch at the moment of loss   {bare_gap:6.2f}s")
    print(f"  ratio (provider - check interval) / bare               {net / bare_gap:6.2f}  (target <= 1.5)")  # fmt: skip
    print(f"  ratio (provider - detection) / bare                    {(gap - detection) / bare_gap:6.2f}")  # fmt: skip
    print(f"steps lost (redone after the loss), worst round: provider {lost:.0f}, bare "
          f"{max(row['steps_lost'] for row in bare):.0f}  (target 0: resumed at the last checkpoint)")  # fmt: skip
    print(f"medians of {len(provider)} round(s); total {time.monotonic() - began:.0f}s")


if __name__ == "__main__":
    main()
