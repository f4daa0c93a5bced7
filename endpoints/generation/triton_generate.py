"""Triton's generate extension over the generative engines: POST /v2/models/{m}/generate (one JSON response) and
/v2/models/{m}/generate_stream (server-sent events, one per step that produced tokens, no [DONE]: the stream ends
when the response does), as Triton answers for decoupled models.

The body's keys other than `parameters` and `id` are the model's inputs: `text_input` (required) and `max_tokens`;
an input the model does not declare is refused, as Triton refuses it. `parameters` may carry `max_tokens`,
`ignore_eos`, `min_tokens` and `stream` (ignored: the route decides). Each event is `{"model_name", "model_version",
"text_output", "num_output_tokens"}` (the tokens it carries, like the vLLM backend's optional output); the last one
adds `finish_reason`. An error before the stream is `{"error": …}` with its status; one inside it is `data:
{"error": …}`.
"""
from __future__ import annotations

import re

import orjson

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
from tailrace.endpoints.generation.requests import flag, json_object, whole_number
from tailrace.endpoints.serving.continuous import Generation
from tailrace.endpoints.serving.core import RequestClock
from tailrace.endpoints.serving.errors import InferenceError

GENERATE_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/1)?/(generate|generate_stream)$")
_INPUTS = ("text_input", "max_tokens")
_PARAMETERS = ("max_tokens", "ignore_eos", "min_tokens", "stream", "temperature", "top_p", "top_k", "seed")


def _one(value):
    """A KServe JSON input of one element may come as a list of it."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def parse_generate(payload: bytes) -> tuple[str, int, bool, int]:
    """(text, max_tokens, ignore_eos, min_tokens) of a generate request; InferenceError naming what is wrong."""
    body = json_object(payload, "the body must be a JSON object of the model's inputs")
    unknown = set(body) - set(_INPUTS) - {"parameters", "id"}
    if unknown:
        raise InferenceError(f"unexpected inference input '{sorted(unknown)[0]}' for the model (inputs: "
                             f"{', '.join(_INPUTS)})")
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InferenceError("parameters: must be an object")
    text = _one(body.get("text_input"))
    if not isinstance(text, str) or not text.split():
        raise InferenceError("text_input: required, a non-empty string")
    max_tokens = whole_number({"max_tokens": _one(body.get("max_tokens", parameters.get("max_tokens", 16)))},
                              "max_tokens", 16, 1)
    return (text, max_tokens, flag(parameters, "ignore_eos", label="parameters.ignore_eos"),
            whole_number(parameters, "min_tokens", 0, 0, label="parameters.min_tokens"))


def _error(message: str) -> bytes:
    return orjson.dumps({"error": message})


class GenerateRoutes:
    """The generate routes of the generative models (other paths are not its)."""

    def __init__(self, hub: StreamHub) -> None:
        self.hub, self.server = hub, hub.server

    def target(self, path: str) -> tuple[str, bool] | None:
        """(model, stream) when `path` is a generate route of a generative model."""
        match = GENERATE_PATH.match(path)
        if match and match.group(1) in self.server.generators:
            return match.group(1), match.group(2) == "generate_stream"
        return None

    async def __call__(self, scope, receive, send, model: str, stream: bool) -> None:
        self.hub.start()
        clock = RequestClock()
        echo = echoed_traceparent(scope)
        if scope["method"] != "POST":
            await send_whole(send, 405, _error("generate takes POST"), echo)
            return
        engine = self.server.generators[model]
        try:
            body = await read_body(receive, self.server.options.max_body_bytes)
            if body is None:
                return
            text, max_tokens, ignore_eos, min_tokens = parse_generate(body)
            g = Generation(prompt=engine.decoder.vocabulary.encode(text), max_tokens=max_tokens, ignore_eos=ignore_eos,
                           min_tokens=min_tokens, arrival_ns=clock.receive_mono_ns)
            async with self.hub.generating(engine, g, receive):
                piece = engine.decoder.vocabulary.piece
                if not stream:
                    if await self.hub.finished(g):
                        await send_whole(send, 200, self._event(model, "".join(piece(t) for t in g.tokens),
                                                                len(g.tokens), g.finish_reason),
                                         [(b"server-timing", timing_header(clock, g)), *echo])
                    return
                if not await self.hub.first_token(g):
                    return
                await start_stream(send, clock, g, echo)
                sent = 0
                while True:
                    count, finished = len(g.tokens), g.done
                    if count > sent:
                        text_out = "".join(piece(t) for t in g.tokens[sent:count])
                        await send_event(send, b"data: " + self._event(model, text_out, count - sent,
                                                                       g.finish_reason if finished else "") + b"\n\n")
                        sent = count
                    if finished or g.cancelled:
                        break
                    await self.hub.progress(g)
                await end_stream(send)
        except InferenceError as exc:
            await send_whole(send, exc.http_status, _error(exc.message), echo)

    @staticmethod
    def _event(model: str, text: str, tokens: int, finish_reason: str) -> bytes:
        doc = {"model_name": model, "model_version": "1", "text_output": text, "num_output_tokens": tokens}
        if finish_reason:
            doc["finish_reason"] = finish_reason
        return orjson.dumps(doc)
