"""SSH hosts: launch time and resize gap, the provider against bare iroh-tinker.

``make bench-remote`` starts SSH test hosts (network namespaces with their own
sshd: :mod:`tests.ssh_hosts`, root only) that cannot see the jobs root, and
measures two things side by side in one run:

* **Launch time** of 1 rank (1 host), 4 ranks (2 hosts x 2) and 16 ranks
  (4 hosts x 4) with iroh-tinker's real ``JobManager.launch`` from a spec
  file, the provider's SSH engine against iroh-tinker 0.5's own ``SshEngine``
  started the same way (it starts ranks in the login folder, so its ``run``
  names absolute paths; ``UserKnownHostsFile`` in ``ssh_opts`` keeps it from
  writing this user's ``known_hosts``). *launch* is ``JobManager.launch``
  returning; *ready* is every rank having written a file in the pool folder,
  which this machine sees at once. Each provider launch starts cold (its
  multiplexed connections closed first). Target: 16 ranks ready in at most 2x
  the time of 1 rank.
* **Resize gap** 2 -> 4 ranks across hosts: ``train_elastic.py`` runs at 2
  ranks on host A; the provider's ``LaunchManager.launch`` resizes it to 4
  ranks on hosts A and B, against a bare iroh-tinker ``stop`` + ``launch`` of
  specs rendered for the purpose (same run, envs, checkpoint). The gap runs
  from the last step at 2 ranks (they train on while the provider reaches the
  hosts) to the first step at 4, read from the step log
  on host A; each side must resume from the job's checkpoint in the hosts'
  shared pool folder. Target: at most 1.5x the bare restart.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report import (  # noqa: E402
    Report,
    Table,
    arguments,
    check,
    ratio,
    seconds_range,
    wait_for_files,
)

SIZES = ((1, 1, 1), (4, 2, 2), (16, 4, 4))  # ranks, hosts, ranks per host
TRAIN = """\
import os, sys
print("rank", os.environ["RANK"], "up", flush=True)
with open(os.path.join(sys.argv[1], "rank_" + os.environ["RANK"]), "w") as marker:
    marker.write("up")
"""
TRAIN_ELASTIC = ROOT / "example_dags" / "train_elastic.py"
SHARED = "/srv/pool/eg"


def launch_once(hosts, jobs_root: Path, work: Path, engine: str, ranks: int, per_host: int):
    """(launch seconds, ready seconds) of one job on ``ranks // per_host`` hosts."""
    from iroh_tinker.cloud import JobManager

    from elasticgrid_provider.engines.ssh import ENGINE_REF
    from elasticgrid_provider.engines.ssh_transport import close_connections

    name = f"{engine}-{ranks}-{time.monotonic_ns()}"
    marks = hosts.pool / name
    marks.mkdir()
    host_count = ranks // per_host
    params = hosts.params(hosts=hosts.hosts[:host_count])
    if engine == "provider":
        close_connections(params)
        infra, run = ENGINE_REF, f"{sys.executable} train.py /srv/pool/{name}"
    else:
        remote = f"/root/iroh-bench/{name}"
        params = {
            "hosts": params["hosts"],
            "ssh_key": params["ssh_key"],
            "ssh_opts": ["-o", f"UserKnownHostsFile={hosts.known_hosts}"],
            "remote_dir": remote,
        }
        infra, run = "ssh", f"{sys.executable} {remote}/train.py /srv/pool/{name}"
    spec = {
        "name": name,
        "run": run,
        "workdir": str(work),
        "num_nodes": host_count,
        "procs_per_node": per_host,
        "recovery": {"mode": "none"},
        "resources": {"infra": [infra], "params": params},
    }
    path = work.parent / f"{name}.json"
    path.write_text(json.dumps(spec))
    manager = JobManager(root=jobs_root)
    began = time.monotonic()
    manager.launch(path)
    launched = time.monotonic() - began
    ready = wait_for_files(marks, ranks, began, engine, 120)
    time.sleep(1.0)  # let the ranks exit before the next launch
    return launched, ready


def launch_table(results: dict[tuple[str, int], list[tuple[float, float]]], sizes: list[int]):
    """Median launch / ready seconds per engine and size, and the ratios."""

    def median(engine: str, ranks: int, index: int) -> float:
        return statistics.median(figures[index] for figures in results[(engine, ranks)])

    rows = []
    for engine, label in (
        ("provider", "provider's SSH engine"),
        ("iroh", "iroh-tinker's SshEngine"),
    ):
        cells = [f"{median(engine, r, 0):.2f} / {median(engine, r, 1):.2f}" for r in sizes]
        rows.append(
            [label, *cells, ratio(median(engine, sizes[-1], 1), median(engine, sizes[0], 1))]
        )
    speedup = [ratio(median("iroh", r, 1), median("provider", r, 1)) for r in sizes]
    rows.append(["iroh-tinker / provider (ready)", *speedup, "-"])
    columns = ["engine", *(f"{r} rank(s): launch / ready (s)" for r in sizes)]
    columns.append(f"ready {sizes[-1]} / {sizes[0]} (target <= 2)")
    return Table(columns, rows)


# -- the resize gap -------------------------------------------------------------------


def ssh_grid(hosts) -> list[dict[str, Any]]:
    """Provider ``onprem``: the first two hosts, one node each, sharing the pool folder."""
    params = hosts.params(hosts=hosts.hosts[:2], shared_dir=SHARED)
    return [
        {
            "name": "onprem",
            "engine": "ssh",
            "max_nodes": 2,
            "cost_per_node_hour": 0.0,
            "spot": False,
            "params": params,
        }
    ]


