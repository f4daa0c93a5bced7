"""The session runner's timing: turn k+1 intended at turn k's end + its think time, the last turn saying why it ended;
a turn freed without the cyclic collector."""
from __future__ import annotations

import numpy as np

from tailrace.contract.profile import Prompts, Sessions, ThinkTime, TokenCount
from tailrace.harness.client.outcome import Outcome, StreamOutcome
from tailrace.harness.worker.chains.sessions import SessionEndpoint, SessionRunner
from tailrace.harness.worker.scenarios import Arrival
from tailrace.harness.workload.conversations import (
    SyntheticSessions,
)
from tailrace.harness.workload.turns import CONTEXT_LIMIT, DONE, ERROR, RUN_END

WORDS = lambda text: len(text.split())  # noqa: E731


class TurnSender:
    """Answers each turn after `service_ns` (a fake clock), failing the turns listed."""

    def __init__(self, clock: list[int], service_ns: int, failing: set[int] = frozenset()):
        self.clock, self.service_ns, self.failing = clock, service_ns, failing
        self.sent: list[tuple[Arrival, object]] = []

    def __call__(self, arrival: Arrival, turn) -> Outcome:
        self.clock[0] = max(self.clock[0], arrival.intended_mono) + self.service_ns
        self.sent.append((arrival, turn))
        turn.done_mono = self.clock[0]
        ok = turn.index not in self.failing
        stream = StreamOutcome(outcome="complete", pieces=[" reply", " words", " here"])
        outcome = Outcome(status="ok" if ok else "timeout", stream=stream)
        turn.end = turn.decide(outcome)
        return outcome


def runner(sender, clock, end_ns: int, **sessions) -> SessionRunner:
    from tailrace.contract.profile import Endpoint

    ep = Endpoint(name="chat", url="http://127.0.0.1:1", protocol="openai-chat", model="m",
                  prompts=Prompts(input_tokens=TokenCount(mean=8)), sessions=Sessions(**sessions))
    source = SyntheticSessions(ep.prompts, ep.sessions, seed=3)
    waits = []
    r = SessionRunner(sender, lambda t: (waits.append(t), clock.__setitem__(0, max(clock[0], t))), {0: SessionEndpoint(
        ep, source, WORDS)}, 3, lambda: end_ns, lambda t: 1)
    r.waits = waits
    return r


def test_the_next_turn_is_due_at_the_replys_end_plus_the_think_time_and_the_last_says_why():
    clock = [0]
    sender = TurnSender(clock, service_ns=50_000_000)
    r = runner(sender, clock, 10**12, turns=TokenCount(mean=3), think_s=ThinkTime(mean=0.2))
    r.run(r.prepare(Arrival(1_000_000, 0, 1, 0, session=42)))
    intended = [a.intended_mono for a, _ in sender.sent]
    done = [t.done_mono for _, t in sender.sent]
    assert intended[0] == 1_000_000
    assert [intended[k + 1] - done[k] for k in range(2)] == [200_000_000, 200_000_000]
    assert [t.end for _, t in sender.sent] == ["", "", DONE] and {t.session_id for _, t in sender.sent} == {42}
    assert r.summary() == {"started": 1, "turns_sent": 3, "ended": {DONE: 1}, "dropped_turns": 0}
    # a failed turn ends its session (on_error = "end"); a next turn due after the run's end is not sent
    clock = [0]
    failing = TurnSender(clock, 50_000_000, failing={2})
    r = runner(failing, clock, 10**12, turns=TokenCount(mean=4))
    r.run(r.prepare(Arrival(0, 0, 1, 0, session=1)))
    assert [t.end for _, t in failing.sent] == ["", ERROR]
    clock = [0]
    late = TurnSender(clock, 50_000_000)
    r = runner(late, clock, 300_000_000, turns=TokenCount(mean=4), think_s=ThinkTime(mean=0.2))
    r.run(r.prepare(Arrival(0, 0, 1, 0, session=1)))
    assert [t.end for _, t in late.sent] == ["", RUN_END]
    clock = [0]
    tight = TurnSender(clock, 1)
    # 8 words + 64 max_tokens a turn, replies of 3 words: the fourth turn would need 105 tokens
    r = runner(tight, clock, 10**12, turns=TokenCount(mean=4), context_tokens=100)
    r.run(r.prepare(Arrival(0, 0, 1, 0, session=1)))
    assert [t.end for _, t in tight.sent] == ["", "", CONTEXT_LIMIT]
    assert np.all(np.diff([a.intended_mono for a, _ in tight.sent]) > 0)


def test_a_turn_is_freed_as_soon_as_its_session_lets_go_of_it_without_the_cyclic_collector():
    """A turn and its decision make no reference cycle: at 1,000 turns/s such cycles filled the collector's first
    generation, whose passes stopped the sending loop 10-22 ms every 2.5 s."""
    import gc
    import weakref

    clock = [0]
    sender = TurnSender(clock, service_ns=1_000_000)
    r = runner(sender, clock, 10**12, turns=TokenCount(mean=3), think_s=ThinkTime(mean=0.01))
    gc.disable()
    try:
        r.run(r.prepare(Arrival(0, 0, 1, 0, session=7)))
        refs = [weakref.ref(t) for _, t in sender.sent]
        sender.sent.clear()
        assert len(refs) == 3 and all(ref() is None for ref in refs)
    finally:
        gc.enable()


def test_a_sessions_first_turn_carries_its_images_and_every_later_turn_resends_them():
    import orjson

    from tailrace.contract.profile import Endpoint
    from tailrace.harness.workload.media import MediaPrompts

    clock = [0]
    sender = TurnSender(clock, service_ns=50_000_000)
    ep = Endpoint.model_validate({"name": "chat", "url": "http://127.0.0.1:1", "protocol": "openai-chat",
                                  "model": "m", "prompts": {"input_tokens": 8, "images": {"per_request": 2,
                                                                                          "width": 64, "height": 64}},
                                  "sessions": {"turns": 3}})
    source = SyntheticSessions(ep.prompts, ep.sessions, seed=3)
    media = MediaPrompts(ep, 3, __import__("pathlib").Path("."))
    r = SessionRunner(sender, lambda t: clock.__setitem__(0, max(clock[0], t)),
                      {0: SessionEndpoint(ep, source, WORDS, media)}, 3, lambda: 10**12, lambda t: 1)
    r.run(r.prepare(Arrival(1_000_000_000, 0, 1, 0, session=7)))
    turns = [t for _, t in sender.sent]
    assert len(turns) == 3
    first = orjson.loads(turns[0].body)["messages"]
    assert [p["type"] for p in first[0]["content"]] == ["text", "image_url", "image_url"]
    third = orjson.loads(turns[2].body)["messages"]
    assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert third[0] == first[0] and isinstance(third[2]["content"], str)  # the images stay in the history only
    assert turns[0].media[0] == turns[2].media[0] == 2 and turns[0].media[1] > 0
    assert turns[0].prompt_tokens == 8  # the text's words: the images' tokens are the server's to count
