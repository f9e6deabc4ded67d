"""The fleet view of a grid: one function for ``elasticgrid fleet``, the Fleet page and ``/api/fleet``.

:func:`read_fleet` reads the grid ledger under the hook's jobs root (resolved as the
operators resolve it: :attr:`ElasticGridHook.jobs_root`), without the lock and without
writing, reconciled with the jobs' launch records as the next transaction would see it
(:meth:`GridLedgerStore.snapshot`), and lists the providers and capacities of
:func:`~elasticgrid_provider.core.fleet.view.fleet_capacities`: the pools jobs use, plus
the connection's grid when the connection sets one, never the built-in grid on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.fleet.view import fleet_capacities, fleet_view
from elasticgrid_provider.core.settings import BUILT_IN_GRID
from elasticgrid_provider.hooks.grid_ledger import GridLedgerStore

if TYPE_CHECKING:
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook


def connection_grid(hook: ElasticGridHook) -> tuple[dict[str, int] | None, str]:
    """The capacities of the grid the connection sets, and its name in words; None (and why)
    when it sets none (the built-in grid is no job's unless a reservation recorded it)."""
    try:
        if hook.connection_extra is None:  # no connection: no grid set (and nothing to log)
            return None, ""
        settings = hook.settings
    except ElasticGridError as exc:
        return None, f"the {hook.elasticgrid_conn_id} connection's grid cannot be read ({exc})"
    if settings.source == BUILT_IN_GRID:
        return None, ""
    return {p.name: p.max_nodes for p in settings.providers}, (
        f"the {hook.elasticgrid_conn_id} connection's grid"
    )


def read_fleet(
    hook: ElasticGridHook, override: tuple[dict[str, int], str] | None = None
) -> dict[str, Any]:
    """The fleet view (:func:`~elasticgrid_provider.core.fleet.view.fleet_view`) with
    ``jobs_root``, ``ledger`` (paths), ``note`` and ``capacity_source``; ``override``: a
    providers file's capacities and its name (the CLI's ``--providers``)."""
    store = GridLedgerStore(hook.jobs_root)
    shown = store.snapshot()
    grid, named = connection_grid(hook)
    capacities, source = fleet_capacities(
        shown.ledger, None if grid is None else (grid, named), override
    )
    if grid is None and named:
        source += f" ({named})"
    return {
        "jobs_root": str(hook.jobs_root),
        "ledger": str(store.path),
        "note": shown.note,
        "capacity_source": source,
        **fleet_view(shown.ledger, capacities),
    }
