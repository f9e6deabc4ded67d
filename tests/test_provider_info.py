"""Provider registration: the metadata Airflow reads, checked with Airflow's own schemas and code."""

from __future__ import annotations

import importlib
import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from elasticgrid_provider.get_provider_info import get_provider_info
from tests.conftest import airflow_command

PACKAGE = "airflow-provider-elasticgrid"
HOOK = "elasticgrid_provider.hooks.elasticgrid.ElasticGridHook"
CONN_FIELDS = ["providers", "max_spot_fraction", "prefer", "jobs_root"]


def _airflow_schema(name: str) -> dict:
    import airflow

    return json.loads((Path(airflow.__file__).parent / name).read_text())


def test_provider_info_validates_against_airflows_schema():
    info = get_provider_info()
    jsonschema.validate(info, _airflow_schema("provider_info.schema.json"))
    assert info["package-name"] == PACKAGE


def test_connection_types_validate_against_the_strict_provider_yaml_schema():
    info = get_provider_info()
    schema = _airflow_schema("provider.yaml.schema.json")["properties"]["connection-types"]
    jsonschema.validate(info["connection-types"], schema)
    (connection,) = info["connection-types"]
    assert connection["connection-type"] == "elasticgrid"
    assert list(connection["conn-fields"]) == CONN_FIELDS


def test_the_strict_schema_would_catch_a_broken_field():
    """The check above can fail: a field without a label is refused."""
    info = get_provider_info()
    schema = _airflow_schema("provider.yaml.schema.json")["properties"]["connection-types"]
    del info["connection-types"][0]["conn-fields"]["prefer"]["label"]
    with pytest.raises(jsonschema.ValidationError, match="'label' is a required property"):
        jsonschema.validate(info["connection-types"], schema)


def _named_modules(info: dict) -> list[str]:
    return [
        module
        for section in ("operators", "sensors", "hooks", "triggers")
        for entry in info.get(section, [])
        for module in entry["python-modules"]
    ]


def _named_classes(info: dict) -> list[str]:
    classes = [entry["hook-class-name"] for entry in info.get("connection-types", [])]
    classes += info.get("extra-links", [])
    classes += [entry["plugin-class"] for entry in info.get("plugins", [])]
    return classes


def test_every_named_module_and_class_exists():
    info = get_provider_info()
    modules = _named_modules(info)
    assert set(modules) >= {
        "elasticgrid_provider.operators.plan",
        "elasticgrid_provider.operators.launch",
        "elasticgrid_provider.operators.stop",
        "elasticgrid_provider.sensors.scale",
        "elasticgrid_provider.hooks.elasticgrid",
        "elasticgrid_provider.triggers.job",
    }
    for module in modules:
        importlib.import_module(module)
    classes = _named_classes(info)
    assert HOOK in classes
    for path in classes:
        module, _, name = path.rpartition(".")
        assert isinstance(getattr(importlib.import_module(module), name), type), path


def test_the_hook_matches_its_connection_type():
    from elasticgrid_provider.hooks.elasticgrid import ElasticGridHook

    (connection,) = get_provider_info()["connection-types"]
    assert ElasticGridHook.conn_type == connection["connection-type"]
    assert ElasticGridHook.hook_name == connection["hook-name"]
    assert ElasticGridHook.default_conn_name == "elasticgrid_default"


def _cli_json(*arguments: str) -> list[dict]:
    result = subprocess.run(
        [*airflow_command(), *arguments, "--output", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # warnings may come before the JSON on stdout; the JSON is the last line
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_airflow_providers_list_shows_the_provider():
    rows = {row["package_name"]: row for row in _cli_json("providers", "list")}
    assert PACKAGE in rows, sorted(rows)
    assert rows[PACKAGE]["version"] == get_provider_info()["versions"][0]
    assert rows[PACKAGE]["description"].startswith("Elastic, cross-cloud distributed training")


def test_airflow_providers_hooks_shows_the_connection_type():
    rows = [
        row for row in _cli_json("providers", "hooks") if row["connection_type"] == "elasticgrid"
    ]
    assert rows == [
        {
            "connection_type": "elasticgrid",
            "class": HOOK,
            "conn_id_attribute_name": "elasticgrid_conn_id",
            "package_name": PACKAGE,
            "hook_name": "ElasticGrid",
        }
    ]


def test_the_providers_manager_sees_the_connection_form():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert PACKAGE in manager.providers
    widgets = {
        key: widget
        for key, widget in manager.connection_form_widgets.items()
        if key.startswith("extra__elasticgrid__")
    }
    assert [widget.field_name for widget in widgets.values()] == CONN_FIELDS
    assert {widget.hook_class_name for widget in widgets.values()} == {HOOK}
    assert not any(widget.is_sensitive for widget in widgets.values())
    prefer = widgets["extra__elasticgrid__prefer"].field
    assert prefer["schema"]["enum"] == ["cost", "balance", None]
    assert prefer["schema"]["title"] == "Prefer"
    spot = widgets["extra__elasticgrid__max_spot_fraction"].field["schema"]
    assert (spot["minimum"], spot["maximum"]) == (0, 1)
    behaviour = manager.field_behaviours["elasticgrid"]
    assert set(behaviour["hidden_fields"]) == {"host", "schema", "login", "password", "port"}


def test_the_ui_connection_form_api_offers_the_fields():
    """What the connection form of the web UI receives (the hook meta-data service)."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    (meta,) = [m for m in HookMetaService.hook_meta_data() if m.connection_type == "elasticgrid"]
    assert meta.hook_class_name == HOOK
    assert meta.hook_name == "ElasticGrid"
    assert meta.extra_fields is not None
    assert list(meta.extra_fields) == CONN_FIELDS
    assert meta.extra_fields["jobs_root"]["schema"]["title"] == "JobManager root"
    assert meta.standard_fields is not None
    assert meta.standard_fields.host is not None and meta.standard_fields.host.hidden


def test_the_task_runtime_finds_the_hook_for_the_connection_type():
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hook = ProvidersManagerTaskRuntime().hooks["elasticgrid"]
    assert hook is not None
    assert hook.hook_class_name == HOOK
    assert hook.connection_id_attribute_name == "elasticgrid_conn_id"
    assert hook.package_name == PACKAGE
