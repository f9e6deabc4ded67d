"""Checks for numbers and strings that arrive from users, files and XCom.

Each rule is written once, as an ``Annotated`` field type (:data:`Finite`, :data:`Count`,
:data:`Text`, ..., :func:`finite` / :func:`whole` / :func:`choice` for other bounds) of the
models declared with :func:`model`; the ``check_*`` functions are those types in function
form. The models are pydantic *dataclasses*, so positional construction,
``dataclasses.replace`` and ``fields`` keep working. The rules: docs/errors.md ("Bad input").
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from collections.abc import Callable, Hashable
from enum import Enum
from functools import cache, wraps
from typing import Annotated, Any, ClassVar, Literal, TypeVar, cast

from pydantic import (
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    Strict,
    TypeAdapter,
    ValidationError,
)
from pydantic import dataclasses as pydantic_dataclasses
from pydantic_core import PydanticCustomError, core_schema
from typing_extensions import Self, dataclass_transform

from elasticgrid_provider.core.errors import ElasticGridError

_LARGEST = sys.float_info.max  # integers beyond a float are refused like infinity


def _refuse(phrase: str) -> PydanticCustomError:
    """A refusal without the field's name: ``must be ..., got X`` (the caller names the field)."""
    return PydanticCustomError("elasticgrid", "{phrase}", {"phrase": phrase})


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _refuse(f"must be a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float
        number = math.inf
    if not math.isfinite(number):
        raise _refuse(f"must be a finite number, got {value!r}")
    return number


def finite(
    minimum: float | None = 0.0,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
) -> BeforeValidator:
    """Metadata for ``Annotated[float, finite(...)]``: a finite, non-bool number in bounds."""
    low = -math.inf if minimum is None else minimum
    high = math.inf if maximum is None else maximum

    def check(value: Any) -> float:
        kind = type(value)
        if (kind is float or kind is int) and -_LARGEST < value < _LARGEST:
            number = float(value)  # the common case, without the checks' messages
        else:
            number = _number(value)
        if not (number > low if exclusive_minimum else number >= low):
            bound = "greater than" if exclusive_minimum else "at least"
            raise _refuse(f"must be {bound} {minimum:g}, got {value!r}")
        if not (number < high if exclusive_maximum else number <= high):
            bound = "less than" if exclusive_maximum else "at most"
            raise _refuse(f"must be {bound} {maximum:g}, got {value!r}")
        return number

    return BeforeValidator(check)


def whole(minimum: int | None = 0, maximum: int | None = None) -> BeforeValidator:
    """Metadata for ``Annotated[int, whole(...)]``: a whole number (3.0 is 3; "3" is refused)."""

    def check(value: Any) -> int:
        if type(value) is int and -_LARGEST < value < _LARGEST:
            number = value
        elif (as_float := _number(value)).is_integer():
            number = int(as_float)
        else:
            raise _refuse(f"must be a whole number, got {value!r}")
        if minimum is not None and number < minimum:
            raise _refuse(f"must be at least {minimum}, got {value!r}")
        if maximum is not None and number > maximum:
            raise _refuse(f"must be at most {maximum}, got {value!r}")
        return number

    return BeforeValidator(check)


def _text(allow_empty: bool) -> BeforeValidator:
    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise _refuse(f"must be a string, got {value!r}")
        if not allow_empty and not value.strip():
            raise _refuse(f"must not be empty, got {value!r}")
        return value

    return BeforeValidator(check)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _refuse(f"must be true or false, got {value!r}")
    return value


class Choice(str, Enum):
    """A fixed set of words; members equal, print and dump as their plain strings."""

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]


ChoiceT = TypeVar("ChoiceT", bound=Choice)


class OneOf:
    """Metadata for ``Annotated[str, OneOf(words)]``: one of a fixed set of words (schema ``enum``)."""

    def __init__(self, words: tuple[str, ...], members: tuple[Any, ...] | None = None) -> None:
        self.words = words
        self.members = members or words

    def pick(self, value: Any) -> Any:
        """The member whose word ``value`` is, or a refusal listing the words."""
        for word, member in zip(self.words, self.members, strict=True):
            if value == word:
                return member
        allowed = ", ".join(repr(word) for word in self.words)
        raise _refuse(f"must be one of {allowed}, got {value!r}")

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self.pick, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        return {**handler(schema), "enum": list(self.words)}


def choice(kind: type[ChoiceT], *allowed: ChoiceT) -> OneOf:
    """Metadata for ``Annotated[kind, choice(kind, ...)]``: one of ``allowed`` (default: all)."""
    members = allowed or tuple(kind)
    return OneOf(tuple(member.value for member in members), members)


def one_of(words: tuple[str, ...]) -> OneOf:
    """Metadata for ``Annotated[str, one_of(words)]``: one of a fixed tuple of words."""
    return OneOf(words)


