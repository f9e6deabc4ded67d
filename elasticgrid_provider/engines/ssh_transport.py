"""SSH calls to training hosts: options, the remote agent, hosts in parallel; the hook's helpers.

Every call is one ``ssh`` with the same options (host keys checked, a connect
timeout, keepalives, one multiplexed connection per host) and a timeout, and
runs :mod:`.remote_agent` on the host with a JSON request on standard input.
Used by the ssh engine (:mod:`.ssh`) and, through :func:`sweep_launch` and
:func:`read_remote_file`, by the hook. Imports no iroh-tinker: the hook's
module is imported every time Airflow parses a DAG.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import os
import shlex
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from elasticgrid_provider.core.errors import RemoteHostError
from elasticgrid_provider.core.ssh_params import SshParams
from elasticgrid_provider.engines.connection_material import ssh_private_key

log = logging.getLogger(__name__)

CONTROL_PERSIST_S = 30
PROBE_EXTRA_S = 5.0  # beyond the connect timeout: status, logs and reads answer within seconds
STOP_EXTRA_S = 15.0  # beyond a stop's grace
SWEEP_GRACE_S = 3.0
LOADER = "import json,sys;exec(compile(json.loads(sys.stdin.readline()),'remote_agent','exec'))"
"""The remote command: read the agent's source from the first line of standard input, run it."""

Result = TypeVar("Result")


class RemoteRead(NamedTuple):
    """Bytes of a remote file from an offset, with the file's inode and size (0, 0 if missing)."""

    inode: int
    size: int
    data: bytes


# -- ssh -------------------------------------------------------------------------------------


def control_folder() -> Path:
    """This user's 0700 folder for ssh control sockets (refused if someone else owns it)."""
    folder = Path(tempfile.gettempdir()) / f"elasticgrid-ssh-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise RemoteHostError(f"ssh control folder {str(folder)!r} is not this user's own folder")
    if stat.S_IMODE(info.st_mode) != 0o700:
        folder.chmod(0o700)
    return folder


def ssh_options(params: SshParams, key_file: str | None = None) -> list[str]:
    """The options of every ssh call (ours first: ssh keeps the first value of an option);
    ``key_file`` is the private key when it came from ``ssh_conn_id`` (:func:`session_options`)."""
    key = key_file or params.ssh_key
    options = [
        *("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"),
        *(["-o", f"UserKnownHostsFile={params.known_hosts}"] if params.known_hosts else []),
        *("-o", f"ConnectTimeout={max(1, math.ceil(params.connect_timeout_s))}"),
        *("-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=3"),
        *("-o", "ControlMaster=auto", "-o", f"ControlPath={control_folder()}/%C"),
        *("-o", f"ControlPersist={CONTROL_PERSIST_S}"),
        *(["-p", str(params.ssh_port)] if params.ssh_port else []),
        *(["-i", str(Path(key).expanduser())] if key else []),
    ]
    return [*options, *params.ssh_opts]


@contextlib.contextmanager
def session_options(params: SshParams) -> Iterator[list[str]]:
    """:func:`ssh_options` for the calls in the block; a key from ``ssh_conn_id``
    (:func:`~.connection_material.ssh_private_key`) is written to a 0600 file in this user's
    0700 control folder for the block and removed after it."""
    if params.ssh_conn_id is None:
        yield ssh_options(params)
        return
    text = ssh_private_key(params.ssh_conn_id)
    descriptor, path = tempfile.mkstemp(prefix="key-", dir=control_folder())
    try:
        with os.fdopen(descriptor, "w") as handle:  # mkstemp creates it 0600
            handle.write(text)
        yield ssh_options(params, path)
    finally:
        Path(path).unlink(missing_ok=True)


def port_answers(address: str, port: int, timeout: float) -> bool:
    """Whether a TCP connection to ``address:port`` opens within ``timeout`` seconds (a cheap
    look for a booting machine's sshd before an ssh, which waits out its connect timeout)."""
    try:
        with socket.create_connection((address, port), timeout=max(0.05, timeout)):
            return True
    except OSError:
        return False


