"""The provider's ssh engine with one thing going wrong at a chosen moment (real ``Engine``
subclasses, loaded by iroh-tinker's real ``JobManager`` through ``module=`` infra entries)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from iroh_tinker.cloud.engines import ClusterInfo

from elasticgrid_provider.engines.ssh import SshEngine


class CutBeforeStartSshEngine(SshEngine):
    """Runs ``before_start`` (a test cuts a host off there) after the hosts were checked."""

    name = "module=tests.engines.ssh_engines:CutBeforeStartSshEngine"
    before_start: ClassVar[Callable[[], None]] = staticmethod(lambda: None)

    def start(self, cluster: ClusterInfo, commands: dict[int, list[str]], env: dict[str, str]):
        type(self).before_start()
        super().start(cluster, commands, env)


class LostAfterStartSshEngine(SshEngine):
    """Starts every rank, then raises: iroh-tinker never records the ranks it started."""

    name = "module=tests.engines.ssh_engines:LostAfterStartSshEngine"

    def start(self, cluster: ClusterInfo, commands: dict[int, list[str]], env: dict[str, str]):
        super().start(cluster, commands, env)
        raise RuntimeError("the launcher was lost after starting the ranks")
