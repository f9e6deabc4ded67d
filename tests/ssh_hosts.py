"""Real SSH test hosts on this machine: network namespaces on a bridge, each with its own sshd.

Each host is what a training machine on an on-prem pool would be: its own
address on a LAN (a Linux bridge), its own sshd from Debian's
``openssh-server``, its own PID namespace (sshd is PID 1 there, so killing it
ends every process of the host) and private mounts: a tmpfs over each
``hide`` path (the worker's jobs root: a host must not see it), the ``pool``
folder bind-mounted at ``/srv/pool`` (what an NFS share among the hosts
would be), and a tmpfs home holding the session key in ``authorized_keys``.

Host keys are real: ``known_hosts`` lists each host's own key, so the
engine's ``StrictHostKeyChecking=yes`` is exercised. Names carry a random
suffix and the subnet is a free ``10.x.y.0/24``, so several pytest workers
can each have hosts. Root only; teardown kills every sshd by PID and deletes
the namespaces, the bridge and the veths, also when the test failed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

POOL_MOUNT = "/srv/pool"
PROGRAMS = ("sshd", "ssh", "ssh-keygen", "rsync", "ip", "unshare")
_LOCK = Path(tempfile.gettempdir()) / "elasticgrid-ssh-hosts.lock"
_SSHD_CONFIG = """\
Port 22
ListenAddress {address}
HostKey {host_key}
PidFile none
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
AuthorizedKeysFile .ssh/authorized_keys
MaxSessions 64
MaxStartups 64:30:128
"""


def _program(name: str) -> str | None:
    if name == "sshd":
        return "/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None
    return shutil.which(name)


def missing_requirement() -> str | None:
    """Why test hosts cannot start here (one sentence), or None when they can."""
    if os.geteuid() != 0:
        return "SSH test hosts need root (network namespaces, mounts)"
    missing = [name for name in PROGRAMS if _program(name) is None]
    if missing:
        return (
            f"SSH test hosts need {', '.join(missing)}: run 'bash scripts/system-packages.sh ssh'"
        )
    return None


def _run(*argv: str, check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed: {result.stderr.strip()}")
    return result


def _subnets_in_use() -> set[str]:
    """The ``a.b.c`` prefixes of every IPv4 address and route on this machine."""
    text = _run("ip", "-4", "-o", "addr", "show").stdout + _run("ip", "-4", "route", "show").stdout
    used = set()
    for word in text.split():
        head = word.split("/")[0].split(".")
        if len(head) == 4 and all(part.isdigit() for part in head):
            used.add(".".join(head[:3]))
    return used


class SshTestHosts:
    """``count`` SSH hosts in network namespaces (a context manager; see the module docstring)."""

    def __init__(self, count: int, hide: Iterable[str | Path] = (), pool: str | Path | None = None):
        self.count = count
        self.hide = [str(path) for path in hide]
        self.suffix = secrets.token_hex(3)
        self.folder = Path(tempfile.mkdtemp(prefix="eg-hosts-"))
        self.pool = Path(pool) if pool else self.folder / "pool"
        self.bridge = f"egb{self.suffix}"
        self.namespaces = [f"egh{self.suffix}{i}" for i in range(count)]
        self.veths = [f"egv{self.suffix}{i}" for i in range(count)]
        self.prefix = ""
        self.addresses: list[str] = []
        self.key = str(self.folder / "id_ed25519")
        self.known_hosts = str(self.folder / "known_hosts")
        self._servers: list[subprocess.Popen[bytes]] = []
        self._bridge_made = False

    @property
    def hosts(self) -> list[str]:
        """``root@<address>`` of each host, in order."""
        return [f"root@{address}" for address in self.addresses]

    def params(self, **extra: Any) -> dict[str, Any]:
        """A provider's ``params`` for the ssh engine reaching these hosts (``extra`` on top)."""
        return {
            "hosts": self.hosts,
            "ssh_key": self.key,
            "known_hosts": self.known_hosts,
            "connect_timeout_s": 3,
            **extra,
        }

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> SshTestHosts:
        problem = missing_requirement()
        if problem:
            self.close()
            raise RuntimeError(problem)
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        self.pool.mkdir(parents=True, exist_ok=True)
        _run(
            "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "elasticgrid-tests", "-f", self.key
        )
        with _LOCK.open("w") as lock:  # two workers must not pick the same subnet
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = _subnets_in_use()
            free = [f"10.{a}.{b}" for a in range(200, 250) for b in range(256)]
            self.prefix = random.choice([prefix for prefix in free if prefix not in used])
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            self._bridge_made = True
            _run("ip", "addr", "add", f"{self.prefix}.1/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
        self.addresses = [f"{self.prefix}.{11 + i}" for i in range(self.count)]
        known = self._start_hosts([(index, None, None) for index in range(self.count)])
        Path(self.known_hosts).write_text("".join(known))
        self._wait_until_listening()

    def add_host(
        self, address: str, host_key: str | None = None, authorized_keys: str | None = None
    ) -> int:
        """Start one more host at ``address`` (in this LAN's ``prefix``.0/24) and return its
        index: its sshd uses ``host_key`` (a private key's text; a new random key when None)
        and root's ``authorized_keys`` holds ``authorized_keys`` (the session key when None).
        Its key joins :attr:`known_hosts`; it is not waited for (:meth:`wait_listening`)."""
        return self.add_hosts([(address, host_key, authorized_keys)])[0]

    def add_hosts(self, hosts: Sequence[tuple[str, str | None, str | None]]) -> list[int]:
        """:meth:`add_host` for each ``(address, host_key, authorized_keys)``, the hosts set
        up side by side (as a cloud boots its machines); their indexes, in order."""
        indexes = []
        for address, _, _ in hosts:
            if not self.prefix or address.rpartition(".")[0] != self.prefix:
                raise ValueError(f"address {address!r} is not in this LAN's {self.prefix}.0/24")
        for address, _, _ in hosts:
            index = len(self.namespaces)
            self.namespaces.append(f"egh{self.suffix}{index}")
            self.veths.append(f"egv{self.suffix}{index}")
            self.addresses.append(address)
            indexes.append(index)
        lines = self._start_hosts(
            [
                (index, key, authorized)
                for index, (_, key, authorized) in zip(indexes, hosts, strict=True)
            ]
        )
        with open(self.known_hosts, "a") as known:  # so that run() reaches them too
            known.write("".join(lines))
        return indexes

    def remove_host(self, index: int) -> None:
        """Kill host ``index`` (its sshd and every process in it) and delete its namespace and
        link, as a machine switched off; its address can then be given to a new host."""
        self._kill_host(index)
        _run("ip", "netns", "del", self.namespaces[index], check=False)
        if Path(f"/sys/class/net/{self.veths[index]}").exists():
            _run("ip", "link", "del", self.veths[index], check=False)

    def _start_hosts(self, hosts: list[tuple[int, str | None, str | None]]) -> list[str]:
        """Set up each ``(index, host_key, authorized_keys)`` host side by side, then start
        their sshds in index order (:attr:`_servers` is indexed by host); their known_hosts
        lines, in order."""
        with ThreadPoolExecutor(max_workers=max(1, min(len(hosts), 8))) as pool:
            prepared = list(pool.map(lambda host: self._prepare_host(*host), hosts))
        for (index, _, _), (script, _) in zip(hosts, prepared, strict=True):
            self._launch_host(index, script)
        return [line for _, line in prepared]

    def _prepare_host(
        self, index: int, host_key_text: str | None = None, authorized_keys: str | None = None
    ) -> tuple[str, str]:
        """Create host ``index``'s keys and namespace: (the script that starts its sshd, its
        known_hosts line)."""
        namespace, veth, address = self.namespaces[index], self.veths[index], self.addresses[index]
        host_key = self.folder / f"host{index}_ed25519"
        if host_key_text is None:
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key))
        else:
            host_key.write_text(host_key_text.rstrip("\n") + "\n")
            host_key.chmod(0o600)
            public = _run("ssh-keygen", "-y", "-f", str(host_key)).stdout
            Path(f"{host_key}.pub").write_text(public)
        authorized = Path(f"{self.key}.pub")
        if authorized_keys is not None:
            authorized = self.folder / f"authorized{index}"
            authorized.write_text(authorized_keys.rstrip("\n") + "\n")
        config = self.folder / f"sshd{index}.conf"
        config.write_text(_SSHD_CONFIG.format(address=address, host_key=host_key))
        _run("ip", "netns", "add", namespace)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _run("ip", "link", "set", veth, "master", self.bridge, "up")
        inside = ("ip", "netns", "exec", namespace)
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
        _run(*inside, "ip", "link", "set", "eth0", "up")
        mounts = [f"mount -t tmpfs tmpfs {shlex.quote(path)}" for path in self.hide]
        script = "\n".join(
            [
                "set -e",
                f"mkdir -p {POOL_MOUNT} /run/sshd",
                f"mount --bind {shlex.quote(str(self.pool))} {POOL_MOUNT}",
                *mounts,
                *self._keep_interpreter_mounts(index),
                "mkdir -p /root/.ssh",
                f"cp {shlex.quote(str(authorized))} /root/.ssh/authorized_keys",
                # as a cloud network answers for a running instance's address at once: one
                # datagram to the bridge makes it learn this host's address now, so a connect
                # the worker sent while the host was booting goes out, not at its next ARP try
                f"echo up > /dev/udp/{self.prefix}.1/9 || true",
                f"exec /usr/sbin/sshd -D -f {shlex.quote(str(config))} "
                f"-E {shlex.quote(str(self.folder / f'sshd{index}.log'))}",
            ]
        )
        kind, public = Path(f"{host_key}.pub").read_text().split()[:2]
        return script, f"{address} {kind} {public}\n"

    def _launch_host(self, index: int, script: str) -> None:
        """Start host ``index``'s sshd (its PID 1) in its namespace."""
        inside = ("ip", "netns", "exec", self.namespaces[index])
        unshare = (
            "unshare",
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--propagation",
            "private",
        )
        self._servers.append(  # index == len(self._servers): hosts start in index order
            subprocess.Popen(
                [*inside, *unshare, "bash", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=(self.folder / f"start{index}.log").open("ab"),
                env={**os.environ, "HOME": "/root"},
                start_new_session=True,
            )
        )

    def _keep_interpreter_mounts(self, index: int) -> list[str]:
        """Shell lines mounting the tmpfs home; the Python install stays visible when it lives
        under the home folder (pyenv), so the hosts can run this interpreter."""
        home = Path("/root")
        prefix = Path(sys.base_prefix).resolve()
        tmpfs = f'mount -t tmpfs -o mode=0700 tmpfs "{home}"'
        if home not in prefix.parents:
            return [tmpfs]
        stage = shlex.quote(str(self.folder / f"python{index}"))
        quoted = shlex.quote(str(prefix))
        return [
            f"mkdir -p {stage}",
            f"mount --bind {quoted} {stage}",
            tmpfs,
            f"mkdir -p {quoted}",
            f"mount --move {stage} {quoted}",
        ]

    def _wait_until_listening(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        for index in range(len(self.addresses)):
            self.wait_listening(index, max(0.0, deadline - time.monotonic()))

    def wait_listening(self, index: int, timeout: float = 15.0) -> None:
        """Return once host ``index``'s sshd accepts connections; raise when it exited or did
        not listen within ``timeout`` seconds."""
        address = self.addresses[index]
        deadline = time.monotonic() + timeout
        while True:
            if self._servers[index].poll() is not None:
                log = (self.folder / f"start{index}.log").read_text(errors="replace")
                raise RuntimeError(f"sshd of test host {address} exited: {log.strip()}")
            with contextlib.suppress(OSError), socket.create_connection((address, 22), 0.5):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd of test host {address} did not listen in {timeout}s")
            time.sleep(0.05)

    def sshd_pid(self, index: int) -> int | None:
        """The host's sshd (its PID 1), as a pid of this machine, or None when it is gone."""
        server = self._servers[index] if index < len(self._servers) else None
        if server is None or server.poll() is not None:
            return None
        with contextlib.suppress(OSError, ValueError):
            children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
            return int(children[0]) if children else None
        return None

    def close(self) -> None:
        """Kill every host's sshd (and with it all of the host's processes), delete everything."""
        for veth in self.veths:  # links up: clients' connections see their end at once
            if Path(f"/sys/class/net/{veth}").exists():
                _run("ip", "link", "set", veth, "up", check=False)
        for index in range(len(self._servers)):
            self._kill_host(index)
        for namespace in self.namespaces:
            _run("ip", "netns", "del", namespace, check=False)
        for veth in self.veths:
            if Path(f"/sys/class/net/{veth}").exists():
                _run("ip", "link", "del", veth, check=False)
        if self._bridge_made:
            _run("ip", "link", "del", self.bridge, check=False)
            self._bridge_made = False
        self._servers = []
        shutil.rmtree(self.folder, ignore_errors=True)

    def _kill_host(self, index: int) -> None:
        """SIGKILL host ``index``'s sshd (its PID 1, so every process of the host) and any
        process left in its namespace."""
        server = self._servers[index]
        pid = self.sshd_pid(index)
        if pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(server.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=10)
        namespace = self.namespaces[index]
        if Path(f"/run/netns/{namespace}").exists():
            pids = _run("ip", "netns", "pids", namespace, check=False).stdout.split()
            for pid_text in pids:
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid_text), signal.SIGKILL)

    # -- what tests do to the hosts ------------------------------------------------------------
    def cut(self, index: int) -> None:
        """Cut host ``index`` off the LAN (its link down): the host lives on, unreachable."""
        _run("ip", "link", "set", self.veths[index], "down")

    def restore(self, index: int) -> None:
        """Put host ``index`` back on the LAN."""
        _run("ip", "link", "set", self.veths[index], "up")

    def ssh_command(self, index: int) -> list[str]:
        """The ``ssh`` argv reaching host ``index`` (no multiplexing), before the command."""
        return [
            "ssh",
            *("-i", self.key, "-o", f"UserKnownHostsFile={self.known_hosts}"),
            *("-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3"),
            self.hosts[index],
        ]

    def run(
        self, index: int, command: str, timeout: float = 20.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` (one shell string) on host ``index`` over ssh."""
        return subprocess.run(
            [*self.ssh_command(index), command],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
