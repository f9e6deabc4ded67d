"""A failed read of the state is an error, never "no state": a real Postgres, a real outage.

The metadata DB is a real Postgres (started by :class:`integration.deployment.Deployment`'s
own code, nothing else of the deployment), reached through a TCP relay in this process.
The checks are real ``airflow dags test`` processes of ``tests/dags`` on a real local job.
When armed, the relay cuts the connection in the middle of exactly one query: the read of
the job's state Variable. Airflow's API server logs "Unable to retrieve variable from
secrets backend (MetastoreBackend)" and answers "not found"; the check must fail with one
sentence and leave the stored state (revision, history) as it was, and the next check, the
relay disarmed, must carry on from it.

Run with ``make integration`` (or ``.venv/bin/python -m pytest integration/test_state_outage.py``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import selectors
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from elasticgrid_provider.core.state import state_variable_key
from integration.deployment import ROOT, VENV_BIN, Deployment
from tests.ports import free_port

JOB = "pg-blip"
KEY = state_variable_key(JOB)


class CuttingRelay:
    """A TCP relay to Postgres that, while armed, cuts the connection whose client sends a
    query with every one of ``pattern``'s pieces (once; then it relays again)."""

    def __init__(self, target_port: int, pattern: tuple[bytes, ...]) -> None:
        self.target_port = target_port
        self.pattern = pattern
        self.armed = False
        self.cuts: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ)
        peers: dict[socket.socket, socket.socket] = {}
        while not self._stopping.is_set():
            for key, _ in selector.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self.listener:
                    client, _ = self.listener.accept()
                    server = socket.create_connection(("127.0.0.1", self.target_port))
                    peers[client], peers[server] = server, client
                    selector.register(client, selectors.EVENT_READ, "client")
                    selector.register(server, selectors.EVENT_READ, "server")
                    continue
                other = peers.get(sock)
                if other is None:
                    continue
                data = b""
                with contextlib.suppress(OSError):  # a reset link reads as closed
                    data = sock.recv(65536)
                cut = (
                    key.data == "client"
                    and self.armed
                    and all(piece in data for piece in self.pattern)
                )
                if cut:  # the outage: this query never gets an answer, the link drops
                    self.armed = False
                    self.cuts.append(data)
                if not data or cut:
                    for end in (sock, other):
                        selector.unregister(end)
                        peers.pop(end, None)
                        end.close()
                    continue
                other.sendall(data)
        for sock in list(peers):
            sock.close()
        self.listener.close()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)


@pytest.fixture(scope="module")
def postgres() -> Iterator[Deployment]:
    """Only the deployment's Postgres, as the ``postgres`` user, on a free port."""
    home = Path(tempfile.mkdtemp(prefix="elasticgrid-pg-outage-"))
    home.chmod(0o755)  # the postgres user must reach its cluster folder
    database = Deployment(home=home, ports={"postgres": free_port()})
    try:
        database._start_postgres()
        yield database
    finally:
        database.stop()


