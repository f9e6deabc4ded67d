"""One pool per provider name on a grid: conflicting definitions and shared SSH hosts refused."""

from __future__ import annotations

import pytest

from elasticgrid_provider.core.errors import GridCapacityError
from elasticgrid_provider.core.fleet.ledger import GridLedger, reserve
from elasticgrid_provider.core.fleet.pools import pool_record, pool_records
from elasticgrid_provider.core.fleet.reconcile import rebuild
from elasticgrid_provider.core.fleet.view import fleet_view
from elasticgrid_provider.core.providers import Provider
from tests.core.fleet.test_ledger import OLD_LAUNCH, T0, manifest


def ssh(name: str, *hosts: str, max_nodes: int = 2, **params: object) -> Provider:
    return Provider(
        name, max_nodes=max_nodes, cost_per_node_hour=1.0, engine="ssh",
        params={"hosts": list(hosts), **params},
    )  # fmt: skip


GPU = ssh("gpu", "10.0.0.1", "10.0.0.2")


def reserved_by(
    job: str, providers: list[Provider], ledger: GridLedger | None = None, now: float = T0
) -> GridLedger:
    """``ledger`` after ``job`` reserved one node of each provider, with their pools."""
    return reserve(
        ledger or GridLedger(), job, {p.name: 1 for p in providers}, launch_id=f"{now:.0f}",
        now=now, capacities={p.name: p.max_nodes for p in providers},
        pools=pool_records(providers),
    )  # fmt: skip


def holding(providers: list[Provider]) -> GridLedger:
    """Job ``a`` holds one node of each provider."""
    return reserved_by("a", providers)


def reserve_for_b(ledger: GridLedger, providers: list[Provider]) -> GridLedger:
    return reserved_by("b", providers, ledger, now=T0 + 1)


@pytest.mark.parametrize(
    ("other", "sentence"),
    [
        (
            ssh("gpu", "10.0.9.1", "10.0.9.2"),
            "provider 'gpu' of job 'b' is not the pool that other jobs hold under that name on "
            "this grid (hosts 10.0.9.1:22, 10.0.9.2:22, not 10.0.0.1:22, 10.0.0.2:22); held by "
            "'a' (1 nodes): give one of them another name, or both the same definition",
        ),
        (
            ssh("gpu-b", "10.0.0.2", "10.0.0.3"),
            "provider 'gpu-b' of job 'b' reaches host 10.0.0.2:22, as provider 'gpu' does, held "
            "by 'a' (1 nodes): the machine would count twice on this grid; list each host under "
            "one provider only",
        ),
    ],
    ids=["a name for other hosts", "two names for one host"],
)
def test_a_pool_other_jobs_hold_is_never_counted_twice(other, sentence):
    with pytest.raises(GridCapacityError) as refused:
        reserve_for_b(holding([GPU]), [other])
    assert str(refused.value) == sentence


def cloud(zone: str, engine: str = "fakecloud") -> Provider:
    return Provider(
        "gpu", max_nodes=2, cost_per_node_hour=1.0, engine=engine, params={"zone": zone}
    )


@pytest.mark.parametrize(
    ("held", "other", "difference"),
    [
        (GPU, cloud("a"), "engine 'fakecloud', not 'ssh'"),
        (GPU, ssh("gpu", "10.0.0.1", "10.0.0.2", ssh_port=2222), "hosts 10.0.0.1:2222"),
        (cloud("a"), cloud("b"), "other engine params"),
        (
            cloud("a"),
            Provider("gpu", 2, 1.0, region="eu", engine="fakecloud", params={"zone": "a"}),
            "engine 'fakecloud/eu', not 'fakecloud'",
        ),
    ],
)
def test_another_engine_port_or_params_is_another_pool(held, other, difference):
    with pytest.raises(GridCapacityError, match=difference):
        reserve_for_b(holding([held]), [other])


def test_the_same_pool_may_differ_in_size_and_price_and_a_free_name_may_change():
    # the same hosts with another user, another folder, twice the nodes
    bigger = ssh("gpu", "user@10.0.0.1", "10.0.0.2", max_nodes=4, remote_dir="/scratch")
    assert pool_record(bigger) == pool_record(GPU)
    assert reserve_for_b(holding([GPU]), [bigger]).pools == {"gpu": pool_record(GPU)}
    # nobody else holds the name: the new definition is recorded
    moved = ssh("gpu", "10.0.9.1", "10.0.9.2")
    again = reserved_by("a", [moved], holding([GPU]), now=T0 + 1)
    assert again.pools == {"gpu": pool_record(moved)}


def test_one_jobs_own_providers_may_not_share_a_host_and_a_free_host_may_move():
    other_name = ssh("gpu-b", "10.0.0.2", "10.0.0.3")
    with pytest.raises(GridCapacityError, match="held by job 'b' itself"):
        reserve_for_b(GridLedger(), [GPU, other_name])
    # once nobody holds 'gpu', the host may move to another name
    assert reserve_for_b(GridLedger(pools={"gpu": pool_record(GPU)}), [other_name]).pools


def test_a_rebuilt_ledger_knows_the_pools_of_the_launches_that_run():
    ledger = rebuild({"a": manifest("a", OLD_LAUNCH, {"local": 2})}, now=T0)
    local = Provider("local", max_nodes=4, cost_per_node_hour=0.0)
    assert ledger.pools == {"local": pool_record(local)}
    with pytest.raises(GridCapacityError, match="not the pool that other jobs hold"):
        reserve_for_b(ledger, [Provider("local", max_nodes=4, cost_per_node_hour=0.0, engine="x")])


def test_the_fleet_view_names_the_pool_each_provider_stands_for():
    view = fleet_view(holding([GPU]), {"gpu": 2, "unknown": 1})
    pools = {row["name"]: row["pool"] for row in view["providers"]}
    assert pools == {"gpu": "ssh: 10.0.0.1:22, 10.0.0.2:22", "unknown": None}
