"""The contract: typed rows, the resolved run plan, the run-directory layout, the message catalogue."""
from __future__ import annotations

import pytest

from tailrace.contract import messages
from tailrace.contract.layout import RunLayout, chunk_name
from tailrace.contract.plan import EndpointTimeouts, PoolLimits, RunPlan, unresolved_plan
from tailrace.contract.profile import ProfileError, parse_profile
from tailrace.contract.records import REQUEST_COLUMNS, ClockRow, RequestRow
from tailrace.harness.control.plan_inbox import PlanInbox, StartInbox

PROFILE = {"name": "c", "endpoints": [{"name": "a", "url": "embedded", "protocol": "kserve-http", "model": "m"},
                                      {"name": "b", "url": "inprocess", "protocol": "inprocess", "model": "m"}],
           "regions": [{"name": "r", "share": 1.0, "workers": 2}], "load": {"rate": 10, "duration_s": 5}}


def test_a_misspelt_record_field_is_an_error_not_a_null_column():
    assert RequestRow._fields == REQUEST_COLUMNS
    with pytest.raises(TypeError, match="latncy_ns"):
        RequestRow(**({c: None for c in REQUEST_COLUMNS if c != "latency_ns"} | {"latncy_ns": 1}))
    with pytest.raises(TypeError):
        ClockRow(worker="w")  # every field is required


def test_the_plan_round_trips_through_plan_json_with_every_default(tmp_path):
    plan = unresolved_plan(parse_profile(PROFILE, "p"), "run-7", str(tmp_path), lead_s=6)
    layout = RunLayout(tmp_path)
    plan.write(layout)
    again = RunPlan.read(layout.plan)
    assert again == plan
    assert again.profile.cold_start.first_k == 20 and again.profile.endpoints[0].weight == 1.0
    assert again.endpoint_kinds == {"a": "embedded", "b": "inprocess"}
    assert again.run_seconds == pytest.approx(6 + 0 + 5 + (5 + 2) + 3)
    assert any("endpoint a" in line for line in again.effective_settings())


def test_an_old_manifest_without_a_plan_is_resolved_through_the_same_schema():
    plan = RunPlan.from_manifest({"run_id": "old", "profile": PROFILE}, "manifest.json")
    assert plan.run_id == "old" and plan.profile.generator.send_lag_p99_ms == 5
    with pytest.raises(ProfileError, match="manifest.json: profile"):
        RunPlan.from_manifest({}, "manifest.json")


def test_a_bad_plan_file_names_the_file_and_the_field(tmp_path):
    (tmp_path / "plan.json").write_text('{"run_id": 3}')
    with pytest.raises(ProfileError, match="plan.json"):
        RunPlan.read(tmp_path / "plan.json")


def test_the_layout_spells_every_path_once(tmp_path):
    layout = RunLayout(tmp_path)
    worker = layout.worker("eu", "eu-w0")
    assert worker.chunk("requests", 12) == tmp_path / "regions/eu/eu-w0" / chunk_name("requests", 12)
    assert chunk_name("clock", 3) == "clock-00003.parquet"
    worker.dir.mkdir(parents=True)
    for name in ("requests-00001.parquet", "requests-00000.parquet", "clock-00000.parquet"):
        (worker.dir / name).touch()
    assert [p.name for p in layout.request_chunks()] == ["requests-00000.parquet", "requests-00001.parquet"]
    assert [p.name for p in layout.clock_chunks()] == ["clock-00000.parquet"]
    assert layout.stats_snapshot("a", "after").parent == layout.endpoint("a")
    assert layout.endpoint_names() == []


def test_messages_decode_their_declared_payload_and_refuse_a_misspelt_key():
    hello = messages.Hello("c1", "eu-w0", "eu")
    assert messages.HELLO.decode(messages.wire(hello)) == hello
    with pytest.raises(TypeError):
        messages.HELLO.decode({"client_id": "c1", "worker": "eu-w0", "regoin": "eu"})
    assert len({m.name for m in messages.CATALOGUE}) == len(messages.CATALOGUE)


def test_the_worker_keeps_the_first_plan_message_only():
    inbox, first = PlanInbox(), messages.Plan({"run_id": "one"}, 1)
    assert inbox.wait(timeout_s=0.01) is None
    inbox.offer(messages.wire(first))
    inbox.offer(messages.wire(messages.Plan({"run_id": "two"}, 2)))  # the master re-sends while workers register
    assert inbox.wait(timeout_s=0.01) == first


def test_the_worker_keeps_the_first_start_message_and_waits_no_longer_than_asked():
    inbox = StartInbox()
    assert inbox.wait(timeout_s=0.01) is None and inbox.wait(timeout_s=-1.0) is None  # the plan's instant passed
    inbox.offer(messages.wire(messages.Start(5)))
    inbox.offer(messages.wire(messages.Start(7)))  # sent three times; the first counts
    assert inbox.wait(timeout_s=0.01) == 5


