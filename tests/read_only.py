"""A folder made read-only for real, even to root: a read-only bind mount."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def read_only_mount(source: Path) -> Iterator[Path]:
    """``source`` bind-mounted read-only at a new folder (root ignores mode bits, not this)."""
    target = Path(tempfile.mkdtemp(prefix="elasticgrid-ro-"))
    mount = ["mount", "--bind", "-o", "ro", str(source), str(target)]
    done = subprocess.run(mount, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        target.rmdir()
        pytest.fail(f"cannot bind-mount {source} read-only: {done.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)
        target.rmdir()
