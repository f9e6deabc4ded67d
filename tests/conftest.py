"""Test session setup: a private Airflow home with a real SQLite metadata DB.

The environment is set here, before anything imports Airflow, so no test ever
touches the developer's own ``AIRFLOW_HOME`` or iroh-tinker job folder. The
database is migrated once per run, and only when a test asks for it.

``make test`` runs the suite on pytest-xdist workers. Each worker imports
this module itself, so each has its own session folder: its own Airflow home
and SQLite metadata DB (a copy of one migrated template), iroh-tinker home,
Fernet key and session marker
(``ELASTICGRID_TEST_SESSION``, inherited by every process it starts, so
:func:`tests.job_processes.job_ranks` never counts another worker's ranks
of a job with the same name). Every test's jobs live under its own
``tmp_path``; servers bind port 0. So any test may run on any worker, next to
any other.

Tests write only in temporary folders. A guard checks it: every test fails
when the project tree gained an entry while it ran, and the session fails
when the tree gained one by its end (a rank process may write after its test
ended). Interpreter and tool caches (``__pycache__``, ``.pytest_cache``,
virtualenvs) are not counted; Hypothesis keeps its example database in the
session's temporary folder instead of ``.hypothesis``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
SESSION_HOME = Path(tempfile.mkdtemp(prefix="elasticgrid-tests-"))
# the folder of the one migrated metadata DB that every worker of the run copies: set by the
# first process (the xdist controller, or pytest alone), inherited by the workers it starts
TEMPLATE_DB_HOME = Path(
    os.environ.setdefault("ELASTICGRID_TEST_TEMPLATE_DB", str(SESSION_HOME / "template-db"))
)


# Each file of tests/dags is a DAG bundle of its own, as a deployment may configure several:
# dag.test() parses every DAG of the bundle that holds the DAG it runs, and writes them to the
# DB, on every call. One bundle per file keeps that to the file's few DAGs (about 100 in all).
# A bundle is a folder, so each holds a link to its file: the file stays where tests import it.
DAG_BUNDLES = SESSION_HOME / "dag-bundles"


def dag_bundle_name(dag_file: str) -> str:
    """The bundle of ``tests/dags/<dag_file>`` (its folder is ``DAG_BUNDLES / <stem>``)."""
    return f"tests-{Path(dag_file).stem}"


def _dag_bundle_config() -> str:
    """``[dag_processor] dag_bundle_config_list``: one local bundle per file of tests/dags."""
    bundles = []
    for dag_file in sorted((TESTS / "dags").glob("*.py")):
        folder = DAG_BUNDLES / dag_file.stem
        folder.mkdir(parents=True)
        (folder / dag_file.name).symlink_to(dag_file)
        bundles.append(
            {
                "name": dag_bundle_name(dag_file.name),
                "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {"path": str(folder), "refresh_interval": 0},
            }
        )
    return json.dumps(bundles)


os.environ.update(
    {
        "AIRFLOW_HOME": str(SESSION_HOME / "airflow"),
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": _dag_bundle_config(),
        # one key for every process of the session: Variables that an `airflow dags test`
        # subprocess encrypts must decrypt in this process
        "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(TESTS / "dags"),
        "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "True",
        "IROH_TINKER_HOME": str(SESSION_HOME / "iroh"),
        "IROH_TINKER_RESTART_BACKOFF": "0",
        # inherited by every process of this session (ranks included): tests/job_processes.py
        "ELASTICGRID_TEST_SESSION": str(SESSION_HOME),
    }
)
os.environ.pop("AIRFLOW_CONN_ELASTICGRID_DEFAULT", None)
# Bytecode caches on, whatever the shell says: with PYTHONDONTWRITEBYTECODE set (as on
# some CI images) each of the run's ~4,000 processes (workers, `airflow` commands,
# launchers, ranks) compiles the provider and the tests anew: about a fifth of the CPU.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

PROJECT = TESTS.parent
# caches that Python and pytest keep by design (and .git); not written by the code under test
CACHE_FOLDERS = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


def tree_entries(root: Path) -> frozenset[str]:
    """Every file and folder under ``root`` (relative paths), caches and virtualenvs left out.

    Run twice per test, so it stays on plain strings and ``os.scandir``.
    """
    entries: set[str] = set()
    folders = [(str(root), "")]
    while folders:
        folder, relative = folders.pop()
        with os.scandir(folder) as scan:
            for entry in scan:
                name = f"{relative}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    if (
                        entry.name in CACHE_FOLDERS
                        or entry.name.endswith(".egg-info")
                        or os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))
                    ):
                        continue
                    folders.append((entry.path, f"{name}/"))
                entries.add(name)
    return frozenset(entries)


def new_entries_message(before: frozenset[str], after: frozenset[str], when: str) -> str | None:
    """One sentence naming what appeared in the project tree, or None when nothing did."""
    added = sorted(after - before)
    if not added:
        return None
    shown = ", ".join(added[:10]) + (f" and {len(added) - 10} more" if len(added) > 10 else "")
    return f"{when} wrote into the project tree {PROJECT} (tests must write only in temp folders): {shown}"


_SESSION_START_TREE = tree_entries(PROJECT)


def _use_a_temporary_hypothesis_database() -> None:
    """Hypothesis keeps examples and caches under the session's temp folder, not ./.hypothesis."""
    try:
        from hypothesis import settings
        from hypothesis.configuration import set_hypothesis_home_dir
        from hypothesis.database import DirectoryBasedExampleDatabase
    except ImportError:  # pragma: no cover - hypothesis is a dev dependency
        return
    home = SESSION_HOME / "hypothesis"
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(home)
    set_hypothesis_home_dir(home)
    database = DirectoryBasedExampleDatabase(str(home / "examples"))
    settings.register_profile("elasticgrid-tests", database=database)
    settings.load_profile("elasticgrid-tests")


