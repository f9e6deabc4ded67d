"""What the hook does for parts on SSH hosts: probe, sweep, down ranks and step-log pulls.

A part on SSH hosts (:mod:`elasticgrid_provider.engines.ssh`) or on EC2 instances (whose engine
runs the ranks through the ssh engine's code) runs where the Airflow workers see none of its
files. Everything the hook needs from there goes through the engine's SSH connection and leaves
a local trace in the part's folder under the jobs root, so the rest of the hook reads a remote
part as it reads a local one: the status probe's ``remote-status.json``
(:func:`remote_down_ranks`), the adoption check of a retry (:func:`remote_ranks_unconfirmed`),
the sweep of a killed launch's processes (:func:`sweep_remote_launch`; on EC2 it terminates the
launch's instances by tag) and the step-log mirror (:func:`pull_step_log`). The rules:
docs/remote-hosts.md ("How a job runs there"). The caller holds the job's lock.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from elasticgrid_provider.atomic_files import write_atomically
from elasticgrid_provider.core.providers import EC2_ENGINE, ENGINE_REFERENCES, SSH_ENGINE
from elasticgrid_provider.core.ssh_params import REMOTE_STATUS_FILE

PULL_LIMIT = 4 * 1024 * 1024
FIRST_PULL_BYTES = 256 * 1024
SIDECAR_SUFFIX = ".remote"
_DOWN = re.compile(r"down ranks: \[([0-9, ]*)\]")


def is_ssh_target(engine_target: str) -> bool:
    """Whether an infra entry runs its ranks on machines reached over SSH: the SSH engine, the
    ec2 engine (whose instances it reaches so), or a ``module=`` subclass of either (with or
    without a region); a module that cannot be imported is not one."""
    base = engine_target.split("/", 1)[0]
    if base in (ENGINE_REFERENCES[SSH_ENGINE], ENGINE_REFERENCES[EC2_ENGINE]):
        return True
    return _engine_subclass(base, "ssh:SshEngine") or _engine_subclass(base, "ec2:Ec2Engine")


def is_ec2_target(engine_target: str) -> bool:
    """Whether an infra entry names the ec2 engine or a ``module=`` subclass of it."""
    base = engine_target.split("/", 1)[0]
    return base == ENGINE_REFERENCES[EC2_ENGINE] or _engine_subclass(base, "ec2:Ec2Engine")


def _engine_subclass(base: str, engine: str) -> bool:
    module, _, name = base.removeprefix("module=").partition(":")
    if not base.startswith("module=") or not name:
        return False
    ours, _, kind = engine.partition(":")
    try:
        parent = getattr(importlib.import_module(f"elasticgrid_provider.engines.{ours}"), kind)
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return isinstance(found, type) and issubclass(found, parent)


def _spec_resources(spec_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        spec = json.loads(Path(spec_path).read_text())
    except (OSError, ValueError):
        return None
    resources = spec.get("resources") if isinstance(spec, dict) else None
    return resources if isinstance(resources, dict) else None


def ec2_spec(spec_path: str | os.PathLike[str]) -> tuple[Any, str | None] | None:
    """An ec2 part's checked params and region (from its spec file); None for other engines
    or a spec whose params do not validate."""
    from elasticgrid_provider.core.ec2_params import Ec2Params
    from elasticgrid_provider.core.errors import ElasticGridError

    resources = _spec_resources(spec_path)
    if resources is None:
        return None
    for entry in resources.get("infra") or ():
        if is_ec2_target(str(entry)):
            # a spec iroh-tinker saved keeps instance_type and image_id beside params
            known = {
                key: resources[key] for key in ("instance_type", "image_id") if resources.get(key)
            }
            try:
                params = Ec2Params.parse({**known, **(resources.get("params") or {})})
            except ElasticGridError:
                return None
            region = str(entry).split("/", 1)[1] if "/" in str(entry) else None
            return params, region
    return None


def spec_params(spec_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``resources.params`` of a part's spec file on SSH hosts (the ssh or ec2 engine);
    None for any other engine."""
    resources = _spec_resources(spec_path)
    if resources is None:
        return None
    if not any(is_ssh_target(str(entry)) for entry in resources.get("infra") or ()):
        return None
    params = resources.get("params")
    return dict(params) if isinstance(params, dict) else None


def listed_down_ranks(last_error: str | None) -> list[int]:
    """The ranks in iroh-tinker's ``down ranks: [..]`` words, wherever they stand."""
    found = _DOWN.search(last_error or "")
    if found is None:
        return []
    return [int(rank) for rank in found.group(1).split(",") if rank.strip().isdigit()]


def with_down_ranks(last_error: str | None, ranks: Iterable[int]) -> str | None:
    """``last_error`` whose ``down ranks: [..]`` words list ``ranks`` (the part ranks lost
    now): those words alone when there is no error; unchanged when it lists none (an engine's
    notice) or no rank is lost.

    iroh-tinker writes the words at one refresh and keeps them once the part fails. A rank
    half-way down (its main thread exited, another thread not yet, so it cannot be reaped and
    answers ``kill -0``) reads running there, so a part whose ranks all died can be recorded
    failed naming only those that were already gone.
    """
    lost = sorted(ranks)
    if not lost:
        return last_error
    words = f"down ranks: {lost}"
    return _DOWN.sub(lambda _: words, last_error, count=1) if last_error else words


