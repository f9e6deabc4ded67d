"""The one rendezvous parser: each accepted form, and each bad form as one sentence."""

from __future__ import annotations

from typing import Any

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.launch_spec import rendezvous_spec_fields
from elasticgrid_provider.core.rendezvous import Rendezvous, parse_rendezvous
from elasticgrid_provider.runtime import distributed_context


@pytest.mark.parametrize(
    ("uri", "mode", "target", "local_dir"),
    [
        ("dir:/srv/rdv", "dir", "/srv/rdv", "/srv/rdv"),
        ("/srv/rdv", "dir", "/srv/rdv", "/srv/rdv"),
        ("  /srv/rdv  ", "dir", "/srv/rdv", "/srv/rdv"),
        ("dir:relative/rdv", "dir", "relative/rdv", "relative/rdv"),
        ("relative/rdv", "dir", "relative/rdv", "relative/rdv"),
        ("s3://bucket", "s3", "s3://bucket", None),
        ("s3://bucket/prefix/x", "s3", "s3://bucket/prefix/x", None),
        ("S3://bucket/prefix", "s3", "s3://bucket/prefix", None),
        ("gs://bucket/p/q", "gs", "gs://bucket/p/q", None),
    ],
)
def test_each_accepted_form_reads_the_same_in_the_launch_and_the_rank(
    uri: str, mode: str, target: str, local_dir: str | None
) -> None:
    parsed = parse_rendezvous(uri)
    assert parsed == Rendezvous(mode, target)
    assert parsed.local_dir == local_dir
    assert parsed.spec_fields() == {"mode": mode, "uri": target}
    # the launch spec and the rank runtime read the same thing
    assert rendezvous_spec_fields(uri) == parsed.spec_fields()
    assert distributed_context({"IROH_TINKER_RENDEZVOUS": uri}).rendezvous_dir == local_dir


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("http://x", "must be 'dir:/path', a plain path, 's3://bucket/prefix' or"),
        ("file:///tmp/x", "must be 'dir:/path', a plain path, 's3://bucket/prefix' or"),
        ("s3:bucket/prefix", "must look like s3://bucket/prefix"),
        ("s3://", "must look like s3://bucket/prefix"),
        ("gs:///p", "must look like gs://bucket/prefix"),
        ("dir:", "dir: URI needs a path"),
        ("dir:   ", "dir: URI needs a path"),
        ("", "must not be empty"),
        ("  ", "must not be empty"),
        (7, "must be a string"),
        (None, "must be a string"),
    ],
)
def test_bad_uris_are_one_sentence_naming_the_field_and_value(uri: Any, says: str) -> None:
    with pytest.raises(ElasticGridError) as caught:
        parse_rendezvous(uri)
    message = str(caught.value)
    assert message.startswith("rendezvous ")
    assert says in message
    assert message.endswith(f"got {uri!r}")
    assert "\n" not in message


def test_the_field_named_is_the_callers() -> None:
    with pytest.raises(ElasticGridError) as caught:
        parse_rendezvous("ftp://host/x", "environment variable IROH_TINKER_RENDEZVOUS")
    assert str(caught.value) == (
        "environment variable IROH_TINKER_RENDEZVOUS must be 'dir:/path', a plain path, "
        "'s3://bucket/prefix' or 'gs://bucket/prefix', got 'ftp://host/x'"
    )


@pytest.mark.parametrize("uri", ["s3://", "dir:", "http://x"])
def test_the_rank_runtime_refuses_what_the_launch_refuses(uri: str) -> None:
    with pytest.raises(ValueError, match=f"IROH_TINKER_RENDEZVOUS .*got {uri!r}"):
        distributed_context({"IROH_TINKER_RENDEZVOUS": uri})