Finite = Annotated[float, finite(None)]  # any finite number (a time, a trend)
NonNegative = Annotated[float, finite()]  # a finite number >= 0
AboveZero = Annotated[float, finite(0.0, exclusive_minimum=True)]  # > 0 (a duration, a lease)
Count = Annotated[int, whole()]  # a whole number >= 0
Positive = Annotated[int, whole(1)]  # a whole number >= 1 (a node count, a window size)
Text = Annotated[str, _text(allow_empty=False)]  # a non-empty string
AnyText = Annotated[str, _text(allow_empty=True)]  # a string, possibly empty
Flag = Annotated[bool, BeforeValidator(_flag)]  # true or false, never 1 or "yes"

# every model: unknown fields refused, no NaN or infinity
MODEL_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False, arbitrary_types_allowed=False)


# -- the same types in function form, for one value with a field name ---------------------


@cache
def _adapter(kind: Any, rule: Callable[..., Any] | None = None, *args: Any) -> TypeAdapter[Any]:
    """The cached adapter of ``kind``, or of ``Annotated[kind, rule(*args)]``."""
    return TypeAdapter(kind if rule is None else Annotated[kind, rule(*args)])


def _checked(
    field: str, value: Any, adapter: TypeAdapter[Any], owner: str | None = None, context: Any = None
) -> Any:
    try:
        return adapter.validate_python(value, context=context)
    except ValidationError as error:
        raise model_error(error, field, owner) from None


def check_number(
    field: str,
    value: Any,
    *,
    minimum: float | None = 0.0,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
) -> float:
    """:func:`finite` in function form: ``value`` as a float in bounds, or raise naming ``field``
    (``minimum`` defaults to 0; ``None`` means no lower bound)."""
    bounds = (minimum, maximum, exclusive_minimum, exclusive_maximum)
    return float(_checked(field, value, _adapter(float, finite, *bounds)))


def check_integer(
    field: str, value: Any, *, minimum: int | None = 0, maximum: int | None = None
) -> int:
    """:func:`whole` in function form: ``value`` as an int in bounds, or raise naming ``field``."""
    return int(_checked(field, value, _adapter(int, whole, minimum, maximum)))


def check_text(field: str, value: Any, *, allow_empty: bool = False) -> str:
    """:data:`Text` (or :data:`AnyText`) in function form: ``value`` as a string, or raise."""
    return str(_checked(field, value, _adapter(AnyText if allow_empty else Text)))


def check_choice(field: str, value: Any, choices: tuple[str, ...]) -> str:
    """:func:`one_of` in function form: ``value`` as the plain string of one of ``choices``."""
    return str(_checked(field, value, _adapter(str, one_of, choices)))


def check_mapping(field: str, value: Any) -> dict[str, Any]:
    """A strict ``dict`` field in function form: ``value`` if it is a JSON object, or raise."""
    return _checked(field, value, _adapter(Annotated[dict, Strict()]))


def number_from_text(value: Any) -> Any:
    """A numeric string (from a form or a template) as a float; anything else unchanged."""
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return value
    return value


def none_as_default(data: Any, *names: str) -> Any:
    """``data`` without the ``names`` stored as null (older documents): they take their defaults."""
    if isinstance(data, dict) and any(name in data and data[name] is None for name in names):
        return {key: value for key, value in data.items() if key not in names or value is not None}
    return data


# -- the one adapter from pydantic's errors to ours ---------------------------------------

_OBJECT_ERRORS = frozenset({"dict_type", "model_type", "dataclass_type", "model_attributes_type"})
_LIST_ERRORS = frozenset({"list_type", "tuple_type"})
_UNKNOWN_FIELD_ERRORS = frozenset({"extra_forbidden", "unexpected_keyword_argument"})
_MISSING_ERRORS = frozenset({"missing", "missing_argument", "missing_keyword_only_argument"})


