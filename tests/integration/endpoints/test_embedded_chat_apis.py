"""Anthropic's Messages and OpenAI's Responses for real on the embedded server: `tailrace run` of one model over
/v1/chat/completions, /v1/messages and /v1/responses from two regions — every stream complete, its tokens from
the APIs' own usage, the same prompt tokens for the same prompt whatever the API, sessions over Messages carrying
the conversation (`tailrace probe` of each API: tests/integration/harness/services/test_vllm.py)."""
from __future__ import annotations

import pytest

from tailrace.analysis.analyze import analyze_run
from tests.support import assert_valid, make_profile, run_with

pytestmark = pytest.mark.shares_machine


def test_one_model_over_three_chat_apis_and_sessions_over_messages(model_repo, tmp_path):
    prompts = {"input_tokens": 20, "output_tokens": 12, "count": 8}
    endpoints = [{"name": protocol.split("-")[1], "url": "embedded", "protocol": protocol, "model": "synthetic_lm",
                  "prompts": prompts} for protocol in ("openai-chat", "anthropic-messages", "openai-responses")]
    endpoints.append({"name": "agent", "url": "embedded", "protocol": "anthropic-messages", "model": "synthetic_lm",
                      "prompts": {"input_tokens": 10, "output_tokens": 6}, "sessions": {"turns": 3, "think_s": 0.1}})
    profile = make_profile(model_repo, endpoints=endpoints, load={"rate": 16, "duration_s": 4, "warmup_s": 1,
                                                                  "seed": 6})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    analysis = analyze_run(run.run_dir)
    df = analysis.requests
    assert (df["status"] == "ok").all(), df["error"].unique()
    assert set(df["stream_outcome"].astype(str)) == {"complete"}
    by = {name: g for name, g in df.groupby("endpoint", observed=True)}
    assert set(by) == {"chat", "messages", "responses", "agent"}
    for name in ("chat", "messages", "responses"):  # synthetic_lm generates what is asked for
        assert (by[name]["output_tokens"] == 12).all() and (by[name]["input_tokens"] == 20).all(), name
    assert set(by["messages"]["finish_reason"].astype(str)) == {"max_tokens"}
    assert set(by["responses"]["finish_reason"].astype(str)) == {"max_output_tokens"}
    assert set(by["messages"]["token_source"].astype(str)) == {"final_usage"}
    turns = by["agent"]
    assert turns["turn"].max() >= 2
    later = turns[turns["turn"] > 1]
    # each later turn carries the conversation so far: its words, as tailrace built them, are what the server counted
    assert (later["input_tokens"] == later["prompt_tokens_sent"]).all() and (later["input_tokens"] > 10).all()
    rows = {r.endpoint: r for r in analysis.summary.tokens if r.region == "*"}
    assert rows["messages"].ttft_ms.p50.value is not None and rows["responses"].tpot_ms.p50.value is not None
