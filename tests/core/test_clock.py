"""The one UTC clock, and launch ids made from it."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from elasticgrid_provider.core.clock import as_utc, epoch_now, utc_iso_now, utc_now
from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.launch_record import new_launch_id

FIXED = datetime(2026, 12, 3, 0, 15, 7, tzinfo=timezone.utc)


def test_utc_now_is_aware_utc_and_matches_the_epoch_clock() -> None:
    before = epoch_now()
    now = utc_now()
    after = epoch_now()
    assert now.utcoffset() == timedelta(0)
    assert before - 1 <= now.timestamp() <= after + 1


def test_utc_iso_now_is_utc_to_the_second() -> None:
    text = utc_iso_now()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", text)
    assert abs(datetime.fromisoformat(text).timestamp() - epoch_now()) < 5


def test_as_utc_converts_any_zone_and_refuses_a_naive_time() -> None:
    east = FIXED.astimezone(timezone(timedelta(hours=9, minutes=30)))
    assert as_utc(east) == FIXED and as_utc(east).tzinfo == timezone.utc
    with pytest.raises(ElasticGridError, match="must carry its time zone, got the naive"):
        as_utc(datetime(2026, 12, 3, 0, 15, 7))


def test_launch_id_is_utc_for_a_fixed_aware_time_in_any_zone() -> None:
    for zone in (timezone.utc, timezone(timedelta(hours=-5)), timezone(timedelta(hours=14))):
        launch_id = new_launch_id(FIXED.astimezone(zone))
        assert re.fullmatch(r"20261203T001507Z-[0-9a-f]{6}", launch_id), launch_id


def test_launch_id_refuses_a_naive_time() -> None:
    with pytest.raises(ElasticGridError, match="naive"):
        new_launch_id(datetime(2026, 12, 3, 0, 15, 7))


def test_launch_id_by_default_is_now_in_utc() -> None:
    before = utc_now().replace(microsecond=0)
    launch_id = new_launch_id()
    after = utc_now()
    stamp = datetime.strptime(launch_id.split("-")[0], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=timezone.utc
    )
    assert before <= stamp <= after
