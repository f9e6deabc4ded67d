"""Benchmark: the plugin's pages on Airflow's real API app, server time and bytes.

Run with ``make bench-pages`` (``python benchmarks/bench_pages.py [--decisions N] [--jobs
N] [--profile]``). A private Airflow home (SQLite, a Fernet key, as a deployment has) holds:

* one job with ``--decisions`` (10,000) history entries: real decision records of the
  scale policy, repeated over time as a long-lived job with a large ``history_limit``
  keeps them (``tests/plugins/recorded.py``'s ``long_history``: laps of a hold, a
  scale-up and eight holds that alternate between the rules holding them back), in its
  state Variable (about 38 MB, as the check stores it: compact JSON without each entry's
  derived ``readable`` part);
* ``--jobs`` (100) jobs of 20 entries each, every one with a launch record under the
  connection's jobs root (the pages read its live status) and a share of the grid ledger.

Each page is requested through ``fastapi.testclient`` on ``airflow.api_fastapi.app``
itself, as an admin: the server's time from request to the last byte (best of the
repeats, warm: the state unchanged since the last read; and cold: the first read after the
state changed, which decrypts and parses it) and the bytes sent. The baseline, side by
side: Airflow's own REST API serving the same stored data, ``GET /api/v2/variables/<key>``
(the job) and ``GET /api/v2/variables?limit=N`` (the jobs' states), which only reads and
sends them. The targets: the job page, the list and the Fleet page each under 300 ms and
the job page under 300 KB (warm), printed, never asserted. ``--profile`` prints where a
warm job page spends its time (pyinstrument, when installed).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report import Report, Table, arguments, check  # noqa: E402

DECISIONS, JOBS, PER_JOB = 10_000, 100, 20
QUICK_DECISIONS, QUICK_JOBS = 500, 10
TARGET_S, TARGET_BYTES = 0.300, 300_000
BIG = "long-lived"
HEADER = ["page", "warm ms", "cold ms", "KB", "Airflow REST ms", "REST KB", "warm / REST", "target"]
DAG = "bench_pages"


def setup_airflow(home: Path) -> Path:
    """A private Airflow home (migrated) and jobs root, set before Airflow is imported."""
    jobs_root = home / "jobs"
    jobs_root.mkdir(parents=True)
    extra = {"jobs_root": str(jobs_root)}
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW_CONN_ELASTICGRID_DEFAULT": json.dumps(
                {"conn_type": "elasticgrid", "extra": extra}
            ),
            "IROH_TINKER_HOME": str(home / "iroh"),
        }
    )
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True)
    return jobs_root


def store(job: str, data: dict[str, Any]) -> None:
    """The state Variable, written as the sensor writes it (compact JSON, encrypted)."""
    from airflow.models.variable import Variable

    from elasticgrid_provider.core.state import state_variable_key
    from elasticgrid_provider.hooks.state_store import state_text

    Variable.set(state_variable_key(job), state_text(data))


def launch_records(jobs_root: Path, jobs: list[str]) -> None:
    """A running launch record per job and the grid ledger's share of it (2 nodes each)."""
    from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
    from tests.core.fleet.test_ledger import OLD_LAUNCH
    from tests.hooks.test_grid_ledger import reserve_in, write_manifest

    capacities = {"local": 2 * len(jobs), "aws": 8}
    with GridLedgerStore(jobs_root).transaction() as txn:
        for job in jobs:
            reserve_in(txn, job, {"local": 2}, OLD_LAUNCH, capacities)
    for job in jobs:
        write_manifest(jobs_root, job, OLD_LAUNCH, {"local": 2})


