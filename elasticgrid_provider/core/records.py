"""Stored records, and the one rule for reading what another release wrote.

The records (a job's scale state and its decision records, the grid ledger, a launch
manifest, a plan's capacity request) carry ``schema_version`` (major) and ``schema_minor``
(minor, written only when not 0). A reader keeps each field it does not know, under its own
major, in the object it belongs to (:class:`ForwardCompatible`) and writes it back; a higher
major is refused in one sentence (:class:`~.errors.NewerRecordError`) and the record left as it
is; an older major the layout lists as migrated is upgraded on reading
(:meth:`RecordLayout.read`). Values also read as input (the window, a placement, the policy's
parameters, a grid share) are checked strictly. The rule: docs/deploying.md ("Rolling
upgrades"). Pure: no Airflow, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from functools import cache
from typing import Annotated, Any, ClassVar, cast

from pydantic import Field, GetJsonSchemaHandler, model_serializer, model_validator
from pydantic_core import core_schema

from elasticgrid_provider.core.errors import ElasticGridError, NewerRecordError
from elasticgrid_provider.core.validation import check_integer

SCHEMA_VERSION_KEY = "schema_version"  # the major version
SCHEMA_MINOR_KEY = "schema_minor"  # the minor version; absent means 0
EXTRAS = "extras"  # the field that holds an object's unknown fields (never written as such)

Extras = Annotated[dict[str, Any], Field(exclude=True)]
"""The type of a :class:`ForwardCompatible` model's ``extras`` field."""


def extras_field() -> Any:
    """The ``extras`` field of a :class:`ForwardCompatible` model: last, empty by default,
    outside the hash (a dict cannot be hashed) and the repr."""
    return dataclasses.field(default_factory=dict, hash=False, repr=False)


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """One record's versions (module docstring).

    :param name: the record in words, as errors name it (``grid ledger``).
    :param major: the major version this release reads and writes.
    :param minor: the minor version this release writes.
    :param migrated: older majors still read, and upgraded on reading.
    :param unversioned: the major of a stored record without ``schema_version`` (one
        written before it had one); None refuses such a record.
    """

    name: str
    major: int
    minor: int = 0
    migrated: tuple[int, ...] = ()
    unversioned: int | None = None

    @property
    def version(self) -> str:
        """``MAJOR.MINOR`` of what this release writes."""
        return f"{self.major}.{self.minor}"

    def read(self, data: Mapping[str, Any], remedy: str = "") -> tuple[int, dict[str, Any]]:
        """The stored major and the record without its version fields; a higher major raises
        :class:`NewerRecordError`, an unknown older one :class:`ElasticGridError` (``remedy``
        ends that sentence: what to do with the record)."""
        where = f"{self.name} {SCHEMA_VERSION_KEY}"
        stored = data.get(SCHEMA_VERSION_KEY, self.unversioned)
        major = stored if stored is None else check_integer(where, stored, minimum=None)
        check_integer(f"{self.name} {SCHEMA_MINOR_KEY}", data.get(SCHEMA_MINOR_KEY, 0))
        if major is not None and major > self.major:
            raise NewerRecordError(
                f"{where} {major} was written by a newer release of elasticgrid-provider than "
                f"this worker's, which reads {self.version}: upgrade elasticgrid-provider here; "
                f"the {self.name} is left as it is"
            )
        if major is None or (major != self.major and major not in self.migrated):
            older = "".join(f" (or {old}, which is migrated)" for old in self.migrated)
            raise ElasticGridError(f"{where} must be {self.major}{older}, got {stored!r}{remedy}")
        fields = {k: v for k, v in data.items() if k not in (SCHEMA_VERSION_KEY, SCHEMA_MINOR_KEY)}
        return major, fields

    def stamp(self, dumped: dict[str, Any]) -> dict[str, Any]:
        """``dumped`` with this release's version fields (``schema_minor`` only when not 0)."""
        dumped[SCHEMA_VERSION_KEY] = self.major
        if self.minor:
            dumped[SCHEMA_MINOR_KEY] = self.minor
        return dumped


def split_unknown(
    data: Mapping[str, Any], known: frozenset[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``data``'s known fields, and the others (an ``extras`` key is someone else's field)."""
    fields = {key: value for key, value in data.items() if key in known}
    return fields, {key: value for key, value in data.items() if key not in known}


def with_unknown(dumped: dict[str, Any], extras: Mapping[str, Any]) -> dict[str, Any]:
    """``dumped`` with the unknown fields kept from reading (a known field wins a clash)."""
    return {**extras, **dumped} if extras else dumped


def known_fields(model: type) -> frozenset[str]:
    """The field names of a dataclass model, but ``extras``."""
    return _field_names(cast(Hashable, model))


@cache
def _field_names(model: Any) -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(model)) - {EXTRAS}


class ForwardCompatible:
    """A :func:`~.validation.model` whose unknown fields are kept (module docstring).

    Declare it first among the bases, with a last field ``extras: Extras = extras_field()``;
    a record's root also sets :attr:`LAYOUT`, and may override :meth:`_migrate` (an older
    major's JSON as this release reads it) and :meth:`_remedy`.
    """

    LAYOUT: ClassVar[RecordLayout | None] = None

    @classmethod
    def _migrate(cls, data: dict[str, Any], major: int) -> dict[str, Any]:
        """A stored root of ``major`` as this release reads it (unchanged by default)."""
        return data

    @classmethod
    def _remedy(cls, data: Mapping[str, Any]) -> str:
        """The end of the sentence refusing an unknown older version: what to do."""
        return ""

    @model_validator(mode="before")
    @classmethod
    def _read_stored(cls, data: Any) -> Any:
        """A stored object: its version checked (a root), its unknown fields set aside."""
        if not isinstance(data, dict):  # built in code: nothing unknown
            return data
        if cls.LAYOUT is not None:
            major, data = cls.LAYOUT.read(data, cls._remedy(data))
            data = cls._migrate(data, major)
        known = known_fields(cls)
        if data.keys() <= known:  # the common case: nothing unknown, nothing to copy
            return data
        fields, unknown = split_unknown(data, known)
        return {**fields, EXTRAS: unknown}

    @model_serializer(mode="wrap")
    def _write_stored(self, handler: Any):  # no return type: pydantic keeps the JSON Schema
        """The fields, the unknown ones kept from reading, and a root's version fields."""
        dumped = handler(self)
        if self.extras:  # type: ignore[attr-defined]  # every model declares it
            dumped = with_unknown(dumped, self.extras)  # type: ignore[attr-defined]
        return dumped if self.LAYOUT is None else self.LAYOUT.stamp(dumped)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        """The fields' schema, open to fields of newer minors; a root's version fields."""
        json_schema = handler(schema)
        target = handler.resolve_ref_schema(json_schema)
        target["additionalProperties"] = True
        if cls.LAYOUT is not None:
            target.setdefault("properties", {})[SCHEMA_VERSION_KEY] = {
                "type": "integer",
                "const": cls.LAYOUT.major,
                "description": "The major version of this layout.",
            }
            target["properties"][SCHEMA_MINOR_KEY] = {
                "type": "integer",
                "minimum": 0,
                "default": 0,
                "description": "The minor version of this layout (absent: 0).",
            }
            target["required"] = sorted({*target.get("required", []), SCHEMA_VERSION_KEY})
        return json_schema
