"""Nothing is lost between a stop and a start: kills, full disks and retries, for real.

Real ``airflow dags test`` processes SIGKILLed at the instants named, real
local iroh-tinker jobs, a real tmpfs filled up. The DAGs are in
``tests/dags/kill_dags.py``; :class:`tests.fake_engines.HeldStopEngine`
holds a part's ``stop`` after its ranks are gone, so a resize can be killed
exactly between the stop of the old launch and the start of the new one.
"""

from __future__ import annotations

import json
import os
import signal
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
from tests.airflow_support import run_dag, start_dags_test
from tests.dag_settings import SLEEPING_RUN, TWO_LOCAL_PROVIDERS
from tests.fake_engines import HOLD_STOP
from tests.job_processes import is_alive, job_ranks, rank_pids, stop_ranks_under

pytestmark = [pytest.mark.airflow, pytest.mark.long]

PLANNER = GridPlanner(providers=providers_from_dicts(TWO_LOCAL_PROVIDERS))
SLEEPING = LaunchOptions(run=SLEEPING_RUN, recovery={"mode": "none"})


def _manifest(jobs_root: Path, job: str) -> dict:
    return json.loads((jobs_root / job / "manifest.json").read_text())


def _text(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    captured = capfd.readouterr()
    return captured.out + captured.err + caplog.text


def _wait_for(condition, what: str, process: subprocess.Popen | None = None, timeout=90.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert process is None or process.poll() is None, f"airflow dags test ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.1)


def _sigkill(process: subprocess.Popen, log) -> str:
    """SIGKILL ``airflow dags test`` (no on_kill, no clean-up) and return its output."""
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    log.seek(0)
    return log.read()


def test_a_resize_killed_between_the_stop_and_the_start_leaves_a_record_the_check_reports(
    airflow_db, jobs_root, tmp_path, capfd, caplog
):
    """SIGKILL once the old launch's ranks are gone and before the new launch is recorded:
    the manifest says the old launch was being stopped, the check fails saying what happened
    (never "job_ended"), and the retry starts the job once."""
    conf = {"job_name": "cut", "nodes": 2}
    assert run_dag("launch_held_stop", conf).task_states["launch"] == "success"
    old = _manifest(jobs_root, "cut")
    part = jobs_root / "cut--held"
    (part / HOLD_STOP).write_text("")
    try:
        log_path = tmp_path / "resize.log"
        with log_path.open("w+") as log:
            process = start_dags_test(
                "kill_dags.py", "launch_held_stop", {**conf, "nodes": 3}, output=log
            )
            try:
                _wait_for(lambda: (part / "stop-held").exists(), "held stop", process)
                assert job_ranks("cut") == {}  # the old launch is stopped, nothing new started
                _sigkill(process, log)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    finally:
        (part / HOLD_STOP).unlink(missing_ok=True)

    manifest = _manifest(jobs_root, "cut")
    assert (manifest["launch_id"], manifest["state"]) == (old["launch_id"], "stopping")
    assert manifest["down_reason"].startswith("being replaced by launch ")
    capfd.readouterr()
    check = run_dag("scale_check_patient", {"job_name": "cut"})
    assert check.task_states == {"scale_check": "failed"}
    text = _text(capfd, caplog)
    assert (
        f"JobFailedError: job 'cut' was cut short while its launch {old['launch_id']} was being "
        "stopped (being replaced by launch " in text
    )
    assert "no rank is left, so there is nothing to scale; launch it again with LaunchOperator" in (
        text
    )
    assert "job_ended" not in text

    retry = run_dag("launch_held_stop", {**conf, "nodes": 3})
    assert retry.task_states["launch"] == "success"
    job = retry.xcom("launch", "job")
    assert (job["nodes"], job["launch_state"]) == (3, "running")
    assert set(job_ranks("cut").values()) == {job["launch_id"]}
    assert len(job_ranks("cut")) == 3


def test_a_job_stopped_outside_elasticgrid_fails_the_check_instead_of_ending_it(
    airflow_db, jobs_root, capfd, caplog
):
    """Every part stopped while the launch is recorded running: the job vanished, and the
    check says so instead of "hold ... job_ended ... nothing to scale"."""
    from iroh_tinker.cloud import JobManager

    run_dag("launch_sleeping", {"job_name": "gone", "nodes": 2})
    launch_id = _manifest(jobs_root, "gone")["launch_id"]
    JobManager(root=jobs_root).stop("gone--onprem")  # iroh-tinker's own stop, not the hook's
    _wait_for(lambda: not job_ranks("gone"), "the ranks to go")
    capfd.readouterr()

    check = run_dag("scale_check_patient", {"job_name": "gone"})

    assert check.task_states == {"scale_check": "failed"}
    text = _text(capfd, caplog)
    assert (
        f"job 'gone' has no rank left, yet its launch {launch_id} is recorded running: its "
        "parts were stopped outside elasticgrid or never started" in text
    )
    assert check.xcom("scale_check") is None  # no job_ended record


def test_stop_job_records_the_job_stopped_and_kills_the_runner_before_it_restarts_a_rank(
    jobs_root,
):
    """With iroh-tinker's default ``recovery`` (restart), a TERMed rank would be restarted by
    its runner until the local engine's 10 s deadline; the runner goes first instead."""
    hook = ElasticGridHook(jobs_root=str(jobs_root))
    options = LaunchOptions(run=SLEEPING_RUN)  # iroh-tinker's default recovery: restart
    hook.launch("halt", PLANNER.plan(3), options, startup_grace_s=1)
    ranks = job_ranks("halt")
    assert len(ranks) == 3

    started = time.monotonic()
    snapshot = hook.stop_job("halt")
    elapsed = time.monotonic() - started

    assert snapshot is not None and snapshot.status == "stopped"
    assert elapsed < 4.0, f"stopping took {elapsed:.1f} s"
    assert not [pid for pid in ranks if is_alive(pid)]
    assert job_ranks("halt") == {}
    folders = [jobs_root / "halt--onprem", jobs_root / "halt--cloud"]
    assert [marker.name for f in folders for marker in f.glob("attempt_*")] == []  # no restart
    manifest = _manifest(jobs_root, "halt")
    assert (manifest["state"], manifest["down_reason"]) == ("stopped", "stopped on request")


def test_a_retry_adopts_a_start_killed_in_its_grace_with_every_rank_up(
    airflow_db, jobs_root, tmp_path, capfd, caplog
):
    """SIGKILL in the start-up grace, every part started and every rank up: the launch is
    left ``starting``; the retry confirms it and attaches, restarting nothing."""
    conf = {"job_name": "adopt", "nodes": 3}
    log_path = tmp_path / "first.log"
    with log_path.open("w+") as log:
        process = start_dags_test("kill_dags.py", "launch_long_grace", conf, output=log)
        try:

            def all_up() -> bool:
                manifest = jobs_root / "adopt" / "manifest.json"
                if not manifest.exists():
                    return False
                launch_id = json.loads(manifest.read_text())["launch_id"]
                result = jobs_root / "adopt" / "specs" / launch_id / "launcher-result.json"
                ranks = job_ranks("adopt")
                return (
                    result.exists()
                    and len(json.loads(result.read_text())["started"]) == 2
                    and len(ranks) == 3
                )

            _wait_for(all_up, "every rank up", process)
            assert _manifest(jobs_root, "adopt")["state"] == "starting"  # still in its grace
            first = job_ranks("adopt")
            output = _sigkill(process, log)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert "every rank is up" not in output  # killed before it confirmed anything
    intent = _manifest(jobs_root, "adopt")
    assert intent["state"] == "starting"
    capfd.readouterr()

    retry = run_dag("launch_long_grace", conf)

    assert retry.task_states == {"plan": "success", "launch": "success"}
    job = retry.xcom("launch", "job")
    assert (job["launch_id"], job["launch_state"]) == (intent["launch_id"], "running")
    assert job_ranks("adopt") == first  # the same processes: nothing restarted
    recorded = [
        pid for part in ("adopt--onprem", "adopt--cloud") for pid in rank_pids(jobs_root, part)
    ]
    assert sorted(recorded) == sorted(first)
    text = _text(capfd, caplog)
    assert f"Adopted job adopt's launch {intent['launch_id']} (3 nodes)" in text
    assert "resized from" not in text and "Stopped part" not in text


def test_a_lost_part_with_no_notice_is_named_by_down_ranks_and_global_ranks(jobs_root):
    """A part whose ranks vanish without a word: the cause is iroh-tinker's ``down ranks``,
    and the ranks are named globally (part rank + the part's rank offset)."""
    hook = ElasticGridHook(jobs_root=str(jobs_root))
    hook.launch("quiet", PLANNER.plan(4), SLEEPING, startup_grace_s=1)
    cloud = rank_pids(jobs_root, "quiet--cloud")
    for pid in cloud:  # both at once: iroh-tinker records the part failed, with no error
        os.killpg(pid, signal.SIGKILL)
    _wait_for(lambda: not any(is_alive(pid) for pid in cloud), "the cloud ranks to go")

    def both_lost() -> bool:
        # a killed rank reads as running until it is reaped (a zombie answers kill -0): poll
        # the job as a check would, until iroh-tinker sees both ranks gone
        snapshot = hook.job_snapshot("quiet")
        return snapshot is not None and [len(p.ranks) for p in hook.lost_parts(snapshot)] == [2]

    _wait_for(both_lost, "both cloud ranks reported lost")
    snapshot = hook.job_snapshot("quiet")
    assert snapshot is not None
    [lost] = hook.lost_parts(snapshot)

    assert (lost.part, lost.provider, lost.ranks) == ("quiet--cloud", "cloud", (2, 3))
    assert lost.cause == "its ranks stopped (down ranks: [0, 1])"
    report = hook.failure_report(snapshot)
    assert "part quiet--cloud rank 0 (global rank 2) failed" in report
    assert "part quiet--cloud rank 1 (global rank 3) failed" in report


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
    hook = ElasticGridHook(jobs_root=str(root))
    hook.launch("full", PLANNER.plan(2), SLEEPING, startup_grace_s=1)
    ranks = job_ranks("full")
    manifest = (root / "full" / "manifest.json").read_text()
    assert len(ranks) == 2
    filler = _fill(small_disk, 0)

    with pytest.raises(JobLaunchError) as full:
        hook.launch("full", PLANNER.plan(3), SLEEPING, startup_grace_s=1)

    message = str(full.value)
    assert message.startswith("job 'full' was not launched: writing ")
    assert f"{root}/full/" in message and "(No space left on device)" in message
    assert message.endswith("; the running job was left as it was")
    assert job_ranks("full") == ranks  # the same processes, all alive
    assert (root / "full" / "manifest.json").read_text() == manifest

    # room for the files, not for what the started launch would write: refused by the check
    os.truncate(filler, filler.stat().st_size - 300 * 1024)
    with pytest.raises(JobLaunchError, match=r"free, less than the 1\.0 MiB a started launch"):
        hook.launch("full", PLANNER.plan(3), SLEEPING, startup_grace_s=1)
    assert job_ranks("full") == ranks
    assert (root / "full" / "manifest.json").read_text() == manifest
    assert len(list((root / "full" / "specs").iterdir())) == 1  # the refused ones removed

    filler.unlink()
    outcome = hook.launch("full", PLANNER.plan(3), SLEEPING, startup_grace_s=1)
    assert (outcome.action, outcome.previous_nodes) == ("resized", 2)
    assert len(job_ranks("full")) == 3
    hook.stop_job("full")
