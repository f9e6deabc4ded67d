"""Replace a file whole, so that a crash at any instant leaves the old file or the new one.

Every file this provider rewrites (a job's manifest, the grid ledger, the
launcher's request and result, the ssh engine's status record, a checkpoint's
progress and owner, the step-log mirror) goes through :func:`write_atomically`:

* the bytes go to a temporary file beside the target (the same filesystem),
  created 0600 for a private file (``private``: it may hold ``envs`` values);
* the temporary file is fsynced, then renamed over the target (atomic on POSIX);
* the folder is fsynced, so that the rename itself survives a power loss;
* a failure (a full disk, a kill) leaves the old file and no temporary file.

A cache that is rebuilt when lost (the step-log mirror) skips both fsyncs
(``durable=False``): it needs the atomic rename, not the durability.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


def write_atomically(
    path: Path, data: bytes, *, private: bool = False, durable: bool = True
) -> None:
    """Replace ``path`` by ``data``: a temporary file, fsync, rename, fsync of the folder."""
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
