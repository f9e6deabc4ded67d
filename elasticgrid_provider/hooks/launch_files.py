"""A launch's files, written before anything of the running job is stopped.

A resize stops the running launch, then starts the new one: whatever can be written before
the stop is written before it (:func:`write_launch_files`), so a full or failing disk fails
the resize while the job still runs. The new manifest is written as an intent inside the
spec folder and only renamed into place after the stop. The rules: docs/recovery.md ("Full
disks"), docs/operators.md ("Files under the jobs root").
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from elasticgrid_provider import atomic_files
from elasticgrid_provider.core.errors import JobLaunchError
from elasticgrid_provider.core.job import JobManifest
from elasticgrid_provider.hooks.launcher import (
    LOG_NAME,
    REQUEST_NAME,
    private_folder,
)

INTENT_NAME = "manifest.json"  # the new launch's manifest, in its spec folder until the stop
MIN_FREE_BYTES = 1 << 20
"""Space the jobs root must keep after a launch's files are written (records, first logs)."""
MIN_FREE_INODES = 64


def _size(count: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn an ``OSError`` while writing ``path`` into one sentence naming it."""
    try:
        yield
    except OSError as exc:
        raise JobLaunchError(f"writing {path} failed ({exc.strerror or exc})") from None


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (:func:`~elasticgrid_provider.atomic_files.write_json`), naming
    ``path`` on failure."""
    with writing(path):
        atomic_files.write_json(path, data)


def check_free_space(folder: Path) -> None:
    """Refuse when ``folder``'s filesystem has less than the space a started launch needs."""
    with writing(folder):
        stats = os.statvfs(folder)
    free = stats.f_bavail * stats.f_frsize
    if free < MIN_FREE_BYTES:
        raise JobLaunchError(
            f"{folder} has {_size(free)} free, less than the {_size(MIN_FREE_BYTES)} a started "
            "launch needs for iroh-tinker's records and the ranks' first log lines"
        )
    if stats.f_files and stats.f_favail < MIN_FREE_INODES:
        raise JobLaunchError(
            f"{folder} has {stats.f_favail} free inodes, fewer than the {MIN_FREE_INODES} a "
            "started launch needs"
        )


def write_launch_files(
    manifest: JobManifest,
    spec_folder: Path,
    write_specs: Callable[[], None],
    request: dict[str, Any],
    part_folders: list[Path],
    local_dir: str | None,
) -> Path:
    """Write everything of ``manifest``'s launch that can be written before the stop (module
    docstring); returns the intent's path. ``write_specs`` writes the parts' specs."""
    try:
        if local_dir is not None:
            with writing(Path(local_dir)):
                Path(local_dir).mkdir(parents=True, exist_ok=True)
        with writing(spec_folder):
            private_folder(spec_folder.parent)
            private_folder(spec_folder)
        write_specs()
        with writing(spec_folder / REQUEST_NAME):
            atomic_files.write_json(spec_folder / REQUEST_NAME, request, private=True)
        with writing(spec_folder / LOG_NAME):
            os.close(os.open(spec_folder / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        intent = spec_folder / INTENT_NAME
        write_json(intent, manifest.model_dump())
        for folder in part_folders:
            with writing(folder):
                private_folder(folder)
                copy = folder / "spec.json"
                copy.touch(mode=0o600, exist_ok=True)
                copy.chmod(0o600)
        check_free_space(spec_folder)
    except JobLaunchError:
        with suppress(OSError):
            shutil.rmtree(spec_folder)
        raise
    return intent
