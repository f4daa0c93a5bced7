"""The embedded server's Messages and Responses (endpoints/generation/chat_apis.py): requests read into what the
engines take (text, images' tokens, max tokens), bad ones named; the events it writes read back by tailrace's own
stream readers as a complete stream with its tokens and usage."""
from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest

from tailrace.endpoints.generation.chat_apis import (
    MessagesWriter,
    ResponsesWriter,
    api_error,
    parse_messages,
    parse_responses,
)
from tailrace.endpoints.serving.errors import InferenceError
from tailrace.harness.client.streams.anthropic_stream import AnthropicStream
from tailrace.harness.client.streams.openai_stream import COMPLETE
from tailrace.harness.client.streams.responses_stream import ResponsesStream
from tailrace.harness.client.streams.sse import SseParser
from tailrace.harness.workload.media import synthetic_image


def png(width: int, height: int) -> str:
    return base64.b64encode(synthetic_image(width, height, "png", np.random.default_rng(0))).decode()


def test_a_messages_request_with_a_system_prompt_and_an_image():
    request = parse_messages(orjson.dumps({
        "model": "m", "max_tokens": 7, "stream": True, "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "what is it"},
                                                  {"type": "image", "source": {"type": "base64",
                                                                               "media_type": "image/png",
                                                                               "data": png(56, 56)}}]}]}))
    assert (request.text, request.max_tokens, request.stream, request.media_tokens) == ("be brief\nwhat is it", 7,
                                                                                        True, 4)


def test_a_responses_request_of_text_or_input_items():
    assert parse_responses(orjson.dumps({"model": "m", "input": "hello there", "max_output_tokens": 5})).text == \
        "hello there"
    request = parse_responses(orjson.dumps({"model": "m", "stream": True, "ignore_eos": True, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                     {"type": "input_image", "image_url": f"data:image/png;base64,{png(60, 30)}"}]}]}))
    assert (request.text, request.media_tokens, request.ignore_eos, request.max_tokens) == ("look", 3 * 2, True, 16)


@pytest.mark.parametrize("parse, body, message", [
    (parse_messages, {"model": "m", "messages": [{"role": "user", "content": "a"}]}, "max_tokens: required"),
    (parse_messages, {"model": "m", "max_tokens": 4, "messages": []}, "messages: required"),
    (parse_messages, {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x"}}]}]}, "a base64 source"),
    (parse_responses, {"model": "m"}, "input: required"),
    (parse_responses, {"model": "m", "input": "a", "previous_response_id": "resp_1"}, "keeps no responses"),
    (parse_responses, {"model": "m", "input": [{"role": "user", "content": [{"type": "input_file"}]}]},
     "'input_file' is not served"),
])
def test_a_bad_request_is_named(parse, body, message):
    with pytest.raises(InferenceError, match=message):
        parse(orjson.dumps(body))


def read_back(events: list[bytes], stream) -> None:
    parser = SseParser()
    for t, event in enumerate(events):
        for _, data in parser.feed(event, 100 + t):
            stream.feed(100 + t, data)


@pytest.mark.parametrize("writer, stream", [(MessagesWriter, AnthropicStream), (ResponsesWriter, ResponsesStream)])
def test_what_the_server_streams_tailrace_reads_whole(writer, stream):
    w = writer("m", 42)
    events = [*w.opening(12, 4), *(w.text(f" w{k}") for k in range(5)), *w.closing("length", 12, 5, 4, {"queue_ms": 1})]
    s = stream(True)
    read_back(events, s)
    assert s.outcome() == COMPLETE and s.done and s.unknown_events == 0
    assert (s.input_tokens, s.output_tokens, s.count_source, len(s.event_ns)) == (12, 5, "final_usage", 5)
    assert "".join(s.texts) == " w0 w1 w2 w3 w4"
    assert s.finish_reason in ("max_tokens", "max_output_tokens")
    whole = orjson.loads(w.whole("abc", "stop", 12, 3, 4, {}))
    assert whole["usage"]["input_tokens"] == 12 and whole["usage"]["output_tokens"] == 3


def test_errors_in_each_apis_shape():
    assert orjson.loads(api_error("/v1/messages", "no such model", 404)) == {
        "type": "error", "error": {"type": "not_found_error", "message": "no such model"}}
    assert orjson.loads(api_error("/v1/responses", "bad", 400))["error"]["message"] == "bad"
