"""One request as a sender is handed it (`Send`) and what it produced (`Outcome`), as every sender takes and returns
them (harness/client/senders.py, generative.py, pooling.py, grpc_stream.py).

A failed request is classified into the record's status classes here too (pure functions).
"""
from __future__ import annotations

import socket
import ssl
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import grpc
import numpy as np


class CancelAt(NamedTuple):
    """When the client abandons one stream (an endpoint's `cancel`, drawn for this request)."""

    kind: str  # time | first_token | tokens
    deadline_ns: int  # time: the perf_counter_ns() instant (intended send + the drawn time); else -1
    tokens: int  # first_token: 1; tokens: the drawn count; time: 0


def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Send:
    """One request, everything it carries, in one typed call to a sender's `send` (after httpx's `handle_request`:
    one method, one argument). Either `sample` — a request encoded before the run (its payloads' index) — or `body`,
    built for this request (a session's turn, a pipeline's stage)."""

    sample: int = 0
    headers: dict[str, str] = field(default_factory=dict)  # traceparent, the run's and the clock offset's headers
    on_sent: Callable[[], None] = _nothing  # called just before the request's bytes leave
    body: bytes | None = None
    prompt_index: int = -1  # the prompt a built body came from (a token counter's), -1: none
    inputs: int = 0  # a built pooling body's texts or documents
    cancel: CancelAt | None = None  # when the client abandons a stream (drawn for this request)
    model: str | None = None  # the model of the endpoint's mix this request asks for


class StreamCancelled(Exception):
    """The client closes a stream on purpose: its CancelAt was reached (never a failure of the server)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"cancelled by the client ({kind})")
        self.kind = kind


@dataclass
class StreamOutcome:
    """What one streamed request produced, beside the one-shot Outcome's fields."""

    first_token_ns: int = -1  # perf_counter_ns() of the read that carried the first token
    last_token_ns: int = -1
    event_ns: array = field(default_factory=lambda: array("q"))
    event_tokens: array = field(default_factory=lambda: array("H"))
    output_tokens: int = -1
    input_tokens: int = -1
    token_source: str = ""  # usage | final_usage | events
    finish_reason: str = ""
    outcome: str = ""  # complete | error_event | cut | ttft_timeout | timeout | cancelled
    preview: str = ""  # the text's first 80 characters
    cached_tokens: int = -1  # usage.prompt_tokens_details.cached_tokens (-1: not reported)
    reasoning_tokens: int = -1  # output tokens that were reasoning (-1: no reasoning seen)
    first_answer_ns: int = -1  # perf_counter_ns() of the read that carried the first answer token (not reasoning)
    pieces: list = field(default_factory=list)  # every token event's text, as read (no copy: the stream's own list)
    reasoning_events: tuple = ()  # which of them were reasoning, not answer (empty unless the server reasoned)
    tool_calls: list = field(default_factory=list)  # the tool calls streamed ({"id", "name", "arguments"})
    unknown_events: int = 0  # events of a type the protocol's reader does not know: skipped, counted
    response_id: str = ""  # a Responses stream's response id (a next turn's previous_response_id)

    @property
    def text(self) -> str:
        """The answer's whole text (what a session's next turn carries), joined only when asked for: the request
        path never pays for it."""
        if not self.reasoning_events:
            return "".join(self.pieces)
        skip = set(self.reasoning_events)
        return "".join(p for i, p in enumerate(self.pieces) if i not in skip)


@dataclass
class Outcome:
    """What one request produced."""

    status: str = "ok"
    code: str = ""
    error: str = ""
    server_queue_ns: int = -1
    server_compute_ns: int = -1
    server_receive_ns: int = -1
    server_send_ns: int = -1
    echoed_trace_id: str = ""
    bytes_out: int = 0
    bytes_in: int = 0
    outputs: dict[str, np.ndarray] | None = None  # the outputs a check reads (None: not read or failed)
    stream: StreamOutcome | None = None  # a streamed (generative) response: its tokens
    batch: int = 0  # inputs the request carried, where it says (an embeddings batch; 0: the endpoint's batch size)
    input_tokens: int = -1  # a whole reply's usage.prompt_tokens (embeddings; a stream's are in `stream`)
    ranked: list[int] | None = None  # a rerank reply's document indices, best score first (a pipeline's next stage)


def classify_exception(exc: BaseException) -> tuple[str, str, str]:
    """(status, code, short error text) for an exception raised while sending or receiving."""
    text = f"{type(exc).__name__}: {exc}"[:200]
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        code = exc.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return "timeout", code.name, text
        if code == grpc.StatusCode.UNAVAILABLE and _looks_like_connection(str(exc.details() or "")):
            return "connection", code.name, (exc.details() or "")[:200]
        return "grpc_error", code.name, (exc.details() or text)[:200]
    if isinstance(exc, (socket.timeout, TimeoutError)) or type(exc).__name__ in ("Timeout", "ConnectionTimeout"):
        return "timeout", "timeout", text
    if isinstance(exc, ConnectionRefusedError):
        return "connection", "refused", text
    if isinstance(exc, ConnectionResetError):
        return "connection", "reset", text
    if isinstance(exc, (BrokenPipeError, ConnectionAbortedError, ConnectionError, ssl.SSLError, socket.gaierror)):
        return "connection", type(exc).__name__, text
    if isinstance(exc, OSError) or type(exc).__name__ in ("HTTPConnectionClosed", "HTTPParseError",
                                                           "RemoteDisconnected", "IncompleteRead"):
        return "connection", "closed", text
    return "bad_response", "exception", text


def _looks_like_connection(details: str) -> bool:
    d = details.lower()
    return any(w in d for w in ("connection refused", "failed to connect", "connection reset", "socket closed",
                                "connect failed", "broken pipe", "end of tcp stream", "connection attempt"))


def classify_http_status(status: int) -> str:
    """'ok' for 2xx, else 'http_error'."""
    return "ok" if 200 <= status < 300 else "http_error"
