"""Connections resolved where Airflow answers, handed to the launcher through a pipe.

Real parts: the amazon provider's ``AwsBaseHook`` and the task SDK read the connections (as
``AIRFLOW_CONN_*`` variables here), boto3 builds the client, an OS pipe carries the material.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from elasticgrid_provider.core.errors import CloudApiError, RemoteHostError
from elasticgrid_provider.engines import connection_material
from elasticgrid_provider.hooks.launcher import PRIVATE_PREFIXES, launcher_environment

pytestmark = pytest.mark.airflow

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----"


@pytest.fixture
def connections(airflow_db, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``cm_aws`` (an endpoint_url, region eu-west-3) and ``cm_key`` (a private key extra);
    nothing handed over before or after the test."""
    aws = {
        "conn_type": "aws",
        "login": "AKIDEXAMPLE",
        "password": "s3cr3t-key",
        "extra": {"region_name": "eu-west-3", "endpoint_url": "http://127.0.0.1:9"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_CM_AWS", json.dumps(aws))
    ssh = {"conn_type": "ssh", "extra": {"private_key": KEY.replace("\n", "\\n")}}
    monkeypatch.setenv("AIRFLOW_CONN_CM_KEY", json.dumps(ssh))
    monkeypatch.setattr(connection_material, "_handed", None)
    yield
    monkeypatch.setattr(connection_material, "_handed", None)


def test_the_task_resolves_frozen_credentials_region_endpoint_and_key(connections):
    material = connection_material.resolve([("cm_aws", None), ("cm_aws", "us-east-2")], ["cm_key"])

    (default, east) = (material["aws"][f"cm_aws\n{r}"] for r in ("", "us-east-2"))
    assert (default["access_key"], default["secret_key"], default["token"]) == (
        "AKIDEXAMPLE",
        "s3cr3t-key",
        None,
    )
    assert (default["region"], east["region"]) == ("eu-west-3", "us-east-2")
    assert default["endpoint_url"] == "http://127.0.0.1:9"
    assert material["ssh"] == {"cm_key": KEY + "\n"}


def test_the_launcher_answers_from_the_pipe_only(connections):
    material = connection_material.resolve([("cm_aws", None)], ["cm_key"])
    reader, writer = os.pipe()
    connection_material.send(material, writer)

    assert connection_material.receive(reader) == material
    with pytest.raises(OSError):
        os.fstat(reader)  # closed once read
    client = connection_material.ec2_client("cm_aws", None)
    assert client.meta.endpoint_url == "http://127.0.0.1:9"
    assert client.meta.region_name == "eu-west-3"
    assert client._request_signer._credentials.secret_key == "s3cr3t-key"
    assert connection_material.ssh_private_key("cm_key") == KEY + "\n"
    # a connection the task did not resolve is named, never read (it could not be)
    with pytest.raises(CloudApiError, match=r"aws_conn_id 'cm_aws' \(region us-east-2\) was not"):
        connection_material.ec2_client("cm_aws", "us-east-2")
    with pytest.raises(RemoteHostError, match="ssh_conn_id 'other' was not resolved"):
        connection_material.ssh_private_key("other")


def test_a_task_builds_the_client_as_the_hooks_get_conn_does_and_every_client_shares_the_models(
    connections, monkeypatch: pytest.MonkeyPatch
):
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    aws = json.loads(os.environ["AIRFLOW_CONN_CM_AWS"])
    aws["extra"]["config_kwargs"] = {"retries": {"max_attempts": 7}}
    monkeypatch.setenv("AIRFLOW_CONN_CM_AWS", json.dumps(aws))

    client = connection_material.ec2_client("cm_aws", None)
    east = connection_material.ec2_client("cm_aws", "us-east-2")
    hooks = AwsBaseHook(aws_conn_id="cm_aws", client_type="ec2").get_conn()

    assert (client.meta.endpoint_url, client.meta.region_name) == (
        hooks.meta.endpoint_url,
        hooks.meta.region_name,
    )
    assert (client.meta.region_name, east.meta.region_name) == ("eu-west-3", "us-east-2")
    assert client.meta.config.retries == hooks.meta.config.retries
    assert client.meta.config.retries["total_max_attempts"] == 8  # 7 retries after the first
    assert client._request_signer._credentials.access_key == "AKIDEXAMPLE"
    # one botocore loader for every client this process builds, the handed-over ones too
    connection_material.install(connection_material.resolve([("cm_aws", None)], []))
    handed = connection_material.ec2_client("cm_aws", None)
    assert client._loader is east._loader is handed._loader
    assert hooks._loader is not client._loader


def test_a_connection_that_cannot_be_read_is_named_in_one_sentence(connections):
    with pytest.raises(RemoteHostError, match="ssh_conn_id 'cm_missing' cannot be read"):
        connection_material.resolve([], ["cm_missing"])
    with pytest.raises(CloudApiError, match="aws_conn_id 'cm_missing' cannot be read"):
        connection_material.resolve([("cm_missing", None)], [])


def test_the_launcher_environment_has_none_of_the_task_runners_private_variables(
    monkeypatch: pytest.MonkeyPatch,
):
    private = {
        "__AIRFLOW_SUPERVISOR_FD": "0",
        "_AIRFLOW_FORK_EXEC": "1",
        "_AIRFLOW_PROCESS_CONTEXT": "client",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "airflow-db-not-allowed:///",
        "AIRFLOW__CORE__SQL_ALCHEMY_CONN": "airflow-db-not-allowed:///",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": "/bin/false",
    }
    for name, value in private.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("USER_SETTING", "kept")

    env = launcher_environment("job-a", "launch-1")

    assert not [name for name in env if name.startswith(PRIVATE_PREFIXES)]
    assert set(private).isdisjoint(env)
    assert env["USER_SETTING"] == "kept" and env["PATH"] == os.environ["PATH"]
    assert (env["ELASTICGRID_JOB"], env["ELASTICGRID_LAUNCH_ID"]) == ("job-a", "launch-1")
