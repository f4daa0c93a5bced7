"""Generative prompts: seeded lengths after the profile, JSONL prompt files, errors naming the file and line."""
from __future__ import annotations

import re

import numpy as np
import orjson
import pytest

from tailrace.contract.profile import Endpoint, Prompts, TokenCount
from tailrace.harness.workload.prompts import PromptFileError, draw_counts, file_prompts, prompt_bodies, synthetic_prompts


@pytest.mark.parametrize("spec, low, high, mean", [
    (TokenCount(mean=64), 64, 64, 64),
    (TokenCount(mean=50, distribution="uniform", min=10, max=90), 10, 90, 50),
    (TokenCount(mean=200, distribution="normal", stddev=40, min=20), 20, None, 200),
    (TokenCount(mean=300, distribution="lognormal", stddev=150, max=2000), 1, 2000, 300),
])
def test_counts_follow_their_distribution_within_bounds(spec, low, high, mean):
    counts = draw_counts(spec, 20_000, np.random.default_rng(1))
    assert counts.min() >= low and (high is None or counts.max() <= high)
    assert abs(counts.mean() - mean) / mean < 0.03


def test_synthetic_prompts_are_the_same_for_a_seed_and_have_the_lengths_asked():
    spec = Prompts(input_tokens=TokenCount(mean=30), output_tokens=TokenCount(mean=8), count=5)
    first, again = synthetic_prompts(spec, 7), synthetic_prompts(spec, 7)
    assert first == again and first != synthetic_prompts(spec, 8)
    assert [len(p.split()) for p, _ in first] == [30] * 5 and [m for _, m in first] == [8] * 5


def test_prompt_bodies_for_chat_and_completions(tmp_path):
    chat = Endpoint(name="c", url="http://h:1", protocol="openai-chat", model="m",
                    prompts={"input_tokens": {"mean": 3}, "output_tokens": {"mean": 4}, "count": 2})
    body = orjson.loads(prompt_bodies(chat, 1, tmp_path)[0])
    assert body["messages"][0]["role"] == "user" and len(body["messages"][0]["content"].split()) == 3
    assert (body["max_tokens"], body["stream"], body["ignore_eos"]) == (4, True, True)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi there", "max_tokens": 5}\n\n'
                                      '{"messages": [{"role": "user", "content": "yo"}]}\n')
    completions = Endpoint(name="p", url="http://h:1", protocol="openai-completions", model="m",
                           prompts={"file": "p.jsonl", "output_tokens": {"mean": 9}})
    bodies = [orjson.loads(b) for b in prompt_bodies(completions, 1, tmp_path)]
    assert [(b["prompt"], b["max_tokens"]) for b in bodies] == [("hi there", 5), ("yo", 9)]


@pytest.mark.parametrize("line, words", [
    ("{not json", "p.jsonl:2: not JSON"),
    ("[1, 2]", "p.jsonl:2: a line must be a JSON object"),
    ('{"prompt": ""}', "p.jsonl:2: needs \"prompt\""),
    ('{"messages": [{"role": "user"}]}', "p.jsonl:2: needs \"prompt\""),
    ('{"prompt": "x", "max_tokens": 0}', "p.jsonl:2: max_tokens must be a whole number"),
    ('{"prompt": "x", "request": [1]}', "p.jsonl:2: request must be a JSON object"),
])
def test_a_bad_line_is_named_with_its_file_and_line(tmp_path, line, words):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(PromptFileError, match=words.replace("[", r"\[")):
        file_prompts(path, 16)


def test_a_missing_or_empty_file(tmp_path):
    with pytest.raises(PromptFileError, match="nope.jsonl: No such file"):
        file_prompts(tmp_path / "nope.jsonl", 16)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(PromptFileError, match="empty.jsonl: no prompts"):
        file_prompts(tmp_path / "empty.jsonl", 16)


