"""What an OpenAI-compatible stream says, event by event (the chat role event, usage, trailers, errors, cuts)."""
from __future__ import annotations

import orjson
import pytest

from tailrace.harness.client.streams.openai_stream import COMPLETE, CUT, ERROR_EVENT, OpenAIStream, StreamProtocolError


def chat(content=None, role=None, finish=None, usage=None, choices=True):
    delta = {k: v for k, v in (("role", role), ("content", content)) if v is not None}
    body = {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
    if usage is not None:
        body["usage"] = usage
    return orjson.dumps(body)


def test_a_vllm_chat_stream_with_continuous_usage():
    s = OpenAIStream(chat=True)
    s.feed(100, chat(role="assistant", content="", usage={"prompt_tokens": 12, "completion_tokens": 0}))
    s.feed(150, chat(content="Hel", usage={"prompt_tokens": 12, "completion_tokens": 1}))
    s.feed(170, chat(content="lo world", usage={"prompt_tokens": 12, "completion_tokens": 3}))  # two tokens
    s.feed(190, chat(content="!", finish="length", usage={"prompt_tokens": 12, "completion_tokens": 4}))
    s.feed(195, chat(choices=False, usage={"prompt_tokens": 12, "completion_tokens": 4}))  # the trailer
    s.feed(196, b"[DONE]")
    assert (s.first_token_ns, s.last_token_ns) == (150, 190)  # neither the role event nor the trailer
    assert list(s.event_ns) == [150, 170, 190] and list(s.event_tokens) == [1, 2, 1]
    assert (s.output_tokens, s.input_tokens, s.count_source) == (4, 12, "usage")
    assert (s.finish_reason, s.outcome()) == ("length", COMPLETE)


def test_completions_with_a_final_usage_only():
    s = OpenAIStream(chat=False)
    for t, text in ((10, "a"), (20, " b"), (30, " c")):
        s.feed(t, orjson.dumps({"choices": [{"index": 0, "text": text, "finish_reason": None}]}))
    s.feed(31, orjson.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}))
    s.feed(32, orjson.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}))
    assert list(s.event_tokens) == [1, 1, 1] and s.last_token_ns == 30
    assert (s.output_tokens, s.count_source, s.outcome()) == (4, "final_usage", COMPLETE)


def test_no_usage_counts_events_and_a_stream_without_an_end_is_cut():
    s = OpenAIStream(chat=True)
    s.feed(1, chat(content="x"))
    s.feed(2, chat(content="y"))
    assert (s.output_tokens, s.count_source, s.outcome()) == (2, "events", CUT)


def test_an_error_event_in_a_200_stream_is_a_failure_with_its_message():
    s = OpenAIStream(chat=True)
    s.feed(1, chat(content="x"))
    s.feed(2, orjson.dumps({"error": {"message": "out of KV cache", "code": 507}}))
    assert s.outcome() == ERROR_EVENT and s.error == "out of KV cache"


@pytest.mark.parametrize("data", [b"{not json", b"[1, 2]", b'{"id": "x"}', b'{"choices": [3]}'])
def test_malformed_events_are_protocol_errors(data):
    with pytest.raises(StreamProtocolError):
        OpenAIStream(chat=False).feed(1, data)


def test_triton_generate_events_count_the_named_output_else_one_each_and_an_error_fails():
    from tailrace.harness.client.streams.triton_stream import TritonGenerateStream

    counted = TritonGenerateStream("num_output_tokens")
    for at, doc in ((10, b'{"text_output": " a", "num_output_tokens": 1}'),
                    (20, b'{"text_output": " b c", "num_output_tokens": 2}'),
                    (30, b'{"text_output": " d", "num_output_tokens": 1, "finish_reason": "length"}')):
        counted.feed(at, doc)
    assert (counted.output_tokens, counted.count_source, counted.finish_reason) == (4, "output", "length")
    assert list(counted.event_tokens) == [1, 2, 1] and (counted.first_token_ns, counted.last_token_ns) == (10, 30)
    assert counted.outcome() == "complete"
    plain = TritonGenerateStream()
    plain.feed(5, b'{"text_output": " a b"}')
    plain.feed(6, b'{"text_output": ""}')  # no text: no token
    assert (plain.output_tokens, plain.count_source) == (1, "events")
    plain.feed(7, b'{"error": "out of memory"}')
    assert plain.outcome() == "error_event" and plain.error == "out of memory"


def test_a_generate_body_puts_what_the_model_declares_in_inputs_and_the_rest_in_parameters():
    import orjson

    from tailrace.harness.client.generative import TRITON_GENERATE, request_body

    declared = orjson.loads(request_body(TRITON_GENERATE, "m", "hi there", 8, model_inputs=("text_input", "max_tokens")))
    assert declared == {"text_input": "hi there", "max_tokens": 8, "parameters": {"stream": True, "ignore_eos": True}}
    bare = orjson.loads(request_body(TRITON_GENERATE, "m", "hi", 8, ignore_eos=False, model_inputs=("text_input",)))
    assert bare == {"text_input": "hi", "parameters": {"max_tokens": 8, "stream": True}}