_use_a_temporary_hypothesis_database()


def airflow_command() -> list[str]:
    """The ``airflow`` CLI of the interpreter running the tests."""
    script = Path(sys.executable).with_name("airflow")
    return [str(script)] if script.exists() else [sys.executable, "-m", "airflow"]


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The session's SQLite metadata DB, migrated; returns the Airflow home.

    ``airflow db migrate`` runs once per ``pytest`` run, in the first worker
    that needs it, into a template DB (a file lock makes the other workers
    wait for it); each worker copies the template into its own Airflow home
    with SQLite's backup API, which is safe even if this process already
    opened its (empty) DB.
    """
    import fcntl
    import sqlite3

    home = Path(os.environ["AIRFLOW_HOME"])
    template = TEMPLATE_DB_HOME / "airflow.db"
    TEMPLATE_DB_HOME.mkdir(parents=True, exist_ok=True)
    with (TEMPLATE_DB_HOME / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            result = subprocess.run(
                [*airflow_command(), "db", "migrate"],
                env={**os.environ, "AIRFLOW_HOME": str(TEMPLATE_DB_HOME / "building")},
                capture_output=True,
                text=True,
                check=False,
            )
            assert result.returncode == 0, result.stdout + result.stderr
            (TEMPLATE_DB_HOME / "building" / "airflow.db").rename(template)
    home.mkdir(parents=True, exist_ok=True)
    with (
        contextlib.closing(sqlite3.connect(template)) as source,
        contextlib.closing(sqlite3.connect(home / "airflow.db")) as target,
    ):
        source.backup(target)
    return home


@pytest.fixture
def jobs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private JobManager root, configured through the ``elasticgrid_default`` connection.

    Any job still running at the end of the test is stopped, so no test leaves
    processes behind, and the jobs' scale-state Variables are deleted with the root.
    """
    root = tmp_path / "jobs"
    root.mkdir()
    monkeypatch.setenv(
        "AIRFLOW_CONN_ELASTICGRID_DEFAULT",
        json.dumps({"conn_type": "elasticgrid", "extra": {"jobs_root": str(root)}}),
    )
    yield root
    from iroh_tinker.cloud import JobManager

    from tests.job_processes import stop_ranks_under

    manager = JobManager(root=root)
    for state in manager.jobs():
        if manager.status(state.name).status == "running":
            manager.stop(state.name)
    stop_ranks_under(root)  # and those iroh-tinker never recorded (a launch killed mid-start)
    _forget_scale_states()