def test_a_bare_number_where_a_distribution_is_asked_for_means_that_number_fixed():
    profile = parse_profile({"name": "p", "endpoints": [{
        "name": "chat", "url": "http://127.0.0.1:1", "protocol": "openai-chat", "model": "m",
        "prompts": {"input_tokens": 200, "output_tokens": 32},
        "sessions": {"turns": 4, "think_s": 0.3, "user_tokens": 20}}],
        "regions": [{"name": "r", "share": 1.0}], "load": {"rate": 1, "duration_s": 1}}, "p.toml")
    ep = profile.endpoints[0]
    assert (ep.prompts.input_tokens.mean, ep.prompts.input_tokens.distribution) == (200, "fixed")
    assert (ep.sessions.turns.mean, ep.sessions.think_s.mean, ep.sessions.user_tokens.mean) == (4, 0.3, 20)
    assert ep.sessions.think_s.distribution == "fixed"
    with pytest.raises(ProfileError, match="turns"):
        parse_profile({"name": "p", "endpoints": [{
            "name": "chat", "url": "http://127.0.0.1:1", "protocol": "openai-chat", "model": "m",
            "sessions": {"turns": "four"}}], "regions": [{"name": "r", "share": 1.0}],
            "load": {"rate": 1, "duration_s": 1}}, "p.toml")


def test_an_endpoints_timeouts_and_the_pools_are_resolved_once_in_seconds_and_logged():
    stream = {"name": "llm", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm",
              "timeout_ms": 60_000, "ttft_timeout_ms": 2_500, "stall_timeout_ms": 750}
    plan = unresolved_plan(parse_profile(PROFILE | {"endpoints": [*PROFILE["endpoints"], stream]}, "p"), "r", "d")
    one_shot, llm = plan.profile.endpoints[0], plan.profile.endpoints[2]
    assert EndpointTimeouts.of(llm) == EndpointTimeouts(60.0, 2.5, 0.75) and EndpointTimeouts.of(llm).check_s == 10.0
    assert EndpointTimeouts.of(one_shot).first_token_s is None and EndpointTimeouts.of(one_shot).stall_s is None
    assert EndpointTimeouts(3.0).check_s == 3.0  # a check never waits longer than the request would
    limits = plan.pool_limits
    assert limits.connections == plan.profile.generator.max_in_flight + 100 and limits.warm == 16
    assert PoolLimits.sized(4) == PoolLimits(4, 4)
    settings = "\n".join(plan.effective_settings())
    assert "endpoint llm: openai-chat" in settings and "timeout 60 s, first token 2.5 s, stall 0.75 s" in settings
    assert f"connections: {limits.connections} a sender, 16 opened before the start" in settings


def _embeddings_profile(**fields) -> dict:
    return {"name": "p", "endpoints": [{"name": "emb", "url": "embedded", "protocol": "openai-embeddings",
                                        "model": "synthetic_lm", **fields}],
            "regions": [{"name": "r", "share": 1.0}], "load": {"rate": 1, "duration_s": 1}}


def test_an_embeddings_endpoint_takes_prompts_and_its_own_table():
    ep = parse_profile(_embeddings_profile(prompts={"input_tokens": 64},
                                           embeddings={"inputs": 8, "encoding_format": "base64", "dimensions": 128}),
                       "p.toml").endpoints[0]
    assert ep.pooling and not ep.generative
    assert (ep.embeddings.inputs.mean, ep.embeddings.encoding_format, ep.embeddings.dimensions) == (8, "base64", 128)
    assert parse_profile(_embeddings_profile(), "p.toml").kserve_endpoints == []


@pytest.mark.parametrize("fields, message", [
    ({"ttft_timeout_ms": 100}, "openai-embeddings reply comes whole"),
    ({"sessions": {"turns": 2}}, "openai-embeddings reply comes whole"),
    ({"embeddings": {"encoding_format": "fp16"}}, "encoding_format"),
    ({"embeddings": {"dimensions": 0}}, "dimensions"),
    ({"url": "grpc://127.0.0.1:1"}, "needs a http:// or https:// URL"),
])
def test_a_wrong_embeddings_endpoint_is_named(fields, message):
    with pytest.raises(ProfileError, match=message):
        parse_profile(_embeddings_profile(**fields), "p.toml")


def test_the_embeddings_table_is_for_embeddings_endpoints_only():
    with pytest.raises(ProfileError, match="embeddings is for openai-embeddings endpoints"):
        parse_profile({"name": "p", "endpoints": [{"name": "c", "url": "http://127.0.0.1:1", "protocol": "openai-chat",
                                                   "model": "m", "embeddings": {"inputs": 2}}],
                       "regions": [{"name": "r", "share": 1.0}], "load": {"rate": 1, "duration_s": 1}}, "p.toml")


def test_a_rerank_endpoint_and_its_table():
    ep = parse_profile(_embeddings_profile(protocol="rerank", rerank={"api": "score", "documents": 32,
                                                                      "path": "/v1/score"}), "p.toml").endpoints[0]
    assert ep.pooling and (ep.rerank.api, ep.rerank.documents.mean, ep.rerank.path) == ("score", 32, "/v1/score")
    for fields, message in (({"rerank": {"api": "jina-v9"}}, "rerank.api"), ({"rerank": {"top_n": 0}}, "top_n"),
                            ({"rerank": {"path": "rerank"}}, "rerank.path"),
                            ({"embeddings": {"inputs": 2}}, "embeddings is for openai-embeddings endpoints")):
        with pytest.raises(ProfileError, match=message):
            parse_profile(_embeddings_profile(protocol="rerank", **fields), "p.toml")
    with pytest.raises(ProfileError, match="rerank is for rerank endpoints"):
        parse_profile(_embeddings_profile(rerank={"documents": 4}), "p.toml")
