"""Triton's generate extension (POST /v2/models/{model}/generate_stream, or /generate for a whole reply):
`text_input`, and max_tokens / stream / ignore_eos / min_tokens as inputs where the model declares them (its
metadata's inputs), else as request parameters; tokens from the output the endpoint names (`token_count_output`),
else one an event; a warm-up checks the model's ready route."""
from __future__ import annotations

import orjson

from tailrace.harness.client.apis.base import BodyAsk, GenerativeApi
from tailrace.harness.client.apis.openai_completions import prompt_text
from tailrace.harness.client.outcome import StreamOutcome
from tailrace.harness.client.streams.openai_stream import StreamProtocolError
from tailrace.harness.client.streams.triton_stream import TritonGenerateStream


def body(ask: BodyAsk) -> dict:
    request: dict = {"text_input": prompt_text(ask.prompt)}
    parameters: dict = {}
    asked = {"max_tokens": ask.max_tokens, "stream": ask.stream, "ignore_eos": ask.ignore_eos or None,
             "min_tokens": min(ask.min_tokens, ask.max_tokens) if ask.min_tokens else None}
    for name, value in asked.items():
        if value is None:
            continue
        (request if name in ask.model_inputs else parameters)[name] = value
    if parameters:
        request["parameters"] = parameters
    return request


def whole(payload: bytes, count_output: str | None, result: StreamOutcome) -> str:
    """A /generate reply's text and, when the model reports them (`count_output`), its tokens into `result`."""
    try:
        doc = orjson.loads(payload)
        text = doc["text_output"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise StreamProtocolError(f"a response without text_output: {payload[:80]!r}") from None
    text = text[0] if isinstance(text, list) and text else text
    count = doc.get(count_output) if count_output else None
    count = count[0] if isinstance(count, list) and count else count
    result.output_tokens = count if isinstance(count, int) and not isinstance(count, bool) else -1
    result.token_source = "output" if result.output_tokens >= 0 else ""
    result.preview = str(text)[:80]
    result.outcome = "complete"
    return str(text)


API = GenerativeApi("triton-generate", body, TritonGenerateStream, whole, ready_route="/v2/models/{model}/ready")
