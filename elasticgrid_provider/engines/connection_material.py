"""Airflow connections where Airflow cannot be asked: resolved by the task, handed over privately.

The launcher is a detached child of the task that holds none of its descriptors, so it
cannot ask the task's supervisor for a connection. The task resolves what the parts need
(:func:`resolve`) and hands it over through a pipe (:func:`send`, :func:`receive`); the
launcher answers from that alone. Everywhere else the connection is read the normal way
(:func:`reading_connections`). The rules: docs/deploying.md ("Remote training hosts
(SSH)"), docs/operators.md ("No rank holds a descriptor of the task").
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from elasticgrid_provider.airflow_internals import PROCESS_CONTEXT, has_supervisor
from elasticgrid_provider.core.errors import CloudApiError, RemoteHostError

_handed: dict[str, Any] | None = None  # set in the launcher only
_service_models: Any = None  # botocore's loader, shared by every client this process builds
_service_models_lock = threading.Lock()


@contextlib.contextmanager
def reading_connections() -> Iterator[None]:
    """Read Airflow connections in the block the normal way for this process: a task's through
    its supervisor; a process that is no task in a server context (metadata database and
    secrets backends, as ``airflow connections get``), its own context restored after."""
    if has_supervisor() or PROCESS_CONTEXT in os.environ:
        yield
        return
    os.environ[PROCESS_CONTEXT] = "server"
    try:
        yield
    finally:
        os.environ.pop(PROCESS_CONTEXT, None)


def _aws_key(conn_id: str, region: str | None) -> str:
    return f"{conn_id}\n{region or ''}"


def aws_material(conn_id: str, region: str | None) -> dict[str, Any]:
    """The AWS connection's frozen credentials, region, ``endpoint_url`` and ``verify``
    (``region``: ours if set, else the connection's), through ``AwsBaseHook``."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    try:
        hook = AwsBaseHook(aws_conn_id=conn_id, client_type="ec2", region_name=region)
        with reading_connections():
            credentials = hook.get_credentials(region_name=region)
            endpoint = hook.conn_config.get_service_endpoint_url(service_name="ec2")
        return {
            "access_key": credentials.access_key,
            "secret_key": credentials.secret_key,
            "token": credentials.token,
            "region": region or hook.conn_region_name,
            "endpoint_url": endpoint,
            "verify": hook.verify,
        }
    except Exception as error:  # not found, a secrets backend's failure, no credentials
        raise CloudApiError(f"aws_conn_id {conn_id!r} cannot be read: {error}") from None


def _read_private_key(conn_id: str) -> str:
    from airflow.sdk import BaseHook

    try:
        with reading_connections():
            extra = BaseHook.get_connection(conn_id).extra_dejson
    except Exception as error:  # the SDK's not-found error, a secrets backend's failure
        raise RemoteHostError(f"ssh_conn_id {conn_id!r} cannot be read: {error}") from None
    if extra.get("private_key"):
        text = str(extra["private_key"]).replace("\\n", "\n")
    elif extra.get("key_file"):
        text = Path(str(extra["key_file"])).expanduser().read_text()
    else:
        raise RemoteHostError(
            f"ssh_conn_id {conn_id!r}: the connection holds no private key "
            "(set its extra 'private_key' or 'key_file')"
        )
    return text if text.endswith("\n") else text + "\n"


def resolve(aws: Iterable[tuple[str, str | None]], ssh: Iterable[str]) -> dict[str, Any]:
    """What the launcher needs of these connections: ``aws`` (connection, region) pairs and
    ``ssh`` connection ids (raises ``CloudApiError``/``RemoteHostError`` naming one that
    cannot be read)."""
    return {
        "aws": {_aws_key(conn, region): aws_material(conn, region) for conn, region in set(aws)},
        "ssh": {conn: _read_private_key(conn) for conn in set(ssh)},
    }


def install(material: dict[str, Any]) -> None:
    """Answer from ``material`` (from :func:`resolve`) from now on, in this process only: kept in
    memory, never in the environment, so nothing the launcher starts inherits it; a connection
    not handed over is then named in one sentence."""
    global _handed
    _handed = {"aws": dict(material.get("aws") or {}), "ssh": dict(material.get("ssh") or {})}


def send(material: dict[str, Any], descriptor: int) -> None:
    """Write ``material`` to the pipe ``descriptor`` and close it (a reader that died is
    ignored: it launches nothing)."""
    with contextlib.suppress(BrokenPipeError), os.fdopen(descriptor, "wb") as pipe:
        pipe.write(json.dumps(material).encode())


def receive(descriptor: int) -> dict[str, Any]:
    """Read what :func:`send` wrote to the pipe ``descriptor``, close it and :func:`install`
    it; an empty pipe (the task died) installs nothing to answer from."""
    with os.fdopen(descriptor, "rb") as pipe:
        data = pipe.read()
    material = json.loads(data) if data else {}
    install(material)
    return material


def ssh_private_key(conn_id: str) -> str:
    """The private key text of the SSH connection ``conn_id`` (raises ``RemoteHostError``)."""
    if _handed is None:
        return _read_private_key(conn_id)
    key = _handed["ssh"].get(conn_id)
    if key is None:
        raise RemoteHostError(
            f"ssh_conn_id {conn_id!r} was not resolved by the launch's task "
            "(the launcher reads no Airflow connection)"
        )
    return str(key)


def _sharing_service_models(session: Any) -> Any:
    """``session`` (a boto3 session) reading AWS's service models through this process's one
    botocore loader: EC2's model (megabytes of JSON) is parsed by the first client a process
    builds, not by every one (a triggerer's status looks, a check's status and reconcile,
    each part of a launch): a later client costs about a seventh of the first."""
    global _service_models
    botocore_session = session._session  # boto3 has no public name for it
    with _service_models_lock:
        if _service_models is None:
            _service_models = botocore_session.get_component("data_loader")
        else:
            botocore_session.register_component("data_loader", _service_models)
    return session


@functools.cache
def _shared_models_hook() -> Any:
    """``AwsBaseHook`` whose sessions share this process's service models (its ``get_conn``
    builds the client as ever); a class made on first use: Airflow is not imported before."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    class SharedModelsAwsHook(AwsBaseHook):
        def get_session(self, region_name: str | None = None, deferrable: bool = False) -> Any:
            session = super().get_session(region_name=region_name, deferrable=deferrable)
            return _sharing_service_models(session)

    return SharedModelsAwsHook


def ec2_client(conn_id: str, region: str | None) -> Any:
    """A boto3 EC2 client of the AWS connection ``conn_id`` (region: ``region`` if set, else
    the connection's): from the handed-over credentials in the launcher, else ``AwsBaseHook``'s
    ``get_conn``, its sessions sharing the service models."""
    if _handed is None:
        hook = _shared_models_hook()(aws_conn_id=conn_id, client_type="ec2", region_name=region)
        with reading_connections():
            return hook.get_conn()
    material = _handed["aws"].get(_aws_key(conn_id, region))
    if material is None:
        raise CloudApiError(
            f"aws_conn_id {conn_id!r} (region {region or 'of the connection'}) was not resolved "
            "by the launch's task (the launcher reads no Airflow connection)"
        )
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=material["access_key"],
        aws_secret_access_key=material["secret_key"],
        aws_session_token=material["token"],
        region_name=material["region"],
    )
    session = _sharing_service_models(session)
    return session.client("ec2", endpoint_url=material["endpoint_url"], verify=material["verify"])
