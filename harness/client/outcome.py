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
    text: str = ""  # the answer's whole text (a session's next turn carries it); kept only when asked for
    tool_calls: list = field(default_factory=list)  # the tool calls streamed ({"id", "name", "arguments"})


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