def test_generative_profile_fields_are_checked_where_they_are_read():
    from tailrace.contract.profile import ProfileError, parse_profile

    base = {"name": "g", "regions": [{"name": "a", "share": 1}], "load": {"rate": 1, "duration_s": 1}}
    kserve = {"name": "k", "url": "http://h:1", "protocol": "kserve-http", "model": "m"}
    chat = {"name": "c", "url": "http://h:1", "protocol": "openai-chat", "model": "m"}
    cases = [
        ({"endpoints": [{**chat, "url": "triton"}]},
         "endpoints[0]: url: protocol 'openai-chat' needs a URL (http:// or https://)"),
        ({"endpoints": [{**kserve, "ttft_timeout_ms": 5}]},
             "prompts, sessions, ttft_timeout_ms and stall_timeout_ms are for generative endpoints"),
        ({"endpoints": [{**chat, "prompts": {"output_tokens": {"mean": 9, "distribution": "uniform"}}}]},
         "uniform needs min and max"),
        ({"endpoints": [kserve], "slos": [{"metric": "ttft", "percentile": 99, "threshold_ms": 5}]},
         "slos[0].metric: ttft is a streamed request's: it needs an endpoint of a generative protocol (openai-chat"),
        ({"endpoints": [kserve, chat], "slos": [{"metric": "itl", "percentile": 99, "threshold_ms": 5, "endpoint": "k"}]},
         "needs the endpoint 'k' of a generative protocol"),
        ({"endpoints": [chat], "slos": [{"metric": "tpot", "percentile": 99}]}, "a tpot SLO needs percentile and "),
    ]
    for extra, words in cases:
        with pytest.raises(ProfileError, match=re.escape(words)):
            parse_profile({**base, **extra}, "g.toml")
    ok = parse_profile({**base, "endpoints": [kserve, chat],
                        "slos": [{"metric": "ttft", "percentile": 99, "threshold_ms": 500}]}, "g.toml")
    assert [e.generative for e in ok.endpoints] == [False, True] and [e.name for e in ok.kserve_endpoints] == ["k"]


def test_prompts_share_prefixes_in_turn_and_ask_min_tokens():
    from tailrace.harness.client.generative import request_body

    spec = Prompts(input_tokens=TokenCount(mean=5), output_tokens=TokenCount(mean=8), count=6, prefix_tokens=4,
                   prefix_count=2)
    prompts = [p for p, _ in synthetic_prompts(spec, seed=3)]
    heads = [" ".join(p.split()[:4]) for p in prompts]
    assert all(len(p.split()) == 9 for p in prompts)  # 4 shared + 5 of its own
    assert heads[0] == heads[2] == heads[4] != heads[1] == heads[3] == heads[5]
    assert len({" ".join(p.split()[4:]) for p in prompts}) == 6
    body = orjson.loads(request_body("openai-completions", "m", "hi", 8, ignore_eos=False, min_tokens=4))
    assert body["min_tokens"] == 4 and "ignore_eos" not in body


def test_sharegpt_first_turns_or_whole_conversations_with_the_replies_lengths(tmp_path):
    from tailrace.harness.workload.prompts import sharegpt_prompts

    path = tmp_path / "sg.json"
    path.write_text(orjson.dumps([
        {"id": "a", "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "hi there"},
                                      {"from": "gpt", "value": "one two three"}, {"from": "human", "value": "more"},
                                      {"from": "gpt", "value": "four five"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "nobody asked"}]},  # no human turn: skipped
        {"id": "c", "conversations": [{"from": "human", "value": "last"}]}]).decode())
    assert sharegpt_prompts(path) == [("hi there", 3), ("last", None)]
    messages, _ = sharegpt_prompts(path, "messages")
    assert messages == ([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"},
                         {"role": "assistant", "content": "one two three"}, {"role": "user", "content": "more"}], 2)
    path.write_text('[{"conversations": [{"from": "robot", "value": "x"}]}]')
    with pytest.raises(PromptFileError, match="sg.json: item 0: needs"):
        sharegpt_prompts(path)


def test_a_prompt_file_is_sampled_in_order_or_drawn_with_or_without_replacement(tmp_path):
    from tailrace.harness.workload.prompts import file_items

    path = tmp_path / "p.jsonl"
    path.write_text("".join(orjson.dumps({"prompt": f"p{i}", **({"max_tokens": i + 1} if i % 2 else {})}).decode()
                            + "\n" for i in range(10)))
    base = {"file": str(path), "output_tokens": TokenCount(mean=7)}
    in_order = file_items(Prompts(**base), 1, path)
    assert [p for p, _ in in_order] == [f"p{i}" for i in range(10)]
    assert [m for _, m in in_order] == [7, 2, 7, 4, 7, 6, 7, 8, 7, 10]  # the file's where given, else the profile's
    assert {m for _, m in file_items(Prompts(**base, output_from="profile"), 1, path)} == {7}
    without = file_items(Prompts(**base, sample="without_replacement", count=10), 3, path)
    assert sorted(p for p, _ in without) == sorted(p for p, _ in in_order) and without != in_order
    assert without == file_items(Prompts(**base, sample="without_replacement", count=10), 3, path)  # seeded
    assert len(file_items(Prompts(**base, sample="with_replacement", count=25), 3, path)) == 25
    with pytest.raises(PromptFileError, match="count 11 without replacement, but the file has 10"):
        file_items(Prompts(**base, sample="without_replacement", count=11), 3, path)


