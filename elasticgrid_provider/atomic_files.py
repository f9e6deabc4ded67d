"""Replace a file whole, so that a crash at any instant leaves the old file or the new one.

Every file this provider rewrites (a job's manifest, the grid ledger, the launcher's request
and result, a checkpoint's progress, the step-log mirror, ...) goes through
:func:`write_atomically`; a read-check-write of a shared file holds :func:`acquire_lock`
of a lock file beside it. The rules: docs/recovery.md ("Full disks").
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any


def write_atomically(
    path: Path, data: bytes, *, private: bool = False, durable: bool = True
) -> None:
    """Replace ``path`` by ``data``: a temporary file, fsync, rename, fsync of the folder.

    The temporary file sits beside the target (the same filesystem, so the rename is atomic),
    created 0600 when ``private`` (it may hold ``envs`` values); the folder's fsync makes the
    rename itself survive a power loss. A failure leaves the old file and no temporary one.
    ``durable=False`` skips both fsyncs, for a cache rebuilt when lost (the step-log mirror):
    it needs the atomic rename, not the durability.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        with os.fdopen(os.open(temporary, flags, 0o600 if private else 0o666), "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if durable:
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def write_json(path: Path, data: Any, *, private: bool = False, durable: bool = True) -> None:
    """:func:`write_atomically` of ``data`` as indented JSON and a newline."""
    text = json.dumps(data, indent=2) + "\n"
    write_atomically(path, text.encode(), private=private, durable=durable)


def read_text_map(path: Path) -> dict[str, str]:
    """A JSON object of text values that :func:`write_json` wrote, as ``str -> str``; {} when
    the file is missing, unreadable or not an object (a sidecar record rewritten next time)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(key): str(value) for key, value in data.items()} if isinstance(data, dict) else {}


def acquire_lock(descriptor: int, timeout: float | None) -> bool:
    """``flock`` the descriptor exclusively (a job's, a part's or the grid's lock file), waiting
    at most ``timeout`` seconds (None: forever); whether it got the lock. Open the lock file for
    writing: NFS refuses an exclusive lock on a descriptor opened read-only."""
    if timeout is None:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        return True
    deadline = time.monotonic() + timeout
    while True:
        with suppress(BlockingIOError):
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
