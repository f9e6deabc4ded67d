"""The one atomic writer: whole files, private modes, nothing half-written on a failure."""

from __future__ import annotations

import json
import os
import stat

import pytest

from elasticgrid_provider.atomic_files import write_atomically, write_json


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "record.json"
    write_json(target, {"revision": 1})
    write_json(target, {"revision": 2})
    assert json.loads(target.read_text()) == {"revision": 2}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["record.json"]


def test_a_private_file_is_readable_by_its_owner_only(tmp_path):
    old_umask = os.umask(0o022)
    try:
        write_json(tmp_path / "private.json", {"envs": {"TOKEN": "x"}}, private=True)
        write_json(tmp_path / "shared.json", {"nodes": 2})
    finally:
        os.umask(old_umask)
    assert _mode(tmp_path / "private.json") == 0o600
    assert _mode(tmp_path / "shared.json") == 0o644


@pytest.mark.parametrize("durable", [True, False])
def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary_one(tmp_path, durable):
    target = tmp_path / "ledger.json"
    write_atomically(target, b'{"old": true}\n')
    with pytest.raises(TypeError):
        write_atomically(target, "not bytes", durable=durable)  # type: ignore[arg-type]
    assert target.read_bytes() == b'{"old": true}\n'
    assert [path.name for path in tmp_path.iterdir()] == ["ledger.json"]


def test_a_missing_folder_is_an_error_and_creates_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "absent" / "file.json", b"{}")
    assert list(tmp_path.iterdir()) == []
