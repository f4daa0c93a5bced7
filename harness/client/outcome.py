"""What one request produced, as every sender returns it (harness/client/senders.py, generative.py)."""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np


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
    outcome: str = ""  # complete | error_event | cut | ttft_timeout | timeout
    preview: str = ""  # the text's first 80 characters
    cached_tokens: int = -1  # usage.prompt_tokens_details.cached_tokens (-1: not reported)
    reasoning_tokens: int = -1  # output tokens that were reasoning (-1: no reasoning seen)
    first_answer_ns: int = -1  # perf_counter_ns() of the read that carried the first answer token (not reasoning)
    pieces: list = field(default_factory=list)  # every token event's text, as read (no copy: the stream's own list)
    reasoning_events: tuple = ()  # which of them were reasoning, not answer (empty unless the server reasoned)
    tool_calls: list = field(default_factory=list)  # the tool calls streamed ({"id", "name", "arguments"})

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
