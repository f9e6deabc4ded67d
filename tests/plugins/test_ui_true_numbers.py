"""The pages tell the truth, in headless Chromium against a real ``airflow api-server``.

Records are written as the sensor and the launch write them (the policy's own decisions
through ``ScaleState.advance``, launch records through ``JobManifest``, iroh-tinker's
``job.json`` per part), then a Viewer and an Admin read the pages in the UI:

* after a 6 -> 2 scale-down, "Now" and the list show the cost of the 2 nodes that run (the
  launch record's placement), as the timeline does, not the 6 the last check priced;
* a job whose parts all ended reads ``done`` for its launch too, never "running";
* a hold by the shared grid reads as the grid's capacity ("grid capacity (0 free; ...)"),
  never as the policy's ``max_nodes`` while the job is within its bounds;
* the chart's time axis never repeats a label (a three-minute job);
* a Viewer sees no server path (ledger file, jobs root), an Admin does;
* a job of 3,000 decisions opens on a page of folded rows, pages on, and unfolds a run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elasticgrid_provider.core.job import JobManifest, PartRecord
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.policy.grid import GridShare
from elasticgrid_provider.core.policy.parameters import ScalePolicy
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.state import ScaleState, state_variable_key
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore
from tests.conftest import airflow_command
from tests.hooks.test_grid_ledger import reserve_in
from tests.plugins.recorded import long_history
from tests.plugins.test_ui_end_to_end import _frame_text
from tests.plugins.test_ui_end_to_end import browser as browser  # the fixture
from tests.ports import free_port

pytestmark = [pytest.mark.airflow, pytest.mark.long]

VIEWER, ADMIN, PASSWORD = "reviewer", "boss", "read-the-true-numbers"
CLOUD = Provider("cloud", max_nodes=8, cost_per_node_hour=1.2)
POLICY = ScalePolicy(min_nodes=2, max_nodes=8, cooldown_s=0, min_samples=3, scale_down_factor=0.3)
CONTEXT = {"dag_id": "audit_dag", "task_id": "scale_check", "try_number": 1}


@pytest.fixture
def api_server(jobs_root: Path, airflow_db: Path, tmp_path: Path) -> Iterator[str]:
    """``airflow api-server`` on the session's DB and the test's jobs root: a Viewer, an Admin."""
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({VIEWER: PASSWORD, ADMIN: PASSWORD}))
    port = free_port()
    environment = {
        **os.environ,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{VIEWER}:viewer,{ADMIN}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API_AUTH__JWT_SECRET": "a-true-numbers-test-secret-that-is-long-enough-" * 2,
    }
    log = (tmp_path / "api-server.log").open("w")
    server = subprocess.Popen(
        [*airflow_command(), "api-server", "-H", "127.0.0.1", "-p", str(port), "-w", "1"],
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, (tmp_path / "api-server.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, "the api-server did not answer in 180 s"
                time.sleep(1)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
        log.close()


def _store(data: dict[str, Any]) -> None:
    from airflow.models.variable import Variable

    Variable.set(state_variable_key(data["job_name"]), data, serialize_json=True)


def _launch(jobs_root: Path, job: str, nodes: int, part_status: str) -> None:
    """The job's launch record, ``running``, on ``nodes`` cloud nodes, and its one part's
    iroh-tinker record saying ``part_status``."""
    part = f"{job}--cloud"
    (jobs_root / part).mkdir(parents=True)
    placement = Placement((Assignment(CLOUD, nodes),))
    record = PartRecord(part, "cloud", "local", nodes, 0, str(jobs_root / part / "spec.json"))
    manifest = JobManifest(
        job_name=job,
        launch_id="20261205T090000Z-cccccc",
        launched_at="2026-12-05T09:00:00+00:00",
        placement=placement,
        world_size=nodes,
        procs_per_node=1,
        rendezvous="dir:/tmp/rendezvous",
        run="python train.py",
        parts=(record,),
        state=LaunchPhase.RUNNING,
    )
    (jobs_root / job).mkdir(parents=True, exist_ok=True)
    (jobs_root / job / "manifest.json").write_text(json.dumps(manifest.model_dump()))
    state = {
        "name": part, "status": part_status, "engine": "local", "spec_path": record.spec_path,
        "job_dir": str(jobs_root / part), "created": "2026-12-05T09:00:00Z",
        "world_size": nodes, "backend": "gloo",
    }  # fmt: skip
    (jobs_root / part / "job.json").write_text(json.dumps(state))


def _decide(job: str, nodes: int, now: float, grid: GridShare | None = None) -> dict[str, Any]:
    """Three checks a minute apart ending ``now``, as the sensor records them: two hold for
    want of samples, the third decides (idle: 6 -> 2; queue-bound on a full grid: a hold)."""
    state = ScaleState(job)
    for index, count in enumerate((1, 1, 2)):
        at = now - 120 + 60 * index
        samples = [StepSample(10 * index + i, 1.0, 0.0 if grid is None else 0.5, nodes, 100)
                   for i in range(count)]  # fmt: skip
        cost = CLOUD.cost_per_node_hour * nodes
        context = {**CONTEXT, "job_name": job, "run_id": f"check-{index}", "cost_per_hour": cost,
                   "job_status": "running"}  # fmt: skip
        observed = state.observe(samples, nodes, at)
        record = observed.decide(POLICY, at, grid=grid, context=context)
        if record.decision.changed:
            target = record.decision.target_nodes
            record.context["proposed_cost_per_hour"] = CLOUD.cost_per_node_hour * target
        state = observed.remember(record, at)
    return state.model_dump()


def _axis_labels(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    texts = driver.find_elements(By.CSS_SELECTOR, "svg text")
    placed = [(float(t.get_attribute("y")), t.text) for t in texts]
    bottom = max(y for y, text in placed if not text.startswith("time ("))
    return [text for y, text in placed if y == bottom]


def _log_in(driver: Any, url: str, user: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver.delete_all_cookies()
    driver.get(f"{url}/auth/login")
    wait = WebDriverWait(driver, 60)
    wait.until(expected_conditions.presence_of_element_located((By.NAME, "username")))
    driver.find_element(By.NAME, "username").send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(PASSWORD)
    wait.until(expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "[type=submit]")))
    driver.find_element(By.CSS_SELECTOR, "[type=submit]").click()
    wait.until(lambda d: d.get_cookie("_token") is not None)


def _page(driver: Any, url: str, path: str, wanted: str) -> str:
    driver.get(f"{url}/plugin/scale-decisions{path}")
    return _frame_text(driver, wanted)


@pytest.fixture
def records(jobs_root: Path) -> Iterator[Path]:
    """The jobs root; the records written there are the test's, its running part ends with it
    (it has no processes for the jobs root's clean-up to stop)."""
    yield jobs_root
    part = jobs_root / "shrunk--cloud" / "job.json"
    if part.exists():
        part.write_text(json.dumps({**json.loads(part.read_text()), "status": "stopped"}))


def test_the_pages_show_true_numbers_and_no_path_to_a_viewer(
    records: Path, api_server: str, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    jobs_root = records
    now = time.time()
    shrunk = _decide("shrunk", 6, now)
    assert [e["action"] for e in shrunk["history"]][-1] == "scale_down"
    assert shrunk["history"][-1]["target_nodes"] == 2
    _store(shrunk)
    _launch(jobs_root, "shrunk", 2, "running")  # the resize's launch runs 2 nodes
    _store(_decide("finished", 2, now - 600))
    _launch(jobs_root, "finished", 2, "done")  # it ended on its own: the record says running
    grid = GridShare(job="grid-held", max_nodes=4, holders={"big": {"cloud": 4}})
    _store(_decide("grid-held", 4, now, grid))  # queue-bound at 4 of 8: the grid is full
    with GridLedgerStore(jobs_root).transaction() as txn:
        reserve_in(txn, "big", {"cloud": 4}, "20261205T080000Z-aaaaaa", {"cloud": 8})
    _store({**long_history(3_000), "job_name": "long-job"})

    _log_in(browser, api_server, VIEWER)
    text = _page(browser, api_server, "/elasticgrid/jobs/shrunk", "Scale decisions: shrunk")
    assert "Cost per hour\n$2.40/h (now)" in text  # the 2 nodes running, not the 6 priced
    assert "$7.20/h -> $2.40/h" in text  # the timeline's scale-down, as before
    labels = _axis_labels(browser)
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    listing = _page(browser, api_server, "/elasticgrid/jobs", "shrunk")
    assert "$7.20/h" not in listing and "$2.40/h" in listing

    text = _page(browser, api_server, "/elasticgrid/jobs/finished", "Scale decisions: finished")
    assert "Status\ndone (now)" in text
    launch = next(line for line in text.splitlines() if line.startswith("20261205T090000Z"))
    assert "done" in launch and "running" not in launch

    text = _page(browser, api_server, "/elasticgrid/jobs/grid-held", "Scale decisions: grid-held")
    assert "grid capacity (0 free; 'big' holds 4 on cloud)" in text
    assert "max_nodes=8)" not in text.replace("(min_nodes=2, max_nodes=8)", "")
    assert "held by grid capacity: the shared grid has no free node" in text
    # no launch record: the page says so without the server's path
    assert "no launch record of this job under <jobs root>" in text
    assert str(jobs_root) not in browser.page_source

    fleet = _page(browser, api_server, "/elasticgrid/fleet", "Providers and jobs")
    assert "Ledger" not in fleet and str(jobs_root) not in browser.page_source
    assert "cloud 8 2" in " ".join(fleet.split())  # 'big' reserved 4, 'shrunk' holds 2

    text = _page(browser, api_server, "/elasticgrid/jobs/long-job", "Scale decisions: long-job")
    assert "page 1 of 18 (900 rows)" in text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline + p + table tbody tr")) == 50
    browser.find_elements(By.LINK_TEXT, "older")[0].click()
    assert "page 2 of 18" in _frame_text(browser, "page 2 of 18")
    browser.find_elements(By.PARTIAL_LINK_TEXT, "held 8 times by cooldown and stabilisation")[
        0
    ].click()
    unfolded = _frame_text(browser, "one by one")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline + p + table tbody tr")) == 8
    assert "all decisions" in unfolded

    _log_in(browser, api_server, ADMIN)
    fleet = _page(browser, api_server, "/elasticgrid/fleet", "Providers and jobs")
    assert f"Ledger {jobs_root.resolve()}" in fleet  # an admin sees where the ledger lives
    text = _page(browser, api_server, "/elasticgrid/jobs/grid-held", "Scale decisions: grid-held")
    assert f"no launch record of this job under {jobs_root.resolve()}" in text
