"""A provider's ssh params: one sentence naming the provider and the field for each bad input."""

from __future__ import annotations

import json
import math
import os

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.ssh_params import SshParams, host_address


def test_hosts_carry_the_nodes_one_per_node_or_evenly_in_consecutive_runs():
    params = SshParams.from_provider("onprem", {"hosts": ["gpu@a", "gpu@b"]}, 4)
    assert params.node_hosts(4) == ("gpu@a", "gpu@a", "gpu@b", "gpu@b")
    assert params.node_hosts(2) == ("gpu@a", "gpu@b")
    assert params.node_hosts(0) == ()
    repeated = SshParams.parse({"hosts": ["a", "b", "a"]})
    assert repeated.node_hosts(3) == ("a", "b", "a")


def test_defaults_and_the_remote_layout():
    params = SshParams.parse({"hosts": ["gpu@10.0.0.11"]})
    assert (params.connect_timeout_s, params.python, params.ssh_opts) == (5.0, None, ())
    assert params.remote_root("job--onprem") == "~/elasticgrid/job--onprem"
    assert params.remote_job_dir("job--onprem") == "~/elasticgrid/job--onprem/.elasticgrid"
    custom = SshParams.parse({"hosts": ["h"], "remote_dir": "/scratch/eg/"})
    assert custom.remote_job_dir("x") == "/scratch/eg/.elasticgrid"
    assert host_address("gpu@10.0.0.11") == "10.0.0.11" and host_address("h") == "h"


def test_a_full_set_of_params_is_kept(tmp_path):
    key, known = tmp_path / "id", tmp_path / "known_hosts"
    key.write_text("key")
    known.write_text("")
    raw = {
        "hosts": ["gpu@a"],
        "ssh_port": 2222,
        "ssh_key": str(key),
        "ssh_opts": ["-o", "Compression=yes"],
        "remote_dir": "/scratch/eg",
        "known_hosts": str(known),
        "connect_timeout_s": 2.5,
        "python": "/opt/py/bin/python",
        "shared_dir": "/nfs/eg",
    }
    params = SshParams.from_provider("onprem", raw, 1)
    assert params.model_dump() == {**raw, "ssh_conn_id": None}
    assert params == SshParams.parse(params.model_dump())


@pytest.mark.parametrize(
    ("params", "max_nodes", "message"),
    [
        (
            {"hosts": ["a", "b", "c"]},
            4,
            "provider 'onprem' params.hosts must carry max_nodes=4 evenly, got 3 hosts: "
            "list one host per node (repeat a host to give it more nodes)",
        ),
        ({"hosts": ["a", "b", "c"]}, 2, "params.hosts must carry max_nodes=2 evenly, got 3 hosts"),
        (
            {"hosts": ["a"], "colour": "red"},
            1,
            "provider 'onprem' params has an unknown field 'colour'",
        ),
        ({}, 1, "provider 'onprem' params is missing the field 'hosts'"),
        ({"hosts": []}, 1, "params.hosts must be a non-empty list"),
        ({"hosts": "a"}, 1, "params.hosts must be a non-empty list"),
        ({"hosts": ["-oProxyCommand=x"]}, 1, "must be a '[user@]host' string, got '-oProx"),
        ({"hosts": ["gpu@"]}, 1, "params.hosts must be a '[user@]host' string, got 'gpu@'"),
        ({"hosts": ["a b"]}, 1, "params.hosts must be a '[user@]host' string"),
        ({"hosts": ["a"], "ssh_port": 0}, 1, "params.ssh_port must be at least 1, got 0"),
        ({"hosts": ["a"], "ssh_port": 70000}, 1, "params.ssh_port must be at most 65535"),
        ({"hosts": ["a"], "ssh_port": "22"}, 1, "params.ssh_port must be a number, got '22'"),
        ({"hosts": ["a"], "ssh_opts": "-v"}, 1, "params.ssh_opts must be a list of strings"),
        (
            {"hosts": ["a"], "connect_timeout_s": 0},
            1,
            "params.connect_timeout_s must be greater than 0",
        ),
        ({"hosts": ["a"], "connect_timeout_s": math.inf}, 1, "must be a finite number, got inf"),
        ({"hosts": ["a"], "python": ""}, 1, "params.python must not be empty"),
        (
            {"hosts": ["a"], "ssh_key": "/no/such/id"},
            1,
            "params.ssh_key names a file that cannot be read: '/no/such/id'",
        ),
        (
            {"hosts": ["a"], "known_hosts": "/no/kh"},
            1,
            "params.known_hosts names a file that cannot be read: '/no/kh'",
        ),
        (["a"], 1, "provider 'onprem' params must be a JSON object, got ['a']"),
    ],
)
def test_bad_params_fail_with_one_sentence_naming_provider_and_field(params, max_nodes, message):
    with pytest.raises(ElasticGridError) as raised:
        SshParams.from_provider("onprem", params, max_nodes)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_key_file_that_cannot_be_read_is_refused(tmp_path):
    if os.geteuid() == 0:
        folder = tmp_path  # root reads any file: a folder is not a key file either
        path = str(folder)
    else:
        path = str(tmp_path / "id")
        (tmp_path / "id").write_text("key")
        (tmp_path / "id").chmod(0)
    with pytest.raises(ElasticGridError, match=r"params\.ssh_key names a file that cannot be read"):
        SshParams.from_provider("onprem", {"hosts": ["a"], "ssh_key": path}, 1)


def test_the_key_may_come_from_an_airflow_ssh_connection_written_0600_for_the_call(monkeypatch):
    from elasticgrid_provider.engines.ssh_transport import session_options

    assert SshParams.parse({"hosts": ["a"], "ssh_conn_id": "pool"}).ssh_conn_id == "pool"
    with pytest.raises(
        ElasticGridError, match=r"params.ssh_conn_id must not be given with ssh_key"
    ):
        SshParams.parse({"hosts": ["a"], "ssh_key": "/k", "ssh_conn_id": "pool"})
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----"
    connection = {"conn_type": "ssh", "host": "a", "extra": {"private_key": key}}
    monkeypatch.setenv("AIRFLOW_CONN_POOL_KEY", json.dumps(connection))
    params = SshParams.parse({"hosts": ["a"], "ssh_conn_id": "pool_key"})
    with session_options(params) as options:
        path = options[options.index("-i") + 1]
        assert os.stat(path).st_mode & 0o777 == 0o600
        with open(path) as handle:
            assert handle.read() == key + "\n"
    assert not os.path.exists(path)
    monkeypatch.setenv("AIRFLOW_CONN_EMPTY", json.dumps({"conn_type": "ssh", "host": "a"}))
    from elasticgrid_provider.core.errors import RemoteHostError

    empty = SshParams.parse({"hosts": ["a"], "ssh_conn_id": "empty"})
    with (
        pytest.raises(RemoteHostError, match="'empty': the connection holds no private key"),
        session_options(empty),
    ):
        pass
