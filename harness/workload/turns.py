"""One turn of a session as the request path sends it: the body built at its send, what the record says of it, and
the session's decision, made the moment its reply is in, whether this turn is its last (and why). A trace row's
request, built ahead of its send, travels the same way (`Turn.sessionless`). What is built ahead is built in pieces: a `Build`
yields a `Piece` (what it does next) before each piece of work, and returns what is sent
(harness/worker/build_ahead.py runs the pieces in the issue loop's gaps)."""
from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from types import GeneratorType

from tailrace.harness.client.outcome import Outcome

# why a session ended, on its last turn's record (contract/records.py session_end)
DONE, ERROR, CONTEXT_LIMIT, RUN_END = "done", "error", "context_limit", "run_end"


NO_SESSION = -1  # the session_id of a request built ahead that belongs to no session (a trace row's)


@dataclass
class Turn:
    """A request built from data, in flight: a session's turn, or (`sessionless`) a request of no session."""

    session_id: int
    index: int  # 1..
    body: bytes
    prompt_tokens: int  # the prompt's length as built (words, or the tokenizer's tokens)
    ideal_cached: int  # of them, what an unbounded prefix cache would hold from the session's earlier turns
    decide: Callable[[Outcome], str]  # given the reply: '' (the session goes on) or why it ends
    done_mono: int = 0  # perf_counter_ns() when the reply ended
    end: str = ""
    prompt_index: int = -1  # the prompt's place in the sender's token counter (-1: none)
    inputs: int = 0  # a pooling request's texts or documents (a pipeline's embed or rerank stage; 0: not one)
    pipeline: str = ""  # the pipeline this request is a stage of ('': none)
    media: tuple[int, int] = (0, 0)  # the images / clips the request carries and their bytes
    graded_by: tuple | None = None  # (item, reference, grader): a pipeline's answer graded against its line's reference


    @classmethod
    def sessionless(cls, body: bytes, prompt_tokens: int, ideal_cached: int, prompt_index: int) -> Turn:
        """A request of no session, its body built ahead of its send (a trace row's): its record carries its prompt's
        facts and no session (NO_SESSION, turn 0); nothing follows its reply."""
        return cls(NO_SESSION, 0, body, prompt_tokens, ideal_cached, _nothing_follows, prompt_index=prompt_index)


def _nothing_follows(_outcome: Outcome) -> str:
    return ""


@dataclass(frozen=True)
class PreparedRequest:
    """An arrival and its request, built before the arrival's instant."""

    arrival: object
    turn: Turn

    @property
    def body_bytes(self) -> int:
        return len(self.turn.body)


@dataclass(frozen=True, slots=True)
class Piece:
    """What a build does next: `units` of work of one `kind` (blocks of tokens, a body's tokens, a session's turn)."""

    kind: str
    units: int = 1


Build = Generator[Piece, None, object]


def build_now(build: Build | object) -> object:
    """A build's result, all its pieces run now (or the item itself, if it needs no building)."""
    if not isinstance(build, GeneratorType):
        return build
    try:
        while True:
            next(build)
    except StopIteration as done:
        return done.value
