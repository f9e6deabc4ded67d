"""The first two steps of a launch: prepare it (nothing written), then write its files.

1. :func:`prepare_launch` renders the placement into parts
   (:func:`~elasticgrid_provider.core.launch_spec.build_launch_parts`) with a new
   launch id, a fresh rendezvous and shared folder under the job's home (on this
   machine, or under ``params.shared_dir`` on SSH hosts), and checks every part's
   engine: its hosts are reached and, on the local engine, the ``run`` program
   exists. Nothing is written; any problem is an
   :class:`~elasticgrid_provider.core.errors.ElasticGridError`.
2. :func:`write_launch` writes every file of the launch, its manifest
   (``starting``) as the intent, before anything of the running job is stopped
   (:mod:`elasticgrid_provider.hooks.launch_files`): a failed write stops nothing.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from elasticgrid_provider.core.clock import utc_iso_now
from elasticgrid_provider.core.errors import ElasticGridError, JobLaunchError
from elasticgrid_provider.core.job import JobManifest, JobSnapshot, JobStatus, PartRecord
from elasticgrid_provider.core.launch_record import (
    LaunchPhase,
    launch_fingerprints,
    new_launch_id,
    new_salt,
)
from elasticgrid_provider.core.launch_spec import (
    LaunchOptions,
    LaunchPart,
    build_launch_parts,
    shared_home,
)
from elasticgrid_provider.core.placement import Placement
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.rendezvous import parse_rendezvous
from elasticgrid_provider.hooks.job_store import JobStore
from elasticgrid_provider.hooks.launch_files import write_launch_files, writing
from elasticgrid_provider.hooks.remote_parts import is_ssh_target


@dataclass(frozen=True)
class PreparedLaunch:
    """A launch rendered and validated, not yet started: its id, options and parts."""

    job_name: str
    launch_id: str
    placement: Placement
    options: LaunchOptions
    parts: tuple[LaunchPart, ...]
    fingerprint_salt: str
    on_worker: bool = True
    """Whether every part runs on this machine (so a ``dir:`` rendezvous is made here)."""

    def fingerprints(self, salt: str) -> dict[str, str]:
        """The salted fingerprints of what this launch runs (``run``, ``envs``, ``setup``)."""
        return launch_fingerprints(self.options.run, self.options.envs, self.options.setup, salt)


def prepare_launch(
    store: JobStore, job_name: str, placement: Placement, options: LaunchOptions
) -> PreparedLaunch:
    """Step 1 (nothing written or started); any problem is an :class:`ElasticGridError`."""
    launch_id = new_launch_id()
    workdir = Path(options.workdir).expanduser().resolve()  # the ranks start there
    if not workdir.is_dir():
        raise ElasticGridError(f"workdir must be a folder on this machine, got {options.workdir!r}")
    options = replace(options, workdir=str(workdir))
    homes = {
        share.provider.name: _job_home(store, job_name, share.provider)
        for share in placement.assignments
    }
    world_size = placement.total_nodes * options.procs_per_node
    stores = {share.provider.params.get("rendezvous") for share in placement.assignments}
    if options.rendezvous is None and len(stores) == 1 and None not in stores:
        # every provider names one object store (ec2's params.rendezvous): a fresh prefix
        options = replace(
            options, rendezvous=f"{str(stores.pop()).rstrip('/')}/{job_name}/{launch_id}"
        )
    home = shared_home(homes, world_size, options.rendezvous)
    if options.rendezvous is None and home is not None:
        options = replace(options, rendezvous=f"dir:{home}/rendezvous/{launch_id}")
    if options.shared_dir is None and home is not None:
        options = replace(options, shared_dir=f"{home}/shared")
    options = replace(options, launch_id=launch_id)
    parts = build_launch_parts(placement, job_name, options)
    for part in parts:
        _check_engine(part, options)
    on_worker = not any(is_ssh_target(part.engine_target) for part in parts)
    return PreparedLaunch(job_name, launch_id, placement, options, parts, new_salt(), on_worker)


def _job_home(store: JobStore, job_name: str, provider: Provider) -> str | None:
    """The job's folder as ``provider``'s nodes see it: under the jobs root on this machine,
    under ``params.shared_dir`` on SSH hosts (None when they share none)."""
    if not is_ssh_target(provider.engine_target):
        return str(store.job_folder(job_name))
    shared = provider.params.get("shared_dir")
    return f"{str(shared).rstrip('/')}/{job_name}" if shared else None


def _check_engine(part: LaunchPart, options: LaunchOptions) -> None:
    """Resolve the part's engine; on the local engine, check that the program exists."""
    from iroh_tinker.cloud.engines import create_engine
    from iroh_tinker.cloud.engines.local import LocalEngine

    target = part.engine_target
    try:
        engine = create_engine(target, part.to_launch_spec())
    except Exception as exc:
        raise ElasticGridError(
            f"provider {part.provider.name!r} engine {target!r} cannot be used: {exc}"
        ) from None
    check_hosts = getattr(engine, "check_hosts", None)
    if callable(check_hosts):  # reach every host before anything is stopped or started
        try:
            check_hosts()
        except Exception as exc:
            raise JobLaunchError(
                f"provider {part.provider.name!r} cannot be used now: {exc}"
            ) from None
    if not isinstance(engine, LocalEngine):
        return  # the program lives on machines this worker cannot see
    try:
        program = shlex.split(options.run)[0]
    except (ValueError, IndexError):
        raise ElasticGridError(f"run is not a valid command line, got {options.run!r}") from None
    search_path = options.envs.get("PATH", os.environ.get("PATH", ""))
    if shutil.which(program, path=search_path) is None:  # a path with a "/" is checked as is
        raise ElasticGridError(
            f"run command's program {program!r} is not an executable on this machine "
            f"(provider {part.provider.name!r}, engine {target!r})"
        )


