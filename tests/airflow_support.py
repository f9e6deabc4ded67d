"""Running DAGs from ``tests/dags`` for real, and reading what they left in the DB.

``run_dag`` calls ``dag.test()`` on a DAG loaded from its file (a DAG built
inside a test function is not serialized and cannot run). Airflow 3.3.2's
``dag.test()`` crashes at the end of a *successful* run of a DAG that sets
``deadline=`` (upstream issue #73428: ``'dict' object has no attribute
'hex'``): the tasks have run, the run is left ``running``. ``run_dag``
recognises exactly that error, reports it in ``hit_deadline_defect`` and
lets the test assert on the task states, so the defect stays visible: a test
of a deadline DAG asserts that it was hit, and fails once upstream fixes it.

``start_dags_test`` runs a DAG as ``airflow dags test`` in a process of its
own, for tests that kill it or run two at once; ``wait_for`` waits for a point
of such a run, ``kill_on_exit`` makes sure it ends with the test's block, and
``sigterm_when`` kills it at a point as a worker's supervisor would.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True)
class DagRunResult:
    """The run's id and state, each task's state, and whether the deadline defect hit."""

    dag_id: str
    run_id: str
    state: str
    logical_date: Any
    run_after: Any
    task_states: dict[str, str]
    hit_deadline_defect: bool

    def xcom(self, task_id: str, key: str = "return_value") -> Any:
        """The XCom a task of this run pushed (None when it pushed none)."""
        return read_xcom(self.dag_id, self.run_id, task_id, key)

    def rendered_fields(self, task_id: str) -> dict[str, Any]:
        """A task's rendered template fields as stored for the UI's "Rendered Templates"."""
        from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            row = session.scalars(
                select(Rendered).where(
                    Rendered.dag_id == self.dag_id,
                    Rendered.run_id == self.run_id,
                    Rendered.task_id == task_id,
                )
            ).one()
            return dict(row.rendered_fields)


def load_dag(dag_id: str) -> Any:
    """The DAG ``dag_id`` from its file in tests/dags, parsed anew the way Airflow parses it.

    Anew on each call: ``dag.test()`` on a DAG object used before keeps that run's conf.
    """
    from airflow.dag_processing.dagbag import DagBag

    bundle = _bundle_of(dag_id)
    bag = DagBag(dag_folder=str(bundle))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag(dag_id)
    assert dag is not None, f"no DAG {dag_id!r} in {bundle}"
    return dag


@functools.cache
def _bundles_by_dag_id() -> dict[str, Path]:
    """Each test DAG's bundle folder (tests.conftest: one bundle per file of tests/dags)."""
    from airflow.dag_processing.dagbag import DagBag

    from tests.conftest import DAG_BUNDLES

    folders: dict[str, Path] = {}
    for folder in sorted(DAG_BUNDLES.iterdir()):
        bag = DagBag(dag_folder=str(folder))
        assert not bag.import_errors, bag.import_errors
        folders.update(dict.fromkeys(bag.dag_ids, folder))
    return folders


def _bundle_of(dag_id: str) -> Path:
    folders = _bundles_by_dag_id()
    assert dag_id in folders, f"no DAG {dag_id!r} in tests/dags"
    return folders[dag_id]


def run_dag(dag_id: str, run_conf: dict[str, Any] | None = None, dag: Any = None) -> DagRunResult:
    """Run a DAG with ``dag.test()`` and return what happened (see module docstring)."""
    import sqlalchemy.exc

    dag = dag or load_dag(dag_id)
    run_id = None
    hit = False
    try:
        run_id = dag.test(run_conf=run_conf).run_id
    except sqlalchemy.exc.StatementError as exc:
        known = (
            bool(dag.deadline)
            and isinstance(exc.orig, AttributeError)
            and "'dict' object has no attribute 'hex'" in str(exc.orig)
        )
        if not known:
            raise
        hit = True
    return read_run(dag_id, run_id, hit)


def read_run(dag_id: str, run_id: str | None = None, hit: bool = False) -> DagRunResult:
    """A run of ``dag_id`` (the latest when ``run_id`` is None) and its tasks' states."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(DagRun).where(DagRun.dag_id == dag_id)
        query = query.where(DagRun.run_id == run_id) if run_id else query.order_by(DagRun.id.desc())
        run = session.scalars(query).first()
        assert run is not None, f"no run of {dag_id}"
        task_states = {
            ti.task_id: str(ti.state)
            for ti in session.scalars(
                select(TaskInstance).where(
                    TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id
                )
            )
        }
        return DagRunResult(
            dag_id, run.run_id, str(run.state), run.logical_date, run.run_after, task_states, hit
        )


def read_xcom(dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
    """An XCom value from the metadata DB, deserialized."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.task_id == task_id,
                XComModel.key == key,
            )
        ).first()
        return None if row is None else XComModel.deserialize_value(row)


def read_variable(key: str) -> Any:
    """A JSON Variable from the metadata DB (None when absent)."""
    import json

    from airflow.models.variable import Variable as VariableModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(select(VariableModel).where(VariableModel.key == key)).first()
        return None if row is None else json.loads(row.val)


def start_dags_test(
    dag_file: str,
    dag_id: str,
    run_conf: dict[str, Any],
    *,
    logical_date: str | None = None,
    output: IO[str],
) -> subprocess.Popen[str]:
    """Start ``airflow dags test`` of ``dag_id`` in ``tests/dags/<dag_file>`` in its own process.

    Its output (stderr too) goes to the file ``output``, never a pipe: a run whose
    output outgrows a pipe nobody reads while it runs would block, holding the
    job's lock.
    """
    # imported here: importing conftest sets up a test session's Airflow home, which a
    # benchmark importing this module (benchmarks/bench_recovery.py) must not get
    from tests.conftest import DAG_BUNDLES, TESTS, airflow_command, dag_bundle_name

    return subprocess.Popen(
        [
            *airflow_command(),
            "dags",
            "test",
            dag_id,
            *([logical_date] if logical_date else []),
            "--conf",
            json.dumps(run_conf),
            "--bundle-name",
            dag_bundle_name(dag_file),
            "--dagfile-path",
            str(DAG_BUNDLES / Path(dag_file).stem / dag_file),
        ],
        env={**os.environ, "PYTHONPATH": str(TESTS.parent)},
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(
    condition: Callable[[], object],
    what: str,
    process: subprocess.Popen[str] | None = None,
    timeout: float = 240.0,
) -> None:
    """Wait until ``condition()`` holds; fail if ``process`` ends first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert process is None or process.poll() is None, f"airflow dags test ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.1)


@contextlib.contextmanager
def kill_on_exit(process: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """Kill ``process`` (and reap it) when the block ends with the process still running."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def sigterm_when(
    process: subprocess.Popen[str],
    log: IO[str],
    condition: Callable[[], object],
    what: str,
    *,
    timeout: float = 240.0,
    grace: float = 240.0,
) -> str:
    """SIGTERM ``process`` once ``condition()`` holds (see :func:`wait_for`); its output.

    The process has ``grace`` seconds to end; it is killed when it has not, or when the
    wait failed. ``log`` is the file :func:`start_dags_test` wrote its output to.
    """
    with kill_on_exit(process):
        wait_for(condition, what, process, timeout)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=grace)
    log.seek(0)
    return log.read()
