"""The files the ``elasticgrid`` command reads: providers, samples and scale states.

A file is read whole, as UTF-8, and parsed here; every problem (missing, a
directory, not UTF-8, bad JSON, a bad field) is an :class:`ElasticGridError`
of one sentence naming the file, and the line or entry where it went wrong.

Input files:

* a providers file is a JSON list of providers or ``{"providers": [...]}``;
  without one the built-in grid of SPEC 4.5 is used;
* a samples file is a JSON list of sample objects or JSON Lines (one object
  per line, blank lines ignored), as the step reporter writes it; the
  reporter's ``time`` field (epoch seconds the line was written, i.e. when
  the step ended) is read for the clock and kept in the sample (the
  scheduler reads arrival rates from it);
* a state file is the JSON of a job's scale-state Variable
  (``ScaleState.to_dict()``), bare or as Airflow exports Variables: an
  object with exactly one key whose value is the state (or the state as a
  JSON string).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from elasticgrid_provider.core.errors import ElasticGridError
from elasticgrid_provider.core.providers import (
    DEFAULT_PROVIDERS,
    Provider,
    providers_from_dicts,
)
from elasticgrid_provider.core.samples import StepSample
from elasticgrid_provider.core.state import DecisionRecord, ScaleState
from elasticgrid_provider.core.validation import check_number

T = TypeVar("T")


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise ElasticGridError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise ElasticGridError(f"{what} {path} is a directory, not a file") from None
    except UnicodeDecodeError as error:
        raise ElasticGridError(f"{what} {path} is not UTF-8 text ({error.reason})") from None
    except OSError as error:
        raise ElasticGridError(f"cannot read {what} {path}: {error.strerror or error}") from None


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ElasticGridError(
            f"{where} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except RecursionError:
        raise ElasticGridError(f"{where} is nested too deeply to read") from None


def _load_json(path: str, what: str) -> Any:
    return _parse_json(_read_text(path, what), f"{what} {path}")


def load_grid(path: str | None) -> tuple[Provider, ...]:
    """The providers of a providers file; the built-in grid when there is none."""
    if path is None:
        return DEFAULT_PROVIDERS
    return _from_dict(providers_from_dicts, _load_json(path, "providers file"), path)


@dataclass(frozen=True)
class SampleFile:
    """The samples of a file, oldest first, with each one's time on the simulation clock."""

    path: str
    samples: tuple[StepSample, ...]
    times: tuple[float | None, ...]  # each sample's own ``time`` field, if any

    def clock(self, start: float) -> list[float]:
        """Each sample's time: its ``time`` field, else the previous time plus its duration."""
        times: list[float] = []
        previous = start
        for sample, stamped in zip(self.samples, self.times, strict=True):
            previous = stamped if stamped is not None else previous + sample.duration_s
            times.append(previous)
        return times


def load_samples(path: str) -> SampleFile:
    """The samples of a samples file (a JSON list or JSON Lines), oldest first."""
    text = _read_text(path, "samples file")
    entries: list[tuple[str, Any]] = []
    if text.lstrip().startswith("["):
        data = _parse_json(text, f"samples file {path}")
        entries = [(f"{path} index {position}", entry) for position, entry in enumerate(data)]
    else:
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as error:
                raise ElasticGridError(
                    f"{path} line {number}: not valid JSON: {error.msg} at column {error.colno}"
                ) from None
            entries.append((f"{path} line {number}", entry))
    if not entries:
        raise ElasticGridError(f"samples file {path} holds no samples")
    samples: list[StepSample] = []
    times: list[float | None] = []
    for where, entry in entries:
        try:
            stamped = None
            if isinstance(entry, dict) and "time" in entry:
                stamped = check_number("sample time", entry["time"], minimum=None)
            samples.append(StepSample.from_dict(entry))
            times.append(stamped)
        except ElasticGridError as error:
            raise ElasticGridError(f"{where}: {error}") from None
    return SampleFile(path, tuple(samples), tuple(times))


def _unwrap_state(data: Any, path: str) -> dict[str, Any]:
    """The state dict: bare, or the one value of an Airflow export ``{"key": state}``."""
    if isinstance(data, dict) and "schema_version" not in data and len(data) == 1:
        key, value = next(iter(data.items()))
        if isinstance(value, str):
            value = _parse_json(value, f"state file {path}: the value of {key!r}")
        data = value
    if not isinstance(data, dict) or "schema_version" not in data:
        raise ElasticGridError(
            f"state file {path} must hold a scale state (a JSON object with 'schema_version'), "
            "or an object with exactly one key whose value is one"
        )
    return data


def load_state(path: str) -> ScaleState:
    """The scale state of a state file (bare or as Airflow exports it)."""
    data = _unwrap_state(_load_json(path, "state file"), path)
    return _from_dict(ScaleState.from_dict, data, f"state file {path}")


def load_record(entry: Any, where: str) -> DecisionRecord:
    """A history entry as a :class:`DecisionRecord`; ``where`` names it in errors."""
    return _from_dict(DecisionRecord.from_dict, entry, where)


def _from_dict(build: Callable[[Any], T], data: Any, where: str) -> T:
    """``build(data)``; its one-sentence error is prefixed with ``where`` (the file)."""
    try:
        return build(data)
    except ElasticGridError as error:
        raise ElasticGridError(f"{where}: {error}") from None
