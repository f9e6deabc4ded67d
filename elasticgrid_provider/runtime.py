"""Helpers for training scripts running inside iroh-tinker ranks (docs/runtime.md).

:func:`distributed_context` (global rank and world size across a placement's parts),
:func:`training_client` (iroh-tinker's client, reachable from other hosts),
:class:`StepReporter` (the job's one step log) and :class:`Checkpoint` (progress in the shared
folder, owned by the newest launch; with the reporter, every committed step is logged exactly
once, kills included). No Airflow, no iroh_tinker: cheap to import in every rank.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticgrid_provider.core.clock import epoch_now
from elasticgrid_provider.core.errors import CheckpointFencedError
from elasticgrid_provider.core.rank_environment import (
    ENV_CHECKPOINT_DIR,
    ENV_HOST,
    ENV_JOB,
    ENV_JOB_DIR,
    ENV_LAUNCH_ID,
    ENV_LOCAL_WORLD_SIZE,
    ENV_PART,
    ENV_PROCS_PER_NODE,
    ENV_RANK,
    ENV_RANK_OFFSET,
    ENV_RENDEZVOUS,
    ENV_SHARED_DIR,
    ENV_WORLD_SIZE,
)
from elasticgrid_provider.core.rendezvous import parse_rendezvous
from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.validation import check_integer
from elasticgrid_provider.object_stores import S3_SCHEME, FolderStore, ObjectStore, object_store

STEP_LOG_NAME = "steps.jsonl"  # in the job directory of global rank 0's part


@dataclass(frozen=True)
class DistributedContext:
    """Where this process sits in the (possibly multi-part) job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    procs_per_node: int
    job_name: str | None
    part_name: str | None
    job_dir: str | None
    rendezvous_dir: str | None
    shared_dir: str | None = None
    host: str | None = None
    launch_id: str | None = None
    checkpoint_dir: str | None = None
    rendezvous_uri: str | None = None  # as the engine gave it (``s3://...`` has no folder)

    @property
    def nodes(self) -> int:
        """The job's size in nodes: every node runs ``procs_per_node`` processes."""
        return max(1, self.world_size // self.procs_per_node)

    @property
    def is_rank_zero(self) -> bool:
        """True on the global rank 0 (the one that writes shared files)."""
        return self.rank == 0


def _env_int(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    where = f"environment variable {name}"
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"{where} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{where} must be at least {minimum}, got {raw!r}")
    return value


def _rendezvous_dir(raw: str | None) -> str | None:
    if not raw or not raw.strip():
        return None
    return parse_rendezvous(raw, f"environment variable {ENV_RENDEZVOUS}").local_dir


def distributed_context(environ: Mapping[str, str] | None = None) -> DistributedContext:
    """This process's global position from the environment (``os.environ`` by default); a
    variable that is no whole number, or contradicts another, raises ``ValueError`` naming it."""
    env = os.environ if environ is None else environ
    local_rank = _env_int(env, ENV_RANK, 0, 0)
    local_world = _env_int(env, ENV_LOCAL_WORLD_SIZE, 1, 1)
    if local_rank >= local_world:
        raise ValueError(
            f"environment variable {ENV_RANK} must be below {ENV_LOCAL_WORLD_SIZE} "
            f"({local_world}), got {env.get(ENV_RANK)!r}"
        )
    offset = _env_int(env, ENV_RANK_OFFSET, 0, 0)
    world = _env_int(env, ENV_WORLD_SIZE, local_world, 1)
    if offset + local_world > world:
        raise ValueError(
            f"environment variable {ENV_WORLD_SIZE} must be at least {ENV_RANK_OFFSET} + "
            f"{ENV_LOCAL_WORLD_SIZE} ({offset + local_world}), got {env.get(ENV_WORLD_SIZE)!r}"
        )
    return DistributedContext(
        rank=offset + local_rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        procs_per_node=_env_int(env, ENV_PROCS_PER_NODE, 1, 1),
        job_name=env.get(ENV_JOB) or None,
        part_name=env.get(ENV_PART) or None,
        job_dir=env.get(ENV_JOB_DIR) or None,
        rendezvous_dir=_rendezvous_dir(env.get(ENV_RENDEZVOUS)),
        shared_dir=env.get(ENV_SHARED_DIR) or None,
        host=env.get(ENV_HOST) or None,
        launch_id=env.get(ENV_LAUNCH_ID) or None,
        checkpoint_dir=env.get(ENV_CHECKPOINT_DIR) or None,
        rendezvous_uri=(env.get(ENV_RENDEZVOUS) or "").strip() or None,
    )


def training_client(context: DistributedContext | None = None, **options: Any) -> Any:
    """iroh-tinker's ``TrainingClient`` for this process (docs/runtime.md); ``options`` are
    its other arguments (``base_model``, ``backend``, ...). A multi-rank job needs a ``dir:``
    or an ``s3://`` rendezvous (:mod:`~elasticgrid_provider.object_rendezvous`): without one
    this raises ``ValueError``."""
    import iroh_tinker.client as iroh_client

    ctx = context if context is not None else distributed_context()
    if ctx.world_size == 1:
        return iroh_client.TrainingClient(rank=0, world_size=1, transport="local", **options)
    if ctx.rendezvous_dir is not None:
        folder = str(Path(ctx.rendezvous_dir).expanduser().resolve())
        return _socket_client(ctx, folder, options)
    if not (ctx.rendezvous_uri or "").startswith(S3_SCHEME):
        raise ValueError(
            f"a multi-rank run needs a dir: or s3:// rendezvous for the socket transport, got "
            f"{ENV_RENDEZVOUS}={ctx.rendezvous_uri!r}"
        )
    from elasticgrid_provider.object_rendezvous import mirrored_rendezvous

    with mirrored_rendezvous(str(ctx.rendezvous_uri)) as folder:
        return _socket_client(ctx, folder, options)


def _socket_client(ctx: DistributedContext, rendezvous_dir: str, options: dict[str, Any]) -> Any:
    """A ``TrainingClient`` on the socket transport meeting in ``rendezvous_dir``; reachable
    from other hosts at ``ctx.host`` when the engine gave one."""
    import iroh_tinker.client as iroh_client

    arguments: dict[str, Any] = {
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "transport": "socket",
    }
    if ctx.host is None:
        return iroh_client.TrainingClient(rendezvous_dir=rendezvous_dir, **arguments, **options)
    from iroh_tinker.comm.socket import SocketTransport

    def reachable_transport(rank: int, world_size: int, **_: Any) -> SocketTransport:
        return SocketTransport(
            rank=rank,
            world_size=world_size,
            rendezvous_dir=rendezvous_dir,
            host="0.0.0.0",
            connect_host=ctx.host,
        )

    # TrainingClient takes no bind address: give it, for this one construction, a transport
    # factory that binds every address and publishes the host's (iroh's own is the fallback)
    factory = iroh_client.transport_for_rank
    iroh_client.transport_for_rank = reachable_transport  # type: ignore[assignment]
    try:
        return iroh_client.TrainingClient(rendezvous_dir=rendezvous_dir, **arguments, **options)
    finally:
        iroh_client.transport_for_rank = factory


class StepReporter:
    """Appends one JSON line per training step to the job's step log (docs/runtime.md);
    ``path`` overrides ``<job_dir>/steps.jsonl``, ``all_ranks=True`` writes on every rank."""

    def __init__(
        self,
        context: DistributedContext | None = None,
        path: str | os.PathLike[str] | None = None,
        *,
        all_ranks: bool = False,
    ) -> None:
        self.context = context if context is not None else distributed_context()
        self.enabled = all_ranks or self.context.is_rank_zero
        job_dir = self.context.job_dir
        default = None if job_dir is None else Path(job_dir) / STEP_LOG_NAME
        self.path = default if path is None else Path(path)
        if self.enabled and self.path is None:
            raise ValueError(
                f"step log path is unknown: pass path= or set {ENV_JOB_DIR} (got no value)"
            )

    def sample(
        self,
        step: int,
        duration_s: float,
        queue_s: float = 0.0,
        nodes: int | None = None,
        tokens: float = 0.0,
    ) -> dict[str, Any]:
        """One step as a validated :class:`StepSample` dict, not written; ``nodes`` defaults to
        the job's node count, ``time`` (when the step ended) is added."""
        fields = {"step": step, "duration_s": duration_s, "queue_s": queue_s, "tokens": tokens}
        nodes = self.context.nodes if nodes is None else nodes
        sample = {**fields, "nodes": nodes, "time": epoch_now()}
        return StepSample.model_validate(sample, where="").model_dump()

    def record(
        self,
        step: int,
        duration_s: float,
        queue_s: float = 0.0,
        nodes: int | None = None,
        tokens: float = 0.0,
    ) -> dict[str, Any] | None:
        """Validate and append one step (:meth:`sample`, :meth:`write`); ``None`` if disabled."""
        return self.write(self.sample(step, duration_s, queue_s, nodes, tokens))

    def write(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """Append a :meth:`sample` as one line; return it (``None`` if disabled)."""
        if not self.enabled or self.path is None:
            return None
        _append_line(self.path, record)
        return record

    def replay(self, checkpoint: Checkpoint) -> dict[str, Any] | None:
        """On resume: append the last commit's step line (``Checkpoint.save(step_record=...)``)
        to the log it was meant for, unless that log has it; returns the line it wrote."""
        pending = checkpoint.pending_line() if self.enabled else None
        if pending is None:
            return None
        path, record = pending
        if _last_logged_step(path) >= record["step"]:
            return None
        _append_line(path, record)
        return record


def _append_line(path: Path, record: dict[str, Any]) -> None:
    """One ``write`` of one JSON line on an ``O_APPEND`` descriptor: readers see whole lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        written = os.write(descriptor, line)
        while written < len(line):  # only on exotic filesystems; still appends in order
            written += os.write(descriptor, line[written:])
    finally:
        os.close(descriptor)


def _last_logged_step(path: Path, window: int = 1 << 16) -> int:
    """The highest step among the whole lines at the end of a step log (-1: none)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - window))
            tail = handle.read()
    except OSError:
        return -1
    steps = [-1]
    for line in tail.split(b"\n")[1 if size > window else 0 : -1]:  # whole lines only
        try:
            steps.append(int(json.loads(line)["step"]))
        except (ValueError, KeyError, TypeError):
            continue
    return max(steps)


