"""One module per streamed HTTP API (harness/client/apis/): every generative HTTP API the registry declares has a
client and no client is undeclared; each builds its body from the same ask, reads its own whole reply, and the sender
reads it by protocol."""
from __future__ import annotations

import orjson
import pytest

from tailrace.contract.apis.registry import APIS, HTTP
from tailrace.harness.client.apis import CLIENTS, BodyAsk, generative_client
from tailrace.harness.client.generative import request_body
from tailrace.harness.client.outcome import StreamOutcome
from tailrace.harness.client.streams.openai_stream import StreamProtocolError

STREAMED_HTTP = {a.name for a in APIS if a.generative and a.schemes == HTTP}

WHOLE_REPLIES = {  # what each API's server answers to stream = false, with 5 tokens out of a 3-token prompt
    "openai-chat": {"choices": [{"message": {"content": "a b c d e"}, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 5}},
    "openai-completions": {"choices": [{"text": "a b c d e", "finish_reason": "length"}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 5,
                                     "prompt_tokens_details": {"cached_tokens": 2}}},
    "anthropic-messages": {"content": [{"type": "text", "text": "a b c d e"}], "stop_reason": "max_tokens",
                           "usage": {"input_tokens": 3, "output_tokens": 5}},
    "openai-responses": {"output": [{"type": "message", "content": [{"type": "output_text", "text": "a b c d e"}]}],
                         "status": "incomplete", "usage": {"input_tokens": 3, "output_tokens": 5}},
    "triton-generate": {"text_output": "a b c d e", "n_out": [5]},
}


def test_every_streamed_http_api_has_exactly_one_client():
    assert set(CLIENTS) == STREAMED_HTTP
    for name, client in CLIENTS.items():
        assert client.traits.name == name and client.traits.generative


@pytest.mark.parametrize("protocol", sorted(STREAMED_HTTP))
def test_each_api_builds_its_body_and_the_model_goes_where_its_traits_say(protocol):
    ask = BodyAsk("m", [{"role": "user", "content": "one two three"}], 8, ignore_eos=False)
    body = orjson.loads(generative_client(protocol).encode(ask, {"temperature": 0}))
    assert body["temperature"] == 0  # the endpoint's extra fields, merged last
    assert ("model" in body) == generative_client(protocol).traits.model_in_body
    assert orjson.dumps(body) == orjson.dumps(orjson.loads(request_body(
        protocol, "m", [{"role": "user", "content": "one two three"}], 8, ignore_eos=False,
        extra={"temperature": 0})))
    assert "one two three" in orjson.dumps(body).decode()
    if generative_client(protocol).traits.model_in_body:  # a model mix swaps the model: the body begins with it
        assert generative_client(protocol).encode(ask).startswith(b'{"model":"m"')


@pytest.mark.parametrize("protocol", sorted(STREAMED_HTTP))
def test_each_api_reads_its_own_whole_reply_and_refuses_another(protocol):
    client, result = generative_client(protocol), StreamOutcome()
    text = client.whole(orjson.dumps(WHOLE_REPLIES[protocol]), "n_out", result)
    assert text == "a b c d e" and result.outcome == "complete" and result.output_tokens == 5
    assert result.token_source == ("output" if protocol == "triton-generate" else "final_usage")
    if protocol == "openai-completions":
        assert result.cached_tokens == 2 and result.input_tokens == 3
    with pytest.raises(StreamProtocolError):
        client.whole(b'{"unexpected": true}', None, StreamOutcome())


def test_head_lines_and_warm_up_routes_are_each_apis_own():
    assert generative_client("anthropic-messages").head_lines == ("anthropic-version: 2023-06-01",)
    assert generative_client("triton-generate").ready_path("llama") == "/v2/models/llama/ready"
    assert {generative_client(p).ready_path("x") for p in STREAMED_HTTP - {"triton-generate"}} == {"/v1/models"}
    for protocol in STREAMED_HTTP:
        reader = generative_client(protocol).reader(None)
        assert reader.first_token_ns == -1 and callable(reader.feed)
