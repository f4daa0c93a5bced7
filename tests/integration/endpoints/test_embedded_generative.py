"""The embedded generative server for real: `tailrace serve` streaming tiny_lm and synthetic_lm over the
OpenAI-compatible routes (continuous batching, 429 when its queue is full, a client that leaves cancels its request,
vLLM-style metrics), and `tailrace run` of openai-chat / openai-completions endpoints with url = "embedded" from two
emulated regions: every request ok, the token table, verdicts and the report (rendered in headless Chromium), and
synthetic_lm's known times found again in what tailrace measured."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.analyze_command import write_outputs
from tailrace.analysis.decide.compare import compare_runs
from tailrace.contract.layout import RunLayout
from tailrace.contract.plan import EndpointTimeouts
from tailrace.harness.client.outcome import Send
from tests import ROOT
from tests.support import IN_CI, assert_valid, make_profile, run_with, start_endpoint

STEP_MS, PER_SEQ_MS, PREFILL_MS_PER_TOKEN = 8.0, 0.1, 0.02  # synthetic_lm's config (generative_build.SYNTHETIC_TIMES)
NEAR_MS, FAR_MS = 2, 12


@pytest.fixture(scope="module")
def server_ports(model_repo, tmp_path_factory):
    ep = start_endpoint(model_repo, tmp_path_factory.mktemp("gen-endpoint"),
                        ["--model", "tiny_lm", "--model", "synthetic_lm", "--model", "digits_mlp_fp32",
                         "--max-num-seqs", "synthetic_lm=1",
                         "--max-waiting", "synthetic_lm=2"])
    yield f"http://{ep.host}:{ep.http_port}", f"grpc://{ep.host}:{ep.grpc_port}"
    ep.proc.stop()


@pytest.fixture(scope="module")
def server(server_ports):
    return server_ports[0]


def stream_body(model: str, max_tokens: int, **extra) -> dict:
    return {"model": model, "prompt": "one two three four", "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}, **extra}


def test_a_full_waiting_queue_is_refused_with_429_in_openais_error_shape(server):
    async def burst():
        async with httpx.AsyncClient(base_url=server, timeout=30) as client:
            return await asyncio.gather(*(client.post("/v1/completions", json=stream_body("synthetic_lm", 10))
                                          for _ in range(8)))

    responses = asyncio.run(burst())
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) >= 2 and codes.count(429) >= 1 and set(codes) == {200, 429}, codes
    refused = next(r for r in responses if r.status_code == 429).json()["error"]
    assert refused["code"] == 429 and "max_waiting 2" in refused["message"]
    ok = next(r for r in responses if r.status_code == 200)
    assert ok.text.rstrip().endswith("data: [DONE]") and '"finish_reason":"length"' in ok.text
    metrics = httpx.get(f"{server}/metrics").text
    assert 'tailrace:request_refused_total{model_name="synthetic_lm"}' in metrics
    assert 'tailrace:time_to_first_token_seconds_bucket{le="0.001",model_name="synthetic_lm"}' in metrics


def test_a_client_that_leaves_cancels_its_request_at_the_next_step(server):
    with httpx.stream("POST", f"{server}/v1/completions", json=stream_body("synthetic_lm", 2000), timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if '"text"' in line:
                break  # one token read: leave
    # the engine drops it at its next step: the next request is admitted at once (max_num_seqs is 1)
    whole = {k: v for k, v in stream_body("synthetic_lm", 3).items() if k != "stream_options"} | {"stream": False}
    r = httpx.post(f"{server}/v1/completions", json=whole, timeout=10)
    body = r.json()
    assert r.status_code == 200 and body["usage"]["completion_tokens"] == 3, body
    assert body["server_timing"]["queue_ms"] < 100, body["server_timing"]
    assert r.headers["server-timing"].startswith("queue;dur=")


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_tiny_lm_is_deterministic_and_models_lists_both(server):
    listed = httpx.get(f"{server}/v1/models").json()
    assert [m["id"] for m in listed["data"]] == ["synthetic_lm", "tiny_lm"]
    body = {"model": "tiny_lm", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 12,
            "ignore_eos": True}
    first, second = (httpx.post(f"{server}/v1/chat/completions", json=body, timeout=10).json() for _ in range(2))
    text = first["choices"][0]["message"]["content"]
    assert text == second["choices"][0]["message"]["content"] and len(text.split()) == 12
    assert first["usage"] == {"prompt_tokens": 2, "completion_tokens": 12, "total_tokens": 14,
                              "prompt_tokens_details": {"cached_tokens": 0}}  # tiny_lm does not cache
    # the KServe routes know it (metadata, ready) and refuse what it does not do, never with a 5xx
    assert httpx.get(f"{server}/v2/models/tiny_lm").json()["inputs"][0]["name"] == "text_input"
    assert httpx.get(f"{server}/v2/models/tiny_lm/ready").status_code == 200
    stats = httpx.get(f"{server}/v2/models/tiny_lm/stats")
    infer = httpx.post(f"{server}/v2/models/tiny_lm/infer", json={"inputs": []})
    assert stats.status_code == 404 and "Prometheus" in stats.json()["error"]
    assert infer.status_code == 400 and "generate_stream" in infer.json()["error"]


def generative_profile(model_repo, model: str, rate: float, duration_s: float, input_tokens: int,
                       output_tokens: int, chat_only: bool = False, **extra):
    prompts = {"input_tokens": {"mean": input_tokens}, "output_tokens": {"mean": output_tokens}, "count": 32}
    endpoints = [{"name": "chat", "url": "embedded", "protocol": "openai-chat", "model": model, "prompts": prompts,
                  "timeout_ms": 20000},
                 {"name": "text", "url": "embedded", "protocol": "openai-completions", "model": model,
                  "prompts": prompts, "timeout_ms": 20000}]
    return make_profile(model_repo, endpoints=endpoints[:1] if chat_only else endpoints,
        regions=[{"name": "near", "share": 0.5, "delay_ms": NEAR_MS},
                 {"name": "far", "share": 0.5, "delay_ms": FAR_MS}],
        load={"rate": rate, "duration_s": duration_s, "warmup_s": 1, "seed": 5}, **extra)


def test_tiny_lm_from_two_regions_every_stream_complete_with_verdicts_and_a_report(model_repo, tmp_path):
    profile = generative_profile(model_repo, "tiny_lm", 24, 12, 24, 16, slos=[
        {"metric": "ttft", "percentile": 90, "threshold_ms": 500},
        {"metric": "tpot", "percentile": 90, "threshold_ms": 100},
        {"metric": "itl", "percentile": 90, "threshold_ms": 200},  # p99 of ~40 streams a group: INCONCLUSIVE
        {"metric": "e2e", "percentile": 90, "threshold_ms": 3000}])
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    a = analyze_run(run.run_dir)
    measured = a.requests[a.requests["phase"] > 0]
    assert len(measured) > 220 and (measured["status"] == "ok").all()
    assert set(measured["stream_outcome"].astype(str)) == {"complete"}
    assert (measured["output_tokens"] == 16).all() and (measured["input_tokens"] == 24).all()
    assert set(measured["token_source"].astype(str)) == {"usage"}
    assert (measured["server_receive_ns"] > 0).all() and (measured["server_compute_ns"] >= 0).all()
    verdicts = {(v["metric"], v["endpoint"], v["region"]): v["verdict"] for v in a.summary.to_dict()["slos"]}
    assert {verdicts[(m, e, r)] for m in ("ttft", "tpot", "itl", "e2e") for e in ("chat", "text")
            for r in ("near", "far")} == {"PASS"}, verdicts
    rows = {(r["endpoint"], r["region"]): r for r in a.summary.to_dict()["tokens"]}
    for region, delay in (("near", NEAR_MS), ("far", FAR_MS)):
        assert rows[("chat", region)]["ttft_ms"]["p50"]["value"] > 2 * delay  # both ways through the region
    # the TTFT split: network both ways + the server's queue and prefill add up to what was measured
    split = {(r["endpoint"], r["region"]): r for r in a.summary.to_dict()["ttft_decomposition"]}
    far = split[("chat", "far")]
    assert far["network_up_ms"] == pytest.approx(FAR_MS, abs=3) and far["network_down_ms"] == pytest.approx(
        FAR_MS, abs=3)
    assert far["sum_ms"] == pytest.approx(far["ttft_mean_ms"], abs=0.5)
    # the server's own metrics, scraped before and after the run
    scraped = RunLayout(Path(run.run_dir)).metrics_scrape("chat", "after").read_text()
    assert 'tailrace:time_to_first_token_seconds_count{model_name="tiny_lm"}' in scraped
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "analyze", str(run.run_dir), "--quiet"], cwd=ROOT,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    page = Path(run.run_dir) / "report" / "index.html"
    html = page.read_text()
    for heading in ("Streamed responses", "TTFT p99 per region × endpoint", "TTFT and TPOT per region",
                    "Tokens and TTFT over time", "Where time to first token goes"):
        assert heading in html
    assert html.count("<svg") >= 4 + html.split("Streamed responses")[0].count("<svg")
    render_in_chromium(page, tmp_path)


def render_in_chromium(page: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if IN_CI:
            pytest.fail("chromium must be installed in CI (.ci/run installs Debian's chromium)")
        pytest.skip("chromium not installed")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
             "--no-first-run", "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'ud'}",
             "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert 'data-rendered="' in dom.stdout
    errors = [line for line in dom.stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]
    assert not errors, errors
    assert 'id="tokens"' in dom.stdout and "TTFT" in dom.stdout and "<svg" in dom.stdout


def test_synthetic_lm_known_times_found_again_and_queueing_shows_in_ttft_not_tpot(model_repo, tmp_path):
    """synthetic_lm's steps take STEP_MS + PER_SEQ_MS × batch + PREFILL_MS_PER_TOKEN × prompt tokens. At low load
    TTFT = the way there and back + one prefill step (+ at most the step in progress) and TPOT ≈ the decode step;
    with max_num_seqs 2 and more arrivals than two places serve, requests wait: TTFT grows by the server's queue
    time, TPOT does not."""
    inputs, outputs = 50, 20
    low, _ = run_with(generative_profile(model_repo, "synthetic_lm", 4, 12, inputs, outputs, chat_only=True),
                      tmp_path / "low")
    loaded, _ = run_with(generative_profile(model_repo, "synthetic_lm", 16, 6, inputs, outputs, chat_only=True,
                                            embedded__max_num_seqs={"synthetic_lm": 2}), tmp_path / "loaded")
    prefill_step = STEP_MS + PER_SEQ_MS + PREFILL_MS_PER_TOKEN * (inputs - 1)

    def streams(run):
        df = analyze_run(run.run_dir).requests
        df = df[(df["phase"] > 0)]
        assert (df["status"] == "ok").all() and (df["output_tokens"] == outputs).all()
        ttft = df["ttft_ns"].to_numpy() / 1e6
        tpot = (df["t_last_token"] - df["t_first_token"]).to_numpy() / (outputs - 1) / 1e6
        server = (df["server_queue_ns"] + df["server_compute_ns"]).to_numpy() / 1e6
        delay = np.where(df["region"].astype(str) == "far", FAR_MS, NEAR_MS)
        return ttft, tpot, server, delay, df

    ttft, tpot, server, delay, df = streams(low)
    # the server's own account: prefill ≈ one prefill step (its sleep is compensated to ±0.5 ms)
    assert np.median(df["server_compute_ns"] / 1e6) == pytest.approx(prefill_step, abs=1.5)
    # tailrace's TTFT = both ways + the server's queue and prefill, within 4 ms (send lag, the proxies, parsing;
    # a fresh-clone CI run on a slow afternoon measured a median of 3.06 ms)
    residual = ttft - 2 * delay - server
    assert 0 <= np.median(residual) <= 4, np.percentile(residual, [1, 50, 99])
    assert np.median(tpot) == pytest.approx(STEP_MS + PER_SEQ_MS, abs=0.8), np.percentile(tpot, [1, 50, 99])
    low_ttft = np.median(ttft)
    ttft, tpot, server, delay, df = streams(loaded)
    queue = df["server_queue_ns"].to_numpy() / 1e6
    assert np.median(queue) > 100 and np.median(ttft) > low_ttft + 100  # the queue shows in TTFT
    # under load the server's event loop answers a step later more often: within 4 ms here (3.2 ms seen)
    assert 0 <= np.median(ttft - 2 * delay - server) <= 4
    assert np.median(tpot) == pytest.approx(STEP_MS + 2 * PER_SEQ_MS, abs=1.0)  # ... not in TPOT
    # tailrace compare says the same: TTFT much slower under load, TPOT about the same (independent samples)
    rows = {(r.endpoint, r.region, r.metric): r for r in compare_runs(low.run_dir, loaded.run_dir)}
    ttft_row, tpot_row = rows[("chat", "far", "ttft")], rows[("chat", "far", "tpot")]
    assert ttft_row.verdict == "B slower" and (ttft_row.p50_diff_ms or 0) > 100 and not ttft_row.paired
    assert abs(tpot_row.p50_diff_ms or 0) < 1.5 and ("chat", "far", "latency") in rows
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "compare", str(low.run_dir), str(loaded.run_dir)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "TTFT" in r.stdout and "TPOT" in r.stdout, r.stdout + r.stderr


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_generative_server_killed_mid_run_fails_the_streams_it_cut_and_never_passes(model_repo, tmp_path):
    """The embedded server SIGKILLed 4 s into the measured phase: the streams open then are `cut`, the ones sent
    after it fail to connect; every one is recorded and classified, the verdict is not PASS, nothing is a
    traceback."""
    import os
    import signal

    from tests.support import sleep_until_measuring

    killed = {}

    def kill(run):
        sleep_until_measuring(run, 4)
        pid = run.servers.instances[0].process.pid
        os.kill(pid, signal.SIGKILL)
        killed["pid"] = pid

    profile = generative_profile(model_repo, "synthetic_lm", 12, 8, 24, 40, chat_only=True,
                                 slos=[{"metric": "ttft", "percentile": 90, "threshold_ms": 1000}])
    run, manifest = run_with(profile, tmp_path, during=kill)
    assert "pid" in killed
    a = analyze_run(run.run_dir)
    measured = a.requests[a.requests["phase"] > 0]
    status = measured["status"].astype(str)
    outcome = measured["stream_outcome"].astype(str)
    assert (status == "ok").sum() > 20 and (status == "connection").sum() > 20  # before, and after the kill
    assert (outcome == "cut").sum() >= 1  # streams open at the kill: cut, their tokens so far kept
    cut = measured[outcome == "cut"]
    assert (cut["t_first_token"] > 0).any() and (cut["output_tokens"] < 40).all()
    assert set(outcome[status == "connection"]) <= {"cut", ""}  # "": refused before any stream began
    assert a.summary.to_dict()["verdict"] in ("FAIL", "INVALID") and a.summary.to_dict()["exit_code"] != 0
    rows = {(r["endpoint"], r["region"]): r for r in a.summary.to_dict()["tokens"]}
    assert rows[("chat", "*")]["outcomes"].get("cut", 0) >= 1


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_whole_responses_stream_false_record_e2e_and_usage_tokens_only(server, tmp_path):
    """prompts.stream = false: the sender reads one JSON response; its tokens from the usage, no token instants."""
    from tailrace.harness.client.generative import COMPLETIONS, StreamSender, request_body

    body = request_body(COMPLETIONS, "synthetic_lm", "one two three", 6, stream=False)
    sender = StreamSender(server, COMPLETIONS, [body], EndpointTimeouts(10), None, stream=False)
    out = sender.send(Send(0))
    sender.close()
    assert out.status == "ok" and out.stream.outcome == "complete" and out.stream.finish_reason == "length"
    assert (out.stream.output_tokens, out.stream.input_tokens, out.stream.token_source) == (6, 3, "final_usage")
    assert out.stream.first_token_ns == -1 and len(out.stream.event_ns) == 0 and len(out.stream.preview.split()) == 6


def test_triton_generate_from_two_regions_tokens_counted_from_the_models_output(model_repo, tmp_path):
    """protocol triton-generate on the embedded server's /v2/models/{m}/generate_stream: the endpoint check reads
    the model's inputs (max_tokens goes as an input, ignore_eos as a parameter), every stream complete, tokens from
    num_output_tokens; without token_count_output, one event = one token and the report says "events"."""
    prompts = {"input_tokens": {"mean": 16}, "output_tokens": {"mean": 12}, "count": 16}
    profile = make_profile(model_repo, endpoints=[
        {"name": "gen", "url": "embedded", "protocol": "triton-generate", "model": "synthetic_lm", "prompts": prompts,
         "token_count_output": "num_output_tokens"},
        {"name": "gen-events", "url": "embedded", "protocol": "triton-generate", "model": "tiny_lm",
         "prompts": prompts}],
        regions=[{"name": "near", "share": 0.5, "delay_ms": NEAR_MS}, {"name": "far", "share": 0.5, "delay_ms": FAR_MS}],
        load={"rate": 16, "duration_s": 6, "warmup_s": 1, "seed": 9},
        slos=[{"metric": "ttft", "percentile": 90, "threshold_ms": 300}])
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    assert run.plan.model_inputs["gen"] == ["text_input", "max_tokens"]
    a = analyze_run(run.run_dir)
    measured = a.requests[a.requests["phase"] > 0]
    assert len(measured) > 60 and (measured["status"] == "ok").all()
    assert set(measured["stream_outcome"].astype(str)) == {"complete"}
    by_endpoint = measured["endpoint"].astype(str)
    assert (measured.loc[by_endpoint == "gen", "output_tokens"] == 12).all()
    # tiny_lm outruns its stream: an event often carries several tokens, and counted as events they are fewer —
    # why a count output (or usage) matters
    assert (measured.loc[by_endpoint == "gen-events", "output_tokens"] <= 12).all()
    sources = measured.groupby(measured["endpoint"].astype(str))["token_source"].agg(lambda s: set(s.astype(str)))
    assert sources["gen"] == {"output"} and sources["gen-events"] == {"events"}
    assert set(measured["finish_reason"].astype(str)) == {"length"}
    rows = {(r["endpoint"], r["region"]): r for r in a.summary.to_dict()["tokens"]}
    assert abs(rows[("gen", "*")]["tpot_ms"]["p50"]["value"] - (STEP_MS + PER_SEQ_MS)) < 1.5
    split = {(r["endpoint"], r["region"]): r for r in a.summary.to_dict()["ttft_decomposition"]}
    assert split[("gen", "far")]["network_up_ms"] == pytest.approx(FAR_MS, abs=3)


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_sharegpt_and_a_jsonl_prompt_file_drive_a_run(model_repo, tmp_path):
    """The prompt sets tailrace models build writes: ShareGPT conversations as chat messages (their replies' lengths
    as max_tokens) and JSONL prompts drawn without replacement; the server's usage agrees with the files."""
    import orjson

    from tailrace.contract.profile import Prompts
    from tailrace.endpoints.models.generative_build import PROMPTS_JSONL, PROMPTS_SHAREGPT
    from tailrace.harness.workload.prompts import file_items

    sharegpt = {"file": str(model_repo / PROMPTS_SHAREGPT), "conversation": "messages"}
    jsonl = {"file": str(model_repo / PROMPTS_JSONL), "sample": "without_replacement", "count": 40}
    profile = make_profile(model_repo, endpoints=[
        {"name": "chat", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm", "prompts": sharegpt},
        {"name": "text", "url": "embedded", "protocol": "openai-completions", "model": "synthetic_lm",
         "prompts": jsonl}],
        regions=[{"name": "solo", "share": 1.0}], load={"rate": 12, "duration_s": 5, "warmup_s": 1, "seed": 3})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    df = analyze_run(run.run_dir).requests
    assert (df["status"] == "ok").all() and len(df) > 40
    asked = {orjson.loads(line).get("max_tokens") for line in (model_repo / PROMPTS_JSONL).read_text().splitlines()}
    text = df[df["endpoint"].astype(str) == "text"]
    assert set(text["output_tokens"]) <= asked  # each stream as long as its line asked
    chat_lengths = {m for _, m in file_items(Prompts(**sharegpt), 3, model_repo / PROMPTS_SHAREGPT)}
    assert set(df.loc[df["endpoint"].astype(str) == "chat", "output_tokens"]) <= chat_lengths


def test_kserve_grpc_stream_from_two_regions_and_a_model_that_is_not_decoupled_is_refused(model_repo, server_ports,
                                                                                         tmp_path):
    """ModelStreamInfer on the embedded server's decoupled generative model: every stream ends with its final
    response, tokens from num_output_tokens; a one-shot model asked for a gRPC stream stops the run before any
    load (exit 2, naming the endpoint)."""
    prompts = {"input_tokens": {"mean": 16}, "output_tokens": {"mean": 10}, "count": 8}
    profile = make_profile(model_repo, endpoints=[
        {"name": "stream", "url": "embedded", "protocol": "kserve-grpc-stream", "model": "synthetic_lm",
         "prompts": prompts, "token_count_output": "num_output_tokens", "ttft_timeout_ms": 2000}],
        regions=[{"name": "near", "share": 0.5, "delay_ms": NEAR_MS}, {"name": "far", "share": 0.5, "delay_ms": FAR_MS}],
        load={"rate": 12, "duration_s": 5, "warmup_s": 1, "seed": 2})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    a = analyze_run(run.run_dir)
    measured = a.requests[a.requests["phase"] > 0]
    assert len(measured) > 40 and (measured["status"] == "ok").all(), measured["error"].unique()
    assert set(measured["stream_outcome"].astype(str)) == {"complete"} and (measured["output_tokens"] == 10).all()
    assert set(measured["token_source"].astype(str)) == {"output"} and set(measured["protocol"].astype(str)) == {
        "kserve-grpc-stream"}
    rows = {(r["endpoint"], r["region"]): r for r in a.summary.to_dict()["tokens"]}
    assert abs(rows[("stream", "*")]["tpot_ms"]["p50"]["value"] - (STEP_MS + PER_SEQ_MS)) < 1.5
    assert rows[("stream", "far")]["ttft_ms"]["p50"]["value"] > 2 * FAR_MS
    # the endpoint check asks the model's config: a one-shot model is not decoupled — the run would stop (exit 2)
    from tailrace.harness.orchestration.endpoint_check import EndpointCheckError, check_generate

    _, grpc_url = server_ports
    oneshot = make_profile(model_repo, endpoints=[{"name": "oneshot", "url": grpc_url, "protocol": "kserve-grpc-stream",
                                                   "model": "digits_mlp_fp32"}]).endpoints[0]
    with pytest.raises(EndpointCheckError, match="'digits_mlp_fp32' .* is not decoupled"):
        check_generate(grpc_url, oneshot)



@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_probe_streams_over_modelstreaminfer(server_ports, tmp_path):
    """tailrace probe over ModelStreamInfer: the model's inputs, then streams with tokens from its count output and
    its finish reason."""
    http_url, grpc_url = server_ports
    probe = [sys.executable, "-m", "tailrace.cli", "probe", grpc_url, "--protocol", "kserve-grpc-stream",
             "--requests", "2", "--output-tokens", "6", "--token-count-output", "num_output_tokens"]
    r = subprocess.run([*probe, "--model", "synthetic_lm"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("6 tokens out (output)") == 2 and "finish length" in r.stdout


def test_a_decision_between_generative_variants_ranks_them_on_ttft_tpot_and_tokens(model_repo, tmp_path):
    """tiny_lm (an ONNX step of ~1 ms) against synthetic_lm (8 ms a step) behind the same routes: the decision
    weighs TTFT, TPOT and output tokens/s (the generative defaults), recommends tiny_lm, and its TPOT edge is
    significant."""
    prompts = {"input_tokens": {"mean": 16}, "output_tokens": {"mean": 12}, "count": 16}
    endpoints = [{"name": name, "url": "embedded", "protocol": "openai-chat", "model": model, "prompts": prompts,
                  "timeout_ms": 20000} for name, model in (("tiny", "tiny_lm"), ("synthetic", "synthetic_lm"))]
    profile = make_profile(model_repo, endpoints=endpoints, regions=[{"name": "local", "share": 1.0}],
                           load={"rate": 20, "duration_s": 12, "warmup_s": 1, "seed": 4}, decision={})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    analysis = analyze_run(run.run_dir)
    d = analysis.summary.to_dict()["decision"]
    assert set(d["weights"]) == {"ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s", "capacity_rps", "memory_mb",
                                 "energy_mj"}
    rows = {v["name"]: v for v in d["variants"]}
    assert rows["tiny"]["tpot_p95_ms"] < rows["synthetic"]["tpot_p95_ms"] and rows["synthetic"]["tpot_p50_ms"] > 8
    assert all(rows[n]["output_tokens_per_s"] > 0 and rows[n]["ttft_p95_ms"] > 0 for n in rows)
    assert d["recommended"] == "tiny" and not d["caveats"], d
    test = d["pairwise"][0]
    assert test["tpot_p95_diff_ms"] < 0 and test["tpot_significant"], test
    write_outputs(analysis, tmp_path / "report")
    page = (tmp_path / "report" / "index.html").read_text()
    assert "TTFT p95 ms [CI]" in page and "Pareto: TTFT p95 vs tokens/s" in page
