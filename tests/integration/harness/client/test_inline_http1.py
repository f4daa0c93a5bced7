"""The issue loop's own HTTP/1.1 client (harness/client/inline_http1.py) against the scripted loopback server
(scripted_server.py): what the greenlet path's pool does, it does — keep-alive reuse, the stale connection retried once,
the timeout, a refused connection, a malformed answer — classified the same way."""
from __future__ import annotations

import time

import pytest

from tailrace.harness.client.http1 import Http1Pool
from tailrace.harness.client.inline_http1 import InlineHttp1Pool, InlinePoller
from tailrace.harness.client.outcome import classify_exception
from tailrace.harness.services.processes import free_port
from tests.integration.harness.client.scripted_server import BODY, REQUEST, ScriptedServer

pytestmark = pytest.mark.shares_machine


class Driven:
    """An inline pool and its poller, driven the way the issue loop drives them."""

    def __init__(self, port: int, timeout_s: float = 2.0) -> None:
        self.poller = InlinePoller()
        self.done: list = []
        self.pool = InlineHttp1Pool(self.poller, "127.0.0.1", port, timeout_s, self.done.append)

    def run(self, until: int, limit_s: float = 5.0) -> None:
        """Poll until `until` exchanges have ended."""
        deadline = time.monotonic() + limit_s
        while len(self.done) < until and time.monotonic() < deadline:
            self.poller.poll()
            self.poller.expire(time.perf_counter_ns())
            self.poller.wait(0.01)
        assert len(self.done) >= until, f"{len(self.done)} of {until} exchanges ended"

    def request(self, raw=REQUEST):
        self.pool.start(raw, len(self.done))
        self.run(len(self.done) + 1)
        return self.done[-1]

    def close(self) -> None:
        self.poller.close()


@pytest.mark.parametrize("server", ["keepalive"], indirect=True)
def test_keepalive_reuses_one_connection(server):
    driven = Driven(server.port)
    for _ in range(20):
        ex = driven.request()
        assert ex.error is None and ex.response.status == 200 and ex.response.body == BODY
        assert ex.done_ns >= ex.sent_ns > 0
    assert server.connections == 1 and driven.pool.busy == 0
    driven.close()


@pytest.mark.parametrize("server", ["keepalive"], indirect=True)
def test_requests_in_flight_together_each_get_a_connection_then_share_them(server):
    driven = Driven(server.port)
    for k in range(30):
        driven.pool.start(REQUEST, k)
    driven.run(30)
    assert sorted(ex.context for ex in driven.done) == list(range(30))
    assert all(ex.error is None and ex.response.body == BODY for ex in driven.done)
    opened = server.connections
    assert opened <= 30
    for k in range(30):  # the same burst again: no new connection
        driven.pool.start(REQUEST, k)
    driven.run(60)
    assert server.connections == opened
    driven.close()


@pytest.mark.parametrize("server", ["close-after-one"], indirect=True)
def test_stale_keepalive_connection_is_retried_once(server):
    driven = Driven(server.port)
    for _ in range(5):
        ex = driven.request()
        assert ex.error is None and ex.response.status == 200 and ex.response.body == BODY
    assert server.connections == 5
    driven.close()


@pytest.mark.parametrize("server", ["hang"], indirect=True)
def test_timeout_is_classified_and_its_connection_closed(server):
    driven = Driven(server.port, timeout_s=0.3)
    t0 = time.perf_counter_ns()
    ex = driven.request()
    assert 0.25e9 < ex.done_ns - t0 < 2e9
    assert classify_exception(ex.error)[0] == "timeout"
    assert driven.pool.busy == 0 and not driven.pool._idle
    driven.close()


def test_connection_refused_is_classified_as_the_greenlet_pool_does():
    port = free_port()
    driven = Driven(port)
    ex = driven.request()
    with pytest.raises(Exception) as blocking:
        Http1Pool("127.0.0.1", port, 1.0).request(REQUEST)
    assert classify_exception(ex.error)[:2] == classify_exception(blocking.value)[:2] == ("connection", "refused")
    driven.close()


@pytest.mark.parametrize("server", ["keepalive"], indirect=True)
def test_a_request_in_parts_leaves_whole(server):
    body = b"x" * (3 << 20) + b"{}"
    head = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % len(body)
    driven = Driven(server.port)
    ex = driven.request((head, body))
    assert ex.error is None and ex.response.body == BODY
    driven.close()


class Garbage(ScriptedServer):
    """Answers every request with bytes that are not HTTP."""

    def _serve(self, conn) -> None:
        with conn:
            conn.recv(4096)
            conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            time.sleep(0.5)


def test_a_malformed_answer_fails_its_request_as_the_greenlet_pool_does():
    garbage = Garbage("keepalive")
    driven = Driven(garbage.port)
    ex = driven.request()
    with pytest.raises(Exception) as blocking:
        Http1Pool("127.0.0.1", garbage.port, 1.0).request(REQUEST)
    assert classify_exception(ex.error)[0] == classify_exception(blocking.value)[0] == "bad_response"
    assert driven.pool.busy == 0
    driven.close()
    garbage.close()
