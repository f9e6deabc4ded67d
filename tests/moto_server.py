"""moto's EC2 API on loopback, one request at a time.

moto's server answers each request on its own thread, but its EC2 responses are not
thread-safe: a ``DescribeVpcPeeringConnections`` adds to a class-level transformer map that
another request's serializer is iterating, which fails that request with HTTP 500
("dictionary changed size during iteration"). A real EC2 endpoint has no such race, so the
tests' cloud serializes its requests: each one runs to its last byte under one lock.

:class:`MotoProcess` runs that server in a process of its own: its work then takes no turn of
the caller's interpreter lock, as a real cloud's takes none (what a benchmark of the caller
wants); only moto's in-process backend, which tests reach into to inject faults, is then out
of reach.
"""

from __future__ import annotations

import contextlib
import logging
import select
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server


def _one_at_a_time(app: Callable[..., Iterable[bytes]]) -> Callable[..., list[bytes]]:
    """``app`` as a WSGI app that serves one request at a time, its body read under the lock."""
    lock = threading.Lock()

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with lock:
            answer = app(environ, start_response)
            try:
                return list(answer)
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()

    return serve


class SerialMotoServer(ThreadedMotoServer):
    """:class:`ThreadedMotoServer` whose requests run one at a time (module docstring)."""

    def _server_entry(self) -> None:
        app = _one_at_a_time(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


def serve_until_stdin_closes() -> None:
    """The child's side of :class:`MotoProcess`: a :class:`SerialMotoServer` on a free
    loopback port, ``host port`` printed on one line, served until standard input closes
    (the parent closed it, or died)."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per API call
    server = SerialMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    print(host, port, flush=True)
    sys.stdin.read()
    server.stop()


class MotoProcess:
    """A :class:`SerialMotoServer` in a child process, with its ``start``,
    ``get_host_and_port`` and ``stop`` (module docstring)."""

    def __init__(self, start_timeout_s: float = 60.0) -> None:
        self.start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[str] | None = None
        self._address: tuple[str, int] | None = None

    def start(self) -> None:
        root = Path(__file__).resolve().parents[1]
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.moto_server"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], self.start_timeout_s)
        line = self._process.stdout.readline().split() if ready else []
        if len(line) != 2:
            self.stop()
            raise RuntimeError(f"moto's server did not start within {self.start_timeout_s:g} s")
        self._address = (line[0], int(line[1]))

    def get_host_and_port(self) -> tuple[str, int]:
        assert self._address is not None, "start() first"
        return self._address

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


if __name__ == "__main__":
    serve_until_stdin_closes()


S3_BUCKET = "elasticgrid-tests"  # the bucket the S3 tests make on their moto server
TEST_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client of the moto server at ``endpoint``."""
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **TEST_CREDENTIALS)


def aws_env(endpoint: str) -> dict[str, str]:
    """The environment a process's boto3 needs to reach the moto server at ``endpoint`` (what
    an instance profile and AWS's endpoint give a real instance)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
