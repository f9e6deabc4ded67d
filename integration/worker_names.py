"""``[core] hostname_callable`` for the integration workers: the worker's name.

Both Celery workers run on one machine, so the default hostname cannot tell
which one ran a task; with this, a task instance's ``hostname`` is ``w1`` or
``w2``.
"""

from __future__ import annotations

import os
import socket


def worker_hostname() -> str:
    """``ELASTICGRID_IT_WORKER`` when set (the integration workers), else the FQDN."""
    return os.environ.get("ELASTICGRID_IT_WORKER") or socket.getfqdn()
