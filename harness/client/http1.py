"""A lean keep-alive HTTP/1.1 client for the generator's hot path (gevent sockets + httptools' llhttp), plain or
over TLS.

Why not a general client: an open-loop generator sends one pre-encoded request shape at a high rate,
and every microsecond of client overhead is send lag for the next request. This pool opens as many
connections as there are requests in flight (never caps open-loop concurrency), reuses idle ones, and
retries once on a fresh connection when a reused one turns out closed before any response byte.
"""
from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import gevent
import httptools
from gevent import socket as gsocket

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux: the kernel stamps each packet as it arrives
_ANCILLARY = socket.CMSG_SPACE(16)  # one struct timespec
_HEADER_LENGTH = b"inference-header-content-length"
_SERVER_TIMING = b"server-timing"


class HttpResponse:
    __slots__ = ("status", "body", "complete", "keep_alive", "_chunks", "parser", "header_length", "consumer",
                 "read_ns", "body_bytes", "server_timing")
    parser: Any  # its httptools.HttpResponseParser while it is read (None once read), set by the client


    def __init__(self, consumer: Callable[[bytes, int], None] | None = None) -> None:
        self.status = 0
        self.header_length: str | None = None  # Inference-Header-Content-Length (binary tensor extension)
        self.body = b""
        self.complete = False
        self.keep_alive = True
        self._chunks: list[bytes] = []
        self.consumer = consumer  # a streamed body: each piece handed over as read, with its read instant
        self.read_ns = 0  # perf_counter_ns() when the bytes being parsed were read
        self.body_bytes = 0
        self.server_timing = b""  # a streamed response's Server-Timing header (the embedded server's TTFT parts)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == len(_HEADER_LENGTH) and name.lower() == _HEADER_LENGTH:
            self.header_length = value.decode("latin-1")
        elif len(name) == len(_SERVER_TIMING) and name.lower() == _SERVER_TIMING:
            self.server_timing = value

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()  # only meaningful before the message completes
        self.status = self.parser.get_status_code()  # a streamed body is handed over only for a 200

    def on_body(self, data: bytes) -> None:
        self.body_bytes += len(data)
        if self.consumer is not None and self.status == 200:
            self.consumer(data, self.read_ns)
        else:
            self._chunks.append(data)

    def on_message_complete(self) -> None:
        self.complete = True
        self.body = b"".join(self._chunks)


def _send_parts(sock, parts: tuple[bytes, ...]) -> None:
    """sendmsg (gather, one system call per round) until every part is sent."""
    views = [memoryview(p) for p in parts if p]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if views and sent:
            views[0] = views[0][sent:]


def _send_bytes(sock, data: bytes) -> None:
    """send until every byte is sent (plain TCP): gevent's sendall asks the kernel for SO_SNDBUF on every call, a
    system call a request more than the send itself."""
    sent = sock.send(data)
    while sent < len(data):
        sent += sock.send(memoryview(data)[sent:])


def stamped_recv(sock, offset_ns: int) -> tuple[bytes, int]:
    """recv with the kernel's receive instant of the bytes (SO_TIMESTAMPNS, wall clock) moved to the monotonic
    clock by `offset_ns`; the read's own instant when the kernel gave none. Never later than now."""
    data, ancillary, _, _ = sock.recvmsg(65536, _ANCILLARY)
    now = time.perf_counter_ns()
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
            stamp = int.from_bytes(payload[:8], "little", signed=True) * 1_000_000_000 + int.from_bytes(
                payload[8:16], "little", signed=True) - offset_ns
            return data, min(stamp, now)
    return data, now


class ConnectionClosed(ConnectionError):
    """The server closed the connection before a complete response."""


class Stalled(socket.timeout):
    """A response that began, then sent nothing for the stall timeout."""


class FirstTokenTimeout(socket.timeout):
    """No first token within the endpoint's ttft_timeout_ms."""


STALL_CHECK_S = 0.25  # how often the stall watchdog looks (a stall is caught within this of its timeout)


