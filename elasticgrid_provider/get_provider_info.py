"""Provider metadata for Airflow (entry point ``apache_airflow_provider``).

Validated in the tests against Airflow's own ``provider_info.schema.json``.
"""

from __future__ import annotations

from typing import Any

from elasticgrid_provider import __version__


def _modules(*modules: str) -> list[dict[str, Any]]:
    """One integration entry listing ``elasticgrid_provider.<module>`` for each module."""
    names = [f"elasticgrid_provider.{module}" for module in modules]
    return [{"integration-name": "ElasticGrid", "python-modules": names}]


def get_provider_info() -> dict[str, Any]:
    """Describe the provider's hooks, operators, sensors, triggers and connection type."""
    return {
        "package-name": "airflow-provider-elasticgrid",
        "name": "ElasticGrid",
        "description": "Elastic, cross-cloud distributed training on iroh-tinker: "
        "placement, launch and audited scale decisions.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "ElasticGrid",
                "external-doc-url": "https://pypi.org/project/iroh-tinker/",
                "tags": ["software"],
            }
        ],
        "operators": _modules("operators.plan", "operators.launch", "operators.stop"),
        "sensors": _modules("sensors.scale"),
        "hooks": _modules("hooks.elasticgrid"),
        "triggers": _modules("triggers.job"),
        "connection-types": [
            {
                "connection-type": "elasticgrid",
                "hook-class-name": "elasticgrid_provider.hooks.elasticgrid.ElasticGridHook",
                "hook-name": "ElasticGrid",
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port"],
                    "relabeling": {},
                    "placeholders": {},
                },
                "conn-fields": {
                    "providers": {
                        "label": "Providers grid (JSON)",
                        "description": "A JSON list of providers: name, region, max_nodes, "
                        "cost_per_node_hour, accelerator, spot, engine. Empty: the built-in grid.",
                        "schema": {"type": ["array", "string", "null"], "format": "json"},
                    },
                    "max_spot_fraction": {
                        "label": "Max spot fraction",
                        "description": "Default cap on the share of spot nodes, 0 to 1.",
                        "schema": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                    },
                    "prefer": {
                        "label": "Prefer",
                        "description": "Default placement policy: cost (cheapest) or balance (spread).",
                        "schema": {"type": ["string", "null"], "enum": ["cost", "balance", None]},
                    },
                    "jobs_root": {
                        "label": "JobManager root",
                        "description": "iroh-tinker JobManager root shared by the workers; "
                        "empty: $IROH_TINKER_HOME/jobs.",
                        "schema": {"type": ["string", "null"]},
                    },
                },
            }
        ],
    }
