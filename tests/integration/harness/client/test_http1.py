"""The generator's lean HTTP/1.1 client against a raw loopback server with scripted behaviour."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from tailrace.harness.client.classify import classify_exception
from tailrace.harness.client.http1 import Http1Pool
from tailrace.harness.services.processes import free_port

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)

BODY = b'{"ok":true}'
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
REQUEST = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}"


class ScriptedServer:
    """mode: keepalive (answer every request on a connection), close-after-one (answer, then close silently),
    hang (read, never answer)."""

    def __init__(self, mode: str) -> None:
        self.mode, self.connections = mode, 0
        self.port = free_port()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        with conn:
            while True:
                data = b""
                while not data.endswith(b"{}"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    data += chunk
                if self.mode == "hang":
                    time.sleep(5)
                    return
                conn.sendall(RESPONSE)
                if self.mode == "close-after-one":
                    return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server(request):
    s = ScriptedServer(request.param)
    yield s
    s.close()


@pytest.mark.parametrize("server", ["keepalive"], indirect=True)
def test_keepalive_reuses_one_connection(server):
    pool = Http1Pool("127.0.0.1", server.port, 2.0)
    for _ in range(20):
        r = pool.request(REQUEST)
        assert r.status == 200 and r.body == BODY
    assert server.connections == 1


@pytest.mark.parametrize("server", ["close-after-one"], indirect=True)
def test_stale_keepalive_connection_is_retried_once(server):
    pool = Http1Pool("127.0.0.1", server.port, 2.0)
    for _ in range(5):
        r = pool.request(REQUEST)
        assert r.status == 200 and r.body == BODY
    assert server.connections == 5


@pytest.mark.parametrize("server", ["hang"], indirect=True)
def test_timeout_is_classified(server):
    pool = Http1Pool("127.0.0.1", server.port, 0.3)
    t0 = time.monotonic()
    with pytest.raises(Exception) as err:
        pool.request(REQUEST)
    assert 0.25 < time.monotonic() - t0 < 2
    assert classify_exception(err.value)[0] == "timeout"


def test_connection_refused_is_classified():
    pool = Http1Pool("127.0.0.1", free_port(), 1.0)
    with pytest.raises(Exception) as err:
        pool.request(REQUEST)
    assert classify_exception(err.value)[:2] == ("connection", "refused")