def write_launch(
    store: JobStore, launch: PreparedLaunch, current: JobSnapshot | None
) -> tuple[JobManifest, Path]:
    """Step 2: every file of the launch, its manifest as the intent (launch_files.py)."""
    rendezvous = launch.options.rendezvous or ""
    local_dir = parse_rendezvous(rendezvous).local_dir if rendezvous else None
    if not launch.on_worker:
        local_dir = None  # a folder on the hosts: the ranks make it
    spec_folder = store.spec_folder(launch.job_name, launch.launch_id)
    paths = {part.part_name: spec_folder / f"{part.part_name}.json" for part in launch.parts}
    records = tuple(
        PartRecord(
            name=part.part_name,
            provider=part.provider.name,
            engine_target=part.provider.engine_target,
            nodes=part.nodes,
            rank_offset=part.rank_offset,
            spec_path=str(paths[part.part_name]),
        )
        for part in launch.parts
    )
    manifest = JobManifest(
        job_name=launch.job_name,
        launch_id=launch.launch_id,
        launched_at=utc_iso_now(),
        placement=launch.placement,
        world_size=launch.parts[0].world_size,
        procs_per_node=launch.options.procs_per_node,
        rendezvous=rendezvous,
        run=launch.options.run,
        parts=records,
        state=LaunchPhase.STARTING,
        fingerprint_salt=launch.fingerprint_salt,
        fingerprints=launch.fingerprints(launch.fingerprint_salt),
    )
    request = {
        "parent_pid": os.getpid(),
        "jobs_root": str(store.jobs_root),
        "parts": [{"name": part.name, "spec_path": part.spec_path} for part in records],
    }

    def write_specs() -> None:
        for part in launch.parts:
            with writing(paths[part.part_name]):
                part.write_spec(paths[part.part_name])

    part_folders = [store.jobs_root / record.name for record in records]
    try:
        intent = write_launch_files(
            manifest, spec_folder, write_specs, request, part_folders, local_dir
        )
    except JobLaunchError as exc:
        running = current is not None and current.status is JobStatus.RUNNING
        kept = "the running job was left as it was" if running else "nothing was started"
        raise JobLaunchError(f"job {launch.job_name!r} was not launched: {exc}; {kept}") from None
    return manifest, intent
