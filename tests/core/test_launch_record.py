"""The launch record's pure parts: UTC launch ids and salted fingerprints."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from elasticgrid_provider.core.job import JobManifest
from elasticgrid_provider.core.launch_record import (
    changed_fields,
    launch_fingerprints,
    new_launch_id,
    new_salt,
)
from elasticgrid_provider.core.placement import Placement


def test_launch_ids_are_utc_whatever_the_zone_of_the_clock():
    moment = datetime(2026, 12, 2, 23, 30, 5, tzinfo=timezone(timedelta(hours=-5)))
    launch_id = new_launch_id(moment)
    assert launch_id.startswith("20261203T043005Z-")
    assert new_launch_id(moment) != launch_id  # the random tail keeps them unique


def test_fingerprints_tell_which_field_changed_and_hide_the_values():
    salt = new_salt()
    base = launch_fingerprints("python train.py", {"TOKEN": "s3cr3t-value"}, None, salt)
    assert "s3cr3t-value" not in repr(base)
    same = launch_fingerprints("python train.py", {"TOKEN": "s3cr3t-value"}, None, salt)
    assert changed_fields(base, same) == []
    assert changed_fields(
        base, launch_fingerprints("python train.py", {"TOKEN": "other"}, None, salt)
    ) == ["envs"]
    assert changed_fields(
        base, launch_fingerprints("python train.py", {"TOKEN": "s3cr3t-value"}, "pip i x", salt)
    ) == ["setup"]
    assert changed_fields(
        base, launch_fingerprints("python other.py", {"TOKEN": "s3cr3t-value"}, None, salt)
    ) == ["run"]
    # another salt, another fingerprint: equal values cannot be matched across jobs
    assert (
        launch_fingerprints("python train.py", {"TOKEN": "s3cr3t-value"}, None, new_salt()) != base
    )
    assert changed_fields({}, base) == ["run", "envs", "setup"]  # an old manifest: changed


def test_a_manifest_from_before_the_launch_record_reads_as_confirmed_without_fingerprints():
    placement = Placement.model_validate(
        {
            "assignments": [],
            "total_nodes": 0,
            "cost_per_hour": 0.0,
            "spot_fraction": 0.0,
            "infra_refs": [],
        }
    )
    old = {
        "job_name": "j",
        "launch_id": "20260101T000000-abcdef",
        "launched_at": "2026-01-01T00:00:00+00:00",
        "placement": placement.model_dump(),
        "world_size": 1,
        "procs_per_node": 1,
        "rendezvous": "",
        "run": "x",
        "parts": [],
    }
    manifest = JobManifest.model_validate(old)
    assert (manifest.state, manifest.fingerprints, manifest.down_reason) == ("running", {}, None)
    assert JobManifest.model_validate(manifest.model_dump()) == manifest