def remote_steps(hosts, job: str) -> list[dict]:
    """Every step the job logged on host A (global rank 0 of part ``<job>--onprem``)."""
    from elasticgrid_provider.core.ssh_params import SshParams

    log = f"{SshParams.parse(hosts.params()).remote_job_dir(f'{job}--onprem')}/steps.jsonl"
    text = hosts.run(0, f"cat {log} 2>/dev/null").stdout
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def wait_for_steps(hosts, job: str, condition, what: str, timeout: float = 120.0) -> list[dict]:
    """The step log once a step meets ``condition``; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        steps = remote_steps(hosts, job)
        if any(condition(step) for step in steps):
            return steps
        check(
            time.monotonic() < deadline,
            f"{what} did not really run: no such step in {timeout:.0f} s",
        )
        time.sleep(0.1)


def resize_round(hosts, jobs_root: Path, side: str) -> float:
    """One job at 2 ranks on host A, resized to 4 on A and B; the gap in seconds."""
    from elasticgrid_provider.core.launch_record import new_launch_id
    from elasticgrid_provider.core.launch_spec import LaunchOptions, build_launch_parts
    from elasticgrid_provider.core.placement import Placement
    from elasticgrid_provider.core.providers import providers_from_dicts
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

    job = f"{side}-{time.monotonic_ns()}"
    (provider,) = providers_from_dicts(ssh_grid(hosts))
    options = LaunchOptions(
        run=f"{sys.executable} {TRAIN_ELASTIC.name} --steps 100000 --global-batch 4 "
        "--microbatch-seconds 0.05",
        workdir=str(TRAIN_ELASTIC.parent),
        procs_per_node=2,
        recovery={"mode": "none"},
    )
    hook = ElasticGridHook(jobs_root=str(jobs_root))

    def placement(nodes: int) -> Placement:
        return Placement.model_validate(
            {"assignments": [{**provider.model_dump(), "provider": "onprem", "nodes": nodes}]}
        )

    manager = hook.launch_manager(job)
    manager.launch(placement(1), options)
    wait_for_steps(
        hosts, job, lambda step: step["step"] >= 5 and step["nodes"] == 1, f"{side} at 2 ranks"
    )
    began = time.time()
    if side == "provider":
        manager.launch(placement(2), options)
    else:  # bare iroh-tinker: stop the part, launch specs rendered for the purpose
        from iroh_tinker.cloud import JobManager

        launch_id = new_launch_id()
        bare = replace(
            options,
            rendezvous=f"dir:{SHARED}/{job}/rendezvous/{launch_id}",
            shared_dir=f"{SHARED}/{job}/shared",
            launch_id=launch_id,
        )
        (part,) = build_launch_parts(placement(2), job, bare)
        spec = part.write_spec(jobs_root / f"{job}-bare.json")
        manager = JobManager(root=jobs_root)
        manager.stop(part.part_name)
        manager.launch(spec)
    steps = wait_for_steps(
        hosts, job, lambda step: step["nodes"] == 2 and step["time"] > began, f"{side} at 4 ranks"
    )
    from tests.job_processes import stop_job

    stop_job(jobs_root, job)
    # the old ranks train on until they are stopped: the gap is the time without progress
    last = [step for step in steps if step["nodes"] == 1][-1]
    first = next(step for step in steps if step["nodes"] == 2)
    check(
        last["step"] < first["step"] <= last["step"] + 2,
        f"{side}: after the resize the job logged step {first['step']} after {last['step']}: "
        "it did not resume from its checkpoint",
    )
    return float(first["time"] - last["time"])


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    sizes = SIZES[:2] if args.quick else SIZES

    from elasticgrid_provider.engines.ssh_transport import close_connections
    from tests.ssh_hosts import SshTestHosts

    folder = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    jobs_root, work = folder / "jobs", folder / "work"
    jobs_root.mkdir()
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    launches: dict[tuple[str, int], list[tuple[float, float]]] = {}
    gaps: dict[str, list[float]] = {"provider": [], "bare": []}
    try:
        with SshTestHosts(max(hosts for _, hosts, _ in sizes), hide=[jobs_root]) as hosts:
            for _ in range(rounds):
                for ranks, _, per_host in sizes:
                    for engine in ("provider", "iroh"):
                        figures = launch_once(hosts, jobs_root, work, engine, ranks, per_host)
                        launches.setdefault((engine, ranks), []).append(figures)
                for side in ("provider", "bare"):
                    gaps[side].append(resize_round(hosts, jobs_root, side))
            close_connections(hosts.params())
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    report = Report(
        name="remote",
        title="SSH hosts: launch time and resize gap",
        about=(
            "The provider's SSH engine against iroh-tinker 0.5's own, on SSH test hosts "
            "(network namespaces on this machine) that cannot see the jobs root."
        ),
        quick=args.quick,
        settings=f"median of {rounds} round(s)",
    )
    sized = [ranks for ranks, _, _ in sizes]
    report.tables.append(launch_table(launches, sized))
    provider, bare = statistics.median(gaps["provider"]), statistics.median(gaps["bare"])
    report.tables.append(
        Table(
            [
                "restart 2 -> 4 ranks across hosts",
                "gap (s)",
                "ratio to the bare restart (target <= 1.5)",
            ],
            [
                [
                    "provider: LaunchManager.launch (resize)",
                    seconds_range(gaps["provider"]),
                    ratio(provider, bare),
                ],
                ["bare iroh-tinker stop + launch", seconds_range(gaps["bare"]), "1.00"],
            ],
        )
    )
    report.notes.append(
        "Ranks start Python and the training script on this machine's cores: with 16 ranks on "
        "2 cores, the ranks' own start-up bounds the ready ratio whatever the engine does."
    )
    report.publish(args.json)


if __name__ == "__main__":
    main()