OWNER_FILE = "owner.json"  # the launch whose global rank 0 may commit (the newest to start)
PROGRESS_FILE = "progress.json"  # commits a checkpoint: written last, names a complete state
STATE_PREFIX = "state-"
CHECKPOINT_FOLDER = "checkpoint"  # the checkpoint's folder inside the job's shared folder


class Checkpoint:
    """A job's progress in the checkpoint's store: resume with :meth:`load`, commit with
    :meth:`save`.

    ``folder`` (a folder or an ``s3://bucket/prefix``) defaults to ``ELASTICGRID_CHECKPOINT_DIR``
    when the engine sets it, else to ``<ELASTICGRID_SHARED_DIR>/checkpoint``; without either
    there is nothing to resume and :meth:`save` does nothing.
    """

    def __init__(
        self,
        context: DistributedContext | None = None,
        folder: str | os.PathLike[str] | None = None,
    ) -> None:
        self.context = context if context is not None else distributed_context()
        if folder is not None:
            location: str | os.PathLike[str] | None = folder
        elif self.context.checkpoint_dir:  # the provider's own (the ec2 engine's checkpoint_dir)
            location = self.context.checkpoint_dir
        elif self.context.shared_dir:
            location = Path(self.context.shared_dir) / CHECKPOINT_FOLDER
        else:
            location = None
        self.store: ObjectStore | None = None if location is None else object_store(location)

    @property
    def folder(self) -> Path | None:
        """The checkpoint's folder; None for an ``s3://`` one, or without one."""
        return self.store.folder if isinstance(self.store, FolderStore) else None

    @property
    def location(self) -> str | None:
        """Where the checkpoint is kept (a folder, or an ``s3://`` URI); None without one."""
        return None if self.store is None else self.store.location

    def load(self) -> tuple[int, bytes | None]:
        """``(completed steps, the saved state or None)``; ``(0, None)`` when there is none;
        ``ValueError`` naming the object when ``progress.json`` is unreadable. On global rank 0
        of a launch, it also takes the checkpoint for that launch (:meth:`save`'s fence)."""
        self._claim()
        progress = self._progress()
        if progress is None:
            return 0, None
        try:
            completed = check_integer("completed_steps", progress["completed_steps"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"checkpoint {self._where(PROGRESS_FILE)} is unreadable: {exc}"
            ) from None
        name = progress.get("state")
        assert self.store is not None  # a progress was read from it
        state = self.store.read(str(name)) if name else None
        return completed, state

    def save(
        self,
        completed_steps: int,
        state: bytes,
        *,
        step_record: Mapping[str, Any] | None = None,
        step_log: str | os.PathLike[str] | None = None,
        **extra: Any,
    ) -> bool:
        """Commit ``completed_steps`` with ``state`` (on global rank 0); True when written.
        ``step_record`` and ``step_log``: the step's line and its log, which
        :meth:`StepReporter.replay` writes on resume if a kill kept it from the log."""
        completed = check_integer("completed_steps", completed_steps)
        store = self.store
        if store is None or not self.context.is_rank_zero:
            return False
        self._check_owner()
        name = f"{STATE_PREFIX}{completed}.bin"
        store.write(name, state)
        progress = {
            **extra,
            "completed_steps": completed,
            "state": name,
            "world_size": self.context.world_size,
            "time": epoch_now(),
        }
        if step_record is not None and step_log is not None:
            progress["step_record"] = dict(step_record)
            progress["step_log"] = str(Path(step_log).resolve())
        store.write(PROGRESS_FILE, (json.dumps(progress) + "\n").encode())
        for old in store.names(STATE_PREFIX):
            if old != name and old.endswith(".bin"):
                store.delete(old)
        return True

    def _where(self, name: str) -> str:
        """An object of the checkpoint, named for a message."""
        return f"{(self.location or '').rstrip('/')}/{name}"

    def _progress(self) -> dict[str, Any] | None:
        """The committed ``progress.json``, or None when there is none; ``ValueError`` naming it
        when it is no JSON object."""
        raw = None if self.store is None else self.store.read(PROGRESS_FILE)
        if raw is None:
            return None
        try:
            progress = json.loads(raw)
        except ValueError as exc:
            raise ValueError(
                f"checkpoint {self._where(PROGRESS_FILE)} is unreadable: {exc}"
            ) from None
        if not isinstance(progress, dict):
            raise ValueError(
                f"checkpoint {self._where(PROGRESS_FILE)} is unreadable: not an object"
            )
        return progress

    def _claim(self) -> None:
        """Record this launch as the checkpoint's owner (global rank 0 of a launch only)."""
        launch = self.context.launch_id
        if self.store is None or launch is None or not self.context.is_rank_zero:
            return
        owner = {"launch_id": launch, "time": epoch_now()}
        self.store.write(OWNER_FILE, (json.dumps(owner) + "\n").encode())

    def _check_owner(self) -> None:
        """Raise :class:`CheckpointFencedError` when a newer launch owns the checkpoint."""
        launch = self.context.launch_id
        if self.store is None or launch is None:
            return
        try:
            owner = json.loads(self.store.read(OWNER_FILE) or b"null").get("launch_id")
        except (ValueError, AttributeError):
            return  # never claimed (a checkpoint of an older version): nothing to fence
        if owner not in (None, launch):
            raise CheckpointFencedError(
                f"checkpoint {self.location} now belongs to launch {owner}; this rank's launch "
                f"{launch} was replaced (its host cut off, or the job relaunched elsewhere), so "
                "it stops without committing"
            )

    def pending_line(self) -> tuple[Path, dict[str, Any]] | None:
        """The step line and step log the last commit carries (``save(step_record=...)``)."""
        try:
            progress = self._progress()
            if progress is None:
                return None
            record, log = progress["step_record"], progress["step_log"]
            StepSample.model_validate(record, where="checkpoint step_record")
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return Path(log), dict(record)
