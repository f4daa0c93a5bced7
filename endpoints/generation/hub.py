"""What the generative routes share: the engines started on the server's event loop, each request's wake-up when
its engine moved it (one call_soon_threadsafe a step), a client that leaves cancelling its request, the
server-timing header, and the ASGI plumbing (a body read, an event sent, a whole response)."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tailrace.endpoints.serving.continuous import ContinuousBatcher, Generation
from tailrace.endpoints.serving.core import InferenceServer, RequestClock

SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


class StreamHub:
    """The engines of one server and the requests waiting on them."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        self._waiters: dict[Generation, asyncio.Event] = {}  # the HTTP routes' (on the event loop)
        self._thread_waiters: dict[Generation, threading.Event] = {}  # the gRPC streams' (on its threads)
        self._loop: asyncio.AbstractEventLoop | None = None
        for engine in server.generators.values():
            engine.start(self._publish)

    def start(self) -> None:
        """On the first HTTP request: the event loop to wake its requests on."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()

    def _publish(self, moved: list[Generation]) -> None:  # on an engine thread
        for g in moved:
            event = self._thread_waiters.get(g)
            if event is not None:
                event.set()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake, moved)

    def follow_on_thread(self, engine: ContinuousBatcher, g: Generation) -> threading.Event:
        """Submit `g` for a caller on a thread (InferenceError when refused); the event is set whenever it moves.
        `release` ends it."""
        event = self._thread_waiters[g] = threading.Event()
        try:
            engine.submit(g)
        except BaseException:
            self._thread_waiters.pop(g, None)
            raise
        return event

    def release(self, engine: ContinuousBatcher, g: Generation) -> None:
        engine.cancel(g)
        self._thread_waiters.pop(g, None)

    def _wake(self, moved: list[Generation]) -> None:
        for g in moved:
            event = self._waiters.get(g)
            if event is not None:
                event.set()

    @asynccontextmanager
    async def generating(self, engine: ContinuousBatcher, g: Generation, receive) -> AsyncIterator[None]:
        """Submit `g` (InferenceError when refused) and follow it; a client that disconnects cancels it, and it is
        cancelled when the response is over (a no-op when it finished)."""
        self._waiters[g] = asyncio.Event()
        try:
            engine.submit(g)
        except BaseException:
            self._waiters.pop(g, None)
            raise
        watcher = asyncio.ensure_future(self._watch_disconnect(receive, engine, g))
        try:
            yield
        finally:
            watcher.cancel()
            engine.cancel(g)
            self._waiters.pop(g, None)

    @asynccontextmanager
    async def generating_all(self, engine: ContinuousBatcher, runs: list[Generation], receive
                             ) -> AsyncIterator[None]:
        """`generating` for a request's several sequences (an embeddings batch): all submitted (none left running
        when one is refused), one disconnect watcher cancelling them all, every one cancelled when the response is
        over."""
        submitted = 0
        try:
            for g in runs:
                self._waiters[g] = asyncio.Event()
                engine.submit(g)
                submitted += 1
        except BaseException:
            for k, g in enumerate(runs):
                if k < submitted:
                    engine.cancel(g)
                self._waiters.pop(g, None)
            raise
        watcher = asyncio.ensure_future(self._watch_disconnect_all(receive, engine, runs))
        try:
            yield
        finally:
            watcher.cancel()
            for g in runs:
                engine.cancel(g)
                self._waiters.pop(g, None)

    async def _watch_disconnect_all(self, receive, engine: ContinuousBatcher, runs: list[Generation]) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                for g in runs:
                    engine.cancel(g)
                self._wake(runs)
                return

    async def progress(self, g: Generation) -> None:
        """Until the engine moves `g` again (or its client leaves)."""
        event = self._waiters[g]
        await event.wait()
        event.clear()

    async def first_token(self, g: Generation) -> bool:
        """Until `g` has a token; False when its client left first."""
        while not g.tokens and not g.cancelled:
            await self.progress(g)
        return not g.cancelled

    async def finished(self, g: Generation) -> bool:
        """Until `g` is done; False when its client left first."""
        while not g.done and not g.cancelled:
            await self.progress(g)
        return g.done

    async def _watch_disconnect(self, receive, engine: ContinuousBatcher, g: Generation) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                engine.cancel(g)
                self._wake([g])
                return


def timing_header(clock: RequestClock, g: Generation) -> bytes:
    """Server-Timing of a generation: queue and prefill (ms), receipt and first token's send (epoch ns)."""
    t = g.timings_ms()
    first_wall = clock.receive_wall_ns + (g.first_token_ns - clock.receive_mono_ns) if g.first_token_ns >= 0 else -1
    return b'queue;dur=%.3f, prefill;dur=%.3f, recv;desc="%d", send;desc="%d"' % (
        t.get("queue_ms", 0.0), t.get("prefill_ms", 0.0), clock.receive_wall_ns, first_wall)


def echoed_traceparent(scope) -> list:
    from tailrace.contract.trace_context import parse_traceparent

    return [(k, v) for k, v in scope["headers"] if k == b"traceparent" and parse_traceparent(v.decode("latin-1"))]


async def read_body(receive, limit: int) -> bytes | None:
    """The request body (None when the client left); InferenceError past `limit` bytes."""
    from tailrace.endpoints.serving.errors import InferenceError

    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise InferenceError(f"request body of more than {limit} bytes exceeds the limit")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_event(send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def start_stream(send, clock: RequestClock, g: Generation, echo: list) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [*SSE_HEADERS, (b"server-timing", timing_header(clock, g)), *echo]})


async def end_stream(send) -> None:
    await send({"type": "http.response.body", "body": b""})


async def send_whole(send, status: int, payload: bytes, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload)),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": payload})
