"""Checks for numbers and strings that arrive from users, files and XCom.

Rules: booleans are not numbers; NaN and infinity are never accepted; a
field declared as an integer must hold a whole number (``3.0`` is accepted
as 3, ``3.5`` is not). Every failure is an :class:`ElasticGridError` naming
the field and the value, so callers never need their own wording.
"""

from __future__ import annotations

import math
from typing import Any

from elasticgrid_provider.core.errors import ElasticGridError


def _number(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ElasticGridError(f"{field} must be a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float
        raise ElasticGridError(f"{field} must be a finite number, got {value!r}") from None
    if not math.isfinite(number):
        raise ElasticGridError(f"{field} must be a finite number, got {value!r}")
    return number


def check_number(
    field: str,
    value: Any,
    *,
    minimum: float | None = 0.0,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
) -> float:
    """Return ``value`` as a finite float within the bounds, or raise naming ``field``.

    The default ``minimum=0`` makes "non-negative" the norm; pass ``None``
    for no lower bound.
    """
    number = _number(field, value)
    if minimum is not None:
        if exclusive_minimum and not number > minimum:
            raise ElasticGridError(f"{field} must be greater than {minimum:g}, got {value!r}")
        if not exclusive_minimum and not number >= minimum:
            raise ElasticGridError(f"{field} must be at least {minimum:g}, got {value!r}")
    if maximum is not None:
        if exclusive_maximum and not number < maximum:
            raise ElasticGridError(f"{field} must be less than {maximum:g}, got {value!r}")
        if not exclusive_maximum and not number <= maximum:
            raise ElasticGridError(f"{field} must be at most {maximum:g}, got {value!r}")
    return number


def check_integer(
    field: str, value: Any, *, minimum: int | None = 0, maximum: int | None = None
) -> int:
    """Return ``value`` as an int within the bounds, or raise naming ``field``."""
    number = _number(field, value)
    if not number.is_integer():
        raise ElasticGridError(f"{field} must be a whole number, got {value!r}")
    whole = int(number)
    if minimum is not None and whole < minimum:
        raise ElasticGridError(f"{field} must be at least {minimum}, got {value!r}")
    if maximum is not None and whole > maximum:
        raise ElasticGridError(f"{field} must be at most {maximum}, got {value!r}")
    return whole


def check_text(field: str, value: Any, *, allow_empty: bool = False) -> str:
    """Return ``value`` as a string, or raise naming ``field`` (empty refused by default)."""
    if not isinstance(value, str):
        raise ElasticGridError(f"{field} must be a string, got {value!r}")
    if not allow_empty and not value.strip():
        raise ElasticGridError(f"{field} must not be empty, got {value!r}")
    return value


def check_choice(field: str, value: Any, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, or raise naming ``field``."""
    for choice in choices:
        if value == choice:
            return choice  # the plain string, also when given a str-valued Enum member
    allowed = ", ".join(repr(choice) for choice in choices)
    raise ElasticGridError(f"{field} must be one of {allowed}, got {value!r}")


def check_mapping(field: str, value: Any) -> dict[str, Any]:
    """Return ``value`` if it is a JSON object (dict), or raise naming ``field``."""
    if not isinstance(value, dict):
        raise ElasticGridError(f"{field} must be a JSON object, got {value!r}")
    return value


def reject_unknown_keys(field: str, data: dict[str, Any], known: set[str] | frozenset[str]) -> None:
    """Raise naming the first key of ``data`` that is not in ``known``."""
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ElasticGridError(f"{field} has an unknown field {unknown[0]!r}")


def number_from_text(value: Any) -> Any:
    """A numeric string as a float; anything else unchanged, for the checks above to judge.

    Connection forms and rendered templates hand numbers over as strings.
    """
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return value
    return value
