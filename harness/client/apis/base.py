"""The client's side of one generative serving API (after aiperf's endpoint modules: one module per API, its traits
beside how it builds a request and reads a reply): the interface every module in this package fills in. The traits
themselves — routes, streaming, media, sessions, a model mix, cancellation, structured outputs — are the contract's
(contract/apis/registry.py); a module here adds what only a client does with them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import orjson

from tailrace.contract.apis import ServingApi, serving_api
from tailrace.harness.client.outcome import StreamOutcome
from tailrace.harness.client.streams.openai_stream import StreamProtocolError, cached_tokens


@dataclass(frozen=True)
class BodyAsk:
    """What one request asks of a generative API, whichever API it is: the prompt (text, or chat messages), the
    output length and how it is held, whether the reply streams, and the model's inputs (Triton's, from its
    metadata)."""

    model: str
    prompt: str | list
    max_tokens: int
    ignore_eos: bool = True
    stream: bool = True
    min_tokens: int | None = None
    model_inputs: tuple[str, ...] = ()


class StreamState(Protocol):
    """A reply's stream state, fed each server-sent event with the instant it was read (harness/client/streams/)."""

    first_token_ns: int

    def feed(self, read_ns: int, data: bytes) -> None: ...


@dataclass(frozen=True)
class WholeReply:
    """A stream = false reply, read: its text, its usage in OpenAI's names, its finish reason."""

    text: str
    usage: dict[str, Any]
    finish_reason: str


@dataclass(frozen=True)
class GenerativeApi:
    """How a client speaks one generative API: its request body, its stream's reader, its whole reply's reader, the
    head lines every request carries and the route a warm-up checks."""

    name: str  # the profile's `protocol`, as contract/apis/registry.py declares it
    body: Callable[[BodyAsk], dict[str, Any]]
    reader: Callable[[str | None], StreamState]  # a new stream state (the endpoint's token_count_output, if any)
    whole: Callable[[bytes, str | None, StreamOutcome], str]  # a whole reply into the outcome; its text
    head_lines: tuple[str, ...] = ()
    ready_route: str = "/v1/models"  # ('{model}': the model's name)

    @property
    def traits(self) -> ServingApi:
        return serving_api(self.name)

    def encode(self, ask: BodyAsk, extra: dict | None = None) -> bytes:
        """The request's JSON body (`extra`: the endpoint's extra fields, merged last: their keys win)."""
        body = self.body(ask)
        return orjson.dumps(body | extra if extra else body)

    def ready_path(self, model: str) -> str:
        return self.ready_route.format(model=model)


def messages_of(prompt: str | list) -> list[dict]:
    """A prompt as chat messages (a text: one user message)."""
    return prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]


def text_of(content) -> str:
    """A message's content as text: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def read_whole(payload: bytes, result: StreamOutcome, reply: Callable[[dict], WholeReply]) -> str:
    """A whole JSON reply (`reply` reads its text, usage and finish reason) into `result`: its tokens from the usage,
    its finish reason and first words; its text. A body that is not such a reply: StreamProtocolError."""
    try:
        read = reply(orjson.loads(payload))
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
        raise StreamProtocolError(f"a response that is not a completion: {payload[:80]!r}") from None
    usage = read.usage if isinstance(read.usage, dict) else {}
    result.output_tokens = int(usage.get("completion_tokens", -1))
    result.input_tokens = int(usage.get("prompt_tokens", -1))
    result.token_source = "final_usage" if result.output_tokens >= 0 else ""
    result.finish_reason = read.finish_reason[:32]
    result.preview = read.text[:80]
    result.pieces = [read.text]
    result.cached_tokens = cached_tokens(usage)
    result.outcome = "complete"
    return read.text


def body_extra(protocol: str, prompts) -> dict | None:
    """What every JSON body of an endpoint adds (its `prompts`: contract/profile/ Prompts): the structured-output
    request its JSON Schema makes, in the field the API declares (`response_format` for chat and completions,
    `text.format` for Responses), then its `extra_body` (whose keys win). None: nothing."""
    structured = getattr(prompts, "structured", None)
    extra = dict(prompts.extra_body or {}) if prompts is not None and prompts.extra_body else None
    if structured is None:
        return extra
    schema = {"type": "json_schema", "name": structured.name, "schema": structured.schema_, "strict": structured.strict}
    fields: dict = {"text": {"format": schema}} if serving_api(protocol).structured == "text.format" else {
        "response_format": {"type": "json_schema", "json_schema": {k: v for k, v in schema.items() if k != "type"}}}
    return fields | extra if extra else fields
