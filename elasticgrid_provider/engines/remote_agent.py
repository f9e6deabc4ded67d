"""The code the ssh engine runs on a training host, one request per ssh call.

The engine sends this file's source and then a JSON request on the ssh session's standard
input (so ``envs`` values are never on a command line and never written on the host), and
reads one JSON answer from its standard output. Standard library only: the host needs its
Python and iroh-tinker, not this package. The rules: docs/remote-hosts.md ("The engine").
"""

import base64
import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time

RUNNERS = (b"iroh_tinker.cloud.runner", b"iroh_tinker/cloud/runner.py")


def _folder(path):
    return os.path.abspath(os.path.expanduser(path))


def _stat(pid):
    """(state, pgrp, start time) of a process, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[2]), fields[19].decode()


def _is_rank(pid, started):
    """True while ``pid`` runs (not a zombie) and is the process started at ``started``."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z" and (started is None or stat[2] == started)


def _group_alive(group):
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[1] == group and stat[0] != "Z":
                return True
    return False


def _signal_group(group, number):
    with contextlib.suppress(OSError):
        os.killpg(group, number)


def _stop(runners, groups, others, grace):
    """SIGKILL the runners, SIGTERM their groups, SIGKILL the groups after ``grace`` seconds."""
    for pid in runners + others:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL if pid in runners else signal.SIGTERM)
    for group in groups:
        _signal_group(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_group_alive(group) for group in groups):
        time.sleep(0.05)
    for group in groups:
        _signal_group(group, signal.SIGKILL)
    for pid in others:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_group_alive(group) for group in groups):
        time.sleep(0.05)


def spawn_detached(argv, log, **options):
    """Start ``argv`` detached: its own session, stdin ``/dev/null``, stdout and stderr
    appended to ``log`` (created 0600), no other descriptor of this process; ``options`` go
    to ``subprocess.Popen`` (``cwd``, ``env``)."""
    descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=descriptor,
            stderr=descriptor,
            close_fds=True,
            start_new_session=True,
            **options,
        )
    finally:
        os.close(descriptor)


