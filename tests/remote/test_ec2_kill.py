"""The launch task SIGKILLed while it provisions fake EC2 VMs, then retried: no slot ever has
two live instances, the retry ends with exactly its own instances, and a stop leaves none.

The VMs boot slowly (``boot_delay_s``), so the kill lands at a chosen instant of the
provisioning: right after RunInstances (instances exist, none answers yet), or once every
instance has booted (before any rank starts).
"""

from __future__ import annotations

import json
import time

import pytest

from elasticgrid_provider.cli import main as cli
from tests.airflow_support import run_dag, start_dags_test
from tests.ec2_hosts import FakeEc2, assert_nothing_left, watching

pytestmark = [pytest.mark.airflow, pytest.mark.long]


def _tags(instance: dict) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in instance.get("Tags", ())}


@pytest.mark.parametrize("instant", ["instances started", "instances booted"])
def test_a_sigkill_while_provisioning_then_a_retry_never_doubles_an_instance(
    airflow_db, jobs_root, ec2_pool: FakeEc2, tmp_path, capsys, instant
):
    job = "killed-" + instant.split()[1]
    conf = {"job_name": job, "nodes": 2, "steps": 100000, "token": "kill-token-1f3c"}
    ec2_pool.boot_delay_s = 4.0

    def reached() -> bool:
        alive = ec2_pool.alive()
        if instant == "instances started":
            return len(alive) == 2
        return len(alive) == 2 and all(ec2_pool.host_index(i) is not None for i in alive)

    with watching(ec2_pool) as watch:
        log_path = tmp_path / "first.log"
        with log_path.open("w+") as log:
            process = start_dags_test("ec2_dags.py", "ec2_launch", conf, output=log)
            try:
                deadline = time.monotonic() + 120
                while not reached():
                    assert process.poll() is None, log_path.read_text()[-3000:]
                    assert time.monotonic() < deadline, f"not reached: {instant}"
                    time.sleep(0.05)
                process.kill()
                process.wait(timeout=30)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=30)
        first = set(ec2_pool.alive())
        assert len(first) == 2  # the killed try's instances, left for the retry to settle
        intent = json.loads((jobs_root / job / "manifest.json").read_text())
        assert intent["state"] == "starting"

        retry = run_dag("ec2_launch", conf)

        assert retry.task_states == {"plan": "success", "launch": "success"}
        launch_id = retry.xcom("launch", "job")["launch_id"]
        alive = [i for i in ec2_pool.instances() if i["State"]["Name"] != "terminated"]
        assert {_tags(i)["elasticgrid:launch"] for i in alive} == {launch_id}
        assert len(alive) == 2
        for instance in ec2_pool.instances(**{"instance-id": sorted(first)}):
            # the killed try's instances: terminated, unless the retry adopted them
            adopted = _tags(instance)["elasticgrid:launch"] == launch_id
            assert adopted or instance["State"]["Name"] == "terminated"

        capsys.readouterr()
        assert cli(["stop", job]) == 0
    assert watch.duplicates == [], watch.duplicates
    assert watch.most_alive <= 4
    assert_nothing_left(ec2_pool, conf["token"])
    assert not [s for s in watch.command_lines if conf["token"] in s]
    capsys.readouterr()
    assert cli(["stop", job]) == 0
    assert "nothing left to stop" in capsys.readouterr().out
