"""One turn of a session as the request path sends it: the body built at its send, what the record says of it, and
the session's decision, made the moment its reply is in, whether this turn is its last (and why)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.client.outcome import Outcome

# why a session ended, on its last turn's record (contract/records.py session_end)
DONE, ERROR, CONTEXT_LIMIT, RUN_END = "done", "error", "context_limit", "run_end"


@dataclass
class Turn:
    """A session's turn in flight."""

    session_id: int
    index: int  # 1..
    body: bytes
    prompt_tokens: int  # the prompt's length as built (words, or the tokenizer's tokens)
    ideal_cached: int  # of them, what an unbounded prefix cache would hold from the session's earlier turns
    decide: Callable[[Outcome], str]  # given the reply: '' (the session goes on) or why it ends
    done_mono: int = 0  # perf_counter_ns() when the reply ended
    end: str = ""
