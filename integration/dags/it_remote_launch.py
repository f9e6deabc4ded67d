"""The launch arguments of the integration suite's DAGs on remote hosts (SSH hosts, fake EC2 VMs).

Not a DAG file: the DAG files beside it import it by its bare name, as the DAGs folder is
on ``sys.path`` where Airflow parses them and runs their tasks.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

JOB = "{{ dag_run.conf['job_name'] }}"


def remote_launch(conn_id: str, steps: int, **extra: Any) -> dict[str, Any]:
    """A launch of ``train_elastic.py`` on connection ``conn_id``'s grid, plus ``extra``.

    The script's folder (this one) is the ``workdir`` the engine syncs to each host, where
    the ranks start. It trains ``steps`` steps unless the conf says otherwise, 4
    micro-batches per step: at 1 rank three of them wait (queue-bound).
    """
    return {
        "elasticgrid_conn_id": conn_id,
        "job_name": JOB,
        "run": (
            f"{sys.executable} train_elastic.py --steps {{{{ dag_run.conf.get('steps', {steps}) }}}} "
            "--global-batch 4 --microbatch-seconds 0.05"
        ),
        "workdir": str(Path(__file__).parent),
        # a value that must never show in user data, tags or a host's command line
        "envs": {"TRAINING_TOKEN": "{{ dag_run.conf.get('token', 'none') }}"},
        "recovery": {"mode": "none"},
        **extra,
    }
