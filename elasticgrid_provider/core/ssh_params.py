"""A provider's ``params`` for the ssh engine: which hosts, how to reach them, where to run.

iroh-tinker's own names plus the provider's. Pure: pydantic only, no network;
:meth:`SshParams.from_provider` checks that the key and known_hosts files can be read, so
call it at task time. The rules: docs/remote-hosts.md ("Params").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, ValidationError

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.validation import (
    AboveZero,
    JsonModel,
    Text,
    model,
    model_error,
    whole,
)

REMOTE_STATUS_FILE = "remote-status.json"
"""What the engine's last probe found, in the part's LOCAL job folder (the hook reads it)."""
REMOTE_JOB_FOLDER = ".elasticgrid"
"""The part's job folder inside its remote working directory (logs, markers, step log)."""


def _host_entry(value: Any) -> str:
    """``[user@]host``: no blanks, no leading ``-`` (ssh would read an option), one ``@`` at most."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a '[user@]host' string, got {value!r}")
    user, at, address = value.rpartition("@")
    if (
        any(character.isspace() for character in value)
        or value.startswith("-")
        or not address
        or (at and (not user or "@" in user))
    ):
        raise ValueError(f"must be a '[user@]host' string, got {value!r}")
    return value


def _string_list(value: Any) -> Any:
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise ValueError(f"must be a list of strings, got {value!r}")


def _hosts(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"must be a non-empty list of '[user@]host' strings, got {value!r}")
    return tuple(_host_entry(item) for item in value)


HostList = Annotated[tuple[str, ...], BeforeValidator(_hosts)]
StringList = Annotated[tuple[str, ...], BeforeValidator(_string_list)]
Port = Annotated[int, whole(1, 65535)]


def host_address(entry: str) -> str:
    """The address part of ``user@host`` (what other ranks connect to)."""
    return entry.rpartition("@")[2]


@model
class SshParams(JsonModel):
    """A provider's ssh engine parameters (docs/remote-hosts.md, "Params")."""

    hosts: HostList
    ssh_port: Port | None = None
    ssh_key: Text | None = None
    ssh_conn_id: Text | None = None
    ssh_opts: StringList = ()
    remote_dir: Text | None = None
    known_hosts: Text | None = None
    connect_timeout_s: AboveZero = 5.0
    python: Text | None = None
    shared_dir: Text | None = None

    @classmethod
    def parse(cls, params: Any, where: str = "resources.params") -> SshParams:
        """Validate a params mapping, or raise one sentence naming ``<where>.<field>``."""
        parsed = parse_engine_params(
            cls, params, where, {"hosts": "list one '[user@]host' per node"}
        )
        if parsed.ssh_key is not None and parsed.ssh_conn_id is not None:
            raise ElasticGridError(
                f"{where}.ssh_conn_id must not be given with ssh_key: give one of the two"
            )
        return parsed

    @classmethod
    def from_provider(cls, provider_name: str, params: Any, max_nodes: int) -> SshParams:
        """The params of provider ``provider_name`` with ``max_nodes`` nodes, checked in full:
        fields, the node-to-host rule, and that the key and known_hosts files can be read."""
        where = f"provider {provider_name!r} params"
        parsed = cls.parse(params, where)
        parsed.check_files(where)
        parsed.node_hosts(max_nodes, where)
        return parsed

    def check_files(self, where: str = "resources.params") -> None:
        """Raise unless the ``ssh_key`` and ``known_hosts`` files (when given) can be read."""
        for field in ("ssh_key", "known_hosts"):
            path = getattr(self, field)
            if path is not None and not _readable_file(path):
                raise ElasticGridError(
                    f"{where}.{field} names a file that cannot be read: {path!r}"
                )

    def node_hosts(self, max_nodes: int, where: str = "params") -> tuple[str, ...]:
        """The host of each of ``max_nodes`` nodes: one entry per node, or each host carrying
        ``max_nodes // len(hosts)`` consecutive nodes (2 hosts, 4 nodes: A, A, B, B); raise
        when the hosts cannot carry them evenly."""
        count = len(self.hosts)
        if max_nodes == 0:
            return ()
        if count > max_nodes or max_nodes % count:
            raise ElasticGridError(
                f"{where}.hosts must carry max_nodes={max_nodes} evenly, got {count} hosts: "
                "list one host per node (repeat a host to give it more nodes)"
            )
        return tuple(host for host in self.hosts for _ in range(max_nodes // count))

    def remote_root(self, part_name: str) -> str:
        """The ranks' working directory on every host (``remote_dir``, or a per-part default)."""
        return self.remote_dir or f"~/elasticgrid/{part_name}"

    def remote_job_dir(self, part_name: str) -> str:
        """The part's job folder on every host: logs, iroh's markers, ``steps.jsonl``."""
        return f"{self.remote_root(part_name).rstrip('/')}/{REMOTE_JOB_FOLDER}"


ParamsT = TypeVar("ParamsT")


def parse_engine_params(
    cls: type[ParamsT], params: Any, where: str, required: Mapping[str, str]
) -> ParamsT:
    """An engine's params model from a mapping, or one sentence naming ``<where>.<field>``: an
    unknown key (with the known ones), a missing ``required`` one (with its hint), a bad value.
    ``where`` is the owner and the params' path, as ``provider 'onprem' params``."""
    if not isinstance(params, Mapping):
        raise ElasticGridError(f"{where} must be a JSON object, got {params!r}")
    known = tuple(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    for key in params:
        if key not in known:
            raise ElasticGridError(
                f"{where} has an unknown field {key!r} (known: {', '.join(known)})"
            )
    for key, hint in required.items():
        if key not in params:
            raise ElasticGridError(f"{where} is missing the field {key!r} ({hint})")
    try:
        return cls.type_adapter().validate_python(dict(params))  # type: ignore[attr-defined]
    except ValidationError as error:
        owner, _, path = where.rpartition(" ")
        raise model_error(error, owner, within=path) from None


def _readable_file(path: str) -> bool:
    expanded = Path(path).expanduser()
    return expanded.is_file() and os.access(expanded, os.R_OK)
