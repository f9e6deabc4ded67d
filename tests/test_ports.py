"""The test servers' port helper: two pytest workers never draw the same port."""

from __future__ import annotations

import socket

import pytest

from tests.ports import free_port


def _draws(monkeypatch: pytest.MonkeyPatch, worker: str, count: int) -> set[int]:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    return {free_port() for _ in range(count)}


def test_two_workers_draw_disjoint_ports_that_a_server_can_bind(monkeypatch: pytest.MonkeyPatch):
    first, second = _draws(monkeypatch, "gw0", 40), _draws(monkeypatch, "gw1", 40)
    assert first and second and not first & second
    with socket.socket() as server:  # what was drawn is free to take
        server.bind(("127.0.0.1", min(first)))
