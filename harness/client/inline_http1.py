"""HTTP/1.1 exchanges that the issue loop drives itself, with no greenlet per request (plain TCP, keep-alive).

One `InlinePoller` (an epoll set) holds the connections of every inline pool of a worker. The issue loop calls
`poll()` between sends and `wait()` when nothing is due; `wait()` blocks through gevent, so the rest of the worker
(heartbeats, chunk shipping) runs as before. `InlineHttp1Pool.start` sends a request at once. Its response is read
as its bytes arrive. When it completes, fails or runs out of time (`expire`), the pool's `done` callback gets the
`InlineExchange`. An idle connection stays registered for reading, so a request costs no epoll_ctl: one send, one
recv, one share of an epoll_wait.

The same behaviour as harness/client/http1.py's pool, which the greenlet path keeps:
- connections opened as needed (open-loop concurrency is never capped) and reused when idle;
- a reused connection that turns out closed before any response byte: the request is sent again, once, on a new one;
- the endpoint's timeout bounds the whole exchange, connecting and the retry included.
"""
from __future__ import annotations

import errno
import heapq
import itertools
import socket
import time
from collections import deque
from collections.abc import Callable

import httptools
from gevent import get_hub
from gevent.monkey import get_original
from gevent.socket import wait as wait_on
from gevent.socket import wait_write

from tailrace.harness.client.http1 import (
    SO_TIMESTAMPNS,
    STALL_CHECK_S,
    ConnectionClosed,
    FirstTokenTimeout,
    HttpResponse,
    Stalled,
    stamped_recv,
)
from tailrace.harness.client.outcome import StreamCancelled

_epoll = get_original("select", "epoll")  # gevent's monkey patching removes select.epoll from the module
_select = get_original("select", "select")  # the kernel's select: blocks this process, with a µs timeout
_socket = get_original("socket", "socket")  # a plain socket: never gevent's (its I/O would switch greenlets)
_EPOLLIN, _EPOLLOUT = 0x001, 0x004
_EPOLLERR_HUP = 0x008 | 0x010
_SNDBUF = 4 << 20  # room for a large request in one write (as harness/client/http1.py)


class InlineExchange:
    """One request on an inline pool: its bytes, its response, when it went out and when it ended."""

    __slots__ = ("context", "raw", "out", "deadline_ns", "conn", "response", "parser", "sent_ns", "done_ns",
                 "error", "reused", "retried", "got_bytes", "open", "reader")

    def __init__(self, raw: bytes | tuple[bytes, ...], context: object, deadline_ns: int, reader=None) -> None:
        self.context, self.deadline_ns, self.raw = context, deadline_ns, raw
        self.out = _views(raw)
        self.conn: _Connection | None = None
        # a streamed body's reader (harness/client/generative.py StreamRead): a 200's body handed to its consume()
        # piece by piece as read, with the read's instant; its first_token_ns for the first-token timeout
        self.reader = reader
        self.response = HttpResponse(reader.consume if reader is not None else None)
        self.parser: httptools.HttpResponseParser | None = None
        self.sent_ns = 0  # perf_counter_ns() just before its first byte was handed to the kernel
        self.done_ns = 0  # the read that completed it (or the failure's instant)
        self.error: BaseException | None = None  # a failed exchange: what a blocking client would have raised
        self.reused = self.retried = self.got_bytes = False
        self.open = True


def _connected(sock) -> bool:
    """A non-blocking connect has completed (False: still in progress, or failed: its event says which)."""
    try:
        sock.getpeername()
    except OSError:
        return False
    return True


def _views(raw: bytes | tuple[bytes, ...]) -> list[memoryview]:
    """A request's bytes as the views still to send (a large body is sent as it is, never joined to its head)."""
    return [memoryview(raw)] if isinstance(raw, bytes) else [memoryview(p) for p in raw if p]


class _Connection:
    __slots__ = ("sock", "fd", "exchange", "connecting", "writing")

    def __init__(self, sock, connecting: bool) -> None:
        self.sock, self.fd = sock, sock.fileno()
        self.exchange: InlineExchange | None = None
        self.connecting = connecting
        self.writing = False  # registered for EPOLLOUT (a connect in progress, or a request not all sent)