def run_with_timeout(
    argv: list[str], payload: bytes, timeout: float
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` with ``payload`` on stdin; kill it at ``timeout`` (raises TimeoutExpired)."""
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        try:
            out, err = process.communicate(payload, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            # a control master may hold the pipes a moment longer: do not wait on it
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.communicate(timeout=2.0)
            raise
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


@cache
def _agent_source() -> str:
    return Path(__file__).with_name("remote_agent.py").read_text()


def call_agent(
    params: SshParams, host: str, request: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """One ssh to ``host`` running :mod:`.remote_agent` on ``request``; its JSON answer.

    Raises :class:`RemoteHostError` (one sentence naming the host) when the
    host cannot be reached, does not answer within ``timeout`` or fails.
    """
    python = params.python or sys.executable
    command = shlex.join([python, "-c", LOADER])
    payload = f"{json.dumps(_agent_source())}\n{json.dumps(request)}\n".encode()
    try:
        with session_options(params) as options:
            result = run_with_timeout(["ssh", *options, "--", host, command], payload, timeout)
    except subprocess.TimeoutExpired:
        raise RemoteHostError(f"ssh host {host!r} did not answer within {timeout:g} s") from None
    if result.returncode == 255:
        reason = last_line(result.stderr)
        raise RemoteHostError(f"ssh host {host!r} cannot be reached: {reason}")
    try:
        answer = json.loads(result.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        reason = last_line(result.stderr)
        raise RemoteHostError(
            f"ssh host {host!r}: {python!r} failed (exit {result.returncode}): {reason}"
        ) from None
    if "error" in answer:
        raise RemoteHostError(f"ssh host {host!r}: {answer['error']}")
    return answer


def for_each_host(
    hosts: Iterable[str], call: Callable[[str], Result]
) -> dict[str, Result | RemoteHostError]:
    """``call(host)`` for every distinct host in parallel; a host's error is its result."""
    distinct = list(dict.fromkeys(hosts))
    if not distinct:
        return {}

    def guarded(host: str) -> Result | RemoteHostError:
        try:
            return call(host)
        except RemoteHostError as error:
            return error

    with ThreadPoolExecutor(max_workers=min(len(distinct), 32)) as pool:
        return dict(zip(distinct, pool.map(guarded, distinct), strict=True))


def first_error(results: Mapping[str, object]) -> RemoteHostError | None:
    return next((value for value in results.values() if isinstance(value, RemoteHostError)), None)


def parse_params(params: Mapping[str, Any] | SshParams) -> SshParams:
    return params if isinstance(params, SshParams) else SshParams.parse(params)


# -- for the hook ----------------------------------------------------------------------------


def sweep_launch(
    params: Mapping[str, Any] | SshParams,
    job_name: str,
    launch_ids: Iterable[str],
    grace_s: float = SWEEP_GRACE_S,
) -> dict[str, list[int]]:
    """Kill, on every host of ``params``, the process groups of every process whose environment
    names ``job_name`` and one of ``launch_ids`` (runners first); host -> pids killed.

    A host that cannot be reached is logged and left out of the answer.
    """
    parsed = parse_params(params)
    request = {"op": "sweep", "job": job_name, "launch_ids": list(launch_ids), "grace": grace_s}
    timeout = parsed.connect_timeout_s + grace_s + STOP_EXTRA_S
    results = for_each_host(
        parsed.hosts, lambda host: call_agent(parsed, host, request, timeout)["killed"]
    )
    found: dict[str, list[int]] = {}
    for host, result in results.items():
        if isinstance(result, RemoteHostError):
            log.warning("could not sweep %s: %s", host, result)
        else:
            found[host] = [int(pid) for pid in result]
    return found


def read_remote_file(
    params: Mapping[str, Any] | SshParams, host: str, path: str, offset: int, limit: int
) -> RemoteRead:
    """At most ``limit`` bytes of ``path`` on ``host`` from byte ``offset`` (one ssh).

    A missing file reads as ``RemoteRead(0, 0, b"")``; an unreachable host raises
    :class:`RemoteHostError`.
    """
    parsed = parse_params(params)
    request = {"op": "read", "path": path, "offset": int(offset), "limit": int(limit)}
    answer = call_agent(parsed, host, request, parsed.connect_timeout_s + PROBE_EXTRA_S)
    return RemoteRead(int(answer["inode"]), int(answer["size"]), base64.b64decode(answer["data"]))


def close_connections(params: Mapping[str, Any] | SshParams) -> None:
    """End the multiplexed ssh connections to the hosts of ``params`` (``ssh -O exit``)."""
    parsed = parse_params(params)

    def close(host: str) -> None:
        argv = ["ssh", *ssh_options(parsed), "-O", "exit", "--", host]  # no key needed
        try:
            run_with_timeout(argv, b"", parsed.connect_timeout_s + PROBE_EXTRA_S)
        except subprocess.TimeoutExpired:
            log.warning("ssh -O exit %s did not return", host)

    for_each_host(parsed.hosts, close)
