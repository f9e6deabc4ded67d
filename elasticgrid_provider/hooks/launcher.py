"""Start a launch's parts in a child process, and find the processes a launch left.

iroh-tinker's engines start ranks with the descriptors of the process that calls
``JobManager.launch``; in an Airflow task those include the supervisor's sockets, which a rank
would keep open as long as it runs. So a detached launcher child, holding no descriptor of the
task and dying with it (``PR_SET_PDEATHSIG``), calls it for each part. The rules:
docs/operators.md ("No rank holds a descriptor of the task").
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from elasticgrid_provider.atomic_files import write_json
from elasticgrid_provider.core.rank_environment import ENV_JOB, ENV_LAUNCH_ID
from elasticgrid_provider.engines import connection_material
from elasticgrid_provider.engines.remote_agent import process_environment, spawn_detached

RESULT_NAME = "launcher-result.json"
LOG_NAME = "launcher.log"
REQUEST_NAME = "launcher-request.json"
REDACTED = "***"
HANDOVER_OPTION = "--handover-fd"
PRIVATE_PREFIXES = (
    "__AIRFLOW_",  # the supervisor's descriptor (closed in any child)
    "_AIRFLOW_",  # the task runner's own flags (fork-exec, process context)
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",  # the URL a task gets instead of the database's
    "AIRFLOW__CORE__SQL_ALCHEMY_CONN",
)
"""Variables of a task's environment that are Airflow's own business, never the launcher's."""
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    """Linux ``prctl``; a no-op where it is unavailable."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def private_folder(path: Path) -> Path:
    """Create ``path`` (and parents) and make it mode 0700."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def redact_spec_envs(path: Path) -> None:
    """Replace every ``envs`` value in a spec file by ``***`` (only starting ranks reads them)."""
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    envs = spec.get("envs")
    if not isinstance(envs, dict) or all(value == REDACTED for value in envs.values()):
        return
    spec["envs"] = dict.fromkeys(envs, REDACTED)
    write_json(path, spec, private=True)


def redact_part_specs(jobs_root: Path, part_name: str, spec_path: str) -> None:
    """Redact a part's spec and iroh-tinker's copy of it (:func:`redact_spec_envs`)."""
    redact_spec_envs(Path(spec_path))
    redact_spec_envs(jobs_root / part_name / "spec.json")


def prepare_part_folder(jobs_root: Path, part_name: str) -> None:
    """Ready a part's iroh-tinker folder for a launch: 0700, ``spec.json`` 0600 before the spec
    (``envs`` included) is copied there, no ``done_*``/``attempt_*`` markers left by the last
    launch (iroh-tinker keeps them: a stale ``done_0`` fakes success, stale attempts a restart)."""
    folder = private_folder(jobs_root / part_name)
    for marker in [*folder.glob("done_*"), *folder.glob("attempt_*")]:
        marker.unlink(missing_ok=True)
    copy = folder / "spec.json"
    copy.touch(mode=0o600, exist_ok=True)
    copy.chmod(0o600)


def launcher_environment(job_name: str, launch_id: str) -> dict[str, str]:
    """The launcher's environment (and so its ranks'): this process's without
    :data:`PRIVATE_PREFIXES`, with the launch's ``ELASTICGRID_JOB`` and
    ``ELASTICGRID_LAUNCH_ID``."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE_PREFIXES)}
    return {**kept, ENV_JOB: job_name, ENV_LAUNCH_ID: launch_id}


def launch_connections(
    spec_paths: Iterable[str | Path],
) -> tuple[set[tuple[str, str | None]], set[str]]:
    """The Airflow connections the parts of these spec files need: (``aws_conn_id``, region)
    of each ec2 part, and the ``ssh_conn_id`` of each ec2 or ssh part that names one."""
    from elasticgrid_provider.hooks.remote_parts import ec2_spec, spec_params

    aws: set[tuple[str, str | None]] = set()
    ssh: set[str] = set()
    for path in spec_paths:
        found = ec2_spec(path)
        if found is not None:
            params, region = found
            aws.add((params.aws_conn_id, region))
        conn_id = (spec_params(path) or {}).get("ssh_conn_id")
        if conn_id:
            ssh.add(str(conn_id))
    return aws, ssh


def start_launcher(
    folder: Path, env: dict[str, str], material: dict[str, Any] | None = None
) -> subprocess.Popen:
    """Start the launcher for the request in ``folder`` (``REQUEST_NAME``, written before) with
    none of this process's descriptors but the read end of a pipe, on which it gets
    ``material`` (:func:`.connection_material.resolve`; none: nothing to answer from)."""
    request_path = folder / REQUEST_NAME
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    reader, writer = os.pipe()
    argv = [sys.executable, "-m", "elasticgrid_provider.hooks.launcher", str(request_path)]
    try:
        process = spawn_detached(
            [*argv, HANDOVER_OPTION, str(reader)], folder / LOG_NAME, env=env, pass_fds=(reader,)
        )
    except BaseException:
        os.close(writer)
        raise
    finally:
        os.close(reader)
    connection_material.send(material or {}, writer)
    return process


def read_result(folder: Path) -> dict[str, Any]:
    """What the launcher reported (``started`` parts, ``failed`` part and error), or {}."""
    with contextlib.suppress(OSError, ValueError):
        return json.loads((folder / RESULT_NAME).read_text())
    return {}


def log_tail(folder: Path, lines: int = 5) -> str:
    """The last lines of the launcher's log (to explain a launcher that crashed)."""
    try:
        text = (folder / LOG_NAME).read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(text.strip().splitlines()[-lines:])


