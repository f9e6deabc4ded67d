"""WholeFileJobManager: a part's state file is replaced whole, so a reader never sees half."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import asdict

from iroh_tinker.cloud import JobManager
from iroh_tinker.cloud.job import JobState

from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.hooks.job_manager import WholeFileJobManager

# rewrites the part's state, growing and shrinking it, until told to stop on stdin
WRITER = """
import sys, threading
from iroh_tinker.cloud.job import JobState
from elasticgrid_provider.hooks.job_manager import WholeFileJobManager

manager = WholeFileJobManager(root=sys.argv[1])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
saves = 0
while not stop.is_set():
    error = "down ranks: " + "x" * (1 + 200_000 * (saves % 2))
    manager.save(JobState("part", "running", "local", "spec.json", sys.argv[1] + "/part",
                          "now", 2, "gloo", last_error=error))
    saves += 1
    if saves == 1:
        print("saving", flush=True)
print(saves, flush=True)
"""


def state(root: str, **changes: object) -> JobState:
    fields = dict(name="part", status="running", engine="local", spec_path="spec.json")
    fields.update(job_dir=f"{root}/part", created="now", world_size=2, backend="gloo")
    return JobState(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_save_reads_back_through_iroh_tinkers_own_manager_and_leaves_no_temporary(tmp_path):
    """Only the state and the lock of its saves are left in the part's folder."""
    saved = state(str(tmp_path), pids={"0": 12, "1": 13}, last_error="down ranks: [1]")
    WholeFileJobManager(root=tmp_path).save(saved)
    assert asdict(JobManager(root=tmp_path).load("part")) == asdict(saved)
    assert sorted(p.name for p in (tmp_path / "part").iterdir()) == [".job.json.lock", "job.json"]


def test_a_reader_never_sees_half_a_state_while_another_process_rewrites_it(tmp_path):
    WholeFileJobManager(root=tmp_path).save(state(str(tmp_path)))
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline().strip() == "saving"
    reader, sizes = JobManager(root=tmp_path), set()
    for _ in range(3000):  # iroh-tinker's own reads, as a status or a check makes them
        sizes.add(len(reader.load("part").last_error or ""))
    writer.stdin.close()
    saves = int(writer.stdout.readline())
    assert writer.wait(timeout=30) == 0
    assert saves > 10 and len(sizes) == 2, (saves, sizes)  # both versions were read, whole


def test_the_job_store_builds_the_whole_file_manager(tmp_path):
    assert isinstance(ElasticGridHook(jobs_root=str(tmp_path)).job_manager, WholeFileJobManager)


def test_a_status_read_from_before_a_stop_does_not_undo_it_but_a_new_launch_is_saved(tmp_path):
    manager = WholeFileJobManager(root=tmp_path)
    running = state(str(tmp_path), pids={"0": 12, "1": 13})
    manager.save(running)
    manager.save(state(str(tmp_path), pids={"0": 12, "1": 13}, status="stopped"))
    for stale in ("failed", "running"):  # what a refresh that read "running" would write
        manager.save(state(str(tmp_path), pids={"0": 12, "1": 13}, status=stale))
        assert JobManager(root=tmp_path).load("part").status == "stopped"
    relaunched = state(str(tmp_path), pids={"0": 21, "1": 22})
    manager.save(relaunched)
    assert asdict(JobManager(root=tmp_path).load("part")) == asdict(relaunched)
    failed_start = state(str(tmp_path), status="failed", last_error="no engines configured")
    manager.save(state(str(tmp_path), pids={"0": 21, "1": 22}, status="stopped"))
    manager.save(failed_start)  # a launch that started nothing records its failure
    assert JobManager(root=tmp_path).load("part").last_error == "no engines configured"
