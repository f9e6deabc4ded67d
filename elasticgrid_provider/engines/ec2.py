"""The provider's ec2 engine: ranks on EC2 instances it starts, and always terminates.

An iroh-tinker ``Engine``, loaded as ``module=elasticgrid_provider.engines.ec2:Ec2Engine`` (its
``name``, so ``JobManager`` rebuilds it from a job's state for ``status``, ``stop`` and
``logs``); params: :class:`~elasticgrid_provider.core.ec2_params.Ec2Params`. It owns the
instances' whole life and runs the ranks on them through the ssh engine (one code path for
ranks on remote machines). Every instance is tagged from RunInstances on and found by tag,
never by memory; the intent is recorded before RunInstances; host keys come per launch through
cloud-init; any failure on the way terminates the part's instances. The rules, and what
terminates the instances on every path: docs/clouds.md ("What the engine does", "Spot",
"What it costs when things fail").
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

from iroh_tinker.cloud.engines.base import ClusterInfo, Engine, Node

from elasticgrid_provider.atomic_files import write_json
from elasticgrid_provider.core.ec2_params import (
    AddressKind,
    Ec2Params,
)
from elasticgrid_provider.core.errors import (
    CloudApiError,
    CloudCapacityError,
    ElasticGridError,
    RemoteHostError,
)
from elasticgrid_provider.core.machines import MACHINES_FILE, Market
from elasticgrid_provider.core.providers import EC2_ENGINE, ENGINE_REFERENCES
from elasticgrid_provider.core.rank_environment import ENV_CHECKPOINT_DIR, ENV_JOB, ENV_LAUNCH_ID
from elasticgrid_provider.core.ssh_params import host_address
from elasticgrid_provider.engines.cloud_init import (
    HostKey,
    user_data,
    write_known_hosts,
)
from elasticgrid_provider.engines.ec2_launch import (
    KNOWN_HOSTS_FILE,
    NO_LAUNCH_ID,
    SSH_PARAMS_FILE,
    client_token,
    launch_tags,
    record_fallback,
    record_intent,
    ssh_engine_params,
)
from elasticgrid_provider.engines.instances import (
    GONE_STATES,
    Ec2Instances,
    Instance,
    InstanceApi,
    RunRequest,
    terminate_tagged,
)
from elasticgrid_provider.engines.ssh import SshEngine
from elasticgrid_provider.engines.ssh_transport import first_error, for_each_host, port_answers

log = logging.getLogger(__name__)

ENGINE_REF = ENGINE_REFERENCES[EC2_ENGINE]
POLL_S = 1.0
FIRST_POLL_S = 0.05  # then doubling up to POLL_S
FIRST_PROBE_S = 0.2  # a TCP connect to a booting host's SSH port, doubling up to MAX_PROBE_S
MAX_PROBE_S = 1.0  # past a round trip: a booting host drops the connect, a new one goes at once
PROBE_INTERVAL_S = 0.05  # from one refused port probe to the next (one SYN, one RST)
RUN_WORKERS = 8  # RunInstances calls in flight at once (after the first)


class _Starting:
    """The instances of a part being started, by node index, and its intent (threads add to
    them; a spot fallback is recorded once)."""

    def __init__(self, folder: Path, intent: dict[str, Any]) -> None:
        self.folder, self.intent = folder, intent
        self._lock = threading.Lock()
        self._by_index: dict[int, list[Instance]] = {}

    def add(self, index: int, instances: list[Instance]) -> None:
        with self._lock:
            self._by_index[index] = instances

    def instances(self) -> list[Instance]:
        with self._lock:
            return [item for index in sorted(self._by_index) for item in self._by_index[index]]

    def fall_back(self, price: float | None, cause: str) -> None:
        with self._lock:
            if self.intent["market"] != str(Market.ON_DEMAND):
                self.intent = record_fallback(self.folder, self.intent, price, cause)


class Ec2Engine(Engine):
    """Ranks on EC2 instances the engine starts and terminates (module docstring)."""

    name = ENGINE_REF

    @classmethod
    def probe(cls) -> bool:
        return SshEngine.probe()

    @property
    def params(self) -> Ec2Params:
        """The spec's params, validated (``ElasticGridError`` naming the field)."""
        cached = self.__dict__.get("_params")
        if cached is None:
            where = f"part {self.spec.name!r} params"
            # iroh-tinker's saved spec (what stop, status and logs rebuild the engine from)
            # moves instance_type and image_id out of params into its own resources fields
            resources = self.spec.resources
            raw = {k: getattr(resources, k) for k in ("instance_type", "image_id")}
            raw = {k: v for k, v in raw.items() if v is not None}
            cached = self.__dict__["_params"] = Ec2Params.parse({**raw, **resources.params}, where)
        return cached

    @property
    def instances(self) -> InstanceApi:
        """The cloud's instances, through the part's AWS connection (built on first use)."""
        cached = self.__dict__.get("_instances")
        if cached is None:
            cached = self.__dict__["_instances"] = Ec2Instances(
                self.params.aws_conn_id, self.region
            )
        return cached

    @property
    def job_name(self) -> str:
        return str(self.spec.envs.get(ENV_JOB) or self.spec.name)

    def record_intent(self, folder: Path) -> dict[str, Any]:
        """Record this launch's intent in the part's folder (:func:`.ec2_launch.record_intent`)."""
        spot = bool(self.spec.resources.use_spot)
        return record_intent(
            folder, self.job_name, self.spec.name, self.launch_id, self.spec.num_nodes, spot
        )

    @property
    def launch_id(self) -> str:
        return str(self.spec.envs.get(ENV_LAUNCH_ID) or NO_LAUNCH_ID)

    @property
    def tags(self) -> dict[str, list[str]]:
        """The tag filter of this launch's part."""
        return launch_tags(self.job_name, self.spec.name, self.launch_id)

    # -- provision ---------------------------------------------------------------------------

    def provision(self, job_dir: str) -> ClusterInfo:
        """Start one instance per node, wait until each runs and answers over SSH (module
        docstring); any failure terminates them all before it is raised."""
        from elasticgrid_provider.engines.ec2_status import forget_last_launch

        params, folder = self.params, Path(job_dir)
        self._check_rendezvous()
        forget_last_launch(folder)
        intent = self.record_intent(folder)
        deadline = time.monotonic() + params.boot_timeout_s
        try:
            started = self.run_instances(folder, intent)
            running = self._wait_running(folder, started, deadline)
            key = HostKey.from_json(intent["host_key"])
            assert key is not None
            addresses = [self._address(instance) for instance in running]
            write_known_hosts(folder / KNOWN_HOSTS_FILE, key, addresses)
            nodes = self._nodes(running)
            cluster = ClusterInfo(
                self.spec.name, self.name, nodes, {"pids": {}, "job_dir": job_dir}
            )
            self._wait_reachable(cluster, deadline)
            return cluster
        except BaseException as error:
            self._end_instances(folder, f"provisioning failed: {error}")
            raise

    def _check_rendezvous(self) -> None:
        """A part of several instances needs a way for its ranks to meet that is not the
        worker's disk: ``rendezvous``/``shared_dir`` in params, or an object-store rendezvous."""
        if self.spec.num_nodes < 2 or self.params.has_rendezvous():
            return
        if self.spec.rendezvous.mode in ("s3", "gs"):
            return
        raise ElasticGridError(
            f"part {self.spec.name!r} params: {self.spec.num_nodes} instances need a rendezvous "
            "their ranks all reach: set rendezvous (an s3:// URI) or shared_dir (a folder every "
            "instance mounts), and checkpoint_dir for their checkpoints"
        )

    def run_instances(self, folder: Path, intent: dict[str, Any]) -> list[Instance]:
        """One instance per node, each asked for once: an index whose instance exists (by its
        ``Name`` tag) is not asked for again. The first RunInstances goes alone (a refused
        credential or a cloud with no room answers once), the others in parallel; the first
        try of a launch asks for no existing instance (its intent was just recorded: none can
        carry its tags)."""
        params = self.params
        key = HostKey.from_json(intent["host_key"])
        assert key is not None
        text = user_data(key, params.user_data)
        existing: dict[str | None, Instance] = {}
        if intent.get("attempt", 2) > 1:  # an earlier try of this launch may have started some
            existing = {
                instance.tags.get("Name"): instance
                for instance in self.instances.describe(self.tags)
                if instance.state not in GONE_STATES
            }
        names = [f"{self.spec.name}-{index}" for index in range(self.spec.num_nodes)]
        starting = _Starting(folder, intent)
        for index, name in enumerate(names):
            if name in existing:
                starting.add(index, [existing[name]])
        missing = [index for index, name in enumerate(names) if name not in existing]

        def start(index: int) -> None:
            starting.add(index, self._run_one(starting, index, text))
            self._write_machines(folder, starting.instances())

        if missing:
            start(missing[0])
        if len(missing) > 1:
            with ThreadPoolExecutor(max_workers=min(len(missing) - 1, RUN_WORKERS)) as pool:
                list(pool.map(start, missing[1:]))  # the first error is raised
        return starting.instances()

    def _run_one(self, starting: _Starting, index: int, text: str) -> list[Instance]:
        """RunInstances for node ``index`` (spot falls back to on-demand when params say so)."""
        params, part = self.params, self.spec.name
        name = f"{part}-{index}"
        market = Market(starting.intent["market"])
        tags = {**params.tags, **{k: v[0] for k, v in self.tags.items()}, "Name": name}
        request = RunRequest(
            image_id=params.image_id,
            instance_type=params.instance_type,
            key_name=params.key_name,
            user_data=text,
            tags=tags,
            client_token=client_token(self.launch_id, part, index, market),
            spot=market is Market.SPOT,
            subnet_id=params.subnet_id,
            security_group_ids=params.security_group_ids,
            iam_instance_profile=params.iam_instance_profile,
        )
        try:
            answer = self.instances.run(request)
        except CloudCapacityError as error:
            if market is not Market.SPOT or not params.can_fall_back:
                provider = part.rsplit("--", 1)[-1]
                raise CloudCapacityError(
                    f"provider {provider!r} has no capacity for {params.instance_type} "
                    f"instance {index + 1} of {self.spec.num_nodes}: {error}"
                ) from None
            starting.fall_back(params.on_demand_cost_per_node_hour, str(error))
            answer = self.instances.run(
                replace(
                    request,
                    spot=False,
                    client_token=client_token(self.launch_id, part, index, Market.ON_DEMAND),
                )
            )
        log.info("Started instance %s (%s) for part %s.", answer[0].instance_id, name, part)
        return answer

    def _wait_running(
        self, folder: Path, started: list[Instance], deadline: float
    ) -> list[Instance]:
        """The started instances once all are ``running`` (in index order), before
        ``deadline``; an instance that ends while booting fails the part at once. Polled
        every ``POLL_S`` (a first, shorter wait: RunInstances often answers ``running``)."""
        wanted = [instance.instance_id for instance in started]
        wait = FIRST_POLL_S
        while True:
            found = {item.instance_id: item for item in self.instances.describe(self.tags)}
            current = [found[id_] for id_ in wanted if id_ in found]
            self._write_machines(folder, current)
            ended = [item for item in current if item.state in GONE_STATES]
            if ended:
                what = ", ".join(f"{item.instance_id} is {item.state}" for item in ended)
                raise RemoteHostError(
                    f"part {self.spec.name!r}: instances ended while booting: {what}"
                )
            if len(current) == len(wanted) and all(item.state == "running" for item in current):
                return current
            if time.monotonic() >= deadline:
                states = ", ".join(f"{item.instance_id} {item.state}" for item in current)
                raise RemoteHostError(
                    f"part {self.spec.name!r}: instances not running within boot_timeout_s="
                    f"{self.params.boot_timeout_s:g} s ({states or 'none listed'})"
                )
            time.sleep(wait)
            wait = min(wait * 2, POLL_S)

    def _wait_reachable(self, cluster: ClusterInfo, deadline: float) -> None:
        """Every instance answers over SSH (host key checked) before ``deadline``. Each host
        on its own, in parallel: a TCP connect to its SSH port (short, retried) until sshd
        listens, then the ssh engine's check of that host, which opens the connection the
        sync and start reuse."""
        ssh = self._ssh(cluster)
        port = ssh.params.ssh_port or 22
        direct = not ssh.params.ssh_opts  # through a jump host, only ssh itself can tell

        def reachable(host: str) -> None:
            wait, error = FIRST_POLL_S, "its SSH port did not answer"
            patience = FIRST_PROBE_S  # a booting host drops a connect: look again, longer
            while True:
                began = time.monotonic()
                if direct and not port_answers(
                    host_address(host), port, min(patience, deadline - began)
                ):
                    patience = min(patience * 2, MAX_PROBE_S)
                    pause = PROBE_INTERVAL_S - (time.monotonic() - began)  # refused at once
                else:
                    try:
                        ssh.check_host(host)
                        return
                    except RemoteHostError as failure:
                        error = str(failure)
                    pause, wait = wait, min(wait * 2, POLL_S)
                if time.monotonic() >= deadline:
                    raise RemoteHostError(
                        f"part {self.spec.name!r}: instances not reachable over SSH within "
                        f"boot_timeout_s={self.params.boot_timeout_s:g} s ({error})"
                    )
                time.sleep(max(0.0, min(pause, deadline - time.monotonic())))

        failure = first_error(for_each_host(ssh.params.hosts, reachable))
        if failure is not None:
            raise failure

    def _address(self, instance: Instance) -> str:
        public = self.params.address is AddressKind.PUBLIC
        return instance.public_address if public else instance.private_address

    def _nodes(self, running: list[Instance]) -> list[Node]:
        per_node, user = self.spec.procs_per_node, self.params.ssh_user
        return [
            Node(
                rank=index * per_node + local,
                host=f"{user}@{self._address(instance)}",
                local_rank=local,
                env={"instance_id": instance.instance_id},
            )
            for index, instance in enumerate(running)
            for local in range(per_node)
        ]

    # -- the ranks, through the ssh engine ---------------------------------------------------

    def ssh_params(self, cluster: ClusterInfo) -> dict[str, Any]:
        """The ssh engine's params for the cluster's instances (written for the hook too)."""
        hosts = [node.host for node in cluster.nodes]
        return ssh_engine_params(self.params, Path(cluster.meta["job_dir"]), hosts)

    def _ssh(self, cluster: ClusterInfo) -> SshEngine:
        ssh_params = self.ssh_params(cluster)
        folder = Path(cluster.meta["job_dir"])
        if folder.is_dir() and cluster.nodes:
            write_json(folder / SSH_PARAMS_FILE, ssh_params, private=True)
        resources = replace(self.spec.resources, params=ssh_params)
        return SshEngine(replace(self.spec, resources=resources), target=self.target)

    def _guarded(self, cluster: ClusterInfo, step: str, call: Any) -> None:
        try:
            call()
        except BaseException as error:  # iroh-tinker stops nothing when these fail
            self._end_instances(Path(cluster.meta["job_dir"]), f"{step} failed: {error}")
            raise

    def sync(self, cluster: ClusterInfo, workdir: str) -> None:
        """rsync the workdir to every instance; a failure terminates the part's instances."""
        self._guarded(cluster, "sync", lambda: self._ssh(cluster).sync(cluster, workdir))

    def setup(self, cluster: ClusterInfo, workdir: str, setup_cmd: str) -> None:
        """Run ``setup`` on every instance; a failure terminates the part's instances."""
        ssh = self._ssh(cluster)
        self._guarded(cluster, "setup", lambda: ssh.setup(cluster, workdir, setup_cmd))

    def start(
        self, cluster: ClusterInfo, commands: dict[int, list[str]], env: dict[str, str]
    ) -> None:
        """Start the ranks (``envs`` on stdin; ``checkpoint_dir``, scoped to the job, as
        ``ELASTICGRID_CHECKPOINT_DIR``); a failure terminates the part's instances."""
        ssh = self._ssh(cluster)
        if self.params.checkpoint_dir:
            env = {
                **env,
                ENV_CHECKPOINT_DIR: f"{self.params.checkpoint_dir.rstrip('/')}/{self.job_name}",
            }
        self._guarded(cluster, "start", lambda: ssh.start(cluster, commands, env))

    def status(self, cluster: ClusterInfo) -> dict[int, str]:
        """The ranks' states (the ssh engine's probe), ``machines.json`` refreshed; a part whose
        ranks all stopped has ended and its instances are terminated."""
        from elasticgrid_provider.engines.ec2_status import lost_instances, record_losses

        folder = Path(cluster.meta["job_dir"])
        ssh = self._ssh(cluster)
        words = ssh.status(cluster)
        current = self.instances.describe(self.tags)
        self._write_machines(folder, current)
        losses = lost_instances(cluster.nodes, current)
        lost = self._lost_ranks(cluster, losses)
        if losses:
            record_losses(folder, cluster.nodes, losses)
            words.update(dict.fromkeys(lost, "stopped"))
        if words and all(word == "stopped" for word in words.values()):
            self._keep_last_logs(cluster, ssh)
            self._end_instances(folder, "its ranks all stopped")
        return words

    @staticmethod
    def _keep_last_logs(cluster: ClusterInfo, ssh: SshEngine) -> None:
        """Copy the last lines of each rank whose instance is not lost into the part's folder,
        before its instances end (``logs`` reads them afterwards)."""
        from elasticgrid_provider.engines.ec2_status import (
            LAST_LOG_LINES,
            keep_last_logs,
            recorded_causes,
        )

        folder = Path(cluster.meta["job_dir"])
        lost = recorded_causes(folder)  # read once, not once per rank
        ranks = [node.rank for node in cluster.nodes if str(node.rank) not in lost]
        keep_last_logs(folder, lambda rank: ssh.logs(cluster, rank, LAST_LOG_LINES), ranks)

    @staticmethod
    def _lost_ranks(cluster: ClusterInfo, losses: dict[str, str]) -> set[int]:
        """The ranks whose instance is lost (their logs went with it)."""
        return {node.rank for node in cluster.nodes if node.env.get("instance_id") in losses}

    def stop(self, cluster: ClusterInfo) -> None:
        """Stop the ranks over SSH (best effort) and keep their last lines, then terminate the
        part's instances by tag."""
        ssh = self._ssh(cluster)
        try:
            ssh.stop(cluster)
        except Exception as error:  # an instance gone already: terminating ends its ranks
            log.warning("Could not stop the ranks of part %s over SSH: %s", self.spec.name, error)
        else:
            self._keep_last_logs(cluster, ssh)
        self._end_instances(Path(cluster.meta["job_dir"]), "stopped")

    def logs(self, cluster: ClusterInfo, rank: int, tail: int = 50) -> str:
        """The rank's remote log tail; a rank whose instance was lost reads the cause, one whose
        part ended reads the lines kept before its instances were terminated."""
        from elasticgrid_provider.engines.ec2_status import kept_log, recorded_cause

        folder = Path(cluster.meta["job_dir"])
        cause = recorded_cause(folder, rank)
        if cause is not None:
            return f"preempted: {cause}\n"
        kept = kept_log(folder, rank, tail)
        return kept if kept is not None else self._ssh(cluster).logs(cluster, rank, tail)

    # -- the end -----------------------------------------------------------------------------

    def _end_instances(self, folder: Path, why: str) -> None:
        """Terminate every instance of this launch's part, found by tag (retried); log why.
        ``machines.json`` then records what is left, even when some could not be ended (the
        raised :class:`~elasticgrid_provider.core.errors.InstancesLeftError` names them; the
        reconcile keeps trying)."""
        what = f"the instances of part {self.spec.name!r} (launch {self.launch_id}; {why})"
        try:
            terminate_tagged(self.instances, self.tags, what)
        finally:
            if folder.is_dir():
                with suppress(CloudApiError):  # the record waits for the next status
                    self._write_machines(folder, self.instances.describe(self.tags))

    def _write_machines(self, folder: Path, instances: list[Instance]) -> None:
        record = {
            "part": self.spec.name,
            "launch_id": self.launch_id,
            "instances": [
                instance.machine(self._address(instance)).model_dump() for instance in instances
            ],
        }
        write_json(folder / MACHINES_FILE, record)
