"""A job's scale state in Airflow: a failed read of the state is an error, never "no state".

Airflow's ``Variable.get(key, default=None)`` answers the default both when the Variable does
not exist and when the read failed (each secrets backend's error is logged and skipped; in a
task the Execution API server answers 404), so a check would write a fresh state over the
stored one. :func:`read_variable` asks the same secrets backends, in the same order, itself:
an error fails the read (:class:`StateReadError`), a "not found" in a task is confirmed by
listing the metastore's keys, and a state reported missing for a job whose folder records a
write (:data:`STATE_RECORD_NAME`) fails too. The secrets cache is never used; Airflow is
imported only when a Variable is read. The fault and the rules: docs/recovery.md ("A failed
read of the state is an error, never "no state"").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from elasticgrid_provider.core.clock import utc_iso_now
from elasticgrid_provider.core.errors import (
    CorruptStateError,
    ElasticGridError,
    NewerRecordError,
    StateReadError,
)
from elasticgrid_provider.core.state import ScaleState, state_variable_key
from elasticgrid_provider.core.step_log import cut_report


def _cause(error: Any) -> str:
    """The first line of an error, cut short (a failed SQL query carries its statement)."""
    lines = str(error).strip().splitlines()
    return cut_report(f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": "))


def read_variable(key: str) -> str | None:
    """The Variable's raw text, None only when every secrets backend says it does not
    exist; :class:`StateReadError` (one sentence) when that cannot be told."""
    from elasticgrid_provider.airflow_internals import secrets_backends

    for backend, is_execution_api in secrets_backends():
        if is_execution_api:
            value = _ask_the_api_server(key)
        else:
            try:
                value = backend.get_variable(key=key)
            except Exception as exc:  # any failure: the Variable may well exist
                raise StateReadError(
                    f"Variable {key!r} could not be read from the "
                    f"{type(backend).__name__} secrets backend ({_cause(exc)})"
                ) from None
        if value is not None:
            return str(value)
    return None


def _ask_the_api_server(key: str) -> str | None:
    """The value the Execution API returns, None on a confirmed "not found"."""
    from elasticgrid_provider.airflow_internals import ask_api_server_for_variable

    try:
        answer = ask_api_server_for_variable(key)
    except Exception as exc:
        raise StateReadError(
            f"Variable {key!r} could not be read through the Execution API ({_cause(exc)})"
        ) from None
    if answer.not_found:
        _confirm_absent(key)
        return None
    if answer.error is not None:
        raise StateReadError(
            f"Variable {key!r} could not be read through the Execution API "
            f"({cut_report(answer.error)})"
        )
    return answer.value


def _confirm_absent(key: str) -> None:
    """Raise unless the metastore's key listing agrees that ``key`` does not exist (the API
    server answers "not found" also when its own read of the Variable failed)."""
    from elasticgrid_provider.airflow_internals import variable_keys

    try:
        keys = variable_keys(prefix=key)
    except Exception as exc:
        raise StateReadError(
            f"Variable {key!r} was reported missing, but listing the metadata DB's keys to "
            f"confirm it failed ({_cause(exc)})"
        ) from None
    if key in keys:
        raise StateReadError(
            f"Variable {key!r} exists in the metadata DB, but reading it failed (the API "
            "server reports a failed read as 'not found'; its log names the cause)"
        )


def scale_state_exists(job_name: str) -> bool:
    """Whether the job's state Variable exists, whatever it holds (from a task)."""
    return read_variable(state_variable_key(job_name)) is not None


# -- the job's scale state: one Variable, and a record in the job's folder that it exists --

STATE_RECORD_NAME = "scale-state.json"
"""Written in the job's folder after each write of its state Variable: from then on, a
state reported missing is a failed read (or a deletion a person must confirm), never a
fresh start."""


def read_scale_state(job_folder: Path, job_name: str) -> ScaleState:
    """The job's scale state: fresh only when its Variable surely does not exist and none
    was ever written for the job in ``job_folder``; StateReadError otherwise, and
    CorruptStateError for a state that cannot be used (left as it is)."""
    key = state_variable_key(job_name)
    try:
        text = read_variable(key)
    except StateReadError as exc:
        raise StateReadError(
            f"job {job_name!r}'s scale state could not be read, so the check decided and "
            f"wrote nothing (the next try reads it again): {exc}"
        ) from None
    if text is None:
        record = job_folder / STATE_RECORD_NAME
        written = _written(record)
        if written is not None:
            raise StateReadError(
                f"job {job_name!r}'s scale state Variable {key!r} was written (revision "
                f"{written.get('revision')} at {written.get('written_at')}, recorded in "
                f"{record}) but is now reported missing, so the check decided and wrote "
                "nothing: a failed read is retried; if the Variable was deleted on purpose, "
                "delete that record file too"
            )
        return ScaleState(job_name=job_name)
    try:
        if not text.strip():
            raise ElasticGridError("it is empty")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ElasticGridError(f"it is not valid JSON ({exc})") from None
        if data is None:
            raise ElasticGridError("it holds null instead of a state object")
        return ScaleState.model_validate(data, job_name=job_name)
    except NewerRecordError as exc:  # not corrupt: a newer release wrote it
        raise NewerRecordError(f"scale state Variable {key!r}: {exc}") from None
    except ElasticGridError as exc:
        raise CorruptStateError(
            f"scale state Variable {key!r} cannot be used: {cut_report(str(exc))}; fix or "
            "delete it (the check leaves it unchanged)"
        ) from None


def state_text(data: dict[str, Any]) -> str:
    """A state's JSON (:meth:`ScaleState.model_dump`) as its Variable stores it, so that a long
    history costs the pages that decrypt and parse it the least: compact (no indentation, no
    blanks after separators), and each history entry without ``context.readable``, the
    summary and rounded figures derived from the entry itself (the check's XCom record and log
    keep them; the pages and the CLI format their own). A third of the size of the indented
    whole for a decision record."""
    history = [_without_readable(entry) for entry in data.get("history") or ()]
    return json.dumps({**data, "history": history}, separators=(",", ":"))


def _without_readable(entry: Any) -> Any:
    context = entry.get("context") if isinstance(entry, dict) else None
    if not isinstance(context, dict) or "readable" not in context:
        return entry
    return {**entry, "context": {k: v for k, v in context.items() if k != "readable"}}


def write_scale_state(job_folder: Path, state: ScaleState, log: Any) -> None:
    """Write the job's state Variable, then record in ``job_folder`` that it exists (a record
    that cannot be written is logged as a warning on ``log``: an older one still guards
    the state)."""
    from airflow.sdk import Variable

    from elasticgrid_provider.atomic_files import write_json

    key = state_variable_key(state.job_name)
    Variable.set(
        key,
        state_text(state.model_dump()),
        description=f"elasticgrid scale state of job {state.job_name}",
    )
    record = job_folder / STATE_RECORD_NAME
    try:
        written = {"variable": key, "revision": state.revision, "written_at": utc_iso_now()}
        write_json(record, written, private=True)
    except OSError as exc:
        log.warning(
            "Could not record in %s that job %s's scale state was written: %s.",
            record,
            state.job_name,
            exc.strerror or exc,
        )


def _written(record: Path) -> dict[str, Any] | None:
    """What ``record`` says of the last state written; None when there is no record."""
    try:
        data = json.loads(record.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # unreadable: a state may exist all the same
        return {"revision": "unknown", "written_at": f"an unknown time ({exc})"}
    return data if isinstance(data, dict) else {"revision": "unknown", "written_at": "?"}
