"""A real Airflow deployment in a temp folder: Postgres, Redis, CeleryExecutor, two workers.

What runs (every process is started here, as its own process group, and
its PID recorded; :meth:`Deployment.stop` ends exactly those groups and
nothing else, then removes the folder):

* Postgres (Debian package) as the non-root ``postgres`` user, its cluster
  initialised in the temp folder, on a free loopback port;
* Redis on a free loopback port (the Celery broker);
* ``airflow api-server`` (REST API v2, simple auth manager), ``scheduler``,
  ``dag-processor``, ``triggerer`` and two ``celery worker`` processes.
  Worker ``w1`` serves queues ``default,w1``, worker ``w2`` serves
  ``default,w2``: a task with ``queue="w1"`` runs on w1 only. Each worker has
  its own working folder (``AIRFLOW_HOME``, its copy of the DAG files,
  ``HOME``, ``IROH_TINKER_HOME``, logs); the only folder they share is the
  jobs root, given to every component through the ``elasticgrid_default``
  connection.

The DAGs folder is a copy of ``example_dags/`` plus ``integration/dags/``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
POSTGRES_USER = "postgres"  # the Debian package's system user: Postgres refuses to run as root
WORKER_QUEUES = {"w1": "default,w1", "w2": "default,w2"}
ADMIN = "admin"


def postgres_bin(program: str) -> str:
    """A Postgres server program from the Debian package (not on PATH there)."""
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{program}"))
    if found:
        return str(found[-1])
    on_path = shutil.which(program)
    if on_path:
        return on_path
    raise RuntimeError(f"{program} not found: apt-get install -y postgresql redis-server")


class ComponentExited(RuntimeError):
    """A process of the deployment exited: waiting any longer is pointless."""


def wait_until(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """Poll ``check`` until it returns a truthy value; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except ComponentExited:
            raise
        except Exception as exc:  # not up yet
            last_error = exc
        else:
            if value:
                return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached within {timeout:.0f}s (last error: {last_error})")


