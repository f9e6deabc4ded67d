"""Which pool of machines a provider name stands for, so one grid never counts a pool twice.

The ledger counts nodes by provider name, and each job brings its own grid, so each
reservation records the pool every name stood for (:class:`PoolRecord`), and a name or an
SSH host that would count one pool twice is refused. Pure: the caller passes the ledger and
the providers. The rules: docs/fleet-ledger.md ("The ledger").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping

from elasticgrid_provider.core.errors import GridCapacityError
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.records import Extras, ForwardCompatible, extras_field
from elasticgrid_provider.core.validation import AnyText, JsonModel, Text, model

SSH_PORT = 22  # the port of an SSH host whose provider names none


@model
class PoolRecord(ForwardCompatible, JsonModel):
    """The pool a provider name stood for when it was reserved (docs/fleet-ledger.md)."""

    engine: Text
    params_digest: Text
    hosts: tuple[AnyText, ...] = ()
    extras: Extras = extras_field()

    @property
    def text(self) -> str:
        """The pool in a few words, for the fleet views: ``ssh: 10.0.0.1:22, 10.0.0.2:22``."""
        return f"{self.engine}: {', '.join(self.hosts)}" if self.hosts else self.engine

    def differences(self, other: PoolRecord) -> str:
        """What tells ``other`` apart from this pool, in words ("" when they are the same)."""
        if self.engine != other.engine:
            return f"engine {other.engine!r}, not {self.engine!r}"
        if self.hosts != other.hosts:
            return f"hosts {', '.join(other.hosts)}, not {', '.join(self.hosts)}"
        if self.params_digest != other.params_digest:
            return "other engine params"
        return ""


def pool_record(provider: Provider) -> PoolRecord:
    """The pool ``provider`` stands for: its engine (and region), and its SSH hosts
    (``address:port``: the login user, key and folders do not matter) or else a digest of
    its engine params."""
    params = dict(provider.params)
    hosts: tuple[str, ...] = ()
    if provider.runs_on_ssh_hosts:
        from elasticgrid_provider.core.ssh_params import SshParams, host_address

        ssh = SshParams.parse(params, f"provider {provider.name!r} params")
        port = ssh.ssh_port or SSH_PORT
        hosts = tuple(sorted({f"{host_address(host)}:{port}" for host in ssh.hosts}))
        params = {}  # keys, users and folders are how a job reaches the hosts, not which
    text = json.dumps(params, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    engine = provider.engine_name
    return PoolRecord(f"{engine}/{provider.region}" if provider.region else engine, digest, hosts)


def pool_records(providers: Iterable[Provider]) -> dict[str, PoolRecord]:
    """``{name: pool}`` of the providers a plan or a launch uses."""
    return {provider.name: pool_record(provider) for provider in providers}


def check_pools(
    recorded: Mapping[str, PoolRecord],
    held_by_others: Mapping[str, str],
    job: str,
    pools: Mapping[str, PoolRecord],
) -> None:
    """Raise :class:`GridCapacityError` when ``job``'s ``pools`` would count a pool twice.

    ``recorded`` is the ledger's ``{name: pool}``; ``held_by_others`` names, for each
    provider other jobs use, who uses it (``'a' (2 nodes)``).
    """
    reaching = {**recorded, **pools}  # every name's pool, this job's as it asks now
    for name, pool in sorted(pools.items()):
        known = recorded.get(name)
        held = held_by_others.get(name)
        if known is not None and held and (difference := known.differences(pool)):
            raise GridCapacityError(
                f"provider {name!r} of job {job!r} is not the pool that other jobs hold under "
                f"that name on this grid ({difference}); held by {held}: give one of them "
                f"another name, or both the same definition"
            )
        for host in pool.hosts:
            others = sorted(n for n, p in reaching.items() if n != name and host in p.hosts)
            for other in others:
                by = held_by_others.get(other) if other not in pools else f"job {job!r} itself"
                if by:
                    raise GridCapacityError(
                        f"provider {name!r} of job {job!r} reaches host {host}, as provider "
                        f"{other!r} does, held by {by}: the machine would count twice on this "
                        f"grid; list each host under one provider only"
                    )
