"""What the pages read besides the state Variables, on the API server, at request time.

The job now (launch record and iroh-tinker, through the ``elasticgrid_default`` connection's
jobs root), the job a task instance checked, which task made each launch, and a rank's log.
Nothing here raises: a source that cannot be read gives an answer that says so. The rules:
docs/ui-audit.md ("A job's page").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from elasticgrid_provider.core.job import JobStatus
from elasticgrid_provider.core.launch_record import LaunchPhase
from elasticgrid_provider.hooks.job_machines import part_machines
from elasticgrid_provider.plugins.jobs import as_dict, one_line

LAUNCH_XCOM_KEY = "job"
RETURN_XCOM_KEY = "return_value"
LOG_TAIL_LINES = 200
LAUNCH_ROWS_READ = 500  # the newest launch XComs searched for a job's launches


def connection_hook() -> Any:
    """The ``elasticgrid_default`` connection's hook (build one per request: it reads the
    connection once)."""
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

    return ElasticGridHook()


def live_status(job_name: str, hook: Any = None) -> dict[str, Any]:
    """The job now: ``status``, ``nodes``, ``cost_per_hour`` (of the placement it runs),
    ``launch_id``, ``launched_at``, ``launch_state`` (the launch record's phase; a launch
    still recorded ``running`` whose parts all ended reads as the job's end, ``done``),
    ``down_reason``, ``parts`` (name, provider, nodes, status, ranks, error), ``machines``
    (each part's cloud instances, :mod:`~elasticgrid_provider.hooks.job_machines`) and
    ``machine_errors``; or ``error``."""
    try:
        hook = hook or connection_hook()
        snapshot = hook.job_store.job_snapshot(job_name)
    except Exception as exc:  # the page shows the last check's view instead
        return {"error": f"the live status cannot be read here: {one_line(exc)}"}
    if snapshot is None:
        return {"error": f"no launch record of this job under {hook.jobs_root} on the API server"}
    manifest = snapshot.manifest
    status = snapshot.status
    try:
        launched_at: float | None = datetime.fromisoformat(manifest.launched_at).timestamp()
    except ValueError:
        launched_at = None
    if manifest.state is LaunchPhase.DOWN and not status.is_terminal:
        status = JobStatus.FAILED
    phase = manifest.state.value
    if status.is_terminal and not manifest.state.is_terminal:
        phase = status.value  # nobody rewrote the record when the job ended on its own
    per_node = manifest.procs_per_node
    machines, machine_errors = part_machines(hook.jobs_root, [part.name for part in snapshot.parts])
    return {
        "status": status.value,
        "nodes": snapshot.nodes,
        "cost_per_hour": manifest.placement.cost_per_hour,
        "launch_id": manifest.launch_id,
        "launched_at": launched_at,
        "launch_state": phase,
        "down_reason": manifest.down_reason,
        "parts": [
            {
                "name": part.name,
                "provider": part.provider,
                "nodes": part.nodes,
                "status": part.status,
                "ranks": part.nodes * per_node,
                "error": part.last_error,
            }
            for part in snapshot.parts
        ],
        "machines": machines,
        "machine_errors": machine_errors,
        "error": None,
    }


def rank_log(job_name: str, part_name: str, rank: int) -> tuple[str | None, str]:
    """The newest lines of ``rank``'s log of ``part_name`` (a part of the job's current launch),
    or None and why not."""
    try:
        hook = connection_hook()
        manifest = hook.job_store.read_manifest(job_name)
        if manifest is None:
            return None, "this job has no launch record on the API server"
        part = next((p for p in manifest.parts if p.name == part_name), None)
        if part is None:
            return None, f"part {part_name!r} is not in the job's current launch"
        if not 0 <= rank < part.nodes * manifest.procs_per_node:
            return None, f"rank {rank} is not a rank of part {part_name!r}"
        text = hook.job_manager.logs(part_name, rank=rank, tail=LOG_TAIL_LINES)
    except Exception as exc:  # the page says why
        return None, f"the log cannot be read here: {one_line(exc)}"
    return str(text), ""


def _deserialized(row: Any) -> Any:
    from airflow.models.xcom import XComModel

    try:
        return XComModel.deserialize_value(row)
    except Exception:  # another operator's value: not ours
        return None


def checked_job(dag_id: str, task_id: str, run_id: str, map_index: int) -> str | None:
    """The job that task instance checked or launched: its rendered ``job_name`` field, else
    the ``job_name`` of the decision it pushed; None when neither says."""
    try:
        from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rendered = session.scalar(
                select(Rendered.rendered_fields).where(
                    Rendered.dag_id == dag_id,
                    Rendered.task_id == task_id,
                    Rendered.run_id == run_id,
                    Rendered.map_index == map_index,
                )
            )
            name = as_dict(rendered).get("job_name")
            if isinstance(name, str) and name:
                return name
            rows = session.scalars(
                select(XComModel).where(
                    XComModel.dag_id == dag_id,
                    XComModel.task_id == task_id,
                    XComModel.run_id == run_id,
                    XComModel.map_index == map_index,
                    XComModel.key.in_((RETURN_XCOM_KEY, LAUNCH_XCOM_KEY)),
                )
            ).all()
            for row in rows:
                value = as_dict(_deserialized(row))
                name = value.get("job_name") or as_dict(value.get("context")).get("job_name")
                if isinstance(name, str) and name:
                    return name
    except Exception:  # then every job's history is searched
        return None
    return None


def launch_tasks(job_name: str, dag_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{launch_id: {"dag_id", "run_id", "task_id", "map_index"}}``: the task of each launch of
    ``job_name`` in those DAGs (newest launches first read); empty when none can be read."""
    if not dag_ids:
        return {}
    found: dict[str, dict[str, Any]] = {}
    try:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.scalars(
                select(XComModel)
                .where(XComModel.key == LAUNCH_XCOM_KEY, XComModel.dag_id.in_(dag_ids))
                .order_by(XComModel.timestamp.desc())
                .limit(LAUNCH_ROWS_READ)
            ).all()
            for row in rows:
                value = as_dict(_deserialized(row))
                launch_id = value.get("launch_id")
                if value.get("job_name") == job_name and isinstance(launch_id, str):
                    found.setdefault(
                        launch_id,
                        {
                            "dag_id": row.dag_id,
                            "run_id": row.run_id,
                            "task_id": row.task_id,
                            "map_index": row.map_index,
                        },
                    )
    except Exception:  # the launch ids still show, without their task
        return found
    return found
