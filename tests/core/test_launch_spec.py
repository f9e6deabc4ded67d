"""Rendering placements into iroh-tinker launch specs and parts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from iroh_tinker.cloud.rendezvous import (
    DirTicketStore,
    GSTicketStore,
    S3TicketStore,
    store_from_uri,
)
from iroh_tinker.cloud.spec import LaunchSpec, RendezvousSpec, load_spec

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.launch_spec import (
    LaunchOptions,
    _checked,
    _spec_dict,
    build_launch_parts,
    rendezvous_spec_fields,
    validate_spec_dict,
)
from elasticgrid_provider.core.placement import Assignment, Placement
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.rank_environment import (
    ENV_JOB,
    ENV_PART,
    ENV_PROCS_PER_NODE,
    ENV_RANK_OFFSET,
    ENV_WORLD_SIZE,
)

# two spot pools in two regions (on the local engine: what spec building needs is their targets)
EAST = Provider(
    "east",
    region="us-east-1",
    max_nodes=64,
    cost_per_node_hour=3.2,
    accelerator="p5.48xlarge",
    engine="local",
)
CENTRAL = Provider(
    "central",
    region="us-central1",
    max_nodes=64,
    cost_per_node_hour=3.5,
    accelerator="A100",
    engine="local",
)
ONPREM = Provider(
    "onprem",
    max_nodes=8,
    cost_per_node_hour=0.0,
    spot=False,
    engine="ssh",
    params={"hosts": ["gpu@10.0.0.11", "gpu@10.0.0.12"], "remote_dir": "/scratch/eg"},
)


def placement(*shares: tuple[Provider, int]) -> Placement:
    return Placement(tuple(Assignment(provider, nodes) for provider, nodes in shares))


OPTIONS = LaunchOptions(run="python train.py", rendezvous="dir:/shared/rdv-1")


# -- rendezvous -------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "fields", "env_uri", "store"),
    [
        ("dir:/x/rdv", {"mode": "dir", "uri": "/x/rdv"}, "dir:/x/rdv", DirTicketStore),
        ("/x/rdv", {"mode": "dir", "uri": "/x/rdv"}, "dir:/x/rdv", DirTicketStore),
        (
            "relative/rdv",
            {"mode": "dir", "uri": "relative/rdv"},
            "dir:relative/rdv",
            DirTicketStore,
        ),
        (
            "s3://bucket/prefix",
            {"mode": "s3", "uri": "s3://bucket/prefix"},
            "s3://bucket/prefix",
            S3TicketStore,
        ),
        (
            "gs://bucket/p/q",
            {"mode": "gs", "uri": "gs://bucket/p/q"},
            "gs://bucket/p/q",
            GSTicketStore,
        ),
    ],
)
def test_rendezvous_maps_to_the_uri_ranks_see(uri, fields, env_uri, store):
    assert rendezvous_spec_fields(uri) == fields
    # What iroh hands the ranks (IROH_TINKER_RENDEZVOUS) resolves to the right store.
    seen = RendezvousSpec(**fields).env_uri
    assert seen == env_uri
    assert isinstance(store_from_uri(seen), store)


@pytest.mark.parametrize(
    "uri",
    ["http://x", "file:///tmp/x", "s3:bucket/prefix", "s3://", "gs:///p", "dir:", "", "  ", 7],
)
def test_rendezvous_rejects_other_forms_naming_the_value(uri):
    with pytest.raises(ElasticGridError, match="rendezvous") as caught:
        rendezvous_spec_fields(uri)
    assert repr(uri) in str(caught.value)


def test_options_reject_an_unsupported_rendezvous():
    with pytest.raises(ElasticGridError, match=r"rendezvous .*'http://x'"):
        LaunchOptions(run="python train.py", rendezvous="http://x")


# -- options ----------------------------------------------------------------


def test_options_are_frozen_and_hashable():
    options = LaunchOptions(run="x", envs={"A": "1"}, recovery={"mode": "none"})
    assert hash(options) == hash(LaunchOptions(run="x", envs={"A": "1"}, recovery={"mode": "none"}))
    with pytest.raises(TypeError):
        options.envs["B"] = "2"  # type: ignore[index]
    assert options == LaunchOptions(run="x", envs={"A": "1"}, recovery={"mode": "none"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"run": ""}, "run must not be empty"),
        ({"run": "x", "procs_per_node": 0}, "procs_per_node must be at least 1"),
        ({"run": "x", "procs_per_node": 1.5}, "procs_per_node must be a whole number"),
        (
            {"run": "x", "envs": {"ELASTICGRID_WORLD_SIZE": "9"}},
            "envs must not set 'ELASTICGRID_WORLD_SIZE'",
        ),
        ({"run": "x", "envs": {"RANK": "1"}}, "envs must not set 'RANK'"),
        ({"run": "x", "envs": {"1BAD": "1"}}, "envs name"),
        ({"run": "x", "envs": {"A": 1}}, "envs A must be a string"),
        ({"run": "x", "recovery": {"mode": "always"}}, "recovery mode must be one of"),
        (
            {"run": "x", "recovery": {"max_restarts": -1}},
            "recovery max_restarts must be at least 0",
        ),
        ({"run": "x", "recovery": {"retries": 1}}, "recovery has an unknown field 'retries'"),
        (
            {"run": "x", "checkpoint": {"interval_steps": "5"}},
            "checkpoint interval_steps must be a number",
        ),
    ],
)
def test_options_reject_bad_values(kwargs, message):
    with pytest.raises(ElasticGridError, match=message):
        LaunchOptions(**kwargs)


# -- the single spec ------------------------------------------------------------


def build_launch_spec(placement: Placement, name: str, options: LaunchOptions) -> LaunchSpec:
    """The whole placement as ONE iroh-tinker ``LaunchSpec`` (test support only): its
    ``resources.infra`` lists the engine targets in failover order, and iroh-tinker would ask
    the first target for every node, which is why launches use :func:`build_launch_parts`."""
    placement, options, world_size = _checked(placement, name, options)
    return validate_spec_dict(_spec_dict(options, name, name, placement.assignments, 0, world_size))


def test_single_spec_lists_every_target_in_failover_order():
    spec = build_launch_spec(
        placement((EAST, 64), (CENTRAL, 36)),
        "llm",
        LaunchOptions(
            run="python train.py",
            workdir="/code",
            procs_per_node=2,
            envs={"A": "1"},
            setup="pip install x",
            rendezvous="s3://bucket/job",
            recovery={"mode": "restart", "max_restarts": 2},
            checkpoint={"uri": "s3://bucket/ckpt", "interval_steps": 10},
        ),
    )
    assert isinstance(spec, LaunchSpec)
    assert (spec.name, spec.run, spec.workdir, spec.setup) == (
        "llm",
        "python train.py",
        "/code",
        "pip install x",
    )
    assert spec.num_nodes == 100
    assert spec.world_size == 200
    assert spec.resources.infra == ["local/us-east-1", "local/us-central1"]
    assert spec.resources.use_spot is True
    assert spec.resources.instance_type == "p5.48xlarge"
    assert (spec.rendezvous.mode, spec.rendezvous.env_uri) == ("s3", "s3://bucket/job")
    assert (spec.recovery.mode, spec.recovery.max_restarts) == ("restart", 2)
    assert (spec.checkpoint.uri, spec.checkpoint.interval_steps) == ("s3://bucket/ckpt", 10)
    assert spec.envs["A"] == "1"
    assert spec.envs[ENV_WORLD_SIZE] == "200"
    assert spec.envs[ENV_RANK_OFFSET] == "0"


def test_single_spec_uses_engines_drops_repeats_and_honours_options():
    local_a = Provider("cloud-a", max_nodes=4, cost_per_node_hour=0.0, spot=False, engine="local")
    local_b = Provider("cloud-b", max_nodes=4, cost_per_node_hour=0.0, spot=False, engine="local")
    spec = build_launch_spec(
        placement((local_a, 2), (local_b, 1)),
        "job",
        LaunchOptions(run="x", instance_type="m5.large"),
    )
    assert spec.resources.infra == ["local"]
    assert spec.resources.use_spot is False
    assert spec.resources.instance_type == "m5.large"
    assert spec.rendezvous.mode == "dir"  # iroh's default when none is given


def test_single_spec_rejects_an_empty_placement_and_bad_names():
    with pytest.raises(ElasticGridError, match="placement is empty"):
        build_launch_spec(Placement(), "job", OPTIONS)
    for name in ("", "a b", "a--b", "-lead", "a/b", "x" * 200):
        with pytest.raises(ElasticGridError, match="job name"):
            build_launch_spec(placement((EAST, 1)), name, OPTIONS)


# -- parts ----------------------------------------------------------------------


def test_parts_give_each_share_its_own_job():
    options = LaunchOptions(
        run="python train.py", procs_per_node=2, envs={"A": "1"}, rendezvous="dir:/shared/rdv-1"
    )
    parts = build_launch_parts(placement((EAST, 3), (CENTRAL, 2), (ONPREM, 1)), "llm", options)

    assert [part.part_name for part in parts] == ["llm--east", "llm--central", "llm--onprem"]
    assert [part.nodes for part in parts] == [3, 2, 1]
    assert [part.rank_offset for part in parts] == [0, 6, 10]
    assert {part.world_size for part in parts} == {12}
    for part in parts:
        spec = part.to_launch_spec()
        assert spec.name == part.part_name
        assert spec.num_nodes == part.nodes
        assert spec.resources.infra == [part.provider.engine_target]
        assert spec.resources.use_spot is part.provider.spot
        assert spec.rendezvous.env_uri == "dir:/shared/rdv-1"
        assert spec.envs == {
            "A": "1",
            ENV_JOB: "llm",
            ENV_PART: part.part_name,
            ENV_RANK_OFFSET: str(part.rank_offset),
            ENV_WORLD_SIZE: "12",
            ENV_PROCS_PER_NODE: "2",
        }
    assert [part.to_launch_spec().resources.infra for part in parts] == [
        ["local/us-east-1"],
        ["local/us-central1"],
        ["module=elasticgrid_provider.engines.ssh:SshEngine"],
    ]
    assert [part.to_launch_spec().resources.instance_type for part in parts] == [
        "p5.48xlarge",
        "A100",
        None,
    ]
    # the SSH part runs its one node on the first host, in a folder of its own
    assert parts[2].to_launch_spec().resources.params == {
        "hosts": ["gpu@10.0.0.11"],
        "remote_dir": "/scratch/eg/llm--onprem",
    }
    assert parts[0].to_launch_spec().resources.params == {}


def test_part_specs_are_plain_json_that_iroh_loads_back(tmp_path):
    (part,) = build_launch_parts(placement((EAST, 2)), "llm", OPTIONS)
    spec_dict = part.spec_dict
    assert json.loads(json.dumps(spec_dict)) == spec_dict
    spec_dict["num_nodes"] = 99  # a copy: the part itself cannot change
    assert part.spec_dict["num_nodes"] == 2
    hash(part)

    path = part.write_spec(tmp_path / "part.json")
    loaded = load_spec(path)
    assert loaded.to_dict() == part.to_launch_spec().to_dict()  # iroh-tinker's LaunchSpec
    with pytest.raises(ElasticGridError, match=r"\.json"):
        part.write_spec(tmp_path / "part.yaml")


def test_parts_errors():
    with pytest.raises(ElasticGridError, match="placement is empty"):
        build_launch_parts(Placement(), "llm", OPTIONS)
    with pytest.raises(ElasticGridError, match="rendezvous is required"):
        build_launch_parts(placement((EAST, 1), (CENTRAL, 1)), "llm", LaunchOptions(run="x"))
    with pytest.raises(ElasticGridError, match="job name must not contain '--'"):
        build_launch_parts(placement((EAST, 1)), "a--b", OPTIONS)
    with pytest.raises(ElasticGridError, match="more than once"):
        build_launch_parts(placement((EAST, 1), (EAST, 1)), "llm", OPTIONS)
    spaced = Provider("my pool", max_nodes=2, cost_per_node_hour=0.0)
    with pytest.raises(ElasticGridError, match="'my pool'"):
        build_launch_parts(placement((spaced, 1)), "llm", OPTIONS)
    # One process needs no rendezvous.
    (single,) = build_launch_parts(placement((EAST, 1)), "llm", LaunchOptions(run="x"))
    assert single.world_size == 1


@pytest.mark.parametrize("engine", ["aws", "gcp", "azure"])
def test_a_launch_on_iroh_tinkers_own_cloud_engines_is_refused_before_any_part(engine):
    cloud = Provider("cloud", max_nodes=4, cost_per_node_hour=1.0, engine=engine)
    with pytest.raises(ElasticGridError, match=r"^provider 'cloud' .*iroh-tinker's own") as no:
        build_launch_parts(placement((EAST, 2), (cloud, 1)), "llm", OPTIONS)
    assert "\n" not in str(no.value)


def test_importing_the_module_does_not_import_iroh_tinker():
    code = (
        "import sys, elasticgrid_provider.core.launch_spec, elasticgrid_provider.runtime\n"
        "bad = [m for m in ('iroh_tinker', 'numpy', 'airflow') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
