"""iroh-tinker engines standing in for clouds that cannot run here.

They are real ``Engine`` subclasses, loaded by iroh-tinker's real
``JobManager`` through ``module=tests.fake_engines:ClassName`` infra entries,
so the code under test is exercised exactly as it would be against a cloud.
"""

from __future__ import annotations

import time

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
