"""Launch time on SSH hosts: the provider's ssh engine against iroh-tinker 0.5's own ``SshEngine``.

``make bench-remote`` starts 4 SSH test hosts (network namespaces with their
own sshd: :mod:`tests.ssh_hosts`, root only), hides the jobs root from them,
and launches, per round and per engine, a job of 1 rank (1 host), 4 ranks
(2 hosts x 2) and 16 ranks (4 hosts x 4) with iroh-tinker's real
``JobManager.launch`` from a spec file. Measured:

* **launch**: ``JobManager.launch`` until it returns (the engine's own work:
  checks, rsync, starting the ranks);
* **ready**: ``JobManager.launch`` until every rank has written a line to its
  log (the rank also writes a file in the pool folder, which this machine
  sees at once, so the benchmark does not poll over ssh).

The same spec for both engines, but iroh's engine gets a ``run`` with absolute
paths (it starts ranks in the login folder) and ``UserKnownHostsFile`` in
``ssh_opts`` (it would write the hosts' keys into this user's own
``known_hosts``). Each launch of the provider's engine starts cold: its
multiplexed connections are closed first.

Target: 16 ranks ready in at most 2x the time of 1 rank. The ranks' own start
(Python, iroh's runner import) is CPU work: on a machine with fewer cores than
ranks it bounds that ratio whatever the engine does, so the table also shows
the engine's share (launch).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = ((1, 1, 1), (4, 2, 2), (16, 4, 4))  # ranks, hosts, ranks per host
TRAIN = """\
import os, sys
print("rank", os.environ["RANK"], "up", flush=True)
with open(os.path.join(sys.argv[1], "rank_" + os.environ["RANK"]), "w") as marker:
    marker.write("up")
"""


def launch_once(hosts, jobs_root: Path, work: Path, engine: str, ranks: int, per_host: int):
    """(launch seconds, ready seconds) of one job on ``ranks // per_host`` hosts."""
    from iroh_tinker.cloud import JobManager

    from elasticgrid_provider.engines.ssh import ENGINE_REF, close_connections

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
    deadline = began + 120
    while len(list(marks.iterdir())) < ranks:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: only {len(list(marks.iterdir()))} of {ranks} ranks up")
        time.sleep(0.01)
    ready = time.monotonic() - began
    time.sleep(1.0)  # let the ranks exit before the next launch
    return launched, ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round, 1 and 4 ranks (CI)")
    arguments = parser.parse_args()
    rounds = 1 if arguments.quick else arguments.rounds
    sizes = SIZES[:2] if arguments.quick else SIZES

    from elasticgrid_provider.engines.ssh import close_connections
    from tests.ssh_hosts import SshTestHosts

    folder = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    jobs_root, work = folder / "jobs", folder / "work"
    jobs_root.mkdir()
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    began = time.monotonic()
    try:
        with SshTestHosts(max(hosts for _, hosts, _ in sizes), hide=[jobs_root]) as hosts:
            print(f"{len(hosts.hosts)} SSH test hosts up in {time.monotonic() - began:.2f} s")
            for _ in range(rounds):
                for ranks, _, per_host in sizes:
                    for engine in ("provider", "iroh"):
                        figures = launch_once(hosts, jobs_root, work, engine, ranks, per_host)
                        results.setdefault((engine, ranks), []).append(figures)
            close_connections(hosts.params())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report(results, [ranks for ranks, _, _ in sizes], rounds)


def report(results, sizes: list[int], rounds: int) -> None:
    """The table: median launch and ready seconds per engine and size, and the ratios."""

    def median(engine: str, ranks: int, index: int) -> float:
        return statistics.median(figures[index] for figures in results[(engine, ranks)])

    print(f"\nmedian of {rounds} round(s); launch = JobManager.launch, ready = every rank logged")
    header = "".join(f"{f'{ranks} rank(s)':>22}" for ranks in sizes)
    print(f"{'engine':<18}{header}{'ready ratio':>14}")
    for engine, label in (("provider", "provider ssh"), ("iroh", "iroh-tinker ssh")):
        cells = "".join(
            f"{median(engine, r, 0):>9.2f} / {median(engine, r, 1):>6.2f} s   " for r in sizes
        )
        ratio = median(engine, sizes[-1], 1) / median(engine, sizes[0], 1)
        print(f"{label:<18}{cells}{f'{sizes[-1]}/{sizes[0]}: {ratio:.2f}x':>14}")
    ratios = "".join(
        f"{median('iroh', r, 0) / median('provider', r, 0):>9.2f} / "
        f"{median('iroh', r, 1) / median('provider', r, 1):>6.2f} x   "
        for r in sizes
    )
    print(f"{'iroh / provider':<18}{ratios}")
    ratio = median("provider", sizes[-1], 1) / median("provider", sizes[0], 1)
    verdict = "met" if ratio <= 2.0 else "missed"
    print(f"\ntarget {sizes[-1]} ranks ready <= 2x {sizes[0]} rank: {ratio:.2f}x ({verdict})")


if __name__ == "__main__":
    main()
