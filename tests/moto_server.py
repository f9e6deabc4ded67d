"""moto's EC2 API on loopback, one request at a time.

moto's server answers each request on its own thread, but its EC2 responses are not
thread-safe: a ``DescribeVpcPeeringConnections`` adds to a class-level transformer map that
another request's serializer is iterating, which fails that request with HTTP 500
("dictionary changed size during iteration"). A real EC2 endpoint has no such race, so the
tests' cloud serializes its requests: each one runs to its last byte under one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
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
