"""The OpenAI-compatible routes of the embedded server, over the continuous-batching engines
(endpoints/serving/continuous.py): GET /v1/models, POST /v1/completions and /v1/chat/completions, streamed
(server-sent events, vLLM's shapes) or not; POST /v1/embeddings, rerank and score (pooling.py).

A streamed response starts once its first token exists, so its `server-timing` header carries the request's queue
and prefill time and the server's receive and first-send instants (epoch ns) — what tailrace needs to split TTFT
into network, queue and prefill. Each later event carries the tokens generated since the last one (one, or more
when the stream fell behind the engine), with the running usage when asked (`continuous_usage_stats`); the usage
trailer adds the queue, prefill and decode time. A client that goes away cancels its request at the next step.
"""
from __future__ import annotations

import numpy as np

from tailrace.endpoints.generation.chat_apis import (
    MESSAGES_PATH,
    RESPONSES_PATH,
    MessagesWriter,
    ResponsesWriter,
    api_error,
    parse_messages,
    parse_responses,
)
from tailrace.endpoints.generation.chunks import ChunkWriter, error_body, models_body, usage
from tailrace.endpoints.generation.hub import (
    StreamHub,
    echoed_traceparent,
    end_stream,
    read_body,
    send_event,
    send_whole,
    start_stream,
    timing_header,
)
from tailrace.endpoints.generation.pooling import PoolingRoutes
from tailrace.endpoints.generation.requests import CompletionRequest, parse_completion
from tailrace.endpoints.serving.continuous import ContinuousBatcher, Generation
from tailrace.endpoints.serving.core import RequestClock
from tailrace.endpoints.serving.errors import InferenceError, not_found

COMPLETIONS, CHAT, MODELS = "/v1/completions", "/v1/chat/completions", "/v1/models"
PARSERS = {MESSAGES_PATH: parse_messages, RESPONSES_PATH: parse_responses}
WRITERS = {MESSAGES_PATH: MessagesWriter, RESPONSES_PATH: ResponsesWriter}


class OpenAIRoutes:
    """An ASGI handler for the /v1 paths."""

    def __init__(self, hub: StreamHub) -> None:
        self.hub, self.server = hub, hub.server
        self.pooling = PoolingRoutes(hub)

    async def __call__(self, scope, receive, send) -> None:
        self.hub.start()
        path, method = scope["path"].rstrip("/"), scope["method"]
        if path == MODELS and method == "GET":
            gens = self.server.generators
            await send_whole(send, 200, models_body(sorted(gens), {n: e.limits.max_model_len
                                                                    for n, e in gens.items()}))
        elif path in (COMPLETIONS, CHAT, MESSAGES_PATH, RESPONSES_PATH) and method == "POST":
            await self._completion(scope, receive, send, path)
        elif self.pooling.serves(path) and method == "POST":
            await self.pooling(scope, receive, send)
        elif path in (COMPLETIONS, CHAT, MODELS, MESSAGES_PATH, RESPONSES_PATH) or self.pooling.serves(path):
            await send_whole(send, 405, error_body(f"{path} does not take {method}", 405))
        else:
            await send_whole(send, 404, error_body(f"no route {path}", 404))

    async def _completion(self, scope, receive, send, path: str) -> None:
        """A completion, chat completion, Messages or Responses request: parsed, generated, answered in its API's
        shapes (streamed or whole)."""
        clock = RequestClock()
        echo = echoed_traceparent(scope)
        try:
            body = await read_body(receive, self.server.options.max_body_bytes)
            if body is None:
                return
            request = PARSERS[path](body) if path in PARSERS else parse_completion(body, path == CHAT)
            engine = self.server.generators.get(request.model)
            if engine is None:
                raise not_found(f"the model '{request.model}' does not exist (models: "
                                f"{', '.join(sorted(self.server.generators)) or 'none'})")
            prompt = engine.decoder.vocabulary.encode(request.text)
            if request.media_tokens:  # an image's patches, a clip's frames: prefilled as prompt tokens
                prompt = np.concatenate([prompt, np.ones(request.media_tokens, dtype=prompt.dtype)])
            g = Generation(prompt=prompt, max_tokens=request.max_tokens,
                           ignore_eos=request.ignore_eos, min_tokens=request.min_tokens,
                           arrival_ns=clock.receive_mono_ns)
            answers = self.server.answers.get(request.model)
            if answers is not None:  # a graded item's scripted reply (endpoints/serving/answers.py)
                g.script = answers.script_for(request.text, _trace_id(echo))
            writer = WRITERS[path](request.model, g.request_id) if path in WRITERS else \
                ChunkWriter(path == CHAT, request.model, g.request_id, request.include_usage)
            async with self.hub.generating(engine, g, receive):
                if request.stream:
                    await self._stream(send, engine, g, request, clock, writer, echo)
                else:
                    await self._whole(send, engine, g, clock, writer, echo)
        except InferenceError as exc:
            await send_whole(send, exc.http_status, api_error(path, exc.message, exc.http_status) if path in PARSERS
                             else error_body(exc.message, exc.http_status), echo)

    async def _whole(self, send, engine: ContinuousBatcher, g: Generation, clock: RequestClock, writer,
                     echo: list) -> None:
        if not await self.hub.finished(g):
            return
        piece = _piece_of(engine, g)
        payload = writer.whole("".join(piece(t) for t in g.tokens), g.finish_reason, len(g.prompt),
                               len(g.tokens), g.cached_tokens, g.timings_ms())
        await send_whole(send, 200, payload, [(b"server-timing", timing_header(clock, g)), *echo])

    async def _stream(self, send, engine: ContinuousBatcher, g: Generation, request: CompletionRequest,
                      clock: RequestClock, writer, echo: list) -> None:
        if not await self.hub.first_token(g):
            return
        await start_stream(send, clock, g, echo)
        piece = _piece_of(engine, g)
        for event in writer.opening(len(g.prompt), g.cached_tokens):
            await send_event(send, event)
        sent = 0
        while True:
            count, finished = len(g.tokens), g.done
            if count > sent:
                running = usage(len(g.prompt), count, g.cached_tokens) \
                    if request.include_usage and request.continuous_usage else None
                text = "".join(piece(t) for t in g.tokens[sent:count])
                await send_event(send, writer.text(text, g.finish_reason if finished else None, running))
                sent = count
            if finished or g.cancelled:
                break
            await self.hub.progress(g)
        if g.cancelled and not finished:
            return
        for event in writer.closing(g.finish_reason, len(g.prompt), len(g.tokens), g.cached_tokens, g.timings_ms()):
            await send_event(send, event)
        await end_stream(send)


def _piece_of(engine: ContinuousBatcher, g: Generation):
    """The text a token of `g` adds: its script's words where it has one, else the vocabulary's."""
    vocabulary_piece = engine.decoder.vocabulary.piece
    return vocabulary_piece if g.script is None else lambda t: g.script.piece(t, vocabulary_piece)


def _trace_id(echo: list) -> str:
    """The trace ID of the request's traceparent ('' without one)."""
    return echo[0][1].decode("latin-1").split("-")[1] if echo else ""
