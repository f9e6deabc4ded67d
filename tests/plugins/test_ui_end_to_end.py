"""End to end: a real check, a real ``airflow api-server`` under a sub-path, a real browser.

1. a real local job is launched, a DAG's check scales it up (``dag.test()``),
   the resize relaunches it, and a later check holds;
2. the check's extra link is read through the REST API of an ``airflow
   api-server`` on a free loopback port, served under ``[api] base_url``
   ``http://127.0.0.1:<port>/airflow`` (it computed the link on the worker): it
   opens the plugin's UI route, inside the UI;
3. headless Chromium (Debian's ``chromium`` + ``chromedriver``, through
   Selenium) logs in through the UI's login form as a Viewer;
4. it opens the link: the UI shows the job page in its iframe, this check's
   decision on top, the live status (running, 4 nodes, the resize's launch),
   the conditions, the launch that followed the scale-up, and a rank's log;
5. a 1280x800 screenshot goes to the test's temp folder (and, when the
   environment variable ``ELASTICGRID_DOCS_SCREENSHOT`` names a file, there
   too: that is how ``docs/job-page.png`` is made);
6. the task-instance tab shows the check's decision; Browse > Scale decisions
   lists the job, and its link keeps the UI's address in step; a missing job
   is a readable page.

The server is a process group of its own and is stopped at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from elasticgrid_provider.core.state import state_variable_key
from tests.airflow_support import run_dag
from tests.conftest import airflow_command
from tests.ports import free_port

pytestmark = [pytest.mark.airflow, pytest.mark.long]

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
READER, PASSWORD = "reviewer", "review-the-scale-decisions"
SUB_PATH = "/airflow"  # Airflow served under a sub-path, as behind a proxy


def _http(url: str, data: dict[str, Any] | None = None, token: str | None = None) -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = None if data is None else json.dumps(data).encode()
    request = urllib.request.Request(url, data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture
def base_url(monkeypatch: pytest.MonkeyPatch) -> str:
    """The API server's URL, under a sub-path; workers build extra links from ``[api] base_url``."""
    url = f"http://127.0.0.1:{free_port()}{SUB_PATH}"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", url)
    return url


@pytest.fixture
def api_server(airflow_db: Path, base_url: str, tmp_path: Path) -> Iterator[str]:
    """``airflow api-server`` on the session's metadata DB, with one Viewer user."""
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({READER: PASSWORD}))
    port = str(urlsplit(base_url).port)
    environment = {
        **os.environ,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{READER}:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API_AUTH__JWT_SECRET": "an-end-to-end-test-secret-that-is-long-enough-" * 2,
    }
    log = (tmp_path / "api-server.log").open("w")
    server = subprocess.Popen(
        [*airflow_command(), "api-server", "-H", "127.0.0.1", "-p", port, "-w", "1"],
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, (tmp_path / "api-server.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{base_url}/api/v2/monitor/health", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, "the api-server did not answer in 180 s"
                time.sleep(1)
        yield base_url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
        log.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium driven by chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM and CHROMEDRIVER, (
        "chromium and chromedriver are missing: 'make test' installs them (as root: "
        "'bash scripts/system-packages.sh ui'; otherwise 'sudo apt-get install chromium "
        "chromium-driver')"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,800",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _log_in(driver: Any, base_url: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base_url}/auth/login")
    wait = WebDriverWait(driver, 60)
    wait.until(expected_conditions.presence_of_element_located((By.NAME, "username")))
    driver.find_element(By.NAME, "username").send_keys(READER)
    driver.find_element(By.NAME, "password").send_keys(PASSWORD)
    wait.until(expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "[type=submit]")))
    driver.find_element(By.CSS_SELECTOR, "[type=submit]").click()
    wait.until(lambda d: d.get_cookie("_token") is not None)