def _pid_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:  # gone, or another user's
        return None


def launch_processes(job_name: str, launch_ids: Iterable[str]) -> list[int]:
    """Pids of live processes started for ``job_name`` by any of ``launch_ids`` (not this one).

    Only processes in this process's PID namespace count: ranks of a host in a
    namespace of its own (the SSH test hosts) show in ``/proc`` here too, with
    pids that mean nothing to the host, and the ssh engine stops them itself.
    """
    wanted = set(launch_ids)
    found = []
    ours = _pid_namespace("self")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if _pid_namespace(entry.name) != ours:
            continue
        environment = process_environment(int(entry.name))
        if environment.get(ENV_JOB) == job_name and environment.get(ENV_LAUNCH_ID) in wanted:
            found.append(int(entry.name))
    return sorted(found)


def is_launcher(pid: int) -> bool:
    """True when ``pid`` is a launcher process (it carries its launch's variables too)."""
    try:
        return b"elasticgrid_provider.hooks.launcher" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our (or an adopted) child
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def own_processes(job_name: str, pids: Iterable[int]) -> list[int]:
    """Those of ``pids`` that are live processes of ``job_name`` on this machine: a pid that an
    engine recorded on another machine, or that was reused since, is left alone."""
    return [int(pid) for pid in pids if process_environment(int(pid)).get(ENV_JOB) == job_name]


def _process_groups(pgids: set[int]) -> list[int]:
    """The live (not zombie) processes whose process group is one of ``pgids``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue
        if state != "Z" and int(group) in pgids:
            members.append(int(entry.name))
    return members


def _group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except OSError:
        return False


def terminate(pids: Iterable[int], grace_s: float = 3.0) -> list[int]:
    """Stop the processes and, for a group leader, its whole group; returns the pids that were
    alive when asked to stop.

    A group leader (iroh's runner, a launcher) is SIGKILLed first: a runner restarts the rank
    it was told to stop (``recovery: restart``) and forwards signals on its own clock. Its group
    (the rank's program) then gets SIGTERM, time to checkpoint, and SIGKILL after ``grace_s``.
    """
    targets = [pid for pid in pids if _alive(pid)]
    leaders = {pid for pid in targets if _group_leader(pid)}
    for pid in leaders:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)

    def left() -> bool:
        return any(_alive(pid) for pid in targets) or bool(leaders and _process_groups(leaders))

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in targets:
            with contextlib.suppress(OSError):
                if pid in leaders:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while left() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not left():
            break
    return targets


def main(argv: list[str] | None = None) -> int:
    """Launch each part of the request in order; stop at the first failure."""
    arguments = sys.argv[1:] if argv is None else argv
    request_path = Path(arguments[0])
    if HANDOVER_OPTION in arguments:  # first: the task's write never waits on a slow start
        connection_material.receive(int(arguments[arguments.index(HANDOVER_OPTION) + 1]))
    request = json.loads(request_path.read_text())
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != request["parent_pid"]:  # the task died before the line above
        return 1
    from elasticgrid_provider.hooks.job_manager import WholeFileJobManager

    jobs_root = Path(request["jobs_root"])
    result_path = request_path.with_name(RESULT_NAME)
    manager = WholeFileJobManager(root=jobs_root)
    result: dict[str, Any] = {"started": [], "failed": None}
    try:
        for part in request["parts"]:
            try:
                # the ranks of every engine start in the spec's workdir (resolved by the hook)
                os.chdir(json.loads(Path(part["spec_path"]).read_text()).get("workdir") or ".")
                manager.launch(part["spec_path"])
            except Exception as exc:
                result["failed"] = {"part": part["name"], "error": str(exc)}
                return 1
            finally:
                redact_part_specs(jobs_root, part["name"], part["spec_path"])
            result["started"].append(part["name"])
            write_json(result_path, result, private=True)
        return 0
    finally:
        write_json(result_path, result, private=True)


if __name__ == "__main__":
    raise SystemExit(main())
