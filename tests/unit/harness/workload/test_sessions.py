"""Sessions: scripts from the profile and from files (bad lines named), the conversation each turn carries (actual or
recorded replies, tool results, the context limit), the stream's reasoning / tool-call / cached-token fields, and
the runner's timing — turn k+1 intended at turn k's end + its think time, the last turn saying why it ended."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest

from tailrace.contract.profile import Prompts, Sessions, ThinkTime, TokenCount
from tailrace.harness.client.openai_stream import OpenAIStream
from tailrace.harness.client.outcome import Outcome, StreamOutcome
from tailrace.harness.worker.scenarios import Arrival
from tailrace.harness.worker.sessions import SessionEndpoint, SessionRunner
from tailrace.harness.workload.conversations import (
    Conversation,
    SessionFileError,
    SyntheticSessions,
    TurnScript,
    jsonl_sessions,
    sharegpt_sessions,
)
from tailrace.harness.workload.turns import CONTEXT_LIMIT, DONE, ERROR, RUN_END

WORDS = lambda text: len(text.split())  # noqa: E731


def conversation(protocol: str = "openai-chat", **sessions) -> Conversation:
    return Conversation(protocol, "m", Prompts(), Sessions(**sessions), WORDS, lambda: "tool says ok")


def test_each_turn_carries_the_conversation_so_far_with_the_servers_actual_reply():
    c = conversation()
    first = c.next_request(TurnScript("one two three", 4))
    assert orjson.loads(first.body)["messages"] == [{"role": "user", "content": "one two three"}]
    assert (first.prompt_tokens, first.ideal_cached) == (3, 0)
    c.add_reply(TurnScript("one two three", 4), " alpha beta gamma delta", [], True)
    second = c.next_request(TurnScript("four " * 20, 4))
    messages = orjson.loads(second.body)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == " alpha beta gamma delta"  # what the server streamed
    assert second.prompt_tokens == 27 and second.ideal_cached == 0  # 3 + 4 computed: less than a block
    c.add_reply(TurnScript("x", 4), "a b c d", [], True)
    third = c.next_request(TurnScript("five six", 4))
    assert third.ideal_cached == 16  # 27 + 4 computed: one whole block
    # completions: the previous prompt, the reply and the new text, one after another
    text = conversation("openai-completions")
    text.next_request(TurnScript("hello there", 3))
    text.add_reply(TurnScript("hello there", 3), " general kenobi", [], True)
    assert orjson.loads(text.next_request(TurnScript("again", 3)).body)["prompt"] == \
        "hello there\n general kenobi\nagain"


def test_recorded_replies_tool_results_and_the_context_limit():
    recorded = conversation(history="recorded")
    recorded.next_request(TurnScript("q1", 2, recorded_reply="the recorded answer"))
    recorded.add_reply(TurnScript("q1", 2, recorded_reply="the recorded answer"), "what the server said", [], True)
    assert orjson.loads(recorded.next_request(TurnScript("q2", 2)).body)["messages"][1]["content"] == \
        "the recorded answer"
    agent = conversation(tool_result_tokens=3)
    agent.next_request(TurnScript("find it", 2))
    call = {"id": "call_1", "name": "search", "arguments": "{\"q\": \"it\"}"}
    agent.add_reply(TurnScript("find it", 2), "", [call], True)
    messages = orjson.loads(agent.next_request(TurnScript("and then", 2)).body)["messages"]
    assert messages[1]["tool_calls"][0]["function"] == {"name": "search", "arguments": "{\"q\": \"it\"}"}
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "tool says ok"}
    # a next prompt over the limit: the session ends, or its oldest turns are dropped
    ends = conversation(context_tokens=12)
    ends.next_request(TurnScript("a b c", 2))
    ends.add_reply(TurnScript("a b c", 2), "d e", [], True)
    assert ends.next_request(TurnScript("f g h i j k", 2)) is None
    cut = conversation(context_tokens=12, on_context_limit="truncate")
    cut.next_request(TurnScript("a b c", 2))
    cut.add_reply(TurnScript("a b c", 2), "d e", [], True)
    built = cut.next_request(TurnScript("f g h i j k", 2))
    assert built is not None and built.prompt_tokens == 6 and cut.dropped_turns == 1 and built.ideal_cached == 0


def test_synthetic_sessions_are_the_same_for_a_seed_and_differ_between_sessions():
    spec = Sessions(turns=TokenCount(mean=3), user_tokens=TokenCount(mean=5))
    source = SyntheticSessions(Prompts(input_tokens=TokenCount(mean=20)), spec, seed=9)
    a, b = source.script(1, 0), source.script(1, 0)
    assert a == b and a != source.script(2, 0) and len(a.turns) == 3
    assert [WORDS(t.user) for t in a.turns] == [20, 5, 5]


def test_session_files_read_and_bad_lines_named(tmp_path: Path):
    share = tmp_path / "chats.json"
    share.write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "hi there"}, {"from": "gpt", "value": "hello you two"},
        {"from": "human", "value": "bye"}]}]))
    (script,) = sharegpt_sessions(share, 7)
    assert [(t.user, t.max_tokens, t.recorded_reply) for t in script.turns] == [
        ("hi there", 3, "hello you two"), ("bye", 7, None)]
    share.write_text(json.dumps([{"conversations": [{"from": "gpt", "value": "nobody asked"}]}]))
    with pytest.raises(SessionFileError, match=r"chats.json: item 0: a conversation with no human turn"):
        sharegpt_sessions(share, 7)
    lines = tmp_path / "sessions.jsonl"
    lines.write_text("\n".join(json.dumps(d) for d in [
        {"session_id": "a", "text": "first", "output_tokens": 5, "timestamp": 10.0},
        {"session_id": "a", "input_tokens": 4, "timestamp": 12.5},
        {"session_id": "b", "text": "other", "delay": 1}]))
    a, b = jsonl_sessions(lines, 1, 9)
    assert [t.think_s for t in a.turns] == [None, 2.5] and WORDS(a.turns[1].user) == 4 and b.turns[0].user == "other"
    for bad, words in [({"session_id": "a", "text": "x", "delay": -1}, ":1: delay must be a number ≥ 0"),
                       ({"session_id": "a"}, ":1: a turn needs text or input_tokens"),
                       ({"session_id": True, "text": "x"}, ":1: session_id must be")]:
        lines.write_text(json.dumps(bad))
        with pytest.raises(SessionFileError, match=words):
            jsonl_sessions(lines, 1, 9)
    lines.write_text("\n".join(json.dumps({"session_id": s, "text": "x"}) for s in ("a", "b", "a")))
    with pytest.raises(SessionFileError, match="sessions.jsonl:3: session 'a' continues after other sessions"):
        jsonl_sessions(lines, 1, 9)


def test_a_stream_reads_reasoning_tool_calls_and_cached_tokens():
    s = OpenAIStream(chat=True)
    events = [{"choices": [{"delta": {"role": "assistant"}}]},
              {"choices": [{"delta": {"reasoning_content": "let me think"}}]},
              {"choices": [{"delta": {"reasoning": "more"}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f",
                                                                                             "arguments": "{\"a\""}}]}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]},
              {"choices": [{"delta": {"content": "done"}, "finish_reason": "stop"}]},
              {"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 5,
                                        "prompt_tokens_details": {"cached_tokens": 32}}}]
    for i, e in enumerate(events):
        s.feed(1000 * (i + 1), orjson.dumps(e))
    assert (s.first_token_ns, s.first_answer_ns, s.reasoning_tokens) == (2000, 4000, 2)
    assert s.tool_calls == {0: {"id": "c1", "name": "f", "arguments": "{\"a\": 1}"}}
    assert s.reasoning_events == [0, 1] and s.cached_tokens == 32
    answer = StreamOutcome(pieces=s.texts, reasoning_events=tuple(s.reasoning_events))
    assert answer.text == "f{\"a\": 1}done"  # the reasoning is not the answer


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