def process_environment(pid):
    """The environment of process ``pid`` as a dict, or {} (gone, or another user's)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, value in pairs}


def _command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _runner_script():
    """The path of iroh's runner module, found without importing iroh_tinker (its import takes
    most of a second of CPU, once per rank), or None."""
    import importlib.util

    package = importlib.util.find_spec("iroh_tinker")
    for folder in (package.submodule_search_locations or []) if package else []:
        path = os.path.join(folder, "cloud", "runner.py")
        if os.path.isfile(path):
            return path
    return None


def check(request):
    """Create the part's job folder and log folder; find iroh's runner module."""
    os.makedirs(os.path.join(_folder(request["job_dir"]), "logs"), exist_ok=True)
    if _runner_script() is None:
        raise ImportError(f"{sys.executable} cannot import iroh_tinker.cloud.runner")
    return {"dir": _folder(request["dir"])}


def _command(argv, job_dir, remote_job_dir, script):
    """The rank's argv: the job folder expanded; ``-m iroh_tinker.cloud.runner`` run as its
    file (it imports only the standard library), which starts a rank in a fraction of the time."""
    argv = [job_dir if word == remote_job_dir else word for word in argv]
    if script and argv[1:3] == ["-m", "iroh_tinker.cloud.runner"]:
        argv = [argv[0], script, *argv[3:]]
    return argv


def start(request):
    """Remove the last launch's ``done_*``/``attempt_*`` markers and start each rank detached
    (own session, stdin ``/dev/null``, output appended to its log); answer each rank's pid and
    start time (a pid's identity: a pid reused by another process never reads as the rank)."""
    root, job_dir = _folder(request["dir"]), _folder(request["job_dir"])
    os.makedirs(os.path.join(job_dir, "logs"), exist_ok=True)
    for marker in glob.glob(os.path.join(job_dir, "done_*")) + glob.glob(
        os.path.join(job_dir, "attempt_*")
    ):
        os.unlink(marker)
    env = dict(os.environ)
    env.update(request["env"])
    started = {}
    script = _runner_script()
    try:
        for rank in request["ranks"]:
            argv = _command(rank["argv"], job_dir, request["job_dir"], script)
            log = os.path.join(job_dir, "logs", f"rank_{rank['rank']}.log")
            process = spawn_detached(argv, log, cwd=root, env=env)
            stat = _stat(process.pid)
            started[str(rank["rank"])] = [process.pid, stat[2] if stat else None]
    except Exception:
        pids = [pid for pid, _ in started.values()]
        _stop(pids, pids, [], 0.0)
        raise
    return {"pids": started}


def status(request):
    """Per rank: alive (not a zombie) or not, the launch id its environment carries (while
    alive), and its markers."""
    job_dir = _folder(request["job_dir"])
    ranks = {}
    for rank, (pid, started) in request["ranks"].items():
        markers: dict = {}
        for kind in ("done", "attempt"):
            try:
                with open(os.path.join(job_dir, f"{kind}_{rank}")) as handle:
                    markers[kind] = handle.read()
            except OSError:
                markers[kind] = None
        alive = _is_rank(pid, started)
        launch_id = process_environment(pid).get("ELASTICGRID_LAUNCH_ID") if alive else None
        ranks[rank] = {"alive": alive, "launch_id": launch_id, **markers}
    return {"ranks": ranks}


def stop(request):
    """SIGKILL each rank's runner (the session leader, so it cannot restart the rank it was
    told to stop), SIGTERM the rest of its group, then SIGKILL what outlives the grace."""
    runners = [pid for pid, started in request["ranks"] if _is_rank(pid, started)]
    _stop(runners, runners, [], request["grace"])
    return {"killed": runners}


def sweep(request):
    """:func:`stop` for every process whose environment names the job and one of the launch
    ids (ranks nobody recorded)."""
    wanted = set(request["launch_ids"])
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (os.getpid(), os.getppid()):
            environment = process_environment(int(entry))
            if (
                environment.get("ELASTICGRID_JOB") == request["job"]
                and environment.get("ELASTICGRID_LAUNCH_ID") in wanted
                and _is_rank(int(entry), None)
            ):
                found.append(int(entry))
    runners = [pid for pid in found if any(word in _command_line(pid) for word in RUNNERS)]
    groups = sorted({stat[1] for stat in map(_stat, found) if stat is not None})
    others = [pid for pid in found if pid not in runners]
    _stop(runners, groups, others, request["grace"])
    return {"killed": sorted(found)}


def tail(request):
    """The end of a log."""
    try:
        with open(_folder(request["path"]), "rb") as handle:
            handle.seek(0, os.SEEK_END)
            end = position = handle.tell()
            data = b""
            while position > 0 and data.count(b"\n") <= request["lines"]:
                position = max(0, position - 65536)
                handle.seek(position)
                data = handle.read(end - position)
    except OSError:
        return {"text": ""}
    lines = data.decode(errors="replace").splitlines()
    return {"text": "\n".join(lines[-request["lines"] :]) if request["lines"] > 0 else ""}


def read(request):
    """Bytes of a file from an offset."""
    try:
        descriptor = os.open(_folder(request["path"]), os.O_RDONLY)
    except FileNotFoundError:
        return {"inode": 0, "size": 0, "data": ""}
    try:
        info = os.fstat(descriptor)
        data = os.pread(descriptor, request["limit"], request["offset"])
    finally:
        os.close(descriptor)
    return {"inode": info.st_ino, "size": info.st_size, "data": base64.b64encode(data).decode()}


def setup(request):
    """Run the spec's setup command in the working directory."""
    env = dict(os.environ)
    env.update(request["env"])
    result = subprocess.run(
        request["command"],
        shell=True,
        cwd=_folder(request["dir"]),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=request["timeout"],
    )
    output = result.stdout.decode(errors="replace").strip().splitlines()
    return {"returncode": result.returncode, "output": " | ".join(output[-5:])}


OPERATIONS = {
    "check": check,
    "start": start,
    "status": status,
    "stop": stop,
    "sweep": sweep,
    "tail": tail,
    "read": read,
    "setup": setup,
}


def main():
    request = json.loads(sys.stdin.readline())
    try:
        answer = OPERATIONS[request["op"]](request)
    except Exception as error:  # one line for the engine's one sentence
        answer = {"error": f"{type(error).__name__}: {error}"}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
