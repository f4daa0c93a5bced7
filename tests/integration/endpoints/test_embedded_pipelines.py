"""RAG pipelines for real: `tailrace run` of embed → 10 ms pause → rerank → chat against the embedded server from two
emulated regions, beside plain chat traffic — each stage sent at the stage before's end + its pause, the answer's
prompt built from the reranker's best passages, the pipelines' table, verdicts and report. A bad pipeline stops
the run before anything is sent, in one line. Functional checks at a low rate: it shares the machine."""
from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.analyze_command import write_outputs
from tailrace.harness.workload.pipeline_requests import PipelineRequests
from tests.support import assert_valid, make_profile, run_with, start_endpoint

pytestmark = pytest.mark.shares_machine

# two questions with 6 and 8 candidate passages of different lengths (the rerank's document count tells them apart;
# a prompt built from other passages than the reranker's best 3 has another length)
QUESTIONS = {"how does a load test measure latency": 6, "why cache the prefix of a prompt": 8}


def rag_file(path):
    lines = [{"query": q, "passages": [" ".join(f"word{k}x{j}" for j in range(2 + 3 * k + n)) for k in range(n)]}
             for q, n in QUESTIONS.items()]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def server(model_repo, tmp_path_factory):
    ep = start_endpoint(model_repo, tmp_path_factory.mktemp("rag-endpoint"), ["--model", "synthetic_lm"])
    yield f"http://{ep.host}:{ep.http_port}"
    ep.proc.stop()


def test_a_rag_pipeline_from_two_regions_is_timed_stage_by_stage(model_repo, tmp_path, server):
    rag = rag_file(tmp_path / "rag.jsonl")
    endpoints = [{"name": "embed", "url": "embedded", "protocol": "openai-embeddings", "model": "synthetic_lm",
                  "weight": 0},
                 {"name": "rerank", "url": "embedded", "protocol": "rerank", "model": "synthetic_lm", "weight": 0},
                 {"name": "chat", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm", "weight": 1,
                  "prompts": {"input_tokens": 24, "output_tokens": 12}}]
    pipeline = {"name": "rag", "weight": 2, "file": str(rag),
                "stages": [{"endpoint": "embed"}, {"endpoint": "rerank", "pause_ms": 10, "top_n": 3},
                           {"endpoint": "chat"}]}
    profile = make_profile(model_repo, endpoints=endpoints, pipelines=[pipeline],
                           load={"rate": 15, "duration_s": 6, "warmup_s": 1, "seed": 3},
                           slos=[{"metric": "pipeline_e2e", "percentile": 90, "threshold_ms": 3000},
                                 {"metric": "pipeline_ttft", "pipeline": "rag", "percentile": 90,
                                  "threshold_ms": 2000}])
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    analysis = analyze_run(run.run_dir)
    every = analysis.requests
    assert (every["status"] == "ok").all(), every["error"].unique()
    stages = every[every["pipeline"] == "rag"].sort_values(["session_id", "turn"])
    plain = every[every["pipeline"] == ""]
    assert set(plain["endpoint"]) == {"chat"} and (plain["turn"] == 0).all() and len(plain) > 10
    by_pipeline = stages.groupby("session_id")
    assert len(by_pipeline) > 40
    ends = {}
    for session, rows in by_pipeline:
        ends[session] = rows["session_end"].iloc[-1]
        assert list(rows["endpoint"]) == ["embed", "rerank", "chat"][:len(rows)] and rows["worker"].nunique() == 1
        t_intended, t_done = rows["t_intended"].to_numpy(), rows["t_done"].to_numpy()
        # each stage due at the stage before's end (+ the rerank's 10 ms pause), on the worker's one clock
        gaps_ms = (t_intended[1:] - t_done[:-1]) / 1e6
        assert np.allclose(gaps_ms, [10, 0][:len(gaps_ms)], atol=0.01), gaps_ms
    assert set(ends.values()) <= {"done", "run_end"} and list(ends.values()).count("done") > 40
    # the answer's prompt holds the reranker's own 3 best passages (asked of the same server here)
    requests = PipelineRequests(profile.pipelines[0], profile, 3, tmp_path)
    expected = {}
    for i, (query, passages) in enumerate(requests.items):
        ranked = httpx.post(f"{server}/v1/rerank", json={"model": "synthetic_lm", "query": query,
                                                         "documents": passages}, timeout=10).json()["results"]
        best = [passages[r["index"]] for r in ranked[:3]]
        expected[len(passages)] = requests.request(2, i, best).prompt_tokens
    for _, rows in by_pipeline:
        if len(rows) == 3:
            documents, chat = rows["batch_size"].iloc[1], rows.iloc[2]
            assert chat["prompt_tokens_sent"] == expected[documents] == chat["input_tokens"]
    s = analysis.summary
    whole = s.pipelines.row("rag")
    measured = stages[(stages["turn"] == 1) & (stages["phase"] > 0)]
    assert whole.started == len(measured) and whole.done == whole.started - whole.run_end
    assert {r.region for r in s.pipelines.pipelines} == {"near", "far", "*"}
    assert [st.endpoint for st in whole.stages] == ["embed", "rerank", "chat"]
    far, near = s.pipelines.row("rag", "far"), s.pipelines.row("rag", "near")
    # the far region's 10 ms each way, on each of three stages: 60 ms more end to end at the median
    assert far.e2e_ms.p50.value - near.e2e_ms.p50.value > 40
    assert whole.ttft_ms.p50.value < whole.e2e_ms.p50.value
    verdicts = [v for v in s.slos if v.metric.startswith("pipeline_")]
    assert {(v.metric, v.endpoint, v.region) for v in verdicts} == {
        (m, "rag", r) for m in ("pipeline_e2e", "pipeline_ttft") for r in ("near", "far")}
    assert s.pipelines.slowest and s.pipelines.slowest[0].stages[0].trace_id
    write_outputs(analysis, run.run_dir / "report")
    page = (run.run_dir / "report" / "index.html").read_text()
    assert "id='pipelines'" in page and "Slowest pipelines" in page
    assert (run.run_dir / "report" / "tables" / "pipelines.csv").exists()


@pytest.mark.parametrize("pipeline, message", [
    ('{ name = "rag", file = "RAG", stages = [{ endpoint = "rerank" }] }', "pipelines[0] (rag): RAG:2: no candidates"),
])
def test_a_bad_pipeline_exits_2_in_one_line_and_sends_nothing(model_repo, tmp_path, pipeline, message):
    rag = tmp_path / "rag.jsonl"
    rag.write_text('{"query": "what is tailrace", "documents": ["a load tester"]}\n{"query": "and this"}\n')
    profile = tmp_path / "p.toml"
    profile.write_text(f'name="x"\npipelines = [{pipeline.replace("RAG", str(rag))}]\n'
                       f'[[endpoints]]\nname="rerank"\nurl="embedded"\nprotocol="rerank"\n'
                       f'model="synthetic_lm"\nweight=0\n[[regions]]\nname="a"\nshare=1\n'
                       f'[load]\nrate=5\nduration_s=2\n[embedded]\nmodels_dir="{model_repo}"\n')
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert message.replace("RAG", str(rag)) in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not list((tmp_path / "runs").glob("*/regions/*/*/requests-*"))  # nothing was sent
