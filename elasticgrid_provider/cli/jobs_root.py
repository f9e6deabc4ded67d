"""Where a CLI command finds the jobs root: ``--jobs-root``, else the connection's, as the operators do.

``--jobs-root`` overrides the ``jobs_root`` of the ``elasticgrid`` connection (``--conn-id``,
default ``elasticgrid_default``), which overrides iroh-tinker's default. The connection is
read as ``airflow connections get`` reads it: environment variables, secrets backends, then
the metadata DB. Only the default connection may be missing; a ``--conn-id`` naming none is
an error, lest a command look under another jobs root.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from elasticgrid_provider.airflow_internals import PROCESS_CONTEXT
from elasticgrid_provider.core.errors import ElasticGridError

DEFAULT_CONN_ID = "elasticgrid_default"


def add_jobs_root_arguments(parser: argparse.ArgumentParser) -> None:
    """``--jobs-root`` and ``--conn-id``: the options of every command that reads a jobs root."""
    parser.add_argument(
        "--jobs-root",
        metavar="DIR",
        help="the JobManager root the workers share (default: the connection's jobs_root, "
        "else iroh-tinker's)",
    )
    parser.add_argument(
        "--conn-id",
        default=DEFAULT_CONN_ID,
        metavar="ID",
        help=f"the elasticgrid connection to read (default: {DEFAULT_CONN_ID})",
    )


def connection_hook(args: argparse.Namespace) -> Any:
    """The hook of ``--conn-id`` with ``--jobs-root``, its connection read once (in a server
    context, so the metadata DB too); the process's own context is left as it was."""
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

    hook = ElasticGridHook(elasticgrid_conn_id=args.conn_id, jobs_root=args.jobs_root)
    before = os.environ.get(PROCESS_CONTEXT)
    os.environ.setdefault(PROCESS_CONTEXT, "server")
    try:
        hook.connection_extra  # noqa: B018 (read once, here; cached on the hook)
    except ElasticGridError:  # named by the option typed
        raise ElasticGridError(
            f"--conn-id {args.conn_id!r} names a connection that does not exist; create it, "
            "or give --jobs-root"
        ) from None
    finally:
        if before is None:
            os.environ.pop(PROCESS_CONTEXT, None)
    return hook


def existing_jobs_root(args: argparse.Namespace, hook: Any = None) -> Path:
    """The jobs root, which must be an existing folder (one sentence naming its source).
    ``--jobs-root`` needs no connection; otherwise ``hook`` (or :func:`connection_hook`)
    resolves it."""
    if hook is None and args.jobs_root:
        root = Path(args.jobs_root).expanduser().resolve()
    else:
        root = (hook or connection_hook(args)).jobs_root
    if not root.is_dir():
        given = "--jobs-root" if args.jobs_root else f"connection {args.conn_id!r} jobs_root"
        raise ElasticGridError(
            f"the jobs root must be an existing folder, got {str(root)!r} (from {given}, else "
            "iroh-tinker's default); give --jobs-root or set the connection's jobs_root"
        )
    return root
