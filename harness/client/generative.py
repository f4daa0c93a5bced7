"""The generative sender: POST /v1/completions or /v1/chat/completions with `stream: true` (OpenAI-compatible), or
Triton's /v2/models/{m}/generate_stream; the server-sent events read as they arrive on the worker's event loop
(harness/client/http1.py hands each piece of the body over with the instant it arrived), parsed incrementally
(sse.py) and interpreted (openai_stream.py, triton_stream.py).

What a streamed request adds to its Outcome: the first and last token instants, every token event's instant and
token count (arrays, no object per token), the output and input token counts and where they came from, the
finish reason and how the stream ended (complete, error_event, cut, ttft_timeout, timeout).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import gevent
import orjson

from tailrace.contract.apis import serving_api
from tailrace.contract.credentials import Credential, CredentialError
from tailrace.contract.plan import EndpointTimeouts, PoolLimits
from tailrace.contract.profile import Tls
from tailrace.contract.records import CANCELLED
from tailrace.harness.client.api_bodies import (
    ANTHROPIC_VERSION,
    MESSAGES,
    RESPONSES,
    messages_body,
    responses_body,
    whole_messages,
    whole_responses,
)
from tailrace.harness.client.http1 import FirstTokenTimeout, Stalled
from tailrace.harness.client.http_transport import HttpTransport
from tailrace.harness.client.outcome import (
    CancelAt,
    Outcome,
    Send,
    StreamCancelled,
    StreamOutcome,
    classify_exception,
    classify_http_status,
)
from tailrace.harness.client.streams.anthropic_stream import AnthropicStream
from tailrace.harness.client.streams.openai_stream import (
    CUT,
    STALLED,
    TIMEOUT,
    TTFT_TIMEOUT,
    OpenAIStream,
    StreamProtocolError,
    cached_tokens,
)
from tailrace.harness.client.streams.responses_stream import ResponsesStream
from tailrace.harness.client.streams.sse import SseError, SseParser
from tailrace.harness.client.streams.triton_stream import TritonGenerateStream
from tailrace.harness.client.tokenizer import TokenCounter

CHAT, COMPLETIONS, TRITON_GENERATE = "openai-chat", "openai-completions", "triton-generate"
STREAMS = {MESSAGES: AnthropicStream, RESPONSES: ResponsesStream}  # the others: OpenAIStream (Triton's aside)


def stream_path(protocol: str, model: str, stream: bool = True) -> str:
    """The route a generative protocol posts to (Triton's generate extension: the model's own route)."""
    return serving_api(protocol).route(model, stream)


@dataclass(frozen=True)
class OneRequest:
    batched: bool = False  # a prompt is one request of one row


@dataclass(frozen=True)
class PromptSamples:
    """The prompts as the request path counts samples: no labels, nothing to check."""

    count: int
    labels: None = None
    expected: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class PromptPayloads:
    """A generative endpoint's encoded bodies, seen as the request path sees a KServe endpoint's payloads."""

    bodies: list[bytes]
    request: OneRequest = OneRequest()
    count: int = 0  # the samples where no body is built before the run (a session endpoint's: its sessions)

    @property
    def samples(self) -> PromptSamples:
        return PromptSamples(len(self.bodies) or self.count)

    def index(self, sample: int) -> int:
        return sample % (len(self.bodies) or self.count or 1)

    def first_row(self, sample: int) -> int:
        return self.index(sample)


def request_body(protocol: str, model: str, prompt: str | list, max_tokens: int, ignore_eos: bool = True,
                 stream: bool = True, min_tokens: int | None = None, model_inputs: tuple[str, ...] = (),
                 extra: dict | None = None) -> bytes:
    """The JSON body of one generative request (`prompt`: text, or chat messages): usage asked for on every event
    (vLLM's continuous_usage_stats) and in a trailer, so that token counts come from the server. Triton's generate
    extension: `text_input`, and max_tokens / stream / ignore_eos / min_tokens as inputs where the model declares
    them (`model_inputs`, from its metadata), else as request parameters. `extra`: the endpoint's extra_body, merged
    last (its keys win)."""
    if protocol == TRITON_GENERATE:
        return generate_body(prompt, max_tokens, ignore_eos, stream, min_tokens, model_inputs, extra)
    if protocol == MESSAGES:  # Anthropic's API has no ignore_eos / min_tokens: the model's own lengths
        return messages_body(model, prompt, max_tokens, stream, extra)
    if protocol == RESPONSES:
        return responses_body(model, prompt, max_tokens, stream, ignore_eos, min_tokens, extra=extra)
    body: dict = {"model": model, "max_tokens": max_tokens, "stream": stream}
    if protocol == CHAT:
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    elif isinstance(prompt, list):  # chat messages sent to /v1/completions: their contents, one after another
        body["prompt"] = "\n".join(m["content"] for m in prompt)
    else:
        body["prompt"] = prompt
    if stream:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM, SGLang, TGI's OpenAI route: the output length is the one asked for
    if min_tokens is not None:
        body["min_tokens"] = min(min_tokens, max_tokens)
    return orjson.dumps(body | extra if extra else body)


def generate_body(prompt: str | list, max_tokens: int, ignore_eos: bool, stream: bool, min_tokens: int | None,
                  model_inputs: tuple[str, ...], extra: dict | None = None) -> bytes:
    text = "\n".join(m["content"] for m in prompt) if isinstance(prompt, list) else prompt
    body: dict = {"text_input": text}
    parameters: dict = {}
    asked = {"max_tokens": max_tokens, "stream": stream, "ignore_eos": ignore_eos or None,
             "min_tokens": min(min_tokens, max_tokens) if min_tokens else None}
    for name, value in asked.items():
        if value is None:
            continue
        (body if name in model_inputs else parameters)[name] = value
    if parameters:
        body["parameters"] = parameters
    return orjson.dumps(body | extra if extra else body)


class StreamRead:
    """One streamed response being read: its SSE parser and its protocol's stream state, fed each piece of the body
    with the instant it was read. A fault in the stream is kept (`faults`) and raised, which stops the read; so is
    the client's own cancellation (`cancel`: a read at or after its deadline, or the token that reaches its count,
    closes the stream — what was read before it counts, nothing after)."""

    __slots__ = ("parser", "stream", "faults", "began", "timer", "cancel", "cancelled", "tokens_read", "counted")

    def __init__(self, stream, cancel: CancelAt | None = None) -> None:
        self.parser = SseParser()
        self.stream = stream  # OpenAIStream or TritonGenerateStream
        self.faults: list[Exception] = []  # raised inside the HTTP parser's callback: kept here, then classified
        self.began = False  # a 200's body was read (a cut is a stream that began)
        self.timer: gevent.Timeout | None = None  # the greenlet path's first-token timeout, cancelled at the token
        self.cancel = cancel
        self.cancelled = ""  # what closed it, once the client cancelled it (CancelAt.kind)
        self.tokens_read = self.counted = 0  # cancel after N tokens: tokens of the events counted so far

    def consume(self, data: bytes, read_ns: int) -> None:
        self.began = True
        stream, cancel = self.stream, self.cancel
        if cancel is not None and 0 <= cancel.deadline_ns <= read_ns:
            self._close(cancel.kind)  # read after the user left: none of it counts
        try:
            for at, event in self.parser.feed(data, read_ns):
                stream.feed(at, event)
        except (SseError, StreamProtocolError) as exc:
            self.faults.append(exc)
            raise  # stops reading: the connection is closed
        if self.timer is not None and stream.first_token_ns >= 0:
            self.timer.cancel()
        if cancel is not None and cancel.tokens and stream.first_token_ns >= 0:
            counts = stream.event_tokens
            if len(counts) > self.counted:
                self.tokens_read += sum(counts[self.counted:])
                self.counted = len(counts)
            if self.tokens_read >= cancel.tokens:
                self._close(cancel.kind)

    def _close(self, kind: str) -> None:
        self.cancelled = kind
        raise StreamCancelled(kind)  # stops reading: the connection is closed, as a user's browser closes it

    @property
    def first_token_ns(self) -> int:
        """The first token's read instant; -1 before it (the inline pool's first-token timeout reads it)."""
        return self.stream.first_token_ns


class StreamPending(NamedTuple):
    """A stream request on its way: its reading, the bytes it sent, its prompt's index in the token counter."""

    read: StreamRead
    bytes_out: int
    index: int