def timed(client: Any, url: str, headers: dict[str, str], repeats: int, before: Any = None):
    """The best server time of ``repeats`` GETs of ``url`` (``before`` runs untimed before
    each), and the bytes of the answer."""
    best, size = float("inf"), 0
    for _ in range(repeats):
        if before is not None:
            before()
        started = time.perf_counter()
        response = client.get(url, headers=headers)
        elapsed = time.perf_counter() - started
        check(response.status_code == 200, f"GET {url} answered {response.status_code}")
        best, size = min(best, elapsed), len(response.content)
    return best, size


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--decisions", type=int, help=f"the big job's decisions ({DECISIONS})")
    parser.add_argument("--jobs", type=int, help=f"jobs in the list and the ledger ({JOBS})")
    parser.add_argument("--profile", action="store_true", help="profile a warm job page")
    args = parser.parse_args()
    decisions = args.decisions or (QUICK_DECISIONS if args.quick else DECISIONS)
    jobs = args.jobs or (QUICK_JOBS if args.quick else JOBS)
    repeats = 2 if args.quick else 5
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as folder:
        jobs_root = setup_airflow(Path(folder))
        from airflow.api_fastapi.app import create_app, get_auth_manager
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
        from fastapi.testclient import TestClient

        from elasticgrid_provider.core.state import state_variable_key
        from elasticgrid_provider.hooks.state_store import state_text
        from elasticgrid_provider.plugins import state_cache
        from tests.plugins.recorded import long_history

        big = long_history(decisions, BIG, dag_id=DAG)
        store(BIG, big)
        names = [f"job-{number:03d}" for number in range(jobs)]
        for name in names:
            store(name, long_history(PER_JOB, name, dag_id=DAG))
        launch_records(jobs_root, names)
        size_mb = len(state_text(big)) / 1e6
        indented_mb = len(json.dumps(big, indent=2)) / 1e6
        before, after = cold_reads(big, repeats)
        with TestClient(create_app(apps="core")) as client:
            user = SimpleAuthManagerUser(username="bench", role="admin")
            headers = {"Authorization": f"Bearer {get_auth_manager().generate_jwt(user)}"}
            pages = {
                f"job page, {decisions:,} decisions": f"/elasticgrid/jobs/{BIG}",
                f"jobs list, {jobs + 1} jobs": "/elasticgrid/jobs",
                f"Fleet page, {jobs} jobs": "/elasticgrid/fleet",
            }
            baselines = {
                f"job page, {decisions:,} decisions": "/api/v2/variables/"
                + state_variable_key(BIG),
                f"jobs list, {jobs + 1} jobs": f"/api/v2/variables?limit={jobs + 1}",
                f"Fleet page, {jobs} jobs": f"/api/v2/variables?limit={jobs + 1}",
            }
            rows, verdicts = [], []
            for what, url in pages.items():
                cold, _ = timed(client, url, headers, max(1, repeats // 2), state_cache.forget)
                warm, size = timed(client, url, headers, repeats)
                base, base_size = timed(client, baselines[what], headers, 1 if args.quick else 2)
                ok = warm < TARGET_S and (not what.startswith("job page") or size < TARGET_BYTES)
                verdicts.append(ok)
                rows.append([
                    what, f"{warm * 1000:.0f}", f"{cold * 1000:.0f}", f"{size / 1000:.0f}",
                    f"{base * 1000:.0f}", f"{base_size / 1000:.0f}",
                    f"{warm / base:.2f}", "met" if ok else "NOT met",
                ])  # fmt: skip
            check(rows, "no page was measured")
            if args.profile:
                profile(BIG)
    report = Report(
        "pages",
        "The UI pages: server time and bytes",
        "Each page of the plugin served by Airflow's own API app (in-process), as an admin, "
        "against Airflow's REST API reading the same state Variables. Warm: the states "
        "unchanged since the last read (each API-server process parses a state once per "
        "change); cold: the first read after a change, which decrypts and parses the whole "
        f"state Variable ({size_mb:.0f} MB of JSON for the big job). Targets, warm: each page "
        "under 300 ms, the job page under 300 KB.",
        tables=[Table(HEADER, rows)],
        notes=[
            f"The big job's state as the check stores it: {size_mb:.0f} MB (compact JSON, "
            "each history entry without its derived `readable` part); indented and whole, "
            f"as earlier releases stored it: {indented_mb:.0f} MB "
            f"({indented_mb / size_mb:.1f}x). A cold read decodes every value of it but the "
            "entries' recorded `inputs`: decoding the big job's state as the pages keep it "
            f"takes {after * 1000:.0f} ms, against {before * 1000:.0f} ms to parse the "
            f"indented whole and drop what they do not keep ({before / after:.1f}x; in this "
            "process, best of the repeats, taken in turns).",
        ],
        settings=f"{decisions:,} decisions, {jobs} jobs of {PER_JOB}, best of {repeats}",
        quick=args.quick,
    )
    report.publish(args.json)
    return 0


def cold_reads(data: dict[str, Any], repeats: int) -> tuple[float, float]:
    """The best time to read ``data`` as the pages keep it from the indented whole (a whole
    ``json.loads``, then the unread fields dropped), and from the state as stored now, taken in
    turns (so the machine's load weighs on both alike)."""
    from elasticgrid_provider.core.state import state_variable_key
    from elasticgrid_provider.hooks.state_store import state_text
    from elasticgrid_provider.plugins import state_cache
    from elasticgrid_provider.plugins.jobs import parse_state

    key = state_variable_key(BIG)
    indented, stored = json.dumps(data, indent=2), state_text(data)
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for index, read in enumerate(
            (
                lambda: state_cache._slim(parse_state(key, indented)),
                lambda: state_cache._parsed(key, stored),
            )
        ):
            started = time.perf_counter()
            kept = read()
            best[index] = min(best[index], time.perf_counter() - started)
            check(kept.error is None and len(kept.history) == len(data["history"]), "lost")
    return best[0], best[1]


def profile(job: str) -> None:
    """Where a job page spends its time, cold and warm (pyinstrument's call tree, when it is
    installed): the state read, the view and the HTML, in this thread (the app's threads
    would hide them)."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        print("--profile needs pyinstrument: .venv/bin/pip install pyinstrument")
        return
    from elasticgrid_provider.plugins import state_cache
    from elasticgrid_provider.plugins.live import live_status
    from elasticgrid_provider.plugins.pages import job_page
    from elasticgrid_provider.plugins.view import job_view

    def page() -> str:
        (stored,) = state_cache.read_scale_states(job)
        return job_page(job_view(stored, time.time(), live=live_status(job)))

    state_cache.forget()
    for kind in ("cold", "warm"):
        with Profiler() as profiler:
            page()
        print(f"--- {kind} job page")
        print(profiler.output_text(unicode=False, color=False))


if __name__ == "__main__":
    raise SystemExit(main())