def _forget_scale_states() -> None:
    """Delete the scale-state Variables: they belong to jobs under a root that is now gone.

    A state Variable without its job's files makes a launch refuse to start a
    second copy (the jobs root looks unshared), so a later test reusing a job
    name would otherwise depend on which tests ran before it.
    """
    from airflow.models import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import delete
    from sqlalchemy.exc import OperationalError

    from elasticgrid_provider.core.state import state_variable_key

    try:
        with create_session() as session:
            session.execute(delete(Variable).where(Variable.key.like(state_variable_key("%"))))
    except OperationalError:  # the session's metadata DB was never migrated: nothing to forget
        pass


@pytest.fixture
def ssh_hosts_factory(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Start SSH test hosts (:class:`tests.ssh_hosts.SshTestHosts`): ``factory(count=2)``.

    The hosts cannot see the test's ``tmp_path`` (the jobs root lives there);
    ``tmp_path / "pool"`` is their shared ``/srv/pool``. Every host is gone at
    the test's end, and so are this machine's ssh connections to them.
    """
    from elasticgrid_provider.engines.ssh import close_connections
    from tests.ssh_hosts import SshTestHosts, missing_requirement

    problem = missing_requirement()
    if problem:
        pytest.fail(problem, pytrace=False)
    started: list[SshTestHosts] = []

    def factory(count: int = 2) -> SshTestHosts:
        hosts = SshTestHosts(count, hide=[tmp_path], pool=tmp_path / "pool")
        started.append(hosts.__enter__())
        return hosts

    yield factory
    for hosts in started:
        try:
            close_connections(hosts.params())
        finally:
            hosts.close()


@pytest.fixture
def ssh_hosts(ssh_hosts_factory: Callable[..., Any]) -> Any:
    """Two SSH test hosts (:func:`ssh_hosts_factory`)."""
    return ssh_hosts_factory(2)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on a free loopback port with the bucket ``S3_BUCKET``
    (tests/moto_server.py); each test keeps to a prefix of its own."""
    from moto.server import ThreadedMotoServer

    from tests.moto_server import S3_BUCKET, s3_client

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    s3_client(endpoint).create_bucket(Bucket=S3_BUCKET)
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture(scope="session", autouse=True)
def _remove_session_home() -> Iterator[None]:
    yield
    shutil.rmtree(SESSION_HOME, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the ``long`` tests (15 s or more each) first, then the other Airflow tests
    (seconds each), then the pure ones (milliseconds each).

    A stable sort, the same in every xdist worker (they must collect the same
    order): the workers share out the long tests first and the short ones fill
    the gaps at the end, so no worker is left alone with a long test.
    """
    items.sort(
        key=lambda item: (
            item.get_closest_marker("long") is None,
            item.get_closest_marker("airflow") is None
            and "airflow_db" not in getattr(item, "fixturenames", ()),
        )
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session folder in every process (the xdist controller runs no fixtures)."""
    shutil.rmtree(SESSION_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def _the_project_tree_stays_unchanged() -> Iterator[None]:
    """Fail the test that made the project tree gain a file or folder."""
    before = tree_entries(PROJECT)
    yield
    message = new_entries_message(before, tree_entries(PROJECT), "this test")
    if message:
        pytest.fail(message, pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when the project tree gained entries (also after their test ended)."""
    message = new_entries_message(_SESSION_START_TREE, tree_entries(PROJECT), "the test session")
    if message:
        session.config.get_terminal_writer().line(f"\nERROR: {message}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