class StreamSender:
    """One endpoint's streamed generative requests — OpenAI-compatible completions or Triton's generate extension
    — over the generator's keep-alive HTTP/1.1 pool (TLS for https://), each body encoded before the run."""

    def __init__(self, url: str, protocol: str, bodies: list[bytes], timeouts: EndpointTimeouts,
                 credential: Credential | None, tls: Tls | None = None, pool: PoolLimits = PoolLimits.sized(16),
                 stream: bool = True, model: str = "", count_output: str | None = None,
                 counter: TokenCounter | None = None, samples: int = 0) -> None:
        self.chat, self.stream, self.protocol = serving_api(protocol).conversation, stream, protocol
        self.model, self.count_output, self.counter = model, count_output, counter
        self.transport = HttpTransport(url, timeouts, credential, tls, pool, kernel_stamps=True)
        self.client, self.warm_connections = self.transport.client, self.transport.warm_connections
        self.path = self.transport.base_path + stream_path(protocol, model, stream)
        self.payloads = PromptPayloads(bodies, count=samples)
        self.timeouts = timeouts
        self.inline = None  # the issue loop's own connections, once attached (attach_inline)
        self.media: list[tuple[int, int]] = []  # each body's images / clips and their bytes (empty: none)
        self._model_prefix = b'{"model":' + orjson.dumps(model)  # how a body built for `model` begins
        self._head = self.transport.head("POST", self.path, "Content-Type: application/json",
                                         "Accept: text/event-stream", "Connection: keep-alive",
                                         *((f"anthropic-version: {ANTHROPIC_VERSION}",) if protocol == MESSAGES else ()))

    def send(self, request: Send) -> Outcome:
        """Send one request and read its stream: its prompt `sample` (modulo the prompts) or the `body` built for it
        (a session's turn); never raises (a failure is an Outcome with a status class, and its stream says how far
        it got). Its `cancel`: when the client abandons it; its `model`: the model of the endpoint's mix it asks
        for."""
        if request.body is None:
            index = self.payloads.index(request.sample)
            return self._send_body(self.payloads.bodies[index], request.headers, request.on_sent, index,
                                   request.cancel, request.model)
        return self._send_body(request.body, request.headers, request.on_sent, request.prompt_index, request.cancel,
                               request.model)

    def _request(self, body: bytes, headers: dict[str, str]) -> bytes:
        """The request's head: its route, the credential (read now: a rotated one is picked up) and `headers`."""
        return b"".join((self._head, self.transport.auth_line(),
                         "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1"),
                         b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n"))

    def _reading(self, cancel: CancelAt | None = None) -> StreamRead:
        if self.protocol == TRITON_GENERATE:
            return StreamRead(TritonGenerateStream(self.count_output), cancel)
        return StreamRead(STREAMS.get(self.protocol, OpenAIStream)(self.chat), cancel)

    def _send_body(self, body: bytes, headers: dict[str, str], on_sent, index: int = -1,
                   cancel: CancelAt | None = None, model: str | None = None) -> Outcome:
        """Send one request body and read its stream (`index`: the prompt's in the token counter, -1: none)."""
        if model is not None:
            body = self.with_model(body, model)
        try:
            head = self._request(body, headers)
        except CredentialError as exc:
            return Outcome(status="client_error", code="credential", error=str(exc)[:200], stream=StreamOutcome())
        if not self.stream:
            return self._send_whole(head, body, on_sent, StreamOutcome(), index)
        read = self._reading(cancel)
        if self.timeouts.first_token_s:
            read.timer = gevent.Timeout(self.timeouts.first_token_s, FirstTokenTimeout("no first token in time"))
        on_sent()
        if read.timer is not None:
            read.timer.start()
        leave = None  # the user leaves at a time: the stream is closed then, whatever it is doing
        if cancel is not None and cancel.deadline_ns >= 0:
            leave = gevent.Timeout(max(0.0, (cancel.deadline_ns - time.perf_counter_ns()) / 1e9),
                                   StreamCancelled(cancel.kind))
            leave.start()
        response, failure = None, None
        try:
            response = self.client.request(head + body, read.consume, self.timeouts.stall_s)
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            failure = exc
        finally:
            if read.timer is not None:
                read.timer.cancel()
            if leave is not None:
                leave.cancel()
        return self.ended(StreamPending(read, len(head) + len(body), index), response, failure)

    def with_model(self, body: bytes, model: str) -> bytes:
        """`body` asking for `model` (of the endpoint's mix) instead of the one it was built with: its leading
        `{"model":"…"` replaced (bodies are built with the model first), else the JSON parsed and written again."""
        if model == self.model:
            return body
        prefix = self._model_prefix
        if body.startswith(prefix):
            return b'{"model":' + orjson.dumps(model) + body[len(prefix):]
        doc = orjson.loads(body)
        doc["model"] = model
        return orjson.dumps(doc)

    # -- the issue loop's own path (harness/worker/inline_sends.py): the same request, the same outcome ----------
    def encode(self, sample: int, headers: dict[str, str], cancel: CancelAt | None = None, model: str | None = None
               ) -> tuple[StreamPending | Outcome, tuple[bytes, bytes] | None]:
        """Prompt `sample`'s request as one buffer and the reading it needs (`StreamPending`); (its Outcome, None)
        when it cannot be sent (the credential cannot be read)."""
        index = self.payloads.index(sample)
        return self.encode_body(self.payloads.bodies[index], headers, index, cancel, model)

    def encode_body(self, body: bytes, headers: dict[str, str], index: int = -1, cancel: CancelAt | None = None,
                    model: str | None = None) -> tuple[StreamPending | Outcome, tuple[bytes, bytes] | None]:
        """encode for a body built ahead (a session's turn, a trace row's request; `index` as _send_body's): its head
        and the body as they are, never joined (a long prompt's body is hundreds of kB)."""
        if model is not None:
            body = self.with_model(body, model)
        try:
            head = self._request(body, headers)
        except CredentialError as exc:
            return Outcome(status="client_error", code="credential", error=str(exc)[:200], stream=StreamOutcome()), \
                None
        return StreamPending(self._reading(cancel), len(head) + len(body), index), (head, body)

    def answered(self, pending: StreamPending, response) -> Outcome:
        """The Outcome of an inline stream read to its end (harness/client/http1.py's HttpResponse)."""
        return self.ended(pending, response, None)

    def failed(self, pending: StreamPending, failure: BaseException) -> Outcome:
        """The Outcome of an inline stream that failed (what a blocking read would have raised)."""
        return self.ended(pending, None, failure)

    def attach_inline(self, poller, done):
        """This endpoint's streams driven by the issue loop (harness/client/inline_http1.py) from now on: plain
        HTTP streams only (None over TLS, or for stream = false: those stay on the greenlet path)."""
        if self.client.tls is not None or not self.stream:
            return None
        from tailrace.harness.client.inline_http1 import InlineHttp1Pool

        self.inline = InlineHttp1Pool(poller, self.client.host, self.client.port, self.timeouts.total_s, done,
                                      streamed=True, kernel_stamps=self.client.kernel_stamps,
                                      ttft_s=self.timeouts.first_token_s, stall_s=self.timeouts.stall_s)
        return self.inline

    def ended(self, pending: StreamPending, response, failure: BaseException | None) -> Outcome:
        """A stream's Outcome from how its read ended: a whole `response`, or the `failure` raised."""
        read, result = pending.read, StreamOutcome()
        status, code, error, bytes_in, timing = "ok", "200", "", 0, {}
        if read.cancelled or isinstance(failure, StreamCancelled):  # the client left, as declared: not a failure
            status, code, result.outcome = CANCELLED, read.cancelled or failure.kind, CANCELLED
        elif failure is None:
            bytes_in = response.body_bytes
            timing = server_timing(response.server_timing)
            code = str(response.status)
            status = classify_http_status(response.status)
            if status != "ok":
                error = error_text(response.body)
            elif read.parser.close():
                result.outcome = CUT  # the response ended inside an event
        elif isinstance(failure, FirstTokenTimeout):
            status, code, error, result.outcome = "timeout", "ttft_timeout", "no first token within " \
                f"{self.timeouts.first_token_s:g} s", TTFT_TIMEOUT
        elif isinstance(failure, Stalled):
            status, code, error, result.outcome = "timeout", STALLED, str(failure), STALLED
        elif read.faults:
            status, code, error = "bad_response", "stream", str(read.faults[0])[:200]
        else:
            status, code, error = classify_exception(failure)
            result.outcome = TIMEOUT if status == "timeout" else CUT if read.began else ""
        stream = read.stream
        stream_into(result, stream, self.counter, pending.index)
        if status == "ok":
            result.outcome = result.outcome or stream.outcome()
            if result.outcome != "complete":
                status, code = "bad_response", result.outcome
                error = stream.error or ("the stream ended before [DONE] or a finish reason" if result.outcome == CUT
                                         else error)
        return Outcome(status=status, code=code, error=error, bytes_out=pending.bytes_out, bytes_in=bytes_in,
                       stream=result, **timing)

    def _send_whole(self, head: bytes, body: bytes, on_sent, result: StreamOutcome, index: int) -> Outcome:
        """stream = false: one JSON response; E2E only, its tokens from the usage, no token instants."""
        on_sent()
        try:
            response = self.client.request(head + body)
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            status, code, error = classify_exception(exc)
            result.outcome = TIMEOUT if status == "timeout" else ""
            return Outcome(status=status, code=code, error=error, bytes_out=len(head) + len(body), stream=result)
        status, code, error = classify_http_status(response.status), str(response.status), ""
        if status != "ok":
            error = error_text(response.body)
        else:
            try:
                if self.protocol == TRITON_GENERATE:
                    text = whole_generate_response(response.body, self.count_output, result)
                else:
                    text = whole_response(response.body, self.chat, result, self.protocol)
                if self.counter is not None:
                    self.counter.fill(result, index, text)
            except StreamProtocolError as exc:
                status, code, error = "bad_response", "body", str(exc)[:200]
        return Outcome(status=status, code=code, error=error, bytes_out=len(head) + len(body),
                       bytes_in=len(response.body), stream=result)

    def warm_up(self) -> None:
        """One connection opened and checked (GET /v1/models, or the Triton model's ready route, with the
        credential), then the pool filled."""
        self.transport.check_and_fill(f"/v2/models/{self.model}/ready" if self.protocol == TRITON_GENERATE
                                      else "/v1/models", self.inline)

    def close(self) -> None:
        self.client.close()


def whole_response(payload: bytes, chat: bool, result: StreamOutcome, protocol: str = CHAT) -> str:
    """A stream = false response's tokens (from its usage), finish reason and first words into `result`; its
    text."""
    try:
        doc = orjson.loads(payload)
        if protocol in (MESSAGES, RESPONSES):
            text, usage, finish = (whole_messages if protocol == MESSAGES else whole_responses)(doc)
            choice = {"finish_reason": finish}
        else:
            choice = doc["choices"][0]
            text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
            usage = doc.get("usage") or {}
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
        raise StreamProtocolError(f"a response that is not a completion: {payload[:80]!r}") from None
    result.output_tokens = int(usage.get("completion_tokens", -1)) if isinstance(usage, dict) else -1
    result.input_tokens = int(usage.get("prompt_tokens", -1)) if isinstance(usage, dict) else -1
    result.token_source = "final_usage" if result.output_tokens >= 0 else ""
    result.finish_reason = str(choice.get("finish_reason") or "")[:32]
    result.preview = (text or "")[:80]
    result.pieces = [str(text or "")]
    result.cached_tokens = cached_tokens(usage)
    result.outcome = "complete"
    return str(text or "")


def whole_generate_response(payload: bytes, count_output: str | None, result: StreamOutcome) -> str:
    """A Triton /generate response's tokens when the model reports them (`count_output`) into `result`; its
    text."""
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


def stream_into(result: StreamOutcome, stream, counter: TokenCounter | None, prompt_index: int) -> None:
    """What a stream state (OpenAIStream, TritonGenerateStream) read, into the request's StreamOutcome; counts from
    the profile's tokenizer where the server reported none."""
    result.first_token_ns, result.last_token_ns = stream.first_token_ns, stream.last_token_ns
    result.event_ns, result.event_tokens = stream.event_ns, stream.event_tokens
    result.output_tokens, result.input_tokens = stream.output_tokens, stream.input_tokens
    result.token_source, result.finish_reason = stream.count_source, stream.finish_reason
    result.preview = stream.preview
    result.cached_tokens = getattr(stream, "cached_tokens", -1)
    result.reasoning_tokens = getattr(stream, "reasoning_tokens", -1)
    result.first_answer_ns = getattr(stream, "first_answer_ns", stream.first_token_ns)
    result.pieces = stream.texts
    result.reasoning_events = tuple(getattr(stream, "reasoning_events", ()))
    result.tool_calls = [call for _, call in sorted(getattr(stream, "tool_calls", {}).items())]
    result.unknown_events = getattr(stream, "unknown_events", 0)
    result.response_id = getattr(stream, "response_id", "")
    if counter is not None:
        counter.fill(result, prompt_index, "".join(stream.texts))


_TIMING = re.compile(rb'(\w+);(?:dur=([0-9.]+)|desc="?(-?\d+)"?)')


def server_timing(header: bytes) -> dict[str, int]:
    """A streamed response's Server-Timing (the embedded server's: queue and prefill durations, its receive and
    first-send epoch ns) as Outcome's server fields; {} when the server sends none."""
    if not header:
        return {}
    out = {}
    for name, duration, stamp in _TIMING.findall(header):
        field_name = _TIMING_FIELDS.get(name)
        if field_name is not None:
            value = int(float(duration) * 1e6) if duration else int(stamp)
            if value >= 0:
                out[field_name] = value
    return out


_TIMING_FIELDS = {b"queue": "server_queue_ns", b"prefill": "server_compute_ns", b"recv": "server_receive_ns",
                  b"send": "server_send_ns"}


def error_text(payload: bytes) -> str:
    try:
        doc = orjson.loads(payload)
        error = doc.get("error", doc) if isinstance(doc, dict) else doc
        return str(error.get("message", error) if isinstance(error, dict) else error)[:200]
    except (orjson.JSONDecodeError, AttributeError):
        return payload[:200].decode("utf-8", "replace")