class InlinePoller:
    """The epoll set of every inline connection of one worker, polled by the issue loop."""

    def __init__(self) -> None:
        self.epoll = _epoll()
        self._connections: dict[int, tuple[InlineHttp1Pool, _Connection]] = {}
        self._watcher = None
        self.pools: list[InlineHttp1Pool] = []
        # streams the client abandons at an instant (an endpoint's cancel after a time): (instant, order, pool, ex)
        self._leaves: list[tuple] = []
        self._leave_order = itertools.count()

    @property
    def next_leave_ns(self) -> int:
        """The instant of the earliest stream to abandon (far off: none)."""
        return self._leaves[0][0] if self._leaves else 1 << 62

    def leave_at(self, instant_ns: int, pool: "InlineHttp1Pool", ex: "InlineExchange") -> None:
        heapq.heappush(self._leaves, (instant_ns, next(self._leave_order), pool, ex))

    def leave_due(self, now_ns: int) -> None:
        """Close every stream whose client leaves by `now_ns` (cancelled: what it read so far is its record)."""
        leaves = self._leaves
        while leaves and leaves[0][0] <= now_ns:
            _, _, pool, ex = heapq.heappop(leaves)
            if ex.open:
                pool.abort(ex, StreamCancelled(ex.reader.cancel.kind), time.perf_counter_ns())

    def poll(self) -> int:
        """Handle every connection that is ready now (never waits); returns how many events there were."""
        events = self.epoll.poll(0)
        connections = self._connections
        for fd, mask in events:
            entry = connections.get(fd)
            if entry is not None:
                entry[0].on_event(entry[1], mask)
        return len(events)

    def wait(self, timeout_s: float) -> None:
        """Yield to gevent until a connection is ready or `timeout_s` has passed."""
        if self._watcher is None:
            self._watcher = get_hub().loop.io(self.epoll.fileno(), 1)
        try:
            wait_on(self._watcher, timeout_s, _WaitOver)
        except _WaitOver:
            pass

    def sleep(self, timeout_s: float, also_fd: int = -1) -> None:
        """Block the whole process in the kernel until a connection (or `also_fd`) is readable or `timeout_s` has
        passed: no greenlet runs meanwhile, so the core is free for a lower-priority process. (epoll_wait's timeout
        is in whole ms; select's is in µs.)"""
        fds = [self.epoll.fileno()] if also_fd < 0 else [self.epoll.fileno(), also_fd]
        try:
            _select(fds, [], [], timeout_s)
        except InterruptedError:
            pass

    def expire(self, now_ns: int) -> None:
        """Fail every exchange whose endpoint timeout has passed."""
        for pool in self.pools:
            pool.expire(now_ns)

    @property
    def busy(self) -> int:
        """Exchanges started and not yet ended."""
        return sum(p.busy for p in self.pools)

    def add(self, pool: "InlineHttp1Pool", conn: _Connection, events: int) -> None:
        self.epoll.register(conn.fd, events)
        self._connections[conn.fd] = (pool, conn)

    def modify(self, conn: _Connection, events: int) -> None:
        self.epoll.modify(conn.fd, events)

    def remove(self, conn: _Connection) -> None:
        if self._connections.pop(conn.fd, None) is not None:
            try:
                self.epoll.unregister(conn.fd)
            except OSError:
                pass

    def close(self) -> None:
        for pool in self.pools:
            pool.close()
        if self._watcher is not None:
            self._watcher.close()
        self.epoll.close()


class _WaitOver(Exception):
    """wait()'s timeout passed (nothing became ready)."""


