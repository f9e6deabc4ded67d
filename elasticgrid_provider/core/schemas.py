"""JSON Schemas of the documents other tools read: the scale state and a decision record.

``state`` is the Airflow Variable each job's scale state is kept in
(:class:`~elasticgrid_provider.core.state.ScaleState`); ``decision`` is one
decision record: the sensor's XCom and one entry of the state's
``history`` (:class:`~elasticgrid_provider.core.state.DecisionRecord`),
the decision's fields with ``context`` and ``inputs`` beside them. The
schemas describe what is written (derived fields such as
``schema_version`` and ``saturated`` included) and are generated from the
models, so they cannot drift from them.
"""

from __future__ import annotations

from typing import Any

from elasticgrid_provider.core.policy.decision import ScaleDecision
from elasticgrid_provider.core.state import DecisionInputs, ScaleState
from elasticgrid_provider.core.validation import check_choice

SCHEMA_KINDS = ("state", "decision")


def _decision_record_schema() -> dict[str, Any]:
    """The decision's schema, widened by the record's ``context``, ``inputs`` and ``hold_run``."""
    schema = ScaleDecision.model_json_schema()
    inputs = DecisionInputs.model_json_schema()
    definitions = {**schema.pop("$defs", {}), **inputs.pop("$defs", {})}
    definitions["DecisionInputs"] = inputs
    schema["properties"] = {
        **schema["properties"],
        "context": {"type": "object", "description": "What surrounded the decision."},
        "inputs": {"$ref": "#/$defs/DecisionInputs"},
        "hold_run": {
            "type": "object",
            "description": "How often a repeated hold was folded into this entry.",
        },
    }
    schema["required"] = [*schema.get("required", []), "context", "inputs"]
    schema["title"] = "DecisionRecord"
    schema["$defs"] = definitions
    return schema


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of ``kind``: ``"state"`` or ``"decision"``."""
    kind = check_choice("schema kind", kind, SCHEMA_KINDS)
    return ScaleState.model_json_schema() if kind == "state" else _decision_record_schema()