@pytest.fixture(scope="module")
def relay(postgres: Deployment) -> Iterator[CuttingRelay]:
    running = CuttingRelay(
        postgres.ports["postgres"], (b"SELECT", b"variable.val", f"'{KEY}'".encode())
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def airflow_env(postgres: Deployment, relay: CuttingRelay) -> dict[str, str]:
    """An Airflow home whose metadata DB is the Postgres behind the relay, migrated."""
    home = postgres.home / "airflow"
    jobs_root = postgres.home / "jobs"
    jobs_root.mkdir()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
            f"postgresql+psycopg2://airflow@127.0.0.1:{relay.port}/airflow"
        ),
        "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "tests" / "dags"),
        "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "True",
        "AIRFLOW_CONN_ELASTICGRID_DEFAULT": json.dumps(
            {"conn_type": "elasticgrid", "extra": {"jobs_root": str(jobs_root)}}
        ),
        "IROH_TINKER_HOME": str(postgres.home / "iroh"),
        "IROH_TINKER_RESTART_BACKOFF": "0",
        "PYTHONPATH": str(ROOT),
    }
    migrate = subprocess.run(
        [str(VENV_BIN / "airflow"), "db", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    return env


def _dags_test(env: dict[str, str], dag_file: str, dag_id: str, conf: dict) -> str:
    """Run ``airflow dags test`` of a DAG in ``tests/dags``; its output."""
    done = subprocess.run(
        [
            str(VENV_BIN / "airflow"),
            "dags",
            "test",
            dag_id,
            "--conf",
            json.dumps(conf),
            "--dagfile-path",
            str(ROOT / "tests" / "dags" / dag_file),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.stdout + done.stderr


def _stored_state(postgres: Deployment, env: dict[str, str]) -> dict | None:
    """The state Variable as Postgres holds it (decrypted), read around the relay."""
    from cryptography.fernet import Fernet

    connection = psycopg2.connect(
        host="127.0.0.1", port=postgres.ports["postgres"], user="airflow", dbname="airflow"
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT val, is_encrypted FROM variable WHERE key = %s", (KEY,))
            row = cursor.fetchone()
    finally:
        connection.close()
    if row is None:
        return None
    value, encrypted = row
    if encrypted:
        value = Fernet(env["AIRFLOW__CORE__FERNET_KEY"].encode()).decrypt(value.encode()).decode()
    return json.loads(value)


def _task_state(postgres: Deployment, dag_id: str) -> str:
    connection = psycopg2.connect(
        host="127.0.0.1", port=postgres.ports["postgres"], user="airflow", dbname="airflow"
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT ti.state FROM task_instance ti JOIN dag_run dr ON dr.run_id = ti.run_id "
                "AND dr.dag_id = ti.dag_id WHERE ti.dag_id = %s AND ti.task_id = 'scale_check' "
                "ORDER BY dr.id DESC LIMIT 1",
                (dag_id,),
            )
            row = cursor.fetchone()
    finally:
        connection.close()
    assert row is not None
    return str(row[0])


def _sample_line(step: int) -> str:
    return json.dumps({"step": step, "duration_s": 1.0, "queue_s": 0.1, "nodes": 1}) + "\n"


def test_a_postgres_outage_during_the_state_read_keeps_the_stored_state(
    postgres: Deployment, relay: CuttingRelay, airflow_env: dict[str, str]
) -> None:
    jobs_root = Path(
        json.loads(airflow_env["AIRFLOW_CONN_ELASTICGRID_DEFAULT"])["extra"]["jobs_root"]
    )
    try:
        output = _dags_test(
            airflow_env, "launch_dags.py", "launch_sleeping", {"job_name": JOB, "nodes": 1}
        )
        assert "Launched job pg-blip" in output, output[-3000:]
        step_log = jobs_root / f"{JOB}--onprem" / "steps.jsonl"
        step_log.write_text("".join(_sample_line(step) for step in range(4)))
        check = {"job_name": JOB}
        for _ in range(2):  # two holds: min_samples is out of reach
            _dags_test(airflow_env, "scale_dags.py", "scale_check_patient", check)
            assert _task_state(postgres, "scale_check_patient") == "skipped"
        stored = _stored_state(postgres, airflow_env)
        assert stored is not None and stored["revision"] == 2
        assert stored["history"][-1]["hold_run"]["count"] == 2

        relay.armed = True
        output = _dags_test(airflow_env, "scale_dags.py", "scale_check_patient", check)
        assert len(relay.cuts) == 1, output[-3000:]  # the outage hit the state read, once
        assert "Unable to retrieve variable from secrets backend" in output  # Airflow's side
        assert _task_state(postgres, "scale_check_patient") == "failed"
        message = output.split("StateReadError: ", 1)[1].splitlines()[0]
        assert message.startswith(
            f"job {JOB!r}'s scale state could not be read, so the check decided and wrote nothing"
        ), message
        assert _stored_state(postgres, airflow_env) == stored  # revision and history kept

        output = _dags_test(airflow_env, "scale_dags.py", "scale_check_patient", check)
        assert _task_state(postgres, "scale_check_patient") == "skipped", output[-3000:]
        resumed = _stored_state(postgres, airflow_env)
        assert resumed is not None and resumed["revision"] == 3
        assert resumed["history"][-1]["hold_run"]["count"] == 3
    finally:
        from iroh_tinker.cloud import JobManager

        manager = JobManager(root=jobs_root)
        for state in manager.jobs():
            if manager.status(state.name).status == "running":
                manager.stop(state.name)