class InlineHttp1Pool:
    """Keep-alive connections to one host:port whose exchanges the issue loop drives through an InlinePoller."""

    def __init__(self, poller: InlinePoller, host: str, port: int, timeout_s: float,
                 done: Callable[[InlineExchange], None], streamed: bool = False, kernel_stamps: bool = False,
                 ttft_s: float | None = None, stall_s: float | None = None) -> None:
        self.poller, self.host, self.port, self.timeout_s, self.done = poller, host, port, timeout_s, done
        self.timeout_ns = int(timeout_s * 1e9)
        # `streamed`: each request is started with a reader of its streamed body (harness/client/http1.py's
        # rules): the body's pieces stamped with the kernel's receive instant; no first token within ttft_s fails
        # it (FirstTokenTimeout), as does a begun response silent for stall_s (Stalled)
        self.streamed, self.kernel_stamps = streamed, kernel_stamps
        self.ttft_s, self.ttft_ns = ttft_s, int(ttft_s * 1e9) if ttft_s else 0
        self.stall_s, self.stall_ns = stall_s, int(stall_s * 1e9) if stall_s else 0
        self._address: tuple | None = None  # resolved once; again after a failed connect
        self._idle: list[_Connection] = []
        self._deadlines: deque[InlineExchange] = deque()  # in start order: one timeout, so in deadline order too
        self._firsts: deque[InlineExchange] = deque()  # streams without a first token yet, in start order
        self._next_stall_check = 0
        self.busy = 0
        poller.pools.append(self)

    # -- starting ---------------------------------------------------------------------------------
    def start(self, raw: bytes | tuple[bytes, ...], context: object = None, reader=None) -> InlineExchange:
        """Send `raw` (one whole request, or its parts) now; the exchange ends through `done`, never by raising here.
        `reader`: a streamed response's (InlineExchange.reader)."""
        ex = InlineExchange(raw, context, time.perf_counter_ns() + self.timeout_ns, reader)
        self.busy += 1
        self._deadlines.append(ex)
        if reader is not None and self.ttft_ns:
            self._firsts.append(ex)
        cancel = getattr(reader, "cancel", None)
        if cancel is not None and cancel.deadline_ns >= 0:
            self.poller.leave_at(cancel.deadline_ns, self, ex)
        ex.sent_ns = time.perf_counter_ns()
        self._begin(ex)
        return ex

    def _begin(self, ex: InlineExchange, fresh: bool = False) -> None:
        """Put `ex` on an idle connection (unless `fresh`) or a new one, and send it."""
        try:
            if self._idle and not fresh:
                conn, ex.reused = self._idle.pop(), True
            else:
                conn, ex.reused = self._connect(), False
        except OSError as exc:
            self._fail(ex, exc)
            return
        conn.exchange, ex.conn = ex, conn
        ex.parser = httptools.HttpResponseParser(ex.response)
        ex.response.parser = ex.parser
        if conn.connecting and _connected(conn.sock):  # a near server (loopback, a LAN) answers the connect at once
            conn.connecting = False
        if not conn.connecting:
            self._write(conn, ex)

    def _connect(self) -> _Connection:
        if self._address is None:
            self._address = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
        family, kind, proto, _, address = self._address
        sock = _socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SNDBUF)
            if self.kernel_stamps:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            err = sock.connect_ex(address)
            if err not in (0, errno.EINPROGRESS):
                self._address = None
                raise OSError(err, f"connect to {self.host}:{self.port}: {errno.errorcode.get(err, err)}")
        except BaseException:
            sock.close()
            raise
        conn = _Connection(sock, connecting=err == errno.EINPROGRESS)
        conn.writing = conn.connecting
        self.poller.add(self, conn, _EPOLLIN | _EPOLLOUT if conn.connecting else _EPOLLIN)
        return conn

    def _write(self, conn: _Connection, ex: InlineExchange) -> None:
        views = ex.out
        try:
            sent = conn.sock.send(views[0]) if len(views) == 1 else conn.sock.sendmsg(views)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._lost(conn, ex, exc)
            return
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if views and sent:
            views[0] = views[0][sent:]
        writing = bool(views)
        if writing != conn.writing:
            conn.writing = writing
            self.poller.modify(conn, _EPOLLIN | _EPOLLOUT if writing else _EPOLLIN)

    # -- events -------------------------------------------------------------------------------------
    def on_event(self, conn: _Connection, mask: int) -> None:
        ex = conn.exchange
        if ex is None:  # an idle connection readable: the server closed it (or sent what nobody asked for)
            self._discard(conn)
            return
        if conn.connecting:
            if not mask & (_EPOLLOUT | _EPOLLERR_HUP):
                return
            err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._address = None
                self._lost(conn, ex, OSError(err, f"connect to {self.host}:{self.port}: "
                                                  f"{errno.errorcode.get(err, err)}"))
                return
            conn.connecting = False
            self._write(conn, ex)
            return
        if conn.writing and mask & _EPOLLOUT:
            self._write(conn, ex)
        if mask & (_EPOLLIN | _EPOLLERR_HUP):
            self._read(conn, ex)

    def _read(self, conn: _Connection, ex: InlineExchange) -> None:
        stamp = 0
        try:
            if ex.reader is not None and self.kernel_stamps:  # (wall − monotonic now, for the kernel's stamp)
                data, stamp = stamped_recv(conn.sock, time.time_ns() - time.perf_counter_ns())
            else:
                data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as exc:
            self._lost(conn, ex, exc)
            return
        now = time.perf_counter_ns()
        if not data:
            self._lost(conn, ex, ConnectionClosed("during response" if ex.got_bytes else "before response"))
            return
        ex.got_bytes = True
        response = ex.response
        response.read_ns = stamp or now  # a stream's: the kernel's receive instant, on the monotonic clock
        parser = ex.parser
        try:
            if parser is None:
                raise ConnectionError("a response read on an exchange with no parser")
            parser.feed_data(data)
        except Exception as exc:  # noqa: BLE001 - a malformed response fails its request, named
            self._close(conn)
            self._fail(ex, exc, now)
            return
        if response.complete:
            response.status = parser.get_status_code()
            response.parser = ex.parser = None
            conn.exchange = None
            if response.keep_alive and not conn.writing:
                self._idle.append(conn)
            else:
                self._close(conn)
            self._end(ex, response.read_ns)  # (a stream's: when its last bytes reached the host, however late read)

    def _lost(self, conn: _Connection, ex: InlineExchange, exc: BaseException) -> None:
        """The connection failed under `ex`: a reused one before any response byte is retried once, fresh."""
        self._close(conn)
        before = not ex.got_bytes and (isinstance(exc, (ConnectionResetError, BrokenPipeError)) or (
            isinstance(exc, ConnectionClosed) and exc.args and exc.args[0] == "before response"))
        if before and ex.reused and not ex.retried:
            ex.retried = True
            ex.response = HttpResponse(ex.reader.consume if ex.reader is not None else None)
            ex.out = _views(ex.raw)
            self._begin(ex, fresh=True)
            return
        if before and not isinstance(exc, ConnectionClosed):
            exc = ConnectionClosed("before response")
        self._fail(ex, exc)

    # -- ending ---------------------------------------------------------------------------------------
    def expire(self, now_ns: int) -> None:
        """Fail the exchanges whose timeout has passed (`socket.timeout`, as the blocking pool raises); then the
        streams with no first token within ttft_s (FirstTokenTimeout), and, every STALL_CHECK_S, those begun and
        silent for stall_s (Stalled), as the greenlet path's timer and watchdog do."""
        deadlines = self._deadlines
        while deadlines and (not deadlines[0].open or deadlines[0].deadline_ns <= now_ns):
            ex = deadlines.popleft()
            if ex.open:
                self.abort(ex, socket.timeout(f"no complete response within {self.timeout_s:g} s"), now_ns)
        firsts = self._firsts
        while firsts and (not firsts[0].open or firsts[0].reader.first_token_ns >= 0
                          or firsts[0].sent_ns + self.ttft_ns <= now_ns):
            ex = firsts.popleft()
            if ex.open and ex.reader.first_token_ns < 0:
                self.abort(ex, FirstTokenTimeout("no first token in time"), now_ns)
        if self.stall_ns and now_ns >= self._next_stall_check:
            self._next_stall_check = now_ns + int(STALL_CHECK_S * 1e9)
            for ex in [e for e in deadlines if e.open and e.got_bytes and e.reader is not None
                       and now_ns - e.response.read_ns >= self.stall_ns]:
                self.abort(ex, Stalled(f"no data for {self.stall_s:g} s in the middle of the response"), now_ns)

    def abort(self, ex: InlineExchange, exc: BaseException, now_ns: int) -> None:
        """End `ex` with `exc`, its connection closed (it may still be sending or reading)."""
        if ex.conn is not None and ex.conn.exchange is ex:
            ex.conn.exchange = None
            self._close(ex.conn)
        self._fail(ex, exc, now_ns)

    def _fail(self, ex: InlineExchange, exc: BaseException, now_ns: int = 0) -> None:
        ex.error = exc
        if ex.conn is not None and ex.conn.exchange is ex:
            ex.conn.exchange = None
        self._end(ex, now_ns or time.perf_counter_ns())

    def _end(self, ex: InlineExchange, now_ns: int) -> None:
        if not ex.open:
            return
        ex.open = False
        ex.done_ns = now_ns
        ex.conn = None
        self.busy -= 1
        self.done(ex)

    def _discard(self, conn: _Connection) -> None:
        if conn in self._idle:
            self._idle.remove(conn)
        self._close(conn)

    def _close(self, conn: _Connection) -> None:
        self.poller.remove(conn)
        conn.sock.close()

    def prewarm(self, connections: int) -> None:
        """Open `connections` idle connections now (before the start instant), waiting through gevent for each
        connect to finish; raises when the endpoint cannot be reached."""
        while len(self._idle) < connections:
            conn = self._connect()
            if conn.connecting:
                try:
                    wait_write(conn.fd, self.timeout_s)
                    err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        raise OSError(err, f"connect to {self.host}:{self.port}: {errno.errorcode.get(err, err)}")
                except BaseException:
                    self._close(conn)
                    raise
                conn.connecting = conn.writing = False
                self.poller.modify(conn, _EPOLLIN)
            self._idle.append(conn)

    def close(self) -> None:
        for conn in self._idle:
            self._close(conn)
        self._idle.clear()
