"""Sessions on the worker: the arrival process starts sessions; each runs its turns one after another in a greenlet
of its own — open loop across sessions, closed within one.

Turn 1's intended send is the arrival; turn k+1's is turn k's end + its think time, and every latency of it (TTFT,
E2E) counts from that instant, so a generator late to send a next turn shows as send lag like any other request.
A turn is built at its send from the conversation so far (harness/workload/conversations.py). Whether a turn is its
session's last is decided the moment its reply is in, so its record says why the session ended: done (its turns
ran out), error (a failed turn with on_error = "end"), context_limit (the next prompt would not fit), run_end (the
next turn would be due after the run's window).
"""
from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tailrace.contract.profile import Endpoint, Prompts, Sessions
from tailrace.contract.records import CANCELLED
from tailrace.harness.client.outcome import Outcome
from tailrace.harness.worker.scenarios import Arrival
from tailrace.harness.workload.conversations import Built, Conversation, SessionScript, TurnScript, words_of
from tailrace.harness.workload.turns import CONTEXT_LIMIT, DONE, ERROR, RUN_END, Build, Piece, Turn, build_now


def think_ns(spec: Sessions, turn: TurnScript, rng: np.random.Generator) -> int:
    """The pause before a later turn (ns): fixed, exponential or lognormal (seeded), or the data's own."""
    t = spec.think_s
    if t.distribution == "data":
        seconds = turn.think_s if turn.think_s is not None else t.mean
    elif t.distribution == "exponential":
        seconds = rng.exponential(t.mean) if t.mean > 0 else 0.0
    elif t.distribution == "lognormal":
        sigma2 = np.log1p((t.stddev / t.mean) ** 2)
        seconds = rng.lognormal(np.log(t.mean) - sigma2 / 2, np.sqrt(sigma2))
    else:
        seconds = t.mean
    return int(seconds * 1e9)


@dataclass
class PreparedSession:
    """A session ready to start: its arrival, script, conversation (the first turn in it) and first request."""

    arrival: Arrival
    script: SessionScript
    conversation: Conversation
    rng: np.random.Generator
    first: Built | None  # None: its first turn alone is over the context limit
    next_built: Built | None = None  # the next turn's request, once the last reply is in (SessionRunner.after)
    next_at: int = 0  # and its intended instant
    grader: Any = None  # what grades a turn that carries a reference (a sessionized file's): None, none does

    @property
    def body_bytes(self) -> int:
        """The bytes its first request holds."""
        return len(self.first.body) if self.first is not None else 0


@dataclass
class SessionEndpoint:
    """What one session endpoint's sessions are made of."""

    endpoint: Endpoint
    source: object  # SyntheticSessions | FileSessions: script(session_id, sample) -> SessionScript
    count: Callable[[str], int]  # a text's length (words, or the tokenizer's tokens)
    media: object | None = None  # harness/workload/media.py MediaPrompts: a session's first turn's images / audio


