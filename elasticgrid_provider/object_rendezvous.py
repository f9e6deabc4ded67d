"""Ranks on hosts that share no disk meet through an ``s3://`` rendezvous (docs/runtime.md).

iroh-tinker's socket transport publishes each rank's address as a small JSON file in a
rendezvous folder and waits there for its peers' files. :func:`mirrored_rendezvous` gives it a
private folder and, while the transport is built, mirrors that folder both ways with the
launch's fresh ``s3://`` prefix: a file the transport wrote is put to S3 once it is whole JSON,
a file a peer put is written into the folder whole (by rename). Once the transport is built
every peer has this rank's address, so the mirror stops (after a last upload pass).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from elasticgrid_provider.object_stores import ObjectStore, S3Store

POLL_S = 0.05


class _Mirror:
    """One folder and one store kept in step: this rank's files up, its peers' files down."""

    def __init__(self, folder: Path, store: ObjectStore) -> None:
        self.folder = folder
        self.store = store
        self.sent: dict[str, bytes] = {}
        self.received: set[str] = set()
        self.error: Exception | None = None

    def run(self, stop: threading.Event) -> None:
        """Sync every ``POLL_S`` until ``stop``, then once more (this rank's last writes)."""
        while True:
            last = stop.is_set()
            try:
                self.sync()
                self.error = None
            except Exception as exc:  # S3 unreachable for now: said if the transport fails
                self.error = exc
            if last:
                return
            stop.wait(POLL_S)

    def sync(self) -> None:
        """One pass: put what this rank wrote (whole JSON only), get what peers put."""
        for path in self.folder.iterdir():
            if path.name.startswith(".") or path.name in self.received:
                continue
            data = path.read_bytes()
            if self.sent.get(path.name) == data or not _whole_json(data):
                continue  # sent already, or still being written
            self.store.write(path.name, data)
            self.sent[path.name] = data
        for name in self.store.names(""):
            if name in self.sent or name in self.received or "/" in name:
                continue
            fetched = self.store.read(name)
            if fetched is None:
                continue
            partial = self.folder / f".{name}.part"
            partial.write_bytes(fetched)
            os.replace(partial, self.folder / name)
            self.received.add(name)


def _whole_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


@contextmanager
def mirrored_rendezvous(uri: str) -> Iterator[str]:
    """A private rendezvous folder mirrored with ``uri`` (``s3://bucket/prefix``) while the
    block runs; a transport that fails while S3 could not be reached says so."""
    folder = Path(tempfile.mkdtemp(prefix="elasticgrid-rendezvous-"))
    mirror = _Mirror(folder, S3Store(uri))
    stop = threading.Event()
    thread = threading.Thread(target=mirror.run, args=(stop,), name="rendezvous-mirror")
    thread.daemon = True
    thread.start()
    try:
        yield str(folder)
    except Exception as exc:
        if mirror.error is not None:
            raise RuntimeError(
                f"rendezvous {uri} could not be reached ({mirror.error}), so the ranks could "
                f"not meet: {exc}"
            ) from exc
        raise
    finally:
        stop.set()
        thread.join()
        shutil.rmtree(folder, ignore_errors=True)