def remote_down_ranks(job_dir: str | os.PathLike[str]) -> str | None:
    """The ``last_error`` a remote part's last probe implies (None: every rank runs or ended).

    Ranks that stopped without their ``done`` marker are down; an unreachable host is named,
    since its ranks' logs cannot be read to say why.
    """
    folder = Path(job_dir)
    try:
        probe = json.loads((folder / REMOTE_STATUS_FILE).read_text())
        ranks = {int(rank): str(state) for rank, state in probe["ranks"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    down = sorted(
        rank
        for rank, state in ranks.items()
        if state != "running" and not (folder / f"done_{rank}").exists()
    )
    if not down:
        return None
    unreachable = [str(host) for host in probe.get("unreachable_hosts") or ()]
    cut_off = f"host(s) {', '.join(unreachable)} unreachable; " if unreachable else ""
    return f"{cut_off}down ranks: {down}"


def remote_ranks_unconfirmed(
    job_dir: str | os.PathLike[str], launch_id: str, ranks: Iterable[int], since: float
) -> tuple[list[int], dict[int, str]]:
    """Which of a remote part's ``ranks`` the engine's probe (made at or after ``since``) did
    not find running as processes of ``launch_id``, and the ``host:pid`` of those it did; every
    rank counts as unconfirmed when there is no such probe (a host could not be asked)."""
    wanted = sorted(ranks)
    try:
        probe = json.loads((Path(job_dir) / REMOTE_STATUS_FILE).read_text())
        fresh = float(probe["checked_at"]) >= since
        processes = {int(rank): dict(found) for rank, found in probe["processes"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return wanted, {}
    if not fresh:
        return wanted, {}
    confirmed = {
        rank: str(found.get("pid"))
        for rank, found in processes.items()
        if rank in wanted and found.get("launch_id") == launch_id
    }
    return [rank for rank in wanted if rank not in confirmed], confirmed


def sweep_remote_launch(job_name: str, launch_id: str, spec_paths: Iterable[str]) -> list[str]:
    """Kill every process of ``launch_id`` on the SSH hosts of these specs, and terminate the
    instances of its ec2 parts (found by tag); what was killed or terminated."""
    killed: list[str] = []
    for spec_path in spec_paths:
        ec2 = ec2_spec(spec_path)
        if ec2 is not None:
            from elasticgrid_provider.engines.ec2_launch import terminate_launch

            killed.extend(terminate_launch(ec2[0], ec2[1], job_name, launch_id))
            continue
        params = spec_params(spec_path)
        if params is None:
            continue
        from elasticgrid_provider.engines.ssh_transport import sweep_launch

        for host, pids in sweep_launch(params, job_name, [launch_id]).items():
            killed.extend(f"{host}:{pid}" for pid in pids)
    return killed


def pull_step_log(params: Mapping[str, Any], part_name: str, mirror: Path) -> None:
    """Append to ``mirror`` what the part's remote step log gained since the last pull: at
    most :data:`PULL_LIMIT` bytes from where the mirror ends (the rest comes with the next
    check); a first pull of a log longer than :data:`FIRST_PULL_BYTES` starts that far from
    its end, at a line start; a remote file with another inode, or shorter than what was
    pulled, starts a new mirror (read as a rotation). The sidecar records the remote inode
    and the offset the mirror starts at, so a pull cut short by a kill resumes."""
    from elasticgrid_provider.core.ssh_params import SshParams
    from elasticgrid_provider.engines.ssh_transport import read_remote_file

    if "hosts" not in params:  # an ec2 part: the engine wrote its instances' ssh params
        from elasticgrid_provider.engines.ec2_launch import SSH_PARAMS_FILE

        params = json.loads((mirror.parent / SSH_PARAMS_FILE).read_text())
    ssh = SshParams.parse(params)
    host, remote = ssh.hosts[0], f"{ssh.remote_job_dir(part_name)}/{mirror.name}"
    sidecar = mirror.with_name(mirror.name + SIDECAR_SUFFIX)
    known = _read_sidecar(sidecar)
    have = mirror.stat().st_size if known is not None and mirror.exists() else 0
    if known is not None:
        read = read_remote_file(params, host, remote, known["base"] + have, PULL_LIMIT)
        if read.inode == known["inode"] and read.size >= known["base"] + have:
            _append(mirror, read.data)
            return
    # first pull, or the remote log was rotated or truncated: start a new mirror
    size = read_remote_file(params, host, remote, 0, 0)
    if size.size == 0:
        return
    start = max(0, size.size - FIRST_PULL_BYTES)
    read = read_remote_file(params, host, remote, start, PULL_LIMIT)
    data = read.data
    if start > 0:  # begin at the first whole line
        newline = data.find(b"\n")
        start, data = (start + newline + 1, data[newline + 1 :]) if newline >= 0 else (start, b"")
    _write_sidecar(sidecar, {"inode": read.inode, "base": start})
    write_atomically(mirror, data, durable=False)


def _read_sidecar(sidecar: Path) -> dict[str, int] | None:
    try:
        record = json.loads(sidecar.read_text())
        return {"inode": int(record["inode"]), "base": int(record["base"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_sidecar(sidecar: Path, record: dict[str, int]) -> None:
    write_atomically(sidecar, (json.dumps(record) + "\n").encode(), durable=False)


def _append(mirror: Path, data: bytes) -> None:
    if not data:
        return
    descriptor = os.open(mirror, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
    finally:
        os.close(descriptor)
