"""Sessions' scripts from the profile and from files (bad lines named), the conversation each turn carries (actual
or recorded replies, tool results, the context limit), and the stream's reasoning / tool-call / cached-token fields."""
from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from tailrace.contract.profile import Prompts, Sessions, TokenCount
from tailrace.harness.client.outcome import StreamOutcome
from tailrace.harness.client.streams.openai_stream import OpenAIStream
from tailrace.harness.workload.conversations import (
    Conversation,
    SessionFileError,
    SyntheticSessions,
    TurnScript,
    jsonl_sessions,
    sharegpt_sessions,
)

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


def test_responses_with_server_state_send_only_the_new_input_and_name_the_previous_reply():
    c = conversation("openai-responses", server_state=True)
    first = orjson.loads(c.next_request(TurnScript("hello there", 8)).body)
    assert first["input"] == [{"role": "user", "content": "hello there"}] and first["store"] is True
    assert "previous_response_id" not in first
    c.add_reply(TurnScript("hello there", 8), "hi back", [], True, "resp_1")
    second = c.next_request(TurnScript("and again", 8))
    body = orjson.loads(second.body)
    assert body["input"] == [{"role": "user", "content": "and again"}] and body["previous_response_id"] == "resp_1"
    assert second.prompt_tokens == 2 + 2 + 2  # what the server computes: the whole conversation
    c.add_reply(TurnScript("and again", 8), "", [], False, "")  # a failed turn: no id to name
    third = orjson.loads(c.next_request(TurnScript("once more", 8)).body)
    assert "previous_response_id" not in third and len(third["input"]) == 5  # the whole conversation again


def test_server_state_is_for_responses_with_the_actual_history():
    from tailrace.contract.profile import ProfileError, parse_profile

    def profile(protocol: str, **sessions):
        return parse_profile({"name": "p", "regions": [{"name": "r", "share": 1.0}], "load": {"rate": 1, "duration_s": 1},
                              "endpoints": [{"name": "e", "url": "http://127.0.0.1:9", "protocol": protocol,
                                             "model": "m", "sessions": {"server_state": True, **sessions}}]}, "p.toml")

    assert profile("openai-responses").endpoints[0].sessions.server_state
    with pytest.raises(ProfileError, match="server_state: for openai-responses endpoints"):
        profile("openai-chat")
    with pytest.raises(ProfileError, match="history must be"):
        profile("openai-responses", on_context_limit="truncate", context_tokens=100)
