"""Providers and placements: validation that names the provider and field, JSON round trips."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.planner import GridPlanner
from elasticgrid_provider.core.providers import (
    DEFAULT_PROVIDERS,
    Provider,
    check_unique_names,
    launch_refusal,
    provider_from_dict,
    providers_from_dicts,
)


def provider_entry(**overrides: Any) -> dict[str, Any]:
    """A valid providers-file entry, with some fields replaced."""
    return {"name": "aws", "max_nodes": 4, "cost_per_node_hour": 3.2, **overrides}


# ---------------------------------------------------------------------------
# Provider validation.
# ---------------------------------------------------------------------------

BAD_NUMBERS = [
    pytest.param(math.nan, "must be a finite number, got nan", id="nan"),
    pytest.param(math.inf, "must be a finite number, got inf", id="inf"),
    pytest.param(-1, "must be at least 0, got -1", id="negative"),
    pytest.param(True, "must be a number, got True", id="bool"),
    pytest.param("4", "must be a number, got '4'", id="string"),
    pytest.param(None, "must be a number, got None", id="none"),
]


@pytest.mark.parametrize(("value", "complaint"), BAD_NUMBERS)
def test_bad_max_nodes_names_the_provider_and_field(value: object, complaint: str) -> None:
    with pytest.raises(ElasticGridError, match=f"provider 'aws' max_nodes {complaint}"):
        Provider("aws", max_nodes=value, cost_per_node_hour=1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "complaint"), BAD_NUMBERS)
def test_bad_cost_names_the_provider_and_field(value: object, complaint: str) -> None:
    with pytest.raises(ElasticGridError, match=f"provider 'aws' cost_per_node_hour {complaint}"):
        Provider("aws", max_nodes=4, cost_per_node_hour=value)  # type: ignore[arg-type]


def test_fractional_max_nodes_is_refused() -> None:
    with pytest.raises(ElasticGridError, match=r"provider 'aws' max_nodes must be a whole number"):
        Provider("aws", max_nodes=2.5, cost_per_node_hour=1.0)  # type: ignore[arg-type]


def test_whole_float_max_nodes_becomes_an_int() -> None:
    provider = Provider("aws", max_nodes=4.0, cost_per_node_hour=3)  # type: ignore[arg-type]
    assert provider.max_nodes == 4
    assert isinstance(provider.max_nodes, int)
    assert isinstance(provider.cost_per_node_hour, float)


@pytest.mark.parametrize("spot", [1, 0, "yes", None])
def test_spot_must_be_a_bool(spot: object) -> None:
    with pytest.raises(ElasticGridError, match="provider 'aws' spot must be true or false"):
        Provider("aws", max_nodes=4, cost_per_node_hour=1.0, spot=spot)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "complaint"), [("", "must not be empty"), (7, "must be a string")]
)
def test_bad_names_are_refused(name: object, complaint: str) -> None:
    with pytest.raises(ElasticGridError, match=f"provider name {complaint}"):
        Provider(name, max_nodes=4, cost_per_node_hour=1.0)  # type: ignore[arg-type]


def test_bad_region_and_engine_name_the_provider() -> None:
    with pytest.raises(ElasticGridError, match="provider 'aws' region must be a string"):
        Provider("aws", max_nodes=4, cost_per_node_hour=1.0, region=None)  # type: ignore[arg-type]
    with pytest.raises(ElasticGridError, match="provider 'aws' engine must not be empty"):
        Provider("aws", max_nodes=4, cost_per_node_hour=1.0, engine="")


def test_zero_capacity_and_free_providers_are_valid() -> None:
    provider = Provider("idle", max_nodes=0, cost_per_node_hour=0.0)
    assert provider.max_nodes == 0
    assert provider.cost_per_node_hour == 0.0


# ---------------------------------------------------------------------------
# Names: infra_ref, engine.
# ---------------------------------------------------------------------------


def test_infra_ref_is_name_slash_region_or_just_name() -> None:
    assert Provider("gcp", region="us-central1", max_nodes=1, cost_per_node_hour=1).infra_ref == (
        "gcp/us-central1"
    )
    assert Provider("local", max_nodes=1, cost_per_node_hour=0).infra_ref == "local"


def test_engine_defaults_to_the_name() -> None:
    provider = Provider("gcp", region="us-central1", max_nodes=1, cost_per_node_hour=1.0)
    assert provider.engine == provider.engine_name == "gcp"
    assert provider.engine_target == "gcp/us-central1"


def test_explicit_engine_is_kept_and_targeted() -> None:
    provider = Provider("a", max_nodes=1, cost_per_node_hour=1.0, engine="local")
    assert provider.engine_name == "local"
    assert provider.engine_target == "local"
    assert provider.infra_ref == "a"


def test_the_default_grid_is_local_gcp_aws_and_azure_with_their_sizes_and_prices() -> None:
    rows = [
        (p.name, p.region, p.max_nodes, p.cost_per_node_hour, p.accelerator, p.spot)
        for p in DEFAULT_PROVIDERS
    ]
    assert rows == [
        ("local", "", 8, 0.0, None, False),
        ("gcp", "us-central1", 64, 3.5, "A100", True),
        ("aws", "us-east-1", 64, 3.2, "p5.48xlarge", True),
        ("azure", "westeurope", 32, 3.9, "ND96asr", True),
    ]


# ---------------------------------------------------------------------------
# Providers from JSON.
# ---------------------------------------------------------------------------


def test_provider_round_trips_through_json() -> None:
    for provider in DEFAULT_PROVIDERS:
        assert provider_from_dict(json.loads(json.dumps(provider.model_dump()))) == provider


def test_an_entry_defaults_to_no_region_spot_no_accelerator_and_the_engine_of_its_name() -> None:
    provider = provider_from_dict(provider_entry())
    assert provider.region == ""
    assert provider.spot is True
    assert provider.accelerator is None
    assert provider.engine == "aws"


def test_missing_name_is_refused_with_the_entry_position() -> None:
    with pytest.raises(ElasticGridError, match="providers entry 1 is missing the field 'name'"):
        providers_from_dicts([provider_entry(), {"max_nodes": 1, "cost_per_node_hour": 1}])


@pytest.mark.parametrize("field", ["max_nodes", "cost_per_node_hour"])
def test_missing_required_field_names_the_provider(field: str) -> None:
    entry = provider_entry()
    del entry[field]
    with pytest.raises(ElasticGridError, match=f"provider 'aws' is missing the field '{field}'"):
        provider_from_dict(entry)


def test_unknown_field_names_the_provider() -> None:
    with pytest.raises(ElasticGridError, match="provider 'aws' has an unknown field 'gpus'"):
        provider_from_dict(provider_entry(gpus=8))


@pytest.mark.parametrize("value", [math.nan, math.inf, -3, True])
def test_bad_numbers_in_json_name_the_provider(value: object) -> None:
    with pytest.raises(ElasticGridError, match="provider 'aws' max_nodes"):
        providers_from_dicts([provider_entry(max_nodes=value)])


def test_entry_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ElasticGridError, match="providers entry 0 must be a JSON object"):
        providers_from_dicts(["aws"])


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ElasticGridError, match="provider name 'aws' appears more than once"):
        providers_from_dicts([provider_entry(), provider_entry(max_nodes=2)])
    with pytest.raises(ElasticGridError, match="'local' appears more than once"):
        check_unique_names([*DEFAULT_PROVIDERS, DEFAULT_PROVIDERS[0]])


def test_providers_file_may_be_a_list_or_an_object() -> None:
    entries = [provider.model_dump() for provider in DEFAULT_PROVIDERS]
    assert providers_from_dicts(entries) == DEFAULT_PROVIDERS
    assert providers_from_dicts({"providers": entries}) == DEFAULT_PROVIDERS


@pytest.mark.parametrize("data", [None, "aws", {"grid": []}, 3])
def test_providers_file_of_the_wrong_shape_is_refused(data: object) -> None:
    with pytest.raises(ElasticGridError, match="providers must be a JSON list"):
        providers_from_dicts(data)


# ---------------------------------------------------------------------------
# Assignments and placements.
# ---------------------------------------------------------------------------

AWS = Provider("aws", region="us-east-1", max_nodes=64, cost_per_node_hour=3.2)


@pytest.mark.parametrize("nodes", [0, -1, 1.5, True, math.nan])
def test_assignment_needs_a_positive_whole_count(nodes: object) -> None:
    with pytest.raises(ElasticGridError, match="assignment 'aws' nodes"):
        Assignment(AWS, nodes)  # type: ignore[arg-type]


def test_assignment_cannot_exceed_the_provider() -> None:
    with pytest.raises(
        ElasticGridError, match="assignment 'aws' nodes 65 exceeds its max_nodes 64"
    ):
        Assignment(AWS, 65)


def test_a_placement_dict_has_its_shares_totals_cost_spot_fraction_and_infra_refs() -> None:
    placement = GridPlanner(DEFAULT_PROVIDERS).plan(100)
    data = placement.model_dump()
    assert {"assignments", "total_nodes", "cost_per_hour", "spot_fraction", "infra_refs"} <= set(
        data
    )
    assert [(entry["provider"], entry["nodes"]) for entry in data["assignments"]] == [
        ("local", 8),
        ("aws", 64),
        ("gcp", 28),
    ]
    assert data["total_nodes"] == 100
    assert data["cost_per_hour"] == pytest.approx(302.8)
    assert data["spot_fraction"] == pytest.approx(0.92)
    assert data["infra_refs"] == ["local", "aws/us-east-1", "gcp/us-central1"]


def test_empty_placement() -> None:
    placement = Placement()
    assert placement.model_dump() == {
        "assignments": [],
        "total_nodes": 0,
        "cost_per_hour": 0.0,
        "spot_fraction": 0.0,
        "infra_refs": [],
    }
    assert Placement.model_validate(placement.model_dump()) == placement


@settings(max_examples=100, deadline=None)
@given(
    nodes=st.integers(min_value=1, max_value=168),  # a plan has at least 1 node
    fraction=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    prefer=st.sampled_from(["cost", "balance"]),
)
def test_placement_round_trips_through_json(nodes: int, fraction: float, prefer: str) -> None:
    placement = GridPlanner(DEFAULT_PROVIDERS, max_spot_fraction=fraction, prefer=prefer).plan(
        nodes
    )
    restored = Placement.model_validate(json.loads(json.dumps(placement.model_dump())))
    assert restored == placement
    assert restored.model_dump() == placement.model_dump()


def test_placement_from_json_rejects_bad_input() -> None:
    with pytest.raises(ElasticGridError, match="placement must be a JSON object"):
        Placement.model_validate([])
    with pytest.raises(ElasticGridError, match="placement assignments must be a list"):
        Placement.model_validate({"assignments": None})
    entry = {**AWS.model_dump(), "provider": "aws"}
    with pytest.raises(
        ElasticGridError, match="placement assignment 0 is missing the field 'nodes'"
    ):
        Placement.model_validate({"assignments": [entry]})
    with pytest.raises(ElasticGridError, match="assignment 'aws' nodes 99 exceeds"):
        Placement.model_validate({"assignments": [{**entry, "nodes": 99}]})


# ---------------------------------------------------------------------------
# iroh-tinker's own cloud engines: refused at plan (aws) and at launch (all).
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "engine"),
    [
        pytest.param({"name": "aws"}, "aws", id="by-name"),
        pytest.param({"name": "cloud", "engine": "gcp"}, "gcp", id="gcp"),
        pytest.param({"name": "cloud", "engine": "azure"}, "azure", id="azure"),
        pytest.param(
            {"name": "cloud", "engine": "module=iroh_tinker.cloud.engines.aws:AwsEngine"},
            "aws",
            id="module-reference",
        ),
        pytest.param({"name": "cloud", "engine": "ec2"}, None, id="ec2"),
        pytest.param({"name": "gcp", "engine": "ssh", "params": {"hosts": ["h1"]}}, None, id="ssh"),
        pytest.param({"name": "cloud", "engine": "module=pkg.mod:Engine"}, None, id="own-engine"),
    ],
)
def test_iroh_tinkers_cloud_engines_are_told_by_name_and_by_module(
    entry: dict[str, Any], engine: str | None
) -> None:
    provider = provider_from_dict({"max_nodes": 4, "cost_per_node_hour": 1.0, **entry})
    assert provider.iroh_cloud_engine == engine
    assert (launch_refusal(provider) is None) is (engine is None)


def test_a_grid_naming_iroh_tinkers_aws_engine_is_refused_when_read() -> None:
    with pytest.raises(ElasticGridError) as refused:
        providers_from_dicts([provider_entry(name="onprem"), provider_entry(engine="aws")])
    assert str(refused.value) == (
        "provider 'aws' would launch on iroh-tinker's own AWS engine (engine 'aws'; a "
        "provider's engine is its name unless set), which leaves instances running when a "
        "launch fails and is never used: set its engine to 'ec2' (docs/clouds.md), or to 'ssh' "
        "for machines reached over SSH"
    )
    # a cloud with no product engine yet stays plannable: its launch is refused instead
    (gcp,) = providers_from_dicts([provider_entry(name="gcp")])
    assert launch_refusal(gcp) == (
        "provider 'gcp' can be planned but not launched: GCP has no elasticgrid engine yet, and "
        "iroh-tinker's own 'gcp' engine is never used (it leaves instances running when a "
        "launch fails); run its machines as SSH hosts (engine 'ssh'), or plan without it"
    )


def test_the_built_in_grid_never_routes_a_launch_to_iroh_tinkers_cloud_engines() -> None:
    engines = {provider.name: provider.engine_name for provider in DEFAULT_PROVIDERS}
    assert engines == {"local": "local", "gcp": "gcp", "aws": "ec2", "azure": "azure"}
    plan_only = [provider.name for provider in DEFAULT_PROVIDERS if launch_refusal(provider)]
    assert plan_only == ["gcp", "azure"]
    placement = GridPlanner(DEFAULT_PROVIDERS).plan(100)  # local 8, aws 64, gcp 28
    assert [refusal.split(":")[0] for refusal in placement.launch_refusals] == [
        "provider 'gcp' can be planned but not launched"
    ]
