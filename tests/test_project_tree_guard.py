"""The conftest guard that keeps tests out of the project tree, checked on a folder of its own.

The guard (``tests/conftest.py``) snapshots the project tree around every
test and at the end of the session. These tests show that the snapshot sees
what a leaky test would leave behind (the ``.cache/iroh_tinker/checkpoints``
folder iroh-tinker creates in the working directory, for one) and ignores
only interpreter and tool caches.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import PROJECT, new_entries_message, tree_entries


def test_the_snapshot_sees_a_leaked_cache_folder(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("x")
    before = tree_entries(tmp_path)
    (tmp_path / ".cache" / "iroh_tinker" / "checkpoints").mkdir(parents=True)
    after = tree_entries(tmp_path)
    assert after - before == {
        ".cache",
        os.path.join(".cache", "iroh_tinker"),
        os.path.join(".cache", "iroh_tinker", "checkpoints"),
    }
    message = new_entries_message(before, after, "this test")
    assert message is not None
    assert message.startswith(f"this test wrote into the project tree {PROJECT}")
    assert message.endswith(": .cache, .cache/iroh_tinker, .cache/iroh_tinker/checkpoints")


def test_the_snapshot_ignores_interpreter_and_tool_caches_only(tmp_path: Path) -> None:
    before = tree_entries(tmp_path)
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"")
    (tmp_path / ".pytest_cache" / "v").mkdir(parents=True)
    (tmp_path / "venv-ci" / "lib").mkdir(parents=True)
    (tmp_path / "venv-ci" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "x.egg-info").mkdir()
    assert tree_entries(tmp_path) - before == {"pkg"}
    (tmp_path / "pkg" / "steps.jsonl").write_text("{}\n")
    assert tree_entries(tmp_path) - before == {"pkg", os.path.join("pkg", "steps.jsonl")}


def test_many_new_entries_are_summarised_in_one_sentence(tmp_path: Path) -> None:
    before = tree_entries(tmp_path)
    for index in range(12):
        (tmp_path / f"f{index:02d}").write_text("")
    message = new_entries_message(before, tree_entries(tmp_path), "the test session")
    assert message is not None and message.endswith("f09 and 2 more")
    assert new_entries_message(before, before, "this test") is None
