"""What an Anthropic Messages stream and an OpenAI Responses stream say, event by event (harness/client/streams/):
token events and their instants, thinking and reasoning counted apart, tool calls, the usage, the end, in-band
errors, events of unknown types skipped and counted, malformed deltas refused; and the two APIs' request bodies
(harness/client/apis/) from one prompt or chat."""
from __future__ import annotations

import orjson
import pytest

from tailrace.harness.client.generative import request_body
from tailrace.harness.client.streams.anthropic_stream import AnthropicStream
from tailrace.harness.client.streams.openai_stream import COMPLETE, CUT, ERROR_EVENT, StreamProtocolError
from tailrace.harness.client.streams.responses_stream import ResponsesStream


def ev(kind: str, **doc) -> bytes:
    return orjson.dumps({"type": kind, **doc})


def text_delta(text: str, index: int = 0) -> bytes:
    return ev("content_block_delta", index=index, delta={"type": "text_delta", "text": text})


def test_an_anthropic_stream_as_vllm_serves_it():
    s = AnthropicStream(chat=True)
    s.feed(100, ev("message_start", message={"id": "msg_1", "type": "message", "role": "assistant", "content": [],
                                             "usage": {"input_tokens": 12, "output_tokens": 1,
                                                       "cache_read_input_tokens": 8}}))
    s.feed(101, ev("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}))
    s.feed(110, ev("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hmm"}))
    s.feed(111, ev("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "x"}))
    s.feed(112, ev("content_block_stop", index=0))
    s.feed(113, ev("ping"))
    s.feed(114, ev("content_block_start", index=1, content_block={"type": "text", "text": ""}))
    s.feed(150, text_delta("Hello", 1))
    s.feed(170, text_delta(" world", 1))
    s.feed(171, ev("content_block_start", index=2, content_block={"type": "tool_use", "id": "toolu_1",
                                                                  "name": "search", "input": {}}))
    s.feed(180, ev("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": '{"q": 1}'}))
    s.feed(190, ev("message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None},
                   usage={"output_tokens": 5}))
    assert s.outcome() == COMPLETE  # the stop reason alone: not cut
    s.feed(191, ev("message_stop"))
    assert (s.first_token_ns, s.first_answer_ns, s.last_token_ns) == (110, 150, 180)
    assert list(s.event_ns) == [110, 150, 170, 180] and s.reasoning_tokens == 1 and s.reasoning_events == [0]
    assert (s.input_tokens, s.cached_tokens, s.output_tokens, s.count_source) == (12, 8, 5, "final_usage")
    assert s.finish_reason == "tool_use" and s.done and s.unknown_events == 0
    assert s.tool_calls == {2: {"id": "toolu_1", "name": "search", "arguments": '{"q": 1}'}}


def test_an_anthropic_stream_cut_before_message_stop_errors_and_unknown_events():
    s = AnthropicStream(chat=True)
    s.feed(1, ev("message_start", message={"usage": {"input_tokens": 3, "output_tokens": 0}}))
    s.feed(2, text_delta("a"))
    s.feed(3, ev("content_block_delta", index=0, delta={"type": "citations_delta", "citation": {}}))
    s.feed(4, ev("message_annotation", data={}))
    assert (s.outcome(), s.output_tokens, s.count_source, s.unknown_events) == (CUT, 1, "events", 2)
    s.feed(5, ev("error", error={"type": "overloaded_error", "message": "Overloaded"}))
    assert (s.outcome(), s.error) == (ERROR_EVENT, "Overloaded")


@pytest.mark.parametrize("data", [b"not json", ev("content_block_delta", index=0),
                                  ev("content_block_delta", delta={"type": "text_delta", "text": 3}),
                                  orjson.dumps({"no": "type"})])
def test_a_malformed_anthropic_event_is_a_protocol_error(data):
    with pytest.raises(StreamProtocolError):
        AnthropicStream(chat=True).feed(1, data)


def test_a_responses_stream_as_vllm_serves_it():
    s = ResponsesStream()
    s.feed(100, ev("response.created", response={"id": "resp_7", "status": "in_progress"}))
    s.feed(101, ev("response.output_item.added", output_index=0, item={"type": "reasoning"}))
    s.feed(110, ev("response.reasoning_text.delta", delta="think"))
    s.feed(120, ev("response.output_item.added", output_index=1, item={"type": "message"}))
    s.feed(121, ev("response.content_part.added", part={"type": "output_text", "text": ""}))
    s.feed(150, ev("response.output_text.delta", delta="Hi"))
    s.feed(160, ev("response.output_text.delta", delta=" there"))
    s.feed(161, ev("response.output_item.added", output_index=2, item={"type": "function_call", "call_id": "c1",
                                                                        "name": "lookup"}))
    s.feed(170, ev("response.function_call_arguments.delta", output_index=2, delta='{"a":'))
    s.feed(175, ev("response.function_call_arguments.delta", output_index=2, delta="1}"))
    s.feed(176, ev("response.output_text.done", text="Hi there"))
    assert s.outcome() == CUT
    s.feed(180, ev("response.completed", response={
        "id": "resp_7", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
        "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 16}, "output_tokens": 9,
                  "output_tokens_details": {"reasoning_tokens": 4}}}))
    assert (s.response_id, s.first_token_ns, s.first_answer_ns, s.last_token_ns) == ("resp_7", 110, 150, 175)
    assert (s.input_tokens, s.cached_tokens, s.output_tokens, s.reasoning_tokens) == (20, 16, 9, 4)
    assert (s.finish_reason, s.outcome(), s.count_source) == ("max_output_tokens", COMPLETE, "final_usage")
    assert s.tool_calls == {2: {"id": "c1", "name": "lookup", "arguments": '{"a":1}'}}


def test_a_failed_response_and_an_error_event_and_unknown_events():
    s = ResponsesStream()
    s.feed(1, ev("response.output_text.delta", delta="x"))
    s.feed(2, ev("session.updated"))
    s.feed(3, ev("response.failed", response={"status": "failed", "error": {"code": "server_error",
                                                                           "message": "engine died"}}))
    assert (s.outcome(), s.error, s.unknown_events) == (ERROR_EVENT, "engine died", 1)
    t = ResponsesStream()
    t.feed(1, ev("error", code="rate_limit", message="slow down"))
    assert (t.outcome(), t.error) == (ERROR_EVENT, "slow down")
    with pytest.raises(StreamProtocolError):
        ResponsesStream().feed(1, ev("response.output_text.delta", delta=None))


def test_the_two_apis_bodies_from_one_chat_with_a_system_message_an_image_and_a_tool_call():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    chat = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "what is this"}, image]},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "look", "arguments": '{"x": 1}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a cat"}]
    m = orjson.loads(request_body("anthropic-messages", "claude", chat, 64))
    assert m["system"] == "be brief" and m["max_tokens"] == 64 and m["stream"] is True
    assert m["messages"][0] == {"role": "user", "content": [
        {"type": "text", "text": "what is this"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}
    assert m["messages"][1] == {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "look",
                                                                  "input": {"x": 1}}]}
    assert m["messages"][2] == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                                             "content": "a cat"}]}
    r = orjson.loads(request_body("openai-responses", "gpt", chat, 64, ignore_eos=True))
    assert r["max_output_tokens"] == 64 and r["store"] is False and r["ignore_eos"] is True
    assert r["input"][1] == {"role": "user", "content": [{"type": "input_text", "text": "what is this"},
                                                         {"type": "input_image",
                                                          "image_url": "data:image/png;base64,AAAA"}]}
    assert r["input"][2] == {"type": "function_call", "call_id": "c1", "name": "look", "arguments": '{"x": 1}'}
    assert r["input"][3] == {"type": "function_call_output", "call_id": "c1", "output": "a cat"}
    assert orjson.loads(request_body("openai-responses", "gpt", "hello", 8))["input"] == "hello"
