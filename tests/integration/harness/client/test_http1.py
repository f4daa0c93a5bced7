"""The generator's lean HTTP/1.1 client against a raw loopback server with scripted behaviour."""
from __future__ import annotations

import time

import pytest

from tailrace.harness.client.http1 import Http1Pool
from tailrace.harness.client.outcome import classify_exception
from tailrace.harness.services.processes import free_port
from tests.integration.harness.client.scripted_server import BODY, REQUEST

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)


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