class SessionRunner:
    """Runs sessions through the request path (`send(arrival, turn)`), waiting for each later turn's instant."""

    def __init__(self, send: Callable[[Arrival, Turn], Outcome], wait_until: Callable[[int], None],
                 endpoints: dict[int, SessionEndpoint], seed: int, end_mono: Callable[[], int],
                 phase_at: Callable[[int], int]) -> None:
        self.send, self.wait_until, self.endpoints, self.seed = send, wait_until, endpoints, seed
        self.end_mono, self.phase_at = end_mono, phase_at
        self.started = 0
        self.turns_sent = 0
        self.ended: Counter = Counter()
        self.dropped_turns = 0  # oldest turns dropped to fit the context (truncate)
        self.in_flight = 0  # sessions running now

    def handles(self, arrival: Arrival) -> bool:
        return arrival.endpoint in self.endpoints

    def prepare(self, arrival: Arrival) -> PreparedSession:
        """A session's script and its first request, built now."""
        return build_now(self.build(arrival))

    def build(self, arrival: Arrival) -> Build:
        """A session's script and its first request in two pieces, built before its arrival's instant (the issue
        loop does it in its gaps before the arrival: harness/worker/build_ahead.py): none of it is send lag."""
        ep = self.endpoints[arrival.endpoint]
        spec, prompts = ep.endpoint.sessions, ep.endpoint.prompts or Prompts()
        yield Piece("session script")
        script: SessionScript = ep.source.script(arrival.session, arrival.sample)
        rng = np.random.default_rng([self.seed, 5, arrival.session])
        conversation = Conversation(ep.endpoint.protocol, ep.endpoint.model, prompts, spec, ep.count,
                                    lambda: words_of(spec.tool_result_tokens, rng))
        first = script.turns[0]
        yield Piece("session first turn", max(1, len(first.user)))
        media = ep.media.draw() if ep.media is not None else ()  # then in the history of every later turn
        return PreparedSession(arrival, script, conversation, rng, conversation.next_request(first, media=media),
                               grader=getattr(ep.source, "grader", None))

    def run(self, session: PreparedSession) -> None:
        """One session on a greenlet of its own, from its arrival to its last turn."""
        step = self.begin(session)
        try:
            while step is not None:
                arrival, turn = step
                if turn.index > 1:
                    self.wait_until(arrival.intended_mono)
                self.send(arrival, turn)
                step = self.after(session, turn)
        finally:
            self.end(session)

    # -- a session as steps: run() takes them on a greenlet; the issue loop's inline path takes them itself, each
    #    later turn sent by the loop at its instant (harness/worker/inline_sends.py) --------------------------------
    def begin(self, session: PreparedSession) -> tuple[Arrival, Turn] | None:
        """A session started: its first turn; None when that alone is over the context limit (nothing to send).
        Every session begun is ended once (`end`)."""
        self.started += 1
        self.in_flight += 1
        if session.first is None:
            self.ended[CONTEXT_LIMIT] += 1
            return None
        return self._turn(session, 1, session.first, session.arrival.intended_mono)

    def after(self, session: PreparedSession, turn: Turn) -> tuple[Arrival, Turn] | None:
        """`turn` answered and decided (Turn.end): the session's next turn, or None when it has ended (counted)."""
        self.turns_sent += 1
        if turn.end:
            self.ended[turn.end] += 1
            return None
        return self._turn(session, turn.index + 1, session.next_built, session.next_at)

    def end(self, session: PreparedSession) -> None:
        """A session begun is over (its last turn, or the run stopped it)."""
        self.in_flight -= 1
        self.dropped_turns += session.conversation.dropped_turns

    def _turn(self, session: PreparedSession, k: int, built: Built, intended: int) -> tuple[Arrival, Turn]:
        """Turn `k` of `session`, due at `intended`: its request and its decision, which builds turn k+1."""
        arrival, script, conversation, rng = session.arrival, session.script, session.conversation, session.rng
        spec, turn_script = conversation.sessions, script.turns[k - 1]

        def decide(outcome: Outcome) -> str:
            """Is this turn the last? Prepares the next turn's request (its think time, its prompt). It reaches its Turn
            through a weak reference: a turn and its decision must make no cycle, which only the cyclic collector
            would free, in passes that stop the sending loop (docs/DECISIONS.md)."""
            answered = outcome.status == "ok" or outcome.status == CANCELLED  # (the user stopped the reply: the
            if not answered and spec.on_error == "end":  # conversation goes on with what was read, as a chat UI's)
                return ERROR
            if k == len(script.turns):
                return DONE
            stream = outcome.stream
            replied = answered and stream is not None
            tool = conversation.add_reply(turn_script, stream.text if replied else "",
                                          stream.tool_calls if replied else [], replied,
                                          stream.response_id if replied else "")
            following = script.turns[k]
            session.next_at = this().done_mono + think_ns(spec, following, rng)
            if session.next_at >= self.end_mono():
                return RUN_END
            session.next_built = conversation.next_request(following, tool)
            return CONTEXT_LIMIT if session.next_built is None else ""

        graded_by = (turn_script.line, turn_script.reference, session.grader) if session.grader is not None \
            and turn_script.reference is not None else None
        turn = Turn(arrival.session, k, built.body, built.prompt_tokens, built.ideal_cached, decide, media=built.media,
                    graded_by=graded_by)
        this = weakref.ref(turn)
        return Arrival(intended, arrival.endpoint, self.phase_at(intended) if k > 1 else arrival.phase,
                       arrival.sample, arrival.session), turn

    def summary(self) -> dict:
        return {"started": self.started, "turns_sent": self.turns_sent, "ended": dict(self.ended),
                "dropped_turns": self.dropped_turns}
