"""The shared input checks: one sentence naming the field and the value."""

from __future__ import annotations

import enum
import math

import pytest

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.providers import Provider
from elasticgrid_provider.core.validation import (
    check_choice,
    check_integer,
    check_mapping,
    check_number,
    check_text,
)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "x must be a finite number, got nan"),
        (math.inf, "x must be a finite number, got inf"),
        (10**400, "x must be a finite number"),
        (True, "x must be a number, got True"),
        ("3", "x must be a number, got '3'"),
        (None, "x must be a number, got None"),
        (-0.5, "x must be at least 0, got -0.5"),
    ],
)
def test_bad_numbers_are_named(value, message):
    with pytest.raises(ElasticGridError, match="^" + message.replace("(", r"\(")):
        check_number("x", value)


def test_number_bounds():
    assert check_number("x", 1, maximum=1) == 1.0
    with pytest.raises(ElasticGridError, match="x must be greater than 0, got 0"):
        check_number("x", 0, exclusive_minimum=True)
    with pytest.raises(ElasticGridError, match="x must be less than 1, got 1"):
        check_number("x", 1, maximum=1, exclusive_maximum=True)
    assert check_number("x", -3, minimum=None) == -3.0


def test_integers_accept_whole_floats_only():
    assert check_integer("n", 3.0) == 3
    with pytest.raises(ElasticGridError, match=r"n must be a whole number, got 3\.5"):
        check_integer("n", 3.5)
    with pytest.raises(ElasticGridError, match="n must be at most 4, got 5"):
        check_integer("n", 5, maximum=4)


def test_choices_return_the_plain_string_even_for_an_enum_member():
    class Prefer(str, enum.Enum):
        COST = "cost"

    chosen = check_choice("prefer", Prefer.COST, ("cost", "balance"))
    assert chosen == "cost" and type(chosen) is str
    with pytest.raises(ElasticGridError, match="prefer must be one of 'cost', 'balance', got 'x'"):
        check_choice("prefer", "x", ("cost", "balance"))


def test_text_mapping_and_unknown_keys():
    assert check_text("name", "a") == "a"
    with pytest.raises(ElasticGridError, match="name must not be empty"):
        check_text("name", "  ")
    assert check_text("region", "", allow_empty=True) == ""
    with pytest.raises(ElasticGridError, match="grid must be a JSON object, got"):
        check_mapping("grid", [])
    with pytest.raises(ElasticGridError, match="provider 'a' has an unknown field 'zone'"):
        Provider.model_validate({"name": "a", "max_nodes": 1, "cost_per_node_hour": 0, "zone": 1})
