"""The provider's ssh engine: ranks on machines reached over SSH, with no filesystem shared.

An iroh-tinker ``Engine``, loaded as ``module=elasticgrid_provider.engines.ssh:SshEngine`` (its
``name``, so ``JobManager`` rebuilds it from a job's state), replacing iroh-tinker 0.5's own.
One ssh per host per operation, hosts in parallel, over a multiplexed connection with host keys
checked (:mod:`.ssh_transport`); the remote side is :mod:`.remote_agent`, sent with its JSON
request on standard input, so ``envs`` values never appear on a command line or a host's disk.
Each rank's remote pid and start time are kept in ``node.env`` (which iroh-tinker saves), never
in ``cluster.meta["pids"]``, which iroh would ``os.kill`` on this machine; ``status`` mirrors
the remote markers into the local job folder and writes ``remote-status.json``. The layout,
each operation and the security rules: docs/remote-hosts.md.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from iroh_tinker.cloud.engines.base import ClusterInfo, Engine, Node

from elasticgrid_provider.atomic_files import write_json
from elasticgrid_provider.core.errors import ElasticGridError, RemoteHostError
from elasticgrid_provider.core.providers import ENGINE_REFERENCES, SSH_ENGINE
from elasticgrid_provider.core.ssh_params import (
    REMOTE_JOB_FOLDER,
    REMOTE_STATUS_FILE,
    SshParams,
    host_address,
)
from elasticgrid_provider.engines.ssh_transport import (
    PROBE_EXTRA_S,
    STOP_EXTRA_S,
    RemoteRead,
    call_agent,
    close_connections,
    first_error,
    for_each_host,
    last_line,
    read_remote_file,
    run_with_timeout,
    session_options,
    sweep_launch,
)

__all__ = [
    "ENGINE_REF",
    "STATUS_FILE",
    "RemoteRead",
    "SshEngine",
    "close_connections",
    "read_remote_file",
    "sweep_launch",
]

log = logging.getLogger(__name__)

ENGINE_REF = ENGINE_REFERENCES[SSH_ENGINE]
"""The ``resources.infra`` entry of this engine."""
STATUS_FILE = REMOTE_STATUS_FILE
SYNC_EXCLUDES = (".git", ".venv", "__pycache__", REMOTE_JOB_FOLDER)
CHECK_EXTRA_S = 15.0  # beyond the connect timeout: creating folders, finding the runner
START_EXTRA_S = 30.0
SYNC_TIMEOUT_S = 1800.0  # a whole rsync; a stalled one ends after its --timeout
SYNC_STALL_S = 60
SETUP_TIMEOUT_S = 3600.0
MAX_STOP_GRACE_S = 10.0


class SshEngine(Engine):
    """Ranks on SSH hosts (module docstring); params from ``spec.resources.params``."""

    name = ENGINE_REF

    @classmethod
    def probe(cls) -> bool:
        return shutil.which("ssh") is not None

    @property
    def params(self) -> SshParams:
        """The spec's params, validated (``ElasticGridError`` naming the field)."""
        cached = self.__dict__.get("_params")
        if cached is None:
            cached = self.__dict__["_params"] = SshParams.parse(self.spec.resources.params)
        return cached

    @property
    def remote_root(self) -> str:
        return self.params.remote_root(self.spec.name)

    @property
    def remote_job_dir(self) -> str:
        return self.params.remote_job_dir(self.spec.name)

    def _timeout(self, extra: float) -> float:
        return self.params.connect_timeout_s + extra

    def _agent(self, host: str, request: dict[str, Any], extra: float) -> dict[str, Any]:
        base = {"dir": self.remote_root, "job_dir": self.remote_job_dir}
        return call_agent(self.params, host, {**base, **request}, self._timeout(extra))

    def _rank_hosts(self) -> list[str]:
        """One host per rank: ``hosts`` per rank, or per node repeated ``procs_per_node`` times."""
        hosts, spec = list(self.params.hosts), self.spec
        if len(hosts) == spec.num_nodes:
            hosts = [host for host in hosts for _ in range(spec.procs_per_node)]
        if len(hosts) != spec.world_size:
            raise ElasticGridError(
                f"resources.params.hosts must cover num_nodes={spec.num_nodes} or "
                f"world_size={spec.world_size}, got {len(self.params.hosts)} hosts"
            )
        return hosts

    def provision(self, job_dir: str) -> ClusterInfo:
        """One node per rank on its host, after :meth:`check_hosts`."""
        hosts = self._rank_hosts()
        self.params.check_files()
        self.check_hosts()
        Path(job_dir).mkdir(parents=True, exist_ok=True)
        nodes = [
            Node(rank=rank, host=host, local_rank=rank % self.spec.procs_per_node)
            for rank, host in enumerate(hosts)
        ]
        meta = {"pids": {}, "job_dir": str(job_dir)}
        return ClusterInfo(job_name=self.spec.name, engine=self.name, nodes=nodes, meta=meta)

    def check_hosts(self) -> None:
        """Reach every host (in parallel): :meth:`check_host`. Raises
        :class:`RemoteHostError` naming the first bad host."""
        results = for_each_host(self.params.hosts, self.check_host)
        error = first_error(results)
        if error is not None:
            raise error

    def check_host(self, host: str) -> None:
        """Reach ``host``: create the job folder, check that the remote Python finds iroh's
        runner (raises :class:`RemoteHostError` naming the host)."""
        self._agent(host, {"op": "check"}, CHECK_EXTRA_S)

    def sync(self, cluster: ClusterInfo, workdir: str) -> None:
        """rsync ``workdir`` into ``R`` on every host, in parallel, over the same ssh options."""
        source = f"{Path(workdir).resolve()}/"
        root = self.remote_root
        target = root[2:] if root.startswith("~/") else root  # rsync's relative paths start at ~
        excludes = [word for name in SYNC_EXCLUDES for word in ("--exclude", name)]

        def copy(host: str) -> None:
            with session_options(self.params) as options:
                copy_with(host, shlex.join(["ssh", *options]))

        def copy_with(host: str, shell: str) -> None:
            argv = ["rsync", "-a", f"--timeout={SYNC_STALL_S}", "-e", shell, *excludes]
            try:
                result = run_with_timeout(
                    [*argv, source, f"{host}:{target.rstrip('/')}/"], b"", SYNC_TIMEOUT_S
                )
            except subprocess.TimeoutExpired:
                raise RemoteHostError(
                    f"rsync to ssh host {host!r} took over {SYNC_TIMEOUT_S:g} s"
                ) from None
            if result.returncode != 0:
                reason = last_line(result.stderr)
                raise RemoteHostError(f"rsync to ssh host {host!r} failed: {reason}")

        error = first_error(for_each_host((node.host for node in cluster.nodes), copy))
        if error is not None:
            raise error

    def setup(self, cluster: ClusterInfo, workdir: str, setup_cmd: str) -> None:
        """Run the spec's ``setup`` in ``R`` on every host (``envs`` sent on stdin)."""
        request: dict[str, Any] = {"op": "setup", "command": setup_cmd, "timeout": SETUP_TIMEOUT_S}
        request["env"] = dict(self.spec.envs)

        def run(host: str) -> None:
            answer = self._agent(host, request, SETUP_TIMEOUT_S + 10)
            if answer["returncode"] != 0:
                raise RemoteHostError(
                    f"setup on ssh host {host!r} exited {answer['returncode']}: {answer['output']}"
                )

        error = first_error(for_each_host((node.host for node in cluster.nodes), run))
        if error is not None:
            raise error

    def _remote_command(self, argv: list[str]) -> list[str]:
        """iroh's runner command with the remote job folder and the host's Python."""
        command = list(argv)
        if "--job-dir" in command:
            command[command.index("--job-dir") + 1] = self.remote_job_dir
        if self.params.python:
            command[0] = self.params.python
        return command

    def start(
        self, cluster: ClusterInfo, commands: dict[int, list[str]], env: dict[str, str]
    ) -> None:
        """Start every rank: one ssh per host, hosts in parallel. If a host fails, the ranks
        started on the others are stopped and :class:`RemoteHostError` names the host."""
        by_host = _nodes_by_host(cluster.nodes)
        _clear_local_markers(cluster)
        cluster.meta["pids"] = {}

        def launch(host: str) -> dict[str, list[Any]]:
            ranks = [
                {"rank": node.rank, "argv": self._remote_command(commands[node.rank])}
                for node in by_host[host]
            ]
            request_env = {**env, "ELASTICGRID_HOST": host_address(host)}
            request = {"op": "start", "ranks": ranks, "env": request_env}
            return self._agent(host, request, START_EXTRA_S)["pids"]

        results = for_each_host(by_host, launch)
        for host, answer in results.items():
            if isinstance(answer, RemoteHostError):
                continue
            for node in by_host[host]:
                pid, started = answer[str(node.rank)]
                node.env.update({"pid": str(pid), "pid_start": str(started or "")})
        error = first_error(results)
        if error is not None:
            self.stop(cluster)
            raise error

    def status(self, cluster: ClusterInfo) -> dict[int, str]:
        """Each rank ``running`` or ``stopped`` (unreachable hosts' ranks: stopped), the
        remote markers mirrored locally, and ``remote-status.json`` written."""
        by_host = _nodes_by_host(cluster.nodes)

        def probe(host: str) -> dict[str, Any]:
            ranks = {str(node.rank): _pid(node) for node in by_host[host] if _pid(node)[0]}
            return self._agent(host, {"op": "status", "ranks": ranks}, PROBE_EXTRA_S)["ranks"]

        results = for_each_host(by_host, probe)
        words: dict[int, str] = {}
        processes: dict[str, dict[str, Any]] = {}
        unreachable = []
        job_dir = Path(cluster.meta["job_dir"]) if cluster.meta.get("job_dir") else None
        for host, answer in results.items():
            if isinstance(answer, RemoteHostError):
                log.warning("%s", answer)
                unreachable.append(host)
                words.update(dict.fromkeys((node.rank for node in by_host[host]), "unreachable"))
                continue
            for node in by_host[host]:
                found = answer.get(str(node.rank), {})
                words[node.rank] = "running" if found.get("alive") else "stopped"
                if found.get("alive"):
                    pid = f"{host_address(host)}:{_pid(node)[0]}"
                    processes[str(node.rank)] = {"pid": pid, "launch_id": found.get("launch_id")}
                for kind in ("done", "attempt"):
                    if job_dir is not None and job_dir.is_dir():
                        _mirror(job_dir / f"{kind}_{node.rank}", found.get(kind))
        record = {
            "checked_at": time.time(),
            "ranks": {str(rank): words[rank] for rank in sorted(words)},
            "processes": processes,
            "unreachable_hosts": unreachable,
        }
        if job_dir is not None and job_dir.is_dir():
            write_json(job_dir / STATUS_FILE, record, private=True)
        return {rank: "running" if word == "running" else "stopped" for rank, word in words.items()}

    def stop(self, cluster: ClusterInfo) -> None:
        """Kill each rank's process group on every host (module :mod:`.remote_agent`); a host
        that cannot be reached is logged and given up after the timeout."""
        grace = min(float(self.spec.recovery.signal_grace_s), MAX_STOP_GRACE_S)
        by_host = _nodes_by_host(node for node in cluster.nodes if _pid(node)[0])

        def kill(host: str) -> None:
            ranks = [_pid(node) for node in by_host[host]]
            self._agent(host, {"op": "stop", "ranks": ranks, "grace": grace}, grace + STOP_EXTRA_S)

        for host, result in for_each_host(by_host, kill).items():
            if isinstance(result, RemoteHostError):
                log.warning("could not stop the ranks on %s: %s", host, result)

    def logs(self, cluster: ClusterInfo, rank: int, tail: int = 50) -> str:
        """The last ``tail`` lines of the rank's remote log ("" when its host is unreachable)."""
        node = next((node for node in cluster.nodes if node.rank == rank), None)
        if node is None:
            return ""
        request = {"op": "tail", "path": f"{self.remote_job_dir}/logs/rank_{rank}.log"}
        try:
            return str(self._agent(node.host, {**request, "lines": tail}, PROBE_EXTRA_S)["text"])
        except RemoteHostError as error:
            log.warning("%s", error)
            return ""


def _pid(node: Node) -> tuple[int, str | None]:
    """A node's remote rank pid (0 when none was recorded) and start time."""
    try:
        pid = int(node.env.get("pid", "0"))
    except ValueError:
        pid = 0
    return pid, node.env.get("pid_start") or None


def _nodes_by_host(nodes: Iterable[Node]) -> dict[str, list[Node]]:
    grouped: dict[str, list[Node]] = {}
    for node in nodes:
        grouped.setdefault(node.host, []).append(node)
    return grouped


def _mirror(path: Path, content: str | None) -> None:
    """Make the local marker ``path`` hold ``content``, or remove it when ``content`` is None."""
    if content is None:
        path.unlink(missing_ok=True)
    elif not path.exists() or path.read_text() != content:
        path.write_text(content)


def _clear_local_markers(cluster: ClusterInfo) -> None:
    job_dir = cluster.meta.get("job_dir")
    if job_dir and Path(job_dir).is_dir():
        for marker in [*Path(job_dir).glob("done_*"), *Path(job_dir).glob("attempt_*")]:
            marker.unlink(missing_ok=True)
