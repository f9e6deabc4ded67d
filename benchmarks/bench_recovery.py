"""Recovery gap: the provider's recover -> re-plan -> relaunch vs a bare iroh-tinker restart.

``make bench-recovery`` runs, in a temporary SQLite Airflow home (the test
DAGs of ``tests/dags/recovery_dags.py``, real task runs with ``dag.test()``)
and a temporary jobs root, per round (``--rounds``; ``--quick``: one):

1. **provider**: launches the 2-node training job as ``onprem 1 + spot 1``,
   where ``spot`` is :class:`tests.preemptible_engine.PreemptibleEngine`,
   reclaimed 8 s after it starts; then runs ``recovery_check`` (check every
   ``CHECK_INTERVAL_S`` -> plan -> relaunch), which decides ``recover`` and
   relaunches the job on ``onprem 1 + backup 1`` from its checkpoint.
2. **bare**: the same job and loss, recovered by hand with iroh-tinker
   alone: as soon as the loss is seen (polling the engine's marker every
   50 ms), ``JobManager.stop`` of the surviving part, then ``JobManager.launch``
   of the same ``onprem 1 + backup 1`` parts, from specs rendered before the
   loss as the provider renders them (the ``relaunch`` task's run and envs
   rendered with the run's conf, a fresh rendezvous, the same shared
   checkpoint).

Measured from the job's step log (the ``time`` of each step, written by
global rank 0 after the step is committed to the checkpoint):

* the gap: from the last step before the loss to the first step after it;
  for the provider also minus the check interval (the most a check waits to
  see the loss) and the detection delay actually measured (decision time
  minus the loss time the engine wrote);
* steps lost: steps computed before the loss that were computed again after
  it (``last step before + 1 - first step after``; 0 means the job resumed
  exactly at its last checkpoint).

Each side must log a step at 2 nodes after the loss, or the benchmark fails
quoting the ranks' logs. Target: provider gap minus the check interval <= 1.5
x the bare gap, and no step lost beyond the last checkpoint.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report import Report, Table, arguments, check, ratio, seconds_range  # noqa: E402
from benchmarks.restarts import (  # noqa: E402
    check_same_launch,
    launch_bare,
    wait_for_step,
    write_bare_specs,
)

if TYPE_CHECKING:
    from elasticgrid_provider.core.launch_spec import LaunchOptions

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


def wait_until(what: str, condition, timeout: float = 180.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        check(time.monotonic() <= deadline, f"timed out waiting for {what}")
        time.sleep(interval)


def loss_time(jobs_root: Path, job: str) -> float | None:
    """When the spot part was reclaimed (written by the preemptible engine), or None yet."""
    marker = jobs_root / f"{job}--spot" / "preempted"
    text = marker.read_text().strip() if marker.exists() else ""
    return float(text) if text else None


def measure(
    jobs_root: Path, job: str, restarted_at: float, side: str, running=lambda: True
) -> dict[str, float]:
    """The gap and the steps redone around a loss, from the step log.

    No step can end between the loss and the restart (the survivors wait for
    the lost rank), so the last step before ``restarted_at`` is the last one
    before the loss. The job must log a step at its 2 nodes after it.
    """
    parts = [f"{job}--onprem", f"{job}--backup"]
    steps = wait_for_step(
        side,
        jobs_root,
        job,
        parts,
        lambda step: step["time"] > restarted_at and step["nodes"] == 2,
        running=running,
    )
    before = [s for s in steps if s["time"] <= restarted_at]
    after = [s for s in steps if s["time"] > restarted_at]
    check(before, f"{side}: the job logged no step before the loss")
    return {
        "gap_s": after[0]["time"] - before[-1]["time"],
        "steps_lost": before[-1]["step"] + 1 - after[0]["step"],
    }


def stop(jobs_root: Path, job: str) -> None:
    from iroh_tinker.cloud import JobManager

    from tests.job_processes import stop_job

    stop_job(jobs_root, job)
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
    figures = measure(jobs_root, job, record["decided_at"], "the provider's recovery")
    figures["detection_s"] = record["decided_at"] - lost_at
    stop(jobs_root, job)
    return figures


def relaunch_options(conf: dict) -> LaunchOptions:
    """What the provider's ``relaunch`` task launches for ``conf``: its options, with its run
    and envs rendered as a run renders them (rendezvous and launch id unset)."""
    import jinja2
    from airflow.dag_processing.dagbag import DagBag

    from elasticgrid_provider.core.launch_spec import LaunchOptions

    dag = DagBag(dag_folder=str(ROOT / "tests" / "dags")).get_dag("recovery_check")
    relaunch = dag.get_task("relaunch")

    def render(text: str) -> str:
        return jinja2.Template(text).render(dag_run={"conf": conf})

    return LaunchOptions(
        run=render(relaunch.run),
        workdir=relaunch.workdir,
        procs_per_node=relaunch.procs_per_node,
        backend=relaunch.backend,
        envs={name: render(value) for name, value in relaunch.envs.items()},
        setup=relaunch.setup,
        recovery=relaunch.recovery,
        checkpoint=relaunch.checkpoint,
    )


def bare_round(jobs_root: Path, job: str) -> dict[str, float]:
    """Launch, lose spot, stop + launch with iroh-tinker alone at once; measure."""
    from iroh_tinker.cloud import JobManager

    from elasticgrid_provider.core.placement import Placement
    from elasticgrid_provider.core.providers import providers_from_dicts
    from tests.dags.recovery_dags import RECOVERY_GRID

    conf = {"job_name": job, "nodes": 2, "steps": STEPS, "preempt": PREEMPT}
    options = relaunch_options(conf)  # rendered and written before the loss
    onprem, _, backup = providers_from_dicts(RECOVERY_GRID)
    placement = Placement.model_validate(
        {"assignments": [{**onprem.model_dump(), "nodes": 1}, {**backup.model_dump(), "nodes": 1}]}
    )
    specs = write_bare_specs(jobs_root, job, placement, options, "bare")
    launched = run_dag("recovery_launch", conf)
    check(launched.task_states["launch"] == "success", f"the launch of {job} failed")
    manifest = json.loads((jobs_root / job / "manifest.json").read_text())
    check_same_launch(options, manifest, "the bare restart")
    wait_until("the loss", lambda: loss_time(jobs_root, job) is not None, timeout=120)
    lost_at = loss_time(jobs_root, job)
    assert lost_at is not None
    restarted_at = time.time()
    JobManager(root=jobs_root).stop(f"{job}--onprem")
    running = launch_bare(jobs_root, specs)
    figures = measure(jobs_root, job, restarted_at, "the bare restart", running)
    figures["detection_s"] = restarted_at - lost_at
    stop(jobs_root, job)
    return figures


def main() -> None:
    """Run the rounds, print each, and report the medians with the ratios."""
    parser = arguments(__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="losses per kind (default 3)")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as home:
        jobs_root = setup_airflow(Path(home))
        provider: list[dict[str, float]] = []
        bare: list[dict[str, float]] = []
        for number in range(rounds):
            provider.append(provider_round(jobs_root, f"bench-recover-{number}"))
            bare.append(bare_round(jobs_root, f"bench-bare-{number}"))
            p, b = provider[-1], bare[-1]
            print(
                f"round {number + 1}: provider gap {p['gap_s']:.2f}s (detection "
                f"{p['detection_s']:.2f}s, steps lost {p['steps_lost']:.0f}); bare gap "
                f"{b['gap_s']:.2f}s (steps lost {b['steps_lost']:.0f})",
                flush=True,
            )

    def column(rows: list[dict[str, float]], key: str, minus: str | float = 0.0) -> list[float]:
        return [row[key] - (row[minus] if isinstance(minus, str) else minus) for row in rows]

    bare_gap = statistics.median(column(bare, "gap_s"))
    detection = statistics.median(column(provider, "detection_s"))
    sides = [
        ("provider: check -> re-plan -> relaunch", column(provider, "gap_s")),
        (f"provider minus the check interval ({CHECK_INTERVAL_S:g} s)",
         column(provider, "gap_s", CHECK_INTERVAL_S)),
        (f"provider minus the measured detection delay ({detection:.2f} s)",
         column(provider, "gap_s", "detection_s")),
        ("bare iroh-tinker stop + launch at the moment of loss", column(bare, "gap_s")),
    ]  # fmt: skip
    rows = [
        [name, seconds_range(gaps), ratio(statistics.median(gaps), bare_gap)]
        for name, gaps in sides
    ]
    lost = (max(column(provider, "steps_lost")), max(column(bare, "steps_lost")))
    report = Report(
        "recovery",
        "Recovery after a lost spot part against a bare iroh-tinker restart",
        "Real task runs (dag.test(), SQLite) and real local jobs: a 2-node job (onprem 1 + spot "
        "1) loses its spot part. Provider: its check (every 1 s) -> re-plan -> relaunch on "
        "onprem 1 + backup 1. Baseline, in the same run: iroh-tinker's own stop + launch of the "
        "same parts, rendered as the provider renders them, started the moment the loss is "
        "seen. The gap runs from the last step before the loss to the first step after it.",
        tables=[Table(["recovery", "gap (s)", "ratio to the bare restart"], rows)],
        quick=args.quick,
        settings=f"{rounds} round(s), medians (range)",
    )
    report.notes.append(
        f"Steps lost beyond the last checkpoint, worst round: provider {lost[0]:.0f}, bare "
        f"{lost[1]:.0f} (target 0). Target: (provider - check interval) / bare <= 1.5."
    )
    report.publish(args.json)


if __name__ == "__main__":
    main()
