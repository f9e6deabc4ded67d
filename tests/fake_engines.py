"""iroh-tinker engines standing in for clouds that cannot run here.

They are real ``Engine`` subclasses, loaded by iroh-tinker's real
``JobManager`` through ``module=tests.fake_engines:ClassName`` infra entries,
so the code under test is exercised exactly as it would be against a cloud.
"""

from __future__ import annotations

import time
from pathlib import Path

from iroh_tinker.cloud.engines import ClusterInfo, Engine
from iroh_tinker.cloud.engines.local import LocalEngine


class NoCapacityEngine(Engine):
    """A cloud region that is out of capacity: provisioning always fails."""

    name = "no-capacity"

    def provision(self, job_dir: str) -> ClusterInfo:
        raise RuntimeError(f"no capacity for {self.spec.num_nodes} nodes in {self.target}")

    def start(self, cluster, commands, env) -> None:  # pragma: no cover - never provisioned
        raise AssertionError("never started")

    def status(self, cluster):  # pragma: no cover - never provisioned
        return {}

    def stop(self, cluster) -> None:  # pragma: no cover - never provisioned
        return None

    def logs(self, cluster, rank: int, tail: int = 50) -> str:  # pragma: no cover
        return ""


class SlowLocalEngine(LocalEngine):
    """The local engine behind slow provisioning (a cloud taking its time to hand out nodes)."""

    provision_seconds = 4.0

    def provision(self, job_dir: str) -> ClusterInfo:
        time.sleep(self.provision_seconds)
        return super().provision(job_dir)


def _delay(engine: Engine, name: str) -> float:
    """A number of seconds the test put in the spec's ``envs`` (0 when absent)."""
    return float(engine.spec.envs.get(name, "0") or 0)


class PartlyStartingEngine(LocalEngine):
    """A cloud that starts the first node's ranks, then loses the next node and raises.

    The ranks it started run, but iroh-tinker never records them: it saves a
    part's pids only after the engine's ``start`` returns.
    """

    def start(self, cluster, commands, env) -> None:
        first_node = [node for node in cluster.nodes if node.rank < self.spec.procs_per_node]
        super().start(
            ClusterInfo(cluster.job_name, cluster.engine, first_node, cluster.meta), commands, env
        )
        raise RuntimeError("lost node 1 while starting its ranks")


class HangingStartEngine(LocalEngine):
    """The local engine, whose ``start`` returns only ``FAKE_START_HANG_S`` seconds after the
    ranks run (a cloud slow to confirm them): a kill in between leaves ranks nobody recorded."""

    def start(self, cluster, commands, env) -> None:
        super().start(cluster, commands, env)
        time.sleep(_delay(self, "FAKE_START_HANG_S"))


HOLD_STOP = "hold-stop"
"""While a part folder holds this file, :class:`HeldStopEngine` does not return from ``stop``."""


class HeldStopEngine(LocalEngine):
    """The local engine whose ``stop`` stops the ranks, then holds (a cloud slow to confirm
    the stop) while the part folder has a ``hold-stop`` file, at most 120 s: a task killed
    there has stopped the old parts and recorded nothing after."""

    name = "module=tests.fake_engines:HeldStopEngine"  # iroh-tinker stops a part by this name

    def stop(self, cluster) -> None:
        super().stop(cluster)
        folder = Path(cluster.meta["job_dir"])
        (folder / "stop-held").write_text("")
        deadline = time.monotonic() + 120
        while (folder / HOLD_STOP).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
