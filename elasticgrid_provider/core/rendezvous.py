"""The one parser of rendezvous URIs: where the ranks of a launch find each other.

The launch spec, the hook and the rank runtime all call :func:`parse_rendezvous`. An object
store keeps its full URI: iroh-tinker hands ranks exactly that, and a bare ``bucket/prefix``
would reach them as ``s3:b/p``, which iroh reads as a directory. Pure: no I/O. The rules:
docs/operators.md ("Parts").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.validation import check_text

DIR_MODE = "dir"
OBJECT_STORE_MODES = ("s3", "gs")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


@dataclass(frozen=True)
class Rendezvous:
    """A parsed rendezvous: its mode (``dir``, ``s3``, ``gs``) and what iroh-tinker is given."""

    mode: str
    uri: str  # the directory for ``dir``; the full ``s3://``/``gs://`` URI for an object store

    @property
    def local_dir(self) -> str | None:
        """The directory ranks share, or ``None`` for an object store."""
        return self.uri if self.mode == DIR_MODE else None

    def spec_fields(self) -> dict[str, str]:
        """The fields of iroh-tinker's ``RendezvousSpec``."""
        return {"mode": self.mode, "uri": self.uri}


def parse_rendezvous(uri: Any, field: str = "rendezvous") -> Rendezvous:
    """Parse a rendezvous URI, or raise :class:`ElasticGridError` naming ``field`` and the value."""
    check_text(field, uri)
    text = uri.strip()
    if text.startswith("dir:"):
        path = text[len("dir:") :]
        if not path.strip():
            raise ElasticGridError(f"{field} dir: URI needs a path, got {uri!r}")
        return Rendezvous(DIR_MODE, path)
    scheme = _SCHEME.match(text)
    if scheme is None:
        return Rendezvous(DIR_MODE, text)
    mode = scheme.group(1).lower()
    if mode in OBJECT_STORE_MODES:
        prefix = f"{mode}://"
        if not text.lower().startswith(prefix) or not text[len(prefix) :].split("/", 1)[0]:
            raise ElasticGridError(f"{field} must look like {prefix}bucket/prefix, got {uri!r}")
        return Rendezvous(mode, prefix + text[len(prefix) :])
    raise ElasticGridError(
        f"{field} must be 'dir:/path', a plain path, 's3://bucket/prefix' or "
        f"'gs://bucket/prefix', got {uri!r}"
    )