def _frame_text(driver: Any, wanted: str) -> str:
    """The text of the UI's plugin iframe once it shows ``wanted`` (the driver stays in it)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver.switch_to.default_content()
    frame = WebDriverWait(driver, 60).until(
        expected_conditions.presence_of_element_located((By.TAG_NAME, "iframe"))
    )
    driver.switch_to.frame(frame)
    WebDriverWait(driver, 60).until(lambda d: wanted in d.find_element(By.TAG_NAME, "body").text)
    return str(driver.find_element(By.TAG_NAME, "body").text)


def test_a_reviewer_opens_the_checks_extra_link_and_reads_the_decision(
    jobs_root: Path, api_server: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    launch = run_dag("launch_queue_bound", {"job_name": "audited", "nodes": 2})
    assert launch.task_states["launch"] == "success"
    result = run_dag("scale_up_then_resize", {"job_name": "audited"})
    assert result.task_states["scale_check"] == "success"
    decision = result.xcom("scale_check")
    assert (decision["action"], decision["target_nodes"]) == ("scale_up", 4)
    resized = result.xcom("resize", key="job")
    # a later check of the resized job holds (fresh window, then the cooldown) until it times out
    later = run_dag("scale_check_cooldown", {"job_name": "audited"})
    assert later.task_states["scale_check"] == "skipped"
    assert later.xcom("scale_check")["action"] == "hold"

    token = _http(f"{api_server}/auth/token", {"username": READER, "password": PASSWORD})[
        "access_token"
    ]
    run = urllib.request.quote(result.run_id, safe="")
    links = _http(
        f"{api_server}/api/v2/dags/scale_up_then_resize/dagRuns/{run}"
        "/taskInstances/scale_check/links",
        token=token,
    )
    link = links["extra_links"]["Scale decisions"]
    # the UI's route, which shows the page in its iframe; both carry the sub-path
    assert link.startswith(
        f"{api_server}/plugin/scale-decisions{SUB_PATH}/elasticgrid/jobs/audited"
        "?dag_id=scale_up_then_resize"
    )
    # the launch task links to the same job's page
    resize = _http(
        f"{api_server}/api/v2/dags/scale_up_then_resize/dagRuns/{run}/taskInstances/resize/links",
        token=token,
    )
    assert resize["extra_links"]["Scale decisions"].startswith(
        f"{api_server}/plugin/scale-decisions{SUB_PATH}/elasticgrid/jobs/audited?"
    )
    # the UI lists the plugin's Browse entry and task-instance tab, under the sub-path
    plugins = _http(f"{api_server}/api/v2/plugins", token=token)["plugins"]
    views = next(p for p in plugins if p["name"] == "elasticgrid")["external_views"]
    assert {(v["destination"], v["url_route"], v["href"].split("/")[1]) for v in views} == {
        ("nav", "scale-decisions", "airflow"),
        ("task_instance", "scale-decision", "airflow"),
        ("nav", "grid-fleet", "airflow"),
    }

    _log_in(browser, api_server)
    browser.get(link)
    text = _frame_text(browser, "Scale decisions: audited")
    # this check's decision heads the page
    top = browser.find_element(By.CSS_SELECTOR, "tr.highlight").text
    assert "scale_up" in top and "waiting for a worker" in top
    assert text.index("This check's decision") < text.index("Now")
    assert decision["reason"] in text
    assert "queue_bound (target_queue_fraction=0.2, scale_up_factor=2)" in text
    # now: the launch record and iroh-tinker, not the last check's values
    assert "Status\nrunning (now)" in text
    assert "Current nodes\n4" in text
    assert f"Launch\n{resized['launch_id']}" in text
    assert "ScalingLimited False DesiredWithinRange" in text
    # the scale-up links the launch that followed it: the resize task, in the top window
    followed = browser.find_element(By.LINK_TEXT, resized["launch_id"])
    assert followed.get_attribute("href").endswith(
        f"{SUB_PATH}/dags/scale_up_then_resize/runs/{run}/tasks/resize"
    )
    times = browser.find_elements(By.TAG_NAME, "time")
    assert times and all(t.get_attribute("title").endswith(" UTC") for t in times)
    assert all(t.text.endswith("ago") or t.text == "just now" for t in times)
    assert len(browser.find_elements(By.CSS_SELECTOR, "path.line")) == 3
    assert browser.find_elements(By.CSS_SELECTOR, "line.marker.resize")

    browser.switch_to.default_content()
    browser.execute_cdp_cmd(  # the viewport itself 1280x800, whatever the window's frame takes
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False},
    )
    screenshot = tmp_path / "job-page.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 10_000
    wanted = os.environ.get("ELASTICGRID_DOCS_SCREENSHOT")
    if wanted:
        shutil.copyfile(screenshot, wanted)

    # a rank's log, as iroh-tinker keeps it, opens in the iframe
    _frame_text(browser, "Rank logs")
    browser.find_elements(By.LINK_TEXT, "rank 0")[0].click()
    log = _frame_text(browser, "Log of rank 0 of part audited--")
    assert "Back to job audited" in log
    assert not browser.find_elements(By.CSS_SELECTOR, "p.error")

    # the task-instance tab: this check's decision, found by the job the task checked; a
    # job that sorts first and holds a record with the same ids (another job checked by
    # the same task) must not win
    from airflow.models.variable import Variable

    decoy = json.loads(Variable.get(state_variable_key("audited")))
    decoy["job_name"] = "aaa-decoy"
    Variable.set(state_variable_key("aaa-decoy"), json.dumps(decoy))
    browser.get(
        f"{api_server}/dags/scale_up_then_resize/runs/{run}/tasks/scale_check/plugin/scale-decision"
    )
    tab = _frame_text(browser, "This check's decision")
    assert "Scale decisions: audited" in tab and "aaa-decoy" not in tab
    assert "scale_up" in browser.find_element(By.CSS_SELECTOR, "tr.highlight").text

    # Browse > Scale decisions: the list in the iframe; the job's link keeps the UI in step
    browser.get(f"{api_server}/plugin/scale-decisions")
    _frame_text(browser, "audited")
    row = browser.find_element(By.LINK_TEXT, "audited")
    assert row.get_attribute("href").endswith(f"{SUB_PATH}/elasticgrid/jobs/audited")
    row.click()
    _frame_text(browser, "Scale decisions: audited")
    browser.switch_to.default_content()
    WebDriverWait(browser, 30).until(
        lambda d: d.current_url.endswith(
            f"{SUB_PATH}/plugin/scale-decisions{SUB_PATH}/elasticgrid/jobs/audited"
        )
    )

    # a job with no decisions: a readable page inside the UI, never raw JSON
    browser.get(f"{api_server}/plugin/scale-decisions{SUB_PATH}/elasticgrid/jobs/never-checked")
    missing = _frame_text(browser, "No such job")
    assert "No ElasticScaleSensor has checked this job yet" in missing
    assert "detail" not in missing
