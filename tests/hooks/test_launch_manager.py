"""LaunchManager on its own: a resize on a full jobs folder, and stopping a job for real.

Real local iroh-tinker jobs with real processes; the full disk is a real tmpfs.
The kills, retries and adoptions through real task runs are in
``tests/operators/test_lifecycle_faults.py`` and ``tests/operators/test_on_kill.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticgrid_provider.core.errors import JobLaunchError
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from tests.dag_settings import SLEEPING_RUN, TWO_LOCAL_PROVIDERS
from tests.job_processes import is_alive, job_ranks, stop_job, stop_ranks_under

pytestmark = [pytest.mark.airflow, pytest.mark.long]

PLANNER = GridPlanner(providers=providers_from_dicts(TWO_LOCAL_PROVIDERS))
SLEEPING = LaunchOptions(run=SLEEPING_RUN, recovery={"mode": "none"})


def _manifest(jobs_root: Path, job: str) -> dict:
    return json.loads((jobs_root / job / "manifest.json").read_text())


def test_stopping_a_job_records_it_stopped_and_kills_the_runner_before_it_restarts_a_rank(
    jobs_root,
):
    """With iroh-tinker's default ``recovery`` (restart), a TERMed rank would be restarted by
    its runner until the local engine's 10 s deadline; the runner goes first instead."""
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager("halt")
    options = LaunchOptions(run=SLEEPING_RUN)  # iroh-tinker's default recovery: restart
    manager.launch(PLANNER.plan(3), options, startup_grace_s=1)
    ranks = job_ranks("halt")
    assert len(ranks) == 3

    started = time.monotonic()
    snapshot = stop_job(jobs_root, "halt")
    elapsed = time.monotonic() - started

    assert snapshot is not None and snapshot.status == "stopped"
    assert elapsed < 4.0, f"stopping took {elapsed:.1f} s"
    assert not [pid for pid in ranks if is_alive(pid)]
    assert job_ranks("halt") == {}
    folders = [jobs_root / "halt--onprem", jobs_root / "halt--cloud"]
    assert [marker.name for f in folders for marker in f.glob("attempt_*")] == []  # no restart
    manifest = _manifest(jobs_root, "halt")
    assert (manifest["state"], manifest["down_reason"]) == ("stopped", "stopped on request")


# -- a full jobs folder: a real tmpfs, filled up ---------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (mounted as root, unmounted after), its jobs' ranks stopped."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs the suite as root)")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        stop_ranks_under(mount)
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(mount: Path, leave: int) -> Path:
    """Fill the tmpfs until only about ``leave`` bytes are free."""
    filler = mount / "filler"
    with open(filler, "ab") as handle, pytest.raises(OSError, match="No space left"):
        while True:
            handle.write(b"\0" * 65536)
            handle.flush()
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def test_a_resize_on_a_full_jobs_folder_leaves_the_running_job_untouched(small_disk):
    root = small_disk / "jobs"
    manager = ElasticGridHook(jobs_root=str(root)).launch_manager("full")
    manager.launch(PLANNER.plan(2), SLEEPING, startup_grace_s=1)
    ranks = job_ranks("full")
    manifest = (root / "full" / "manifest.json").read_text()
    assert len(ranks) == 2
    filler = _fill(small_disk, 0)

    with pytest.raises(JobLaunchError) as full:
        manager.launch(PLANNER.plan(3), SLEEPING, startup_grace_s=1)

    message = str(full.value)  # the first write, the grid ledger's reservation, fails
    assert message == (
        f"job 'full' was not launched: writing the grid ledger {root}/.grid/ledger.json failed "
        "(No space left on device); nothing was stopped or started"
    )
    assert job_ranks("full") == ranks  # the same processes, all alive
    assert (root / "full" / "manifest.json").read_text() == manifest

    # room for the files, not for what the started launch would write: refused by the check
    os.truncate(filler, filler.stat().st_size - 300 * 1024)
    with pytest.raises(JobLaunchError, match=r"free, less than the 1\.0 MiB a started launch"):
        manager.launch(PLANNER.plan(3), SLEEPING, startup_grace_s=1)
    assert job_ranks("full") == ranks
    assert (root / "full" / "manifest.json").read_text() == manifest
    assert len(list((root / "full" / "specs").iterdir())) == 1  # the refused ones removed

    filler.unlink()
    outcome = manager.launch(PLANNER.plan(3), SLEEPING, startup_grace_s=1)
    assert (outcome.action, outcome.previous_nodes) == ("resized", 2)
    assert len(job_ranks("full")) == 3
    stop_job(root, "full")
