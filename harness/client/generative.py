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
from typing import NamedTuple, TypedDict

import gevent
import orjson

from tailrace.contract.apis import serving_api
from tailrace.contract.credentials import Credential, CredentialError
from tailrace.contract.plan import EndpointTimeouts, PoolLimits
from tailrace.contract.profile import Tls
from tailrace.contract.records import CANCELLED
from tailrace.harness.client.apis import BodyAsk, generative_client
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
from tailrace.harness.client.streams.openai_stream import (
    CUT,
    STALLED,
    TIMEOUT,
    TTFT_TIMEOUT,
    StreamProtocolError,
)
from tailrace.harness.client.streams.sse import SseError, SseParser
from tailrace.harness.client.tokenizer import TokenCounter

CHAT, COMPLETIONS, TRITON_GENERATE = "openai-chat", "openai-completions", "triton-generate"


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
    """The JSON body of one generative request (`prompt`: text, or chat messages), as its API builds it
    (harness/client/apis/); `extra`: the endpoint's extra_body, merged last (its keys win)."""
    ask = BodyAsk(model, prompt, max_tokens, ignore_eos, stream, min_tokens, model_inputs)
    return generative_client(protocol).encode(ask, extra)


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
    prompt_index: int


class StreamSender:
    """One endpoint's streamed generative requests — OpenAI-compatible completions or Triton's generate extension
    — over the generator's keep-alive HTTP/1.1 pool (TLS for https://), each body encoded before the run."""

    def __init__(self, url: str, protocol: str, bodies: list[bytes], timeouts: EndpointTimeouts,
                 credential: Credential | None, tls: Tls | None = None, pool: PoolLimits = PoolLimits.sized(16),
                 stream: bool = True, model: str = "", count_output: str | None = None,
                 counter: TokenCounter | None = None, samples: int = 0) -> None:
        self.api, self.stream, self.protocol = generative_client(protocol), stream, protocol
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
                                         "Accept: text/event-stream", "Connection: keep-alive", *self.api.head_lines)

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
        return StreamRead(self.api.reader(self.count_output), cancel)

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
        status, code, error, bytes_in, timing = "ok", "200", "", 0, ServerTiming()
        if read.cancelled or isinstance(failure, StreamCancelled):  # the client left, as declared: not a failure
            kind = failure.kind if isinstance(failure, StreamCancelled) else ""
            status, code, result.outcome = CANCELLED, read.cancelled or kind, CANCELLED
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
        stream_into(result, stream, self.counter, pending.prompt_index)
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
                text = self.api.whole(response.body, self.count_output, result)
                if self.counter is not None:
                    self.counter.fill(result, index, text)
            except StreamProtocolError as exc:
                status, code, error = "bad_response", "body", str(exc)[:200]
        return Outcome(status=status, code=code, error=error, bytes_out=len(head) + len(body),
                       bytes_in=len(response.body), stream=result)

    def warm_up(self) -> None:
        """One connection opened and checked (GET /v1/models, or the Triton model's ready route, with the
        credential), then the pool filled."""
        self.transport.check_and_fill(self.api.ready_path(self.model), self.inline)

    def close(self) -> None:
        self.client.close()


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


class ServerTiming(TypedDict, total=False):
    """What a server's Server-Timing header says, as Outcome's fields."""

    server_queue_ns: int
    server_compute_ns: int
    server_receive_ns: int
    server_send_ns: int


def server_timing(header: bytes) -> ServerTiming:
    """A streamed response's Server-Timing (the embedded server's: queue and prefill durations, its receive and
    first-send epoch ns) as Outcome's server fields; {} when the server sends none."""
    out = ServerTiming()
    for name, duration, stamp in _TIMING.findall(header) if header else ():
        field_name = _TIMING_FIELDS.get(name)
        if field_name is not None:
            value = int(float(duration) * 1e6) if duration else int(stamp)
            if value >= 0:
                out[field_name] = value  # type: ignore[literal-required]  # one of ServerTiming's keys
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
