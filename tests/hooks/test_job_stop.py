"""stop_job and the job's lock: a stop never runs beside a launch, resize or scale check of the
job (they hold the lock), and a stop cancelled while it waits stops nothing. Real local jobs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from elasticgrid_provider.core.errors import JobStopError
from elasticgrid_provider.core.job_stop import JobStopReport
from elasticgrid_provider.core.launch_spec import LaunchOptions
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import providers_from_dicts
from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook
from elasticgrid_provider.hooks.launch_stop import LOCK_POLL_S, stop_job
from tests.dag_settings import SLEEPING_RUN, TWO_LOCAL_PROVIDERS
from tests.job_processes import is_alive, job_ranks

pytestmark = pytest.mark.airflow

PLANNER = GridPlanner(providers=providers_from_dicts(TWO_LOCAL_PROVIDERS))


def _state(jobs_root: Path, job: str) -> str:
    return json.loads((jobs_root / job / "manifest.json").read_text())["state"]


def test_a_stop_waits_for_the_jobs_lock_and_one_cancelled_while_waiting_stops_nothing(jobs_root):
    store = ElasticGridHook(jobs_root=str(jobs_root)).job_store
    manager = ElasticGridHook(jobs_root=str(jobs_root)).launch_manager("locked")
    manager.launch(PLANNER.plan(3), LaunchOptions(run=SLEEPING_RUN), startup_grace_s=1)
    ranks = job_ranks("locked")
    outcome: dict[str, object] = {}
    cancel = threading.Event()

    def stop(key: str) -> None:
        try:
            outcome[key] = stop_job(store, "locked", "stopped in a test", cancelled=cancel.is_set)
        except JobStopError as exc:
            outcome[key] = exc

    with store.job_lock("locked"):  # what a launch, resize or scale check holds
        cancelled = threading.Thread(target=stop, args=("cancelled",))
        cancelled.start()
        time.sleep(2 * LOCK_POLL_S)
        cancel.set()  # the operator's on_kill while the stop waits
        cancelled.join(timeout=10 * LOCK_POLL_S)
        assert not cancelled.is_alive()
        cancel.clear()
        waiting = threading.Thread(target=stop, args=("waiting",))
        waiting.start()
        time.sleep(2 * LOCK_POLL_S)
        assert waiting.is_alive()  # still waiting: nothing stopped under the holder's feet
        assert job_ranks("locked") == ranks
        assert _state(jobs_root, "locked") == "running"

    waiting.join(timeout=60)
    assert str(outcome["cancelled"]) == (
        "job 'locked' was not stopped: the task was killed while it waited for the job's "
        "lock, and nothing was stopped"
    )
    report = outcome["waiting"]
    assert isinstance(report, JobStopReport)
    assert [part.name for part in report.parts] == ["locked--onprem", "locked--cloud"]
    assert not [pid for pid in ranks if is_alive(pid)]
    assert _state(jobs_root, "locked") == "stopped"
