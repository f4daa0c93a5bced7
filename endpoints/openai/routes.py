"""The OpenAI-compatible routes of the embedded server, over the continuous-batching engines
(endpoints/serving/continuous.py): GET /v1/models, POST /v1/completions and /v1/chat/completions, streamed
(server-sent events, vLLM's shapes) or not.

A streamed response starts once its first token exists, so its `server-timing` header carries the request's queue
and prefill time and the server's receive and first-send instants (epoch ns) — what tailrace needs to split TTFT
into network, queue and prefill. Each later event carries the tokens generated since the last one (one, or more
when the stream fell behind the engine), with the running usage when asked (`continuous_usage_stats`); the usage
trailer adds the queue, prefill and decode time. A client that goes away cancels its request at the next step.
"""
from __future__ import annotations

import asyncio

from contract.trace_context import parse_traceparent
from endpoints.openai.chunks import DONE, ChunkWriter, error_body, models_body, usage
from endpoints.openai.requests import CompletionRequest, parse_completion
from endpoints.serving.continuous import ContinuousBatcher, Generation
from endpoints.serving.core import InferenceServer, RequestClock
from endpoints.serving.errors import InferenceError, not_found

COMPLETIONS, CHAT, MODELS = "/v1/completions", "/v1/chat/completions", "/v1/models"
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


def _timing_header(clock: RequestClock, g: Generation) -> bytes:
    t = g.timings_ms()
    first_wall = clock.receive_wall_ns + (g.first_token_ns - clock.receive_mono_ns) if g.first_token_ns >= 0 else -1
    return b'queue;dur=%.3f, prefill;dur=%.3f, recv;desc="%d", send;desc="%d"' % (
        t.get("queue_ms", 0.0), t.get("prefill_ms", 0.0), clock.receive_wall_ns, first_wall)


class OpenAIRoutes:
    """An ASGI handler for the /v1 paths; the engines are started on the first request's event loop."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        self._waiters: dict[Generation, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def _start_engines(self) -> None:
        self._loop = asyncio.get_running_loop()
        for engine in self.server.generators.values():
            engine.start(self._publish)

    def _publish(self, moved: list[Generation]) -> None:  # on an engine thread
        self._loop.call_soon_threadsafe(self._wake, moved)

    def _wake(self, moved: list[Generation]) -> None:
        for g in moved:
            event = self._waiters.get(g)
            if event is not None:
                event.set()

    async def __call__(self, scope, receive, send) -> None:
        if self._loop is None:
            self._start_engines()
        path, method = scope["path"].rstrip("/"), scope["method"]
        if path == MODELS and method == "GET":
            gens = self.server.generators
            await _send(send, 200, models_body(sorted(gens), {n: e.limits.max_model_len for n, e in gens.items()}))
        elif path in (COMPLETIONS, CHAT) and method == "POST":
            await self._completion(scope, receive, send, path == CHAT)
        elif path in (COMPLETIONS, CHAT, MODELS):
            await _send(send, 405, error_body(f"{path} does not take {method}", 405))
        else:
            await _send(send, 404, error_body(f"no route {path}", 404))

    async def _completion(self, scope, receive, send, chat: bool) -> None:
        clock = RequestClock()
        echo = [(k, v) for k, v in scope["headers"] if k == b"traceparent"
                and parse_traceparent(v.decode("latin-1"))]
        try:
            body = await _read_body(receive)
            if body is None:
                return
            request = parse_completion(body, chat)
            engine = self.server.generators.get(request.model)
            if engine is None:
                raise not_found(f"the model '{request.model}' does not exist (models: "
                                f"{', '.join(sorted(self.server.generators)) or 'none'})")
            prompt = engine.decoder.vocabulary.encode(request.text)
            g = Generation(prompt=prompt, max_tokens=request.max_tokens, ignore_eos=request.ignore_eos,
                           min_tokens=request.min_tokens, arrival_ns=clock.receive_mono_ns)
            self._waiters[g] = asyncio.Event()
            engine.submit(g)
        except InferenceError as exc:
            await _send(send, exc.http_status, error_body(exc.message, exc.http_status), echo)
            return
        watcher = asyncio.ensure_future(_watch_disconnect(receive, engine, g, self._waiters[g]))
        try:
            if request.stream:
                await self._stream(send, engine, g, request, clock, chat, echo)
            else:
                await self._whole(send, engine, g, request, clock, chat, echo)
        finally:
            watcher.cancel()
            engine.cancel(g)  # a no-op when it finished; ends it at the next step when the client went away
            self._waiters.pop(g, None)

    async def _progress(self, g: Generation) -> None:
        event = self._waiters[g]
        await event.wait()
        event.clear()

    async def _whole(self, send, engine: ContinuousBatcher, g: Generation, request: CompletionRequest,
                     clock: RequestClock, chat: bool, echo: list) -> None:
        while not g.done and not g.cancelled:
            await self._progress(g)
        if g.cancelled and not g.done:
            return
        vocabulary = engine.decoder.vocabulary
        writer = ChunkWriter(chat, request.model, g.request_id)
        payload = writer.whole("".join(vocabulary.piece(t) for t in g.tokens), g.finish_reason,
                               usage(len(g.prompt), len(g.tokens)), g.timings_ms())
        await _send(send, 200, payload, [(b"server-timing", _timing_header(clock, g)), *echo])

    async def _stream(self, send, engine: ContinuousBatcher, g: Generation, request: CompletionRequest,
                      clock: RequestClock, chat: bool, echo: list) -> None:
        while not g.tokens and not g.cancelled:
            await self._progress(g)
        if g.cancelled:
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*_SSE_HEADERS, (b"server-timing", _timing_header(clock, g)), *echo]})
        writer = ChunkWriter(chat, request.model, g.request_id)
        piece = engine.decoder.vocabulary.piece
        if chat:
            await _body(send, writer.role())
        sent = 0
        while True:
            count, finished = len(g.tokens), g.done
            if count > sent:
                running = usage(len(g.prompt), count) if request.include_usage and request.continuous_usage else None
                text = "".join(piece(t) for t in g.tokens[sent:count])
                await _body(send, writer.text(text, g.finish_reason if finished else None, running))
                sent = count
            if finished or g.cancelled:
                break
            await self._progress(g)
        if g.cancelled and not finished:
            return
        if request.include_usage:
            await _body(send, writer.trailer(usage(len(g.prompt), len(g.tokens)), g.timings_ms()))
        await _body(send, DONE)
        await send({"type": "http.response.body", "body": b""})


async def _watch_disconnect(receive, engine: ContinuousBatcher, g: Generation, event: asyncio.Event) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            engine.cancel(g)
            event.set()
            return


async def _read_body(receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _body(send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _send(send, status: int, payload: bytes, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload)),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": payload})