def model_error(
    error: ValidationError,
    where: str,
    owner: str | None = None,
    positional: tuple[str, ...] = (),
    within: str = "",
) -> ElasticGridError:
    """One sentence for the first problem in ``error``: ``where``, the dotted field path, the value.

    ``owner`` names the model when ``where`` is empty; ``positional`` names the fields given
    by position; ``within`` is the dotted path the validated value sits at (``params``). A
    validator's :class:`ElasticGridError` is kept; a validator's ``ValueError`` gives the phrase.
    """
    problem = error.errors(include_url=False)[0]
    kind, value = problem["type"], problem.get("input")
    cause = (problem.get("ctx") or {}).get("error")
    if isinstance(cause, ElasticGridError):
        return type(cause)(str(cause))
    loc = list(problem["loc"])
    if loc and isinstance(loc[0], int) and loc[0] < len(positional):
        loc[0] = positional[loc[0]]
    path = [part for part in within.split(".") if part] + [str(part) for part in loc]
    if kind in _UNKNOWN_FIELD_ERRORS | _MISSING_ERRORS:
        named = " ".join(part for part in (where, ".".join(path[:-1])) if part)
        owner = named or owner or "input"
        verb = "has an unknown field" if kind in _UNKNOWN_FIELD_ERRORS else "is missing the field"
        return ElasticGridError(f"{owner} {verb} {path[-1] if path else '?'!r}")
    if kind == "elasticgrid":
        phrase = str(problem["msg"])
    elif kind == "value_error" and cause is not None:
        phrase = str(cause)
    elif kind in _OBJECT_ERRORS:
        phrase = f"must be a JSON object, got {value!r}"
    elif kind in _LIST_ERRORS:
        phrase = f"must be a list, got {value!r}"
    else:
        message = str(problem["msg"]).replace("Input should be", "must be")
        phrase = f"{message[:1].lower()}{message[1:]}, got {value!r}"
    field = " ".join(part for part in (where, ".".join(path)) if part) or owner or "input"
    return ElasticGridError(f"{field} {phrase}")


ModelT = TypeVar("ModelT")
FROM_JSON: dict[str, Any] = {"from_json": True}  # model_validate's context: JSON stands for models


def class_words(name: str) -> str:
    """A class name as lowercase words: ``QueuedRequest`` -> ``queued request``."""
    return " ".join(word.lower() for word in re.findall(r"[A-Z][a-z0-9]*", name))


class JsonModel:
    """JSON in and out for a :func:`model` class, under pydantic's names.

    ``WHERE`` names the model in errors: by default the class name in words
    (:func:`class_words`), unless the class declares ``WHERE`` or an ``OWNER`` (a model
    whose errors name only the field's path); :meth:`_where` names one instance
    (``provider 'aws'``).
    """

    WHERE: ClassVar[str] = ""
    OWNER: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "WHERE" not in cls.__dict__ and "OWNER" not in cls.__dict__:
            cls.WHERE = class_words(cls.__name__)

    @classmethod
    def _where(cls, data: Any) -> str:
        return cls.WHERE

    @classmethod
    def type_adapter(cls) -> TypeAdapter[Any]:
        """The cached pydantic adapter of this class."""
        return _adapter(cast(Hashable, cls))

    def model_dump(self, *, mode: Literal["json", "python"] = "json") -> dict[str, Any]:
        """Plain JSON of this model (enums as their strings, tuples as lists); pydantic's ``mode``."""
        return self.type_adapter().dump_python(self, mode=mode)

    @classmethod
    def model_validate(cls, data: Any, *, where: str | None = None) -> Self:
        """Build from plain JSON, or raise one sentence naming the field and the value."""
        where = cls._where(data) if where is None else where
        return _checked(where, data, cls.type_adapter(), cls.OWNER, FROM_JSON)

    def model_dump_json(self) -> str:
        """:meth:`model_dump` as a JSON string, in the fields' order."""
        return self.type_adapter().dump_json(self).decode()

    @classmethod
    def model_validate_json(cls, text: str | bytes, *, where: str | None = None) -> Self:
        """Build from a JSON string, or raise one sentence: not JSON, or the field and value."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as error:
            named = cls._where(None) if where is None else where
            raise ElasticGridError(f"{named or 'input'} is not valid JSON: {error}") from None
        return cls.model_validate(data, where=where)

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]:
        """The JSON Schema of :meth:`model_dump`'s output (derived fields included)."""
        return cls.type_adapter().json_schema(mode="serialization")


def trusted(cls: type[ModelT], **values: Any) -> ModelT:
    """A :func:`model` instance, unchecked, from values derived from checked models (missing
    fields take their defaults); only where the policy benchmark measured the checks' cost."""
    instance = object.__new__(cls)
    for name, field in cls.__dataclass_fields__.items():  # type: ignore[attr-defined]
        if name not in values:
            factory = field.default_factory
            values[name] = field.default if factory is dataclasses.MISSING else factory()
    instance.__dict__.update(values)
    return instance


@dataclass_transform(frozen_default=True)
def model(cls: type[ModelT]) -> type[ModelT]:
    """Make ``cls`` a frozen pydantic dataclass with :data:`MODEL_CONFIG`; construction errors
    become :func:`model_error` sentences, so ``Provider(...)`` fails like loading from JSON."""
    built: Any = pydantic_dataclasses.dataclass(frozen=True, config=MODEL_CONFIG)(cls)
    validated_init = built.__init__

    @wraps(validated_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            validated_init(self, *args, **kwargs)
        except ValidationError as error:
            names = tuple(field.name for field in dataclasses.fields(built))[: len(args)]
            where = built._where({**dict(zip(names, args, strict=False)), **kwargs})
            raise model_error(error, where, built.OWNER, names) from None

    built.__init__ = __init__
    return built
