"""Host-header parsing and the loopback allow-list (the servers' own tests send real
requests with foreign Host headers)."""

from __future__ import annotations

import asyncio

import pytest

from trinity.utils.hosts import HostGuard, allowed_hosts, host_of, is_loopback


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("127.0.0.1:8000", "127.0.0.1"),
        ("LocalHost", "localhost"),
        ("[::1]:8000", "::1"),
        ("[::1]", "::1"),
        ("evil.example:80", "evil.example"),
        ("", ""),
    ],
)
def test_host_of_strips_port_and_brackets(header, host):
    assert host_of(header) == host


def test_loopback_binds_get_an_allow_list_and_others_none():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    assert "localhost" in allowed_hosts("127.0.0.1")
    assert "myhost" in allowed_hosts("127.0.0.1", extra=["MyHost:9000"])
    assert allowed_hosts("0.0.0.0") is None


def _status(headers: list[tuple[bytes, bytes]]) -> int:
    sent: list[dict] = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message):
        sent.append(message)

    guard = HostGuard(app, allowed_hosts("127.0.0.1"))
    asyncio.run(guard({"type": "http", "headers": headers}, None, send))
    return sent[0]["status"]


def test_guard_rejects_a_foreign_or_missing_host():
    assert _status([(b"host", b"localhost:8000")]) == 200
    assert _status([(b"host", b"[::1]:1")]) == 200
    assert _status([(b"host", b"evil.example")]) == 400
    assert _status([(b"host", b"127.0.0.1.evil.example")]) == 400
    assert _status([]) == 400
