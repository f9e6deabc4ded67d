"""What an instance is told at boot, and how the worker knows it before it first connects.

Each launch of a part gets its own ed25519 host key pair, given to the instances in
cloud-init user data; the worker checks every ssh call strictly against it. ``cryptography``
and ``yaml`` are imported inside the functions (Airflow parses the modules that import this
one). The rules: docs/clouds.md ("What the engine does").
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticgrid_provider.atomic_files import write_atomically

CLOUD_CONFIG_HEADER = "#cloud-config\n"


@dataclass(frozen=True)
class HostKey:
    """One launch's host key pair: the OpenSSH private key text and the ``ssh-ed25519`` line."""

    private: str
    public: str

    def to_json(self) -> dict[str, str]:
        """As stored in the part's (private) launch intent."""
        return {"private": self.private, "public": self.public}

    @classmethod
    def from_json(cls, data: Any) -> HostKey | None:
        """The pair stored by :meth:`to_json`, or None when ``data`` is not one."""
        if isinstance(data, Mapping) and all(
            isinstance(data.get(name), str) for name in ("private", "public")
        ):
            return cls(private=data["private"], public=data["public"])
        return None


def new_host_key(comment: str) -> HostKey:
    """A fresh ed25519 host key pair, its public line ending in ``comment``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return HostKey(private=private, public=f"{public.decode()} {comment}")


def user_data(host_key: HostKey, extra: Mapping[str, Any]) -> str:
    """The ``#cloud-config`` text: the provider's ``extra`` keys and the launch's host key
    (``ssh_keys`` is the engine's alone: the params refuse it)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        """Multi-line strings (the private key) as literal blocks, as cloud-init's examples."""

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    keys = {"ed25519_private": host_key.private, "ed25519_public": host_key.public}
    document = {**dict(extra), "ssh_keys": keys}
    return CLOUD_CONFIG_HEADER + yaml.dump(document, Dumper=Dumper, sort_keys=False, width=1000)


def write_known_hosts(path: Path, host_key: HostKey, addresses: Iterable[str]) -> None:
    """Write the known_hosts file that lists ``host_key`` for each address (and only them)."""
    key_type, key_data = host_key.public.split()[:2]
    lines = [f"{address} {key_type} {key_data}\n" for address in sorted(set(addresses))]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, "".join(lines).encode(), private=True)
    os.chmod(path, 0o600)