class Http1Pool:
    """Keep-alive connections to one host:port, over TLS when given a client context (gevent's ssl, so the
    handshake and every read and write yield to the other requests)."""

    def __init__(self, host: str, port: int, timeout_s: float, tls: "ssl.SSLContext | None" = None,
                 server_name: str | None = None, kernel_stamps: bool = False) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self.tls, self.server_name = tls, server_name or host
        # a streamed body's pieces stamped with the kernel's receive instant (plain TCP on Linux): what a busy
        # event loop does after the bytes arrive no longer moves the stamp
        self.kernel_stamps = kernel_stamps and tls is None and hasattr(socket.socket, "recvmsg")
        self._idle: list = []
        self.host_header = f"{host}:{port}".encode()
        # responses under a stall timeout: greenlet → (its response, stall_s), watched by one greenlet that wakes
        # now and then — not a timer on every read of every stream
        self._watched: dict = {}
        self._watchdog: gevent.Greenlet | None = None

    def _connect(self):
        sock = gsocket.create_connection((self.host, self.port), timeout=self.timeout_s)
        sock.settimeout(None)  # the request's own timeout (`request`) bounds every read: no timer per read
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.kernel_stamps:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                self.kernel_stamps = False
        # room for a large request in one write (a 602 kB image): fewer wake-ups of the sending loop per request
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        if self.tls is not None:
            try:
                return self.tls.wrap_socket(sock, server_hostname=self.server_name)
            except BaseException:
                sock.close()
                raise
        return sock

    def request(self, raw: bytes | tuple[bytes, ...], consumer: Callable[[bytes, int], None] | None = None,
                stall_s: float | None = None) -> HttpResponse:
        """Send one complete request (bytes, or its parts: a large pre-encoded body is sent as it is, never copied
        into a joined buffer) and read its response; raises on timeout / connection errors. `consumer`: a 200
        response's body is handed to it piece by piece as it is read (with perf_counter_ns() of the read, taken
        before any parsing) instead of being kept. `stall_s`: once the response has begun, a read that waits longer
        than this raises Stalled (a stream that stopped sending)."""
        with gevent.Timeout(self.timeout_s, socket.timeout(f"no complete response within {self.timeout_s:g} s")):
            if self._idle:
                sock = self._idle.pop()
                try:
                    return self._exchange(sock, raw, consumer, stall_s)
                except ConnectionClosed as exc:
                    if exc.args and exc.args[0] == "before response":
                        return self._exchange(self._connect(), raw, consumer, stall_s)  # stale keep-alive: retry once
                    raise
            return self._exchange(self._connect(), raw, consumer, stall_s)

    def _exchange(self, sock, raw: bytes | tuple[bytes, ...], consumer=None, stall_s: float | None = None
                  ) -> HttpResponse:
        response = HttpResponse(consumer)
        parser = response.parser = httptools.HttpResponseParser(response)
        got_bytes = False
        try:
            if isinstance(raw, tuple):
                if self.tls is None:
                    _send_parts(sock, raw)
                else:  # TLS has no gather write: each part is encrypted as it is
                    for part in raw:
                        sock.sendall(part)
            elif self.tls is None:
                _send_bytes(sock, raw)
            else:
                sock.sendall(raw)
            stamped = consumer is not None and self.kernel_stamps
            offset_ns = time.time_ns() - time.perf_counter_ns()  # wall − monotonic, for the kernel's stamps
            while not response.complete:
                if stamped:
                    data, response.read_ns = stamped_recv(sock, offset_ns)
                else:
                    data = sock.recv(65536)
                    response.read_ns = time.perf_counter_ns()
                if not data:
                    raise ConnectionClosed("during response" if got_bytes else "before response")
                if not got_bytes and stall_s is not None:
                    self._watch(response, stall_s)  # from here on no read may wait more than stall_s
                got_bytes = True
                parser.feed_data(data)
        except (ConnectionResetError, BrokenPipeError) as exc:
            sock.close()
            if not got_bytes:  # a peer that had closed a kept-alive connection answers with a reset
                raise ConnectionClosed("before response") from exc
            raise
        except BaseException:
            sock.close()
            raise
        finally:
            if stall_s is not None:
                self._watched.pop(gevent.getcurrent(), None)
        response.status = parser.get_status_code()
        response.parser = None
        if response.keep_alive:
            self._idle.append(sock)
        else:
            sock.close()
        return response

    def _watch(self, response: HttpResponse, stall_s: float) -> None:
        self._watched[gevent.getcurrent()] = (response, stall_s)
        if self._watchdog is None or self._watchdog.dead:
            self._watchdog = gevent.spawn(self._watch_stalls)

    def _watch_stalls(self) -> None:
        """Every STALL_CHECK_S while some response is watched: one that read nothing for its stall_s gets Stalled
        raised where it waits (its socket is then closed, as after any failure)."""
        while self._watched:
            gevent.sleep(STALL_CHECK_S)
            now = time.perf_counter_ns()
            for greenlet, (response, stall_s) in list(self._watched.items()):
                if now - response.read_ns >= stall_s * 1e9:
                    self._watched.pop(greenlet, None)
                    # raised where it waits, as gevent.Timeout raises (any greenlet, the main one included)
                    gevent.get_hub().loop.run_callback(
                        greenlet.throw, Stalled(f"no data for {stall_s:g} s in the middle of the response"))

    def prewarm(self, connections: int) -> None:
        """Open `connections` idle keep-alive connections now, so a burst at the start of a run does not
        pay TCP set-up on the sending loop (stale ones are retried once, as always)."""
        while len(self._idle) < connections:
            self._idle.append(self._connect())

    def close(self) -> None:
        for sock in self._idle:
            sock.close()
        self._idle.clear()