def test_extra_body_is_merged_last_into_every_request_of_every_chat_api():
    from pathlib import Path

    import orjson

    from tailrace.contract.profile import Endpoint, ProfileError, Prompts, Sessions, parse_profile
    from tailrace.harness.workload.conversations import Conversation, TurnScript
    from tailrace.harness.workload.prompts import prompt_bodies

    extra = {"temperature": 0.2, "priority": 3, "max_tokens": 9}
    for protocol in ("openai-chat", "openai-completions", "anthropic-messages", "openai-responses"):
        ep = Endpoint.model_validate({"name": "e", "url": "http://127.0.0.1:9", "protocol": protocol, "model": "m",
                                      "prompts": {"count": 2, "input_tokens": 4, "extra_body": extra}})
        body = orjson.loads(prompt_bodies(ep, 1, Path("."))[0])
        assert body["temperature"] == 0.2 and body["priority"] == 3 and body["max_tokens"] == 9, protocol  # theirs win
    turn = Conversation("openai-chat", "m", Prompts(extra_body={"top_p": 0.5}), Sessions(), lambda t: len(t.split()),
                        lambda: "").next_request(TurnScript("hi there", 4))
    assert orjson.loads(turn.body)["top_p"] == 0.5
    with pytest.raises(ProfileError, match=r"prompts.extra_body: for .* \(fields added to a JSON body\), not kserve-grpc"):
        parse_profile({"name": "p", "regions": [{"name": "r", "share": 1.0}], "load": {"rate": 1, "duration_s": 1},
                       "endpoints": [{"name": "g", "url": "grpc://127.0.0.1:9", "protocol": "kserve-grpc-stream",
                                      "model": "m", "prompts": {"extra_body": {"a": 1}}}]}, "p.toml")


def test_a_prompt_lines_own_request_fields_are_merged_into_its_body_last(tmp_path):
    """A JSONL line's "request": its own fields (sampling parameters, a priority, a per-row schema), after the
    endpoint's extra_body and structured output — its keys win — and only in that line's request."""
    (tmp_path / "p.jsonl").write_text('{"prompt": "one", "request": {"temperature": 0.9, "priority": 7}}\n'
                                      '{"prompt": "two"}\n'
                                      '{"prompt": "three", "max_tokens": 3, "request": {"max_tokens": 2}}\n')
    ep = Endpoint.model_validate({"name": "e", "url": "http://127.0.0.1:9", "protocol": "openai-chat", "model": "m",
                                  "prompts": {"file": "p.jsonl", "extra_body": {"temperature": 0.1, "top_p": 0.5},
                                              "structured": {"schema": {"type": "array"}}}})
    one, two, three = (orjson.loads(b) for b in prompt_bodies(ep, 1, tmp_path))
    assert (one["temperature"], one["priority"], one["top_p"]) == (0.9, 7, 0.5)
    assert (two["temperature"], "priority" in two) == (0.1, False)
    assert three["max_tokens"] == 2 and three["response_format"]["json_schema"]["schema"] == {"type": "array"}
    assert "ignore_eos" not in one  # a structured output ends where its JSON does


def test_a_structured_output_asks_each_api_its_way_and_every_reply_is_checked():
    from tailrace.harness.client.apis import body_extra
    from tailrace.harness.client.payloads import SchemaCheck

    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    spec = Prompts(structured={"schema": schema, "name": "place", "strict": False})
    chat = body_extra("openai-chat", spec)["response_format"]
    assert chat == {"type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": False}}
    assert body_extra("openai-responses", spec)["text"]["format"] == {"type": "json_schema", "name": "place",
                                                                      "schema": schema, "strict": False}
    check = SchemaCheck(schema)
    assert check.valid(' {"city": "Lyon"}') == 1
    assert check.valid('{"town": "Lyon"}') == 0 and check.valid("Lyon, I think") == 0 and check.valid("") == 0


@pytest.mark.parametrize("protocol, prompts, words", [
    ("openai-chat", {"structured": {"schema": {"type": "objekt"}}},
     "endpoints[0].prompts.structured.schema: not a valid JSON Schema at type"),
    ("openai-chat", {"structured": {"schema": "no-such-schema.json"}}, "schema: cannot read no-such-schema.json"),
    ("openai-chat", {"structured": {"schema": {"type": "array"}}, "ignore_eos": True},
     "ignore_eos: a structured output ends where its JSON does"),
    ("anthropic-messages", {"structured": {"schema": {"type": "array"}}},
     "prompts.structured: for openai-chat, openai-completions and openai-responses endpoints"),
])
def test_a_bad_structured_output_is_refused_in_one_line(protocol, prompts, words):
    from tailrace.contract.profile import ProfileError, parse_profile

    with pytest.raises(ProfileError) as err:
        parse_profile({"name": "p", "regions": [{"name": "r", "share": 1.0}], "load": {"rate": 1, "duration_s": 1},
                       "endpoints": [{"name": "e", "url": "http://127.0.0.1:9", "protocol": protocol, "model": "m",
                                      "prompts": prompts}]}, "p.toml")
    assert words in str(err.value) and "\n" not in str(err.value).strip(), str(err.value)