@dataclass
class Process:
    """A process group this deployment started: its leader's PID and where it logs."""

    name: str
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        """The group leader's PID (the group id too: started with a new session)."""
        return self.popen.pid

    def alive(self) -> bool:
        """True while the leader has not exited."""
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        """The end of its log, for failure messages."""
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Deployment:
    """The running deployment: ports, folders, processes and a REST client."""

    home: Path
    processes: dict[str, Process] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    ssh_hosts: Any = None  # the SSH training hosts of tests/ssh_hosts.py, when the suite has them
    password: str = ""
    _token: str = ""

    # -- layout -----------------------------------------------------------------
    @property
    def jobs_root(self) -> Path:
        """The only folder the workers share."""
        return self.home / "shared-jobs"

    @property
    def dags_folder(self) -> Path:
        return self.home / "dags"

    def worker_home(self, worker: str) -> Path:
        """A worker's own working folder."""
        return self.home / f"worker-{worker}"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    @property
    def database_url(self) -> str:
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.ports['postgres']}/airflow"

    # -- start ------------------------------------------------------------------
    @classmethod
    def start(cls, home: Path | None = None, env: dict[str, str] | None = None) -> Deployment:
        """Start everything in ``home`` (default: a new temp folder), ``env`` added to every
        component's environment; on any failure stop what was started and re-raise."""
        home = home or Path(tempfile.mkdtemp(prefix="elasticgrid-integration-"))
        home.chmod(0o755)  # the postgres user must reach its cluster folder
        deployment = cls(home=home, extra_env=dict(env or {}))
        try:
            deployment._start()
        except BaseException:
            deployment.stop()
            raise
        return deployment

    def _start(self) -> None:
        self.ports = {
            name: free_port()
            for name in ("postgres", "redis", "api", "triggerer_logs", "w1_logs", "w2_logs")
        }
        self.jobs_root.mkdir()
        self._copy_dags()
        self._start_postgres()
        self._start_redis()
        self.env = self._airflow_env()
        self._run("airflow db migrate", ["airflow", "db", "migrate"], timeout=600)
        self._spawn(
            "api-server", ["airflow", "api-server", "-H", "127.0.0.1", "-p", str(self.ports["api"])]
        )
        self._spawn("scheduler", ["airflow", "scheduler"])
        self._spawn("dag-processor", ["airflow", "dag-processor"])
        self._spawn("triggerer", ["airflow", "triggerer"])
        for worker in WORKER_QUEUES:
            self.start_worker(worker)
        self.password = wait_until(
            "the simple auth manager's password file", self._read_password, timeout=180
        )
        wait_until("the API server", self._api_is_healthy, timeout=180)

    def _copy_dags(self, folder: Path | None = None) -> None:
        """The DAG files, copied to ``folder`` (default: the scheduler's DAGs folder)."""
        folder = folder or self.dags_folder
        folder.mkdir(parents=True)
        for source in (ROOT / "example_dags", ROOT / "integration" / "dags"):
            for path in source.glob("*.py"):
                shutil.copy(path, folder / path.name)

    def _start_postgres(self) -> None:
        data = self.home / "postgres"
        data.mkdir()
        shutil.chown(data, POSTGRES_USER, POSTGRES_USER)
        data.chmod(0o700)
        subprocess.run(
            [
                postgres_bin("initdb"),
                "-D",
                str(data),
                "-U",
                "airflow",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
            user=POSTGRES_USER,
            group=POSTGRES_USER,
            extra_groups=[],
            check=True,
            capture_output=True,
            cwd=data,
        )
        self._spawn(
            "postgres",
            [
                postgres_bin("postgres"),
                "-D", str(data),
                "-h", "127.0.0.1",
                "-p", str(self.ports["postgres"]),
                "-k", str(data),  # the Unix socket stays inside the temp folder
                "-c", "fsync=off",
                "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off",
                "-c", "max_connections=200",
            ],
            airflow=False,
            user=POSTGRES_USER,
            cwd=data,
        )  # fmt: skip
        wait_until("Postgres", self._create_database, timeout=60)

    def _create_database(self) -> bool:
        import psycopg2

        connection = psycopg2.connect(
            host="127.0.0.1", port=self.ports["postgres"], user="airflow", dbname="postgres"
        )
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = 'airflow'")
                if cursor.fetchone() is None:
                    cursor.execute("CREATE DATABASE airflow")
        finally:
            connection.close()
        return True

    def _start_redis(self) -> None:
        folder = self.home / "redis"
        folder.mkdir()
        self._spawn(
            "redis",
            [
                shutil.which("redis-server") or "/usr/bin/redis-server",
                "--bind", "127.0.0.1",
                "--port", str(self.ports["redis"]),
                "--save", "",
                "--appendonly", "no",
                "--dir", str(folder),
            ],
            airflow=False,
            cwd=folder,
        )  # fmt: skip

        def pong() -> bool:
            with socket.create_connection(("127.0.0.1", self.ports["redis"]), timeout=2) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")

        wait_until("Redis", pong, timeout=30)

    def _airflow_env(self) -> dict[str, str]:
        base = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("AIRFLOW", "IROH_TINKER", "ELASTICGRID", "PYTEST"))
        }
        broker = f"redis://127.0.0.1:{self.ports['redis']}/0"
        result_backend = (
            f"db+postgresql+psycopg2://airflow@127.0.0.1:{self.ports['postgres']}/airflow"
        )
        return {
            **base,
            "PATH": f"{VENV_BIN}:{base.get('PATH', '/usr/bin:/bin')}",
            "PYTHONPATH": str(ROOT),
            "AIRFLOW_HOME": str(self.home / "airflow"),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "True",
            "AIRFLOW__API__BASE_URL": self.api_url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url,
            "AIRFLOW__CELERY__BROKER_URL": broker,
            "AIRFLOW__CELERY__RESULT_BACKEND": result_backend,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.ports["triggerer_logs"]),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            # a killed worker's task is noticed (and retried) in about 30 s, not 5 minutes
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            "AIRFLOW_CONN_ELASTICGRID_DEFAULT": json.dumps(
                {"conn_type": "elasticgrid", "extra": {"jobs_root": str(self.jobs_root)}}
            ),
            "IROH_TINKER_HOME": str(self.home / "airflow" / "iroh"),
            "IROH_TINKER_RESTART_BACKOFF": "0",
            **self.extra_env,
        }

    def worker_env(self, worker: str) -> dict[str, str]:
        """The environment worker ``w1``/``w2`` runs in, and passes on to its tasks."""
        own = self.worker_home(worker)
        return {
            **self.env,
            "AIRFLOW_HOME": str(own / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(own / "dags"),  # its own copy of the DAG files
            "HOME": str(own),
            "IROH_TINKER_HOME": str(own / "iroh"),  # only the jobs root is shared
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.ports[f"{worker}_logs"]),
            # the task instance's hostname names the worker that ran it
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "integration.worker_names.worker_hostname",
            "ELASTICGRID_IT_WORKER": worker,
        }

    def start_worker(self, worker: str) -> Process:
        """Start (or restart) Celery worker ``w1``/``w2`` in its own folder."""
        own = self.worker_home(worker)
        if not own.exists():
            own.mkdir()
            self._copy_dags(own / "dags")
        return self._spawn(
            f"worker-{worker}",
            [
                "airflow", "celery", "worker",
                "--queues", WORKER_QUEUES[worker],
                "--celery-hostname", f"{worker}@%h",
                "--concurrency", "2",
                "--without-gossip", "--without-mingle",
            ],
            env=self.worker_env(worker),
            cwd=own,
        )  # fmt: skip

    def _run(self, name: str, command: list[str], timeout: float) -> None:
        log = self.home / "logs" / f"{name.replace(' ', '-')}.log"
        log.parent.mkdir(exist_ok=True)
        with open(log, "w") as out:
            result = subprocess.run(
                command,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                cwd=self.home,
                check=False,
            )
        if result.returncode != 0:
            raise RuntimeError(f"{name} failed ({result.returncode}):\n{log.read_text()[-3000:]}")

    def _spawn(
        self,
        name: str,
        command: list[str],
        *,
        airflow: bool = True,
        env: dict[str, str] | None = None,
        user: str | None = None,
        cwd: Path | None = None,
    ) -> Process:
        log = self.home / "logs" / f"{name}.log"
        log.parent.mkdir(exist_ok=True)
        if airflow:
            command = [str(VENV_BIN / command[0]), *command[1:]]
        with open(log, "a") as out:
            popen = subprocess.Popen(
                command,
                env=(env or self.env) if airflow else None,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd or self.home,
                start_new_session=True,  # its own process group: stopped as a whole, by PID
                user=user,
                group=user,
                extra_groups=[] if user else None,
            )
        process = Process(name, popen, log)
        self.processes[name] = process
        return process

    # -- stop ------------------------------------------------------------------
    def kill_group(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal the process group this deployment started under ``name`` (by its PID)."""
        process = self.processes[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)

    def stop(self) -> None:
        """Stop every process group started here, the jobs' ranks, then remove the folder."""
        airflow_parts = [
            name
            for name in self.processes
            # a group killed on purpose is gone: never signal its PID again
            if name not in ("postgres", "redis") and not name.startswith("stopped-")
        ]
        self._stop_groups(airflow_parts, signal.SIGTERM, grace=20)
        self._stop_ranks()
        # then the services they used; SIGINT is Postgres's fast shutdown
        self._stop_groups([name for name in ("redis", "postgres") if name in self.processes],
                          signal.SIGINT, grace=30)  # fmt: skip
        shutil.rmtree(self.home, ignore_errors=True)

    def _stop_groups(self, names: list[str], sig: signal.Signals, grace: float) -> None:
        """Signal each group, give them ``grace`` seconds together, then SIGKILL what is left."""
        for name in names:
            self.kill_group(name, sig)
        deadline = time.monotonic() + grace
        for name in names:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.processes[name].popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            self.kill_group(name, signal.SIGKILL)  # whatever is left of the group
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.processes[name].popen.wait(timeout=10)

    def _stop_ranks(self) -> None:
        """Stop the jobs under the jobs root, then any rank left (they run in their own sessions)."""
        if self.jobs_root.exists():
            from iroh_tinker.cloud import JobManager

            manager = JobManager(root=self.jobs_root)
            for state in manager.jobs():
                try:
                    if manager.status(state.name).status == "running":
                        manager.stop(state.name)
                except Exception as exc:  # keep stopping the others
                    print(f"could not stop job {state.name}: {exc}", file=sys.stderr)
        for pid in processes_under(self.jobs_root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    # -- REST API v2 -------------------------------------------------------------
    def _read_password(self) -> str | None:
        path = self.home / "passwords.json"
        if not path.exists():
            return None
        return json.loads(path.read_text()).get(ADMIN)

    def _api_is_healthy(self) -> bool:
        self.check_alive()
        response = httpx.get(f"{self.api_url}/api/v2/monitor/health", timeout=10)
        return response.status_code == 200

    def token(self) -> str:
        """A JWT from ``POST /auth/token`` (the REST API v2 login), fetched once."""
        if not self._token:
            response = httpx.post(
                f"{self.api_url}/auth/token",
                json={"username": ADMIN, "password": self.password},
                timeout=30,
            )
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call ``/api/v2/<path>`` with the JWT; the decoded JSON answer."""
        response = httpx.request(
            method,
            f"{self.api_url}/api/v2/{path}",
            headers={"Authorization": f"Bearer {self.token()}"},
            timeout=60,
            **kwargs,
        )
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.content else None

    def check_alive(self) -> None:
        """Fail at once, with its log, when a component this deployment started has exited."""
        for name, process in self.processes.items():
            if not process.alive() and not name.startswith("stopped-"):
                raise ComponentExited(f"{name} (pid {process.pid}) exited:\n{process.tail()}")

    def wait_for_dags(self, dag_ids: list[str], timeout: float = 240) -> None:
        """Wait until the dag-processor has registered every DAG, then unpause them."""

        def registered() -> bool:
            self.check_alive()
            known = {
                dag["dag_id"] for dag in self.api("GET", "dags", params={"limit": 100})["dags"]
            }
            return set(dag_ids) <= known

        wait_until(f"DAGs {dag_ids} registered", registered, timeout=timeout, interval=2)
        for dag_id in dag_ids:
            self.api("PATCH", f"dags/{dag_id}", json={"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Trigger a run through the REST API; its run id."""
        run = self.api(
            "POST", f"dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}}
        )
        return str(run["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}")["state"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300) -> str:
        """Wait until the run ends; its final state."""

        def ended() -> str | None:
            self.check_alive()
            state = self.run_state(dag_id, run_id)
            return state if state in ("success", "failed") else None

        try:
            return str(wait_until(f"{dag_id} run {run_id} to end", ended, timeout, interval=2))
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.task_instances(dag_id, run_id)}") from None

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        """The run's task instances by task id (state, hostname, queue, dates, try number)."""
        answer = self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti for ti in answer["task_instances"]}

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        return {task: ti["state"] for task, ti in self.task_instances(dag_id, run_id).items()}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """An XCom value through the REST API (deserialized)."""
        entry = self.api(
            "GET",
            f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
            params={"deserialize": "true", "stringify": "false"},
        )
        return entry["value"]

    def diagnostics(self) -> str:
        """The tail of every component's log, for a failing assertion."""
        return "\n\n".join(f"== {name}\n{proc.tail(25)}" for name, proc in self.processes.items())


def processes_under(folder: Path) -> list[int]:
    """PIDs of the rank processes whose ``IROH_TINKER_JOB_DIR`` is ``folder`` or inside it."""
    exact = f"IROH_TINKER_JOB_DIR={folder}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(item == exact or item.startswith(exact + b"/") for item in environ):
            found.append(int(entry.name))
    return found
