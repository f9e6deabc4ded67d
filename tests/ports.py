"""Free loopback ports for servers a test starts, never the same in two pytest workers.

A port is drawn by binding port 0 and closing the socket, so the server can take it. Two
xdist workers drawing at the same moment could be handed the same one; each worker
keeps only the ports whose half (Linux gives odd ports to ``bind`` and even ones to
``connect``) modulo the worker count is its own index, so they never can.
"""

from __future__ import annotations

import os
import socket


def free_port() -> int:
    """A loopback port that was free a moment ago and that no other pytest worker draws."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if (port >> 1) % workers == index % workers:
            return port
