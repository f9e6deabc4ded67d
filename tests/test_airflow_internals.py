"""The private Airflow names the provider uses: all in one module, and all still there.

* Every name :data:`~elasticgrid_provider.airflow_internals.PRIVATE_NAMES` lists resolves on
  the installed Airflow; a release that moved one fails here, naming it and the version,
  rather than in a scale check on a worker.
* The list is complete: every import the adapter makes from a private Airflow module, or of
  a private name, is on it.
* No other module of the package reaches a private Airflow name: no import from
  ``airflow.sdk.execution_time``, ``airflow.sdk._shared`` or ``airflow.models.crypto``, no
  ``._val`` attribute, no ``_AIRFLOW_PROCESS_CONTEXT`` literal.
* The functions behave as their callers rely on (Airflow's own rule for sensitive keys;
  encrypted Variable values decrypted as ``Variable.get_val`` does).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from elasticgrid_provider import airflow_internals
from elasticgrid_provider.airflow_internals import PRIVATE_NAMES, resolve
from tests.test_package_shape import PACKAGE, PACKAGE_NAME, package_modules

ADAPTER = Path(airflow_internals.__file__)
PRIVATE_MODULES = ("airflow.sdk.execution_time", "airflow.sdk._shared", "airflow.models.crypto")


def _is_private(module: str, name: str) -> bool:
    return module.startswith(PRIVATE_MODULES) or name.startswith("_")


@pytest.mark.parametrize(("module", "attribute"), PRIVATE_NAMES, ids=lambda v: str(v))
def test_every_private_name_still_resolves(module: str, attribute: str) -> None:
    import airflow

    try:
        resolve(module, attribute)
    except (ImportError, AttributeError) as exc:
        pytest.fail(
            f"Airflow {airflow.__version__} has no {module}.{attribute} ({exc}); "
            "elasticgrid_provider/airflow_internals.py must follow it (docs/compatibility.md)"
        )


def test_the_list_names_every_private_import_of_the_adapter() -> None:
    listed = {(module, attribute.split(".")[0]) for module, attribute in PRIVATE_NAMES}
    imported = {
        (node.module, alias.name)
        for node in ast.walk(ast.parse(ADAPTER.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("airflow")
        for alias in node.names
        if _is_private(node.module, alias.name)
    }
    attributes = {
        node.attr
        for node in ast.walk(ast.parse(ADAPTER.read_text()))
        if isinstance(node, ast.Attribute) and node.attr.startswith("_")
    }
    assert imported, "the adapter imports no private name: the check below would prove nothing"
    assert imported <= listed, f"private imports missing from PRIVATE_NAMES: {imported - listed}"
    listed_attributes = {attribute.split(".")[-1] for _, attribute in PRIVATE_NAMES}
    assert attributes <= listed_attributes, f"unlisted private attributes: {attributes}"


def test_no_other_module_reaches_a_private_airflow_name() -> None:
    offenders = []
    for name, path in package_modules(PACKAGE).items():
        if path == ADAPTER:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airflow"):
                module = node.module or ""
                private = [a.name for a in node.names if _is_private(module, a.name)]
                if private:
                    offenders.append(f"{name}:{node.lineno} imports {module}.{private[0]}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PRIVATE_MODULES):
                        offenders.append(f"{name}:{node.lineno} imports {alias.name}")
            elif isinstance(node, ast.Attribute) and node.attr == "_val":
                offenders.append(f"{name}:{node.lineno} reads ._val")
            elif isinstance(node, ast.Constant) and node.value == airflow_internals.PROCESS_CONTEXT:
                offenders.append(f"{name}:{node.lineno} names {node.value}")
    assert not offenders, (
        f"private Airflow names outside {PACKAGE_NAME}.airflow_internals: {offenders}"
    )


@pytest.mark.parametrize(
    ("key", "sensitive"),
    [("HF_TOKEN", True), ("db_password", True), ("MY_API_KEY", True), ("MODE", False)],
)
def test_sensitive_keys_follow_airflows_rule(key: str, sensitive: bool) -> None:
    assert airflow_internals.is_sensitive_key(key) is sensitive


def test_an_encrypted_value_decrypts_as_airflow_stores_it(airflow_db: Path) -> None:
    from airflow.models.crypto import get_fernet

    token = get_fernet().encrypt(b'{"revision": 3}').decode()
    assert token != '{"revision": 3}'
    assert airflow_internals.decrypt_variable_value(token) == '{"revision": 3}'
