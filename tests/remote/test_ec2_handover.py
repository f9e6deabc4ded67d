"""The AWS and SSH connections of an ec2 launch, stored in the metadata database as a user
stores them, reach the launcher only through its pipe: the launch works, and neither the
secret key nor the private key shows in the job's files, the launcher's log, XCom, the
instances' user data and tags, or the environment of a process on the instances."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticgrid_provider.cli import main as cli
from tests.airflow_support import run_dag, wait_for
from tests.ec2_hosts import REGION, FakeEc2, assert_nothing_left
from tests.remote.conftest import ec2_provider, use_grid

pytestmark = [pytest.mark.airflow, pytest.mark.long]

AWS_CONN = "handover_aws"
KEY_CONN = "handover_key"


@pytest.fixture
def vms_with_stored_connections(
    airflow_db, jobs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FakeEc2, str]]:
    """Provider ``aws`` (2 fake VMs) whose ``aws_conn_id`` and ``ssh_conn_id`` are rows of the
    metadata DB (no ``AIRFLOW_CONN_*`` variable); yields the harness and the secret key."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    secret = secrets.token_hex(20)  # moto takes any secret key
    with FakeEc2(hide=[jobs_root], pool=tmp_path / "pool", set_connection=False) as ec2:
        provider = ec2_provider("aws", ec2, 2)
        del provider["params"]["ssh_key"]
        provider["params"].update(aws_conn_id=AWS_CONN, ssh_conn_id=KEY_CONN)
        use_grid(monkeypatch, jobs_root, [provider], "ec2")
        aws_extra = {"region_name": REGION, "endpoint_url": ec2.endpoint_url}
        key_extra = {"private_key": Path(ec2.key).read_text()}
        with create_session() as session:
            session.add(
                Connection(
                    AWS_CONN,
                    conn_type="aws",
                    login="testing",
                    password=secret,
                    extra=json.dumps(aws_extra),
                )
            )
            session.add(Connection(KEY_CONN, conn_type="ssh", extra=json.dumps(key_extra)))
        try:
            yield ec2, secret
        finally:
            with create_session() as session:
                session.query(Connection).filter(
                    Connection.conn_id.in_([AWS_CONN, KEY_CONN])
                ).delete()


def test_connections_from_the_metadata_db_reach_the_launcher_and_no_file_or_process(
    jobs_root: Path, vms_with_stored_connections: tuple[FakeEc2, str], capsys
):
    ec2, secret = vms_with_stored_connections
    key_line = Path(ec2.key).read_text().splitlines()[1]  # a line of the key's body
    conf = {"job_name": "handed", "nodes": 2, "steps": 100000}

    result = run_dag("ec2_launch", conf)

    assert result.task_states == {"plan": "success", "launch": "success"}
    indexes = ec2.wait_booted(ec2.alive())
    assert len(indexes) == 2
    found = []
    for index in indexes:  # every process on the instances, ranks included
        environ = ec2.lan.run(index, "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'")
        assert "ELASTICGRID_JOB=handed" in environ.stdout
        found += [s for s in (secret, key_line) if s in environ.stdout]
    assert found == []
    launch = json.dumps(result.xcom("launch", "job")) + json.dumps(result.xcom("launch"))
    files = [path for path in (jobs_root / "handed").rglob("*") if path.is_file()]
    assert any(path.name == "launcher.log" for path in files)
    for path in files:
        assert not [s for s in (secret, key_line) if s in path.read_text(errors="replace")], path
    assert secret not in launch and key_line not in launch

    from iroh_tinker.cloud import JobManager

    manager = JobManager(root=jobs_root)
    first_line = "starting at step 0/100000"
    try:
        wait_for(lambda: first_line in manager.logs("handed--aws", 0), "rank 0's first line")
    except AssertionError as error:  # what each rank printed instead
        tails = {rank: manager.logs("handed--aws", rank) for rank in (0, 1)}
        raise AssertionError(f"{error}; the ranks' logs: {tails}") from None

    capsys.readouterr()
    assert cli(["stop", "handed"]) == 0  # the CLI reads the connections the normal way
    assert "Stopped part handed--aws." in capsys.readouterr().err
    assert_nothing_left(ec2, secret)
    # the ranks' last lines were kept before their instances ended
    assert first_line in JobManager(root=jobs_root).logs("handed--aws", 0)
