"""The README's first command: run ``elastic_training`` end to end and show what happened.

Everything lives inside the project folder, under ``.demo/``: an SQLite
Airflow home, the iroh-tinker JobManager root and the logs. The script

1. migrates the Airflow metadata DB (SQLite);
2. runs the ``elastic_training`` DAG with ``airflow dags test``: plan 2 nodes,
   launch a real 2-rank training job on the local iroh-tinker engine, check
   its step samples, re-plan at the decided size and relaunch, then wait for
   the job to finish;
3. prints the decision trail (time, action, sizes, reason), the cost of
   each placement, the queue fraction the job measured at each size, the
   job's outcome, and where the logs are.

It exits non-zero when the DAG run or the job did not succeed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def demo_environment(demo: Path) -> dict[str, str]:
    """Airflow and iroh-tinker confined to ``demo``; the connection points at its jobs root.

    No ``AIRFLOW__`` setting of the caller's shell applies: one naming a database or DAG
    bundles of theirs would send the demo there.
    """
    connection = {"conn_type": "elasticgrid", "extra": {"jobs_root": str(demo / "jobs")}}
    inherited = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW__")}
    return {
        **inherited,
        "AIRFLOW_HOME": str(demo / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT / "example_dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_ELASTICGRID_DEFAULT": json.dumps(connection),
        "IROH_TINKER_HOME": str(demo / "iroh"),
    }


def airflow(arguments: list[str], environment: dict[str, str], log: Path) -> int:
    """Run an ``airflow`` command with its output in ``log``; its exit status."""
    with log.open("w") as handle:
        return subprocess.run(
            [str(BIN / "airflow"), *arguments],
            env=environment,
            stdout=handle,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode


def read_state(job: str, environment: dict[str, str]) -> dict:
    """The job's scale state Variable, as the sensor left it."""
    from elasticgrid_provider.core.state import state_variable_key

    result = subprocess.run(
        [str(BIN / "airflow"), "variables", "get", state_variable_key(job)],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 or "{" not in result.stdout:
        return {}
    return json.loads(result.stdout[result.stdout.index("{") :])


def queue_fraction_by_size(jobs_root: Path, job: str) -> list[tuple[int, int, float, float]]:
    """(nodes, samples, mean step seconds, queue fraction) per size from the job's step logs."""
    from elasticgrid_provider.core.samples import MetricsWindow
    from elasticgrid_provider.core.step_log import read_step_log
    from elasticgrid_provider.runtime import STEP_LOG_NAME

    samples = [
        sample
        for step_log in sorted(jobs_root.glob(f"{job}--*/{STEP_LOG_NAME}"))
        for sample in read_step_log(step_log).samples
    ]
    rows = []
    for nodes in sorted({sample.nodes for sample in samples}):
        at_size = tuple(sample for sample in samples if sample.nodes == nodes)
        signals = MetricsWindow(len(at_size), at_size).signals()
        rows.append((nodes, len(at_size), signals.mean_step_s, signals.queue_fraction))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Set up the demo folder, run the DAG, print the summary; non-zero if anything failed."""
    from elasticgrid_provider.core.clock import utc_now
    from elasticgrid_provider.core.formatting import decision_line, placement_table
    from elasticgrid_provider.core.placement import Placement
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--home",
        type=Path,
        default=PROJECT / ".demo",
        help="where the demo keeps Airflow, jobs and logs (default: .demo)",
    )
    parser.add_argument(
        "--steps", type=int, default=60, help="the training job's total steps (default: 60)"
    )
    arguments = parser.parse_args(argv)
    demo = arguments.home.resolve()
    jobs_root = demo / "jobs"
    for folder in (demo / "airflow", jobs_root, demo / "logs"):
        folder.mkdir(parents=True, exist_ok=True)
    environment = demo_environment(demo)
    job = utc_now().strftime("elastic-demo-%Y%m%d%H%M%S")

    print(f"Airflow home: {demo / 'airflow'} (SQLite); jobs: {jobs_root}")
    if airflow(["db", "migrate"], environment, demo / "logs" / "db-migrate.log") != 0:
        print(f"airflow db migrate failed; see {demo / 'logs' / 'db-migrate.log'}")
        return 1
    dag_log = demo / "logs" / f"{job}.log"
    print(
        f"Running elastic_training for job {job}: plan -> launch -> scale check -> "
        "re-plan -> relaunch -> wait -> stop (teardown) ..."
    )
    started = time.monotonic()
    status = airflow(
        [
            "dags",
            "test",
            "elastic_training",
            "--conf",
            json.dumps({"job_name": job, "steps": arguments.steps}),
        ],
        environment,
        dag_log,
    )
    print(
        f"DAG run finished in {time.monotonic() - started:.0f}s "
        f"({'success' if status == 0 else f'exit status {status}'}); log: {dag_log}\n"
    )

    state = read_state(job, environment)
    history = state.get("history", [])
    print("Decision trail (the job's state Variable):")
    for record in history:
        print("  " + decision_line({**record, **record.get("context", {})}))
    scaled = [record for record in history if record["action"] != "hold"]
    if scaled:
        decision = scaled[-1]
        context = decision["context"]
        print(f"\nPlacement before the decision: ${context['cost_per_hour']:.2f}/h")
        print(placement_table(Placement.model_validate(context["placement"])))
        if "proposed_placement" in context:
            print(f"\nPlacement at the decided size: ${context['proposed_cost_per_hour']:.2f}/h")
            print(placement_table(Placement.model_validate(context["proposed_placement"])))

    print("\nWhat the job measured at each size (from its step log):")
    for nodes, count, mean_step, queue_fraction in queue_fraction_by_size(jobs_root, job):
        print(
            f"  {nodes} nodes: {count:3d} steps, mean step {mean_step:.2f}s, "
            f"queue fraction {queue_fraction:.0%}"
        )

    snapshot = ElasticGridHook(jobs_root=str(jobs_root)).job_store.job_snapshot(job)
    outcome = snapshot.status if snapshot else "missing"
    print(f"\nJob {job}: {outcome} at {snapshot.nodes if snapshot else 0} nodes")
    if snapshot:
        for part in snapshot.parts:
            print(
                f"  part {part.name}: {part.nodes} node(s) on {part.engine_target}, "
                f"{part.status}; logs in {part.job_dir}/logs"
            )
    print(f"Airflow task logs: {dag_log}")
    return 0 if status == 0 and outcome == "done" and scaled else 1


if __name__ == "__main__":
    raise SystemExit(main())
