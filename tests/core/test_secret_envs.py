"""Which envs values go to the secrets masker (core/secret_envs.py), without Airflow."""

from __future__ import annotations

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.secret_envs import (
    HiddenValues,
    check_secret_envs,
    secret_values,
    url_passwords,
)


def _sensitive(key: str) -> bool:  # a stand-in for Airflow's rule, which the operator passes
    return any(word in key.lower() for word in ("token", "password", "secret"))


def test_only_named_sensitive_and_url_password_values_are_secret() -> None:
    envs = {
        "MODE": "train",
        "CHAOS_ITER": "resize",
        "NCCL_DEBUG": "INFO",
        "HF_TOKEN": "hf_abcdef",
        "DB_URL": "postgres://u:pw@h/db",
        "DATA_URL": "https://reader:s3cr3t%40x@data.example/shard",
        "SIGNATURE": "sig-123456",
        "EMPTY_TOKEN": "",
    }
    assert secret_values(envs, ["SIGNATURE"], _sensitive, 5) == [
        "hf_abcdef",
        "postgres://u:pw@h",  # a password too short to mask alone: the URL to its host
        "s3cr3t%40x",
        "s3cr3t@x",  # as written and decoded
        "sig-123456",
    ]


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("https://host/path", []),
        ("https://user@host/path", []),
        ("https://:longpassword@host", ["longpassword"]),
        ("a=s3://k:secret-key-1@bucket/x b=gs://x:another-one@b", ["secret-key-1", "another-one"]),
        ("user:password@host (no scheme)", []),
        ("redis://:p@h:6379/0", ["redis://:p@h:6379"]),
    ],
)
def test_url_passwords(value: str, found: list[str]) -> None:
    assert url_passwords(value, 5) == found


@pytest.mark.parametrize(
    ("secret_envs", "message"),
    [
        ("HF_TOKEN", "secret_envs must be a list of envs names, got 'HF_TOKEN'"),
        ({"HF_TOKEN": 1}, "secret_envs must be a list of envs names, got {'HF_TOKEN': 1}"),
        ([3], "secret_envs entry must be a string, got 3"),
        (["HF_TOKN"], "secret_envs names 'HF_TOKN', which is not a key of envs (envs: HF_TOKEN)"),
    ],
)
def test_a_bad_secret_envs_is_one_sentence_naming_it(secret_envs: object, message: str) -> None:
    with pytest.raises(ElasticGridError) as refused:
        check_secret_envs(secret_envs, {"HF_TOKEN": "x"})
    assert str(refused.value) == message


def test_hidden_values_read_as_the_values_and_serialize_hidden() -> None:
    hidden = HiddenValues({"A": "1", "B": "2"})
    assert dict(hidden) == {"A": "1", "B": "2"} and len(hidden) == 2
    assert hidden.serialize() == {"A": "***", "B": "***"}
    assert "1" not in repr(hidden)
    assert check_secret_envs(None, hidden) == () and check_secret_envs(["A"], hidden) == ("A",)
