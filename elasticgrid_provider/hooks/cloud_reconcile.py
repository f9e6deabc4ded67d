"""The reconcile: no instance outlives the launch that started it.

:func:`reconcile_instances` (at each launch and in each scale check) terminates the instances
tagged with a job of the jobs root whose launch is not, or no longer, the job's running one.
Every launch keeps its spec folder, so the candidate launches, and the AWS connections and
regions to ask, are known without asking the cloud. The rules: docs/clouds.md ("What the
engine does", "What it costs when things fail: nothing left running").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from elasticgrid_provider.core.errors import CloudApiError, ElasticGridError, InstancesLeftError
from elasticgrid_provider.hooks.job_store import JobStore
from elasticgrid_provider.hooks.remote_parts import ec2_spec

if TYPE_CHECKING:
    from elasticgrid_provider.engines.instances import InstanceApi

MAX_FILTER_VALUES = 200  # EC2's limit of values in one filter


def _jobs(store: JobStore, job_names: Iterable[str] | None) -> list[str]:
    if job_names is not None:
        return list(job_names)
    root = store.jobs_root
    if not root.is_dir():
        return []
    return sorted(entry.name for entry in root.iterdir() if (entry / "specs").is_dir())


def _clouds(store: JobStore, job: str) -> set[tuple[str, str | None]]:
    """The (AWS connection, region) pairs of the job's ec2 parts, over all its launches."""
    clouds = set()
    for launch_id in store.launch_ids(job):
        for spec_path in store.spec_files(job, launch_id):
            found = ec2_spec(spec_path)
            if found is not None:
                clouds.add((found[0].aws_conn_id, found[1]))
    return clouds


def reconcile_instances(store: JobStore, job_names: Iterable[str] | None = None) -> list[str]:
    """Terminate the instances of the jobs root's jobs (or of ``job_names``) whose launch is not
    the job's current one, or is over (:func:`_stale`); the ids asked to terminate."""
    from elasticgrid_provider.engines.ec2_launch import launch_tags
    from elasticgrid_provider.engines.instances import (
        Ec2Instances,
        terminate_tagged,
    )

    by_cloud: dict[tuple[str, str | None], list[str]] = {}
    current: dict[str, tuple[str, bool]] = {}
    candidates: dict[str, list[str]] = {}  # per job: its launches that may not run any more
    for job in _jobs(store, job_names):
        try:
            manifest = store.read_manifest(job)
        except (OSError, ValueError, ElasticGridError):
            continue  # a record that cannot be read is left to the job's own tasks
        if manifest is None:
            continue
        current[job] = (manifest.launch_id, manifest.state.is_terminal)
        candidates[job] = [
            launch for launch in store.launch_ids(job) if _stale(launch, *current[job])
        ]
        if not candidates[job]:
            continue  # only its current launch was ever started: nothing to ask the cloud
        for cloud in _clouds(store, job):
            by_cloud.setdefault(cloud, []).append(job)
    ended: list[str] = []
    for (conn_id, region), jobs in sorted(by_cloud.items(), key=str):
        api = Ec2Instances(conn_id, region)
        stale: dict[tuple[str, str], list[str]] = {}
        launches = sorted({launch for job in jobs for launch in candidates[job]})
        try:  # only the candidate launches' live instances
            for instance_id, (job, launch) in _live_instances(api, launches, jobs).items():
                if _stale(launch, *current[job]):
                    stale.setdefault((job, launch), []).append(instance_id)
        except CloudApiError as error:
            store.log.error(
                "Reconcile of EC2 instances (%s, %s) failed: %s", conn_id, region, error
            )
            continue
        for (job, launch), ids in sorted(stale.items()):
            now = current[job][0]
            why = f"launch {now} is over" if launch == now else f"its current launch is {now}"
            store.log.info(
                "Reconcile: terminating instance(s) %s of job %s launch %s (%s).",
                ", ".join(sorted(ids)),
                job,
                launch,
                why,
            )
            what = f"the instances of job {job!r} launch {launch}"
            try:
                tags = launch_tags(job, None, launch)
                ended += terminate_tagged(api, tags, what, found_alive=ids)
            except InstancesLeftError as error:
                store.log.error("Reconcile: %s; the next reconcile tries again.", error)
    return ended


def _live_instances(
    api: InstanceApi, launches: list[str], jobs: list[str]
) -> dict[str, tuple[str, str]]:
    """Instance id -> (job, launch) of the live instances tagged with one of ``launches`` and
    one of ``jobs``. DescribeTags names the instances carrying those launches (any state),
    and, only when there are some, those carrying those jobs; DescribeInstanceStatus tells
    the state of the ones carrying both. Each asks the cloud one look over its tags, where a
    tag filter on DescribeInstances is tested instance by instance (on moto, by scanning
    every tag it holds, for each instance)."""
    from elasticgrid_provider.core.ec2_params import TAG_JOB, TAG_LAUNCH
    from elasticgrid_provider.engines.instances import ENDING, LIVE_STATES

    launch_of: dict[str, str] = {}
    for start in range(0, len(launches), MAX_FILTER_VALUES):
        launch_of.update(api.tagged(TAG_LAUNCH, launches[start : start + MAX_FILTER_VALUES]))
    if not launch_of:
        return {}
    job_of: dict[str, str] = {}
    for start in range(0, len(jobs), MAX_FILTER_VALUES):
        job_of.update(api.tagged(TAG_JOB, jobs[start : start + MAX_FILTER_VALUES]))
    both = [instance_id for instance_id in launch_of if instance_id in job_of]
    states = api.states(both) if both else {}
    return {
        instance_id: (job_of[instance_id], launch_of[instance_id])
        for instance_id, state in states.items()
        if state in LIVE_STATES and state not in ENDING
    }


def _stale(launch: str, current: str, over: bool) -> bool:
    """An older launch than the current one, or the current one once it is over; a newer one
    (being written by another task) never."""
    return launch < current or (launch == current and over)


def reconcile_quietly(store: JobStore, job_names: Iterable[str] | None = None) -> Any:
    """:func:`reconcile_instances` for a caller that must go on (a launch, a check): an
    unexpected error is logged, never raised."""
    try:
        return reconcile_instances(store, job_names)
    except Exception as error:  # a connection that cannot be read, a cloud that is down
        store.log.error("Reconcile of EC2 instances failed: %s", error)
        return []
