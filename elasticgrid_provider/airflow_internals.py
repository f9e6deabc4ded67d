"""Every private Airflow name the provider uses, in one place (docs/compatibility.md).

Airflow's public API cannot do four things the provider must: tell a failed Variable
read from a missing Variable (``hooks/state_store.py``), decide which ``envs`` keys are
sensitive by Airflow's own rule (``operators/launch.py``), read Variable columns without
loading rows (``plugins/state_cache.py``) and read connections from the metadata DB in a
CLI command (``cli/jobs_root.py``). Those uses go through the small functions below, and
:data:`PRIVATE_NAMES` lists each private name they reach, so a test resolves every one of
them and fails loudly, naming the name, on an Airflow release where one moved. Airflow is
imported only when a function is called.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

PROCESS_CONTEXT = "_AIRFLOW_PROCESS_CONTEXT"
"""The environment variable that tells Airflow which process it runs in; ``"server"``
makes connection and Variable reads search the metadata DB too."""

PRIVATE_NAMES: tuple[tuple[str, str], ...] = (
    ("airflow.sdk.execution_time.supervisor", "ensure_secrets_backend_loaded"),
    ("airflow.sdk.execution_time.secrets.execution_api", "ExecutionAPISecretsBackend"),
    ("airflow.sdk.execution_time.task_runner", "SUPERVISOR_COMMS"),
    ("airflow.sdk.execution_time", "task_runner"),
    ("airflow.sdk.execution_time.comms", "GetVariable"),
    ("airflow.sdk.execution_time.comms", "VariableResult"),
    ("airflow.sdk.execution_time.comms", "ErrorResponse"),
    ("airflow.sdk.exceptions", "ErrorType"),
    ("airflow.sdk.execution_time.context", "_get_variable_keys"),
    ("airflow.sdk._shared.secrets_masker", "should_hide_value_for_key"),
    ("airflow.models.crypto", "get_fernet"),
    ("airflow.models.variable", "Variable._val"),
)
"""``(module, attribute path)`` of every private Airflow name used here."""


def resolve(module: str, attribute: str) -> Any:
    """The object at ``module``'s dotted ``attribute`` path (raises if it moved); a module
    global that is only declared until a task runs (``SUPERVISOR_COMMS``) is its annotation."""
    found: Any = importlib.import_module(module)
    for part in attribute.split("."):
        declared = getattr(found, "__annotations__", {}) if isinstance(found, ModuleType) else {}
        found = (
            getattr(found, part) if part not in declared else getattr(found, part, declared[part])
        )
    return found


def has_supervisor() -> bool:
    """Whether this process is a task whose supervisor answers its connection and Variable
    reads (a process it spawns, such as the launcher, has none)."""
    from airflow.sdk.execution_time import task_runner  # its SUPERVISOR_COMMS, set in a task

    return getattr(task_runner, "SUPERVISOR_COMMS", None) is not None


# -- Variables, read as the task SDK reads them, but telling a failure from "missing" --


@dataclass(frozen=True)
class ApiAnswer:
    """The Execution API's answer to a Variable read: its value, "not found", or an error."""

    value: str | None = None
    not_found: bool = False
    error: str | None = None


def secrets_backends() -> list[tuple[Any, bool]]:
    """The task SDK's secrets backends, in the order it asks them, each with whether it
    is the Execution API (a task's way to the metadata DB)."""
    from airflow.sdk.execution_time.secrets.execution_api import ExecutionAPISecretsBackend
    from airflow.sdk.execution_time.supervisor import ensure_secrets_backend_loaded

    return [
        (backend, isinstance(backend, ExecutionAPISecretsBackend))
        for backend in ensure_secrets_backend_loaded()
    ]


def ask_api_server_for_variable(key: str) -> ApiAnswer:
    """Ask the task's supervisor for Variable ``key`` (raises what the channel raises)."""
    from airflow.sdk.exceptions import ErrorType
    from airflow.sdk.execution_time.comms import ErrorResponse, GetVariable, VariableResult
    from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

    answer = SUPERVISOR_COMMS.send(GetVariable(key=key))
    if isinstance(answer, VariableResult):
        return ApiAnswer(value=answer.value)
    if isinstance(answer, ErrorResponse):
        if answer.error == ErrorType.VARIABLE_NOT_FOUND:
            return ApiAnswer(not_found=True)
        return ApiAnswer(error=f"{answer.error.value}: {answer.detail}")
    return ApiAnswer(error=f"an unexpected answer: {answer}")


def variable_keys(prefix: str) -> list[str]:
    """The metastore's Variable keys starting with ``prefix`` (a query the API server does
    not turn into "not found" when it fails)."""
    from airflow.sdk.execution_time.context import _get_variable_keys

    return list(_get_variable_keys(prefix=prefix))


# -- secrets: Airflow's own rule for a sensitive key, and the Variable columns' encryption --


def is_sensitive_key(key: str) -> bool:
    """Whether Airflow masks a value stored under ``key`` (``password``, ``token``, ...
    and ``[core] sensitive_var_conn_names``)."""
    from airflow.sdk._shared.secrets_masker import should_hide_value_for_key

    return bool(should_hide_value_for_key(key))


def decrypt_variable_value(raw: str) -> str:
    """An encrypted Variable column's text, as ``Variable.get_val`` decrypts it."""
    from airflow.models.crypto import get_fernet

    return str(get_fernet().decrypt(raw.encode()).decode())


def variable_value_column() -> Any:
    """The Variable table's stored-value column (encrypted or not), for queries that must
    not load Variable rows (loading one decrypts it and registers it with the masker)."""
    from airflow.models.variable import Variable

    return Variable._val
