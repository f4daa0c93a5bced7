"""The embedded server's pooling routes for real (/v1/embeddings, rerank, score), and `tailrace run` of an
openai-embeddings and a rerank endpoint against it from two emulated regions: batches and document counts drawn per
request, every reply checked, each request's inputs and the server's token count recorded, the embeddings and rerank
tables, the report. Functional checks at a low rate: it shares the machine."""
from __future__ import annotations

import base64
import subprocess
import sys

import httpx
import numpy as np
import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.analyze_command import write_outputs
from tests.support import assert_valid, make_profile, run_with, start_endpoint

pytestmark = pytest.mark.shares_machine


@pytest.fixture(scope="module")
def server(model_repo, tmp_path_factory):
    ep = start_endpoint(model_repo, tmp_path_factory.mktemp("embed-endpoint"), ["--model", "synthetic_lm"])
    yield f"http://{ep.host}:{ep.http_port}"
    ep.proc.stop()


def test_the_route_answers_as_openai_and_names_a_bad_request(server):
    with httpx.Client(base_url=server, timeout=10) as client:
        one = client.post("/v1/embeddings", json={"model": "synthetic_lm", "input": "alpha beta gamma"}).json()
        assert one["usage"]["prompt_tokens"] == 3 and len(one["data"]) == 1 and len(one["data"][0]["embedding"]) == 384
        packed = client.post("/v1/embeddings", json={"model": "synthetic_lm", "input": ["alpha beta gamma", "delta"],
                                                     "encoding_format": "base64", "dimensions": 64}).json()
        first = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
        assert first.shape == (64,) and abs(float(np.linalg.norm(first)) - 1) < 1e-4
        assert packed["usage"]["prompt_tokens"] == 4 and [d["index"] for d in packed["data"]] == [0, 1]
        ranked = client.post("/v1/rerank", json={"model": "synthetic_lm", "query": "alpha beta",
                                                 "documents": ["gamma", "alpha beta", "delta epsilon"], "top_n": 2})
        results = ranked.json()["results"]
        assert [r["index"] for r in results][0] == 1 and len(results) == 2  # the query's own text scores best
        assert ranked.json()["usage"]["prompt_tokens"] == 2 * 3 + 1 + 2 + 2  # each pair: query + document
        scored = client.post("/score", json={"model": "synthetic_lm", "text_1": "alpha", "text_2": ["alpha", "b"]})
        assert [d["index"] for d in scored.json()["data"]] == [0, 1] and scored.json()["data"][0]["score"] > 0.99
        for body, status, words in (({"model": "nope", "input": "a"}, 404, "does not exist"),
                                    ({"model": "synthetic_lm"}, 400, "input: required"),
                                    ({"model": "synthetic_lm", "input": "a", "dimensions": 999}, 400, "dimensions")):
            r = client.post("/v1/embeddings", json=body)
            assert r.status_code == status and words in r.json()["error"]["message"], r.text


def test_a_run_of_drawn_batches_and_documents_from_two_regions(model_repo, tmp_path):
    endpoint = {"name": "embed", "url": "embedded", "protocol": "openai-embeddings", "model": "synthetic_lm",
                "prompts": {"input_tokens": {"distribution": "uniform", "mean": 20, "min": 8, "max": 32}, "count": 64},
                "embeddings": {"inputs": {"distribution": "uniform", "mean": 4, "min": 1, "max": 8},
                               "encoding_format": "base64", "dimensions": 128}}
    reranker = {"name": "rerank", "url": "embedded", "protocol": "rerank", "model": "synthetic_lm",
                "prompts": {"input_tokens": 6, "count": 32},
                "rerank": {"documents": {"distribution": "uniform", "mean": 8, "min": 2, "max": 16},
                           "document_tokens": 40, "top_n": 3}}
    full = {**endpoint, "name": "embed-full", "embeddings": {"inputs": 4, "encoding_format": "float"}}
    profile = make_profile(model_repo, endpoints=[endpoint, full, reranker],
                           load={"rate": 36, "duration_s": 6, "warmup_s": 1, "seed": 5},
                           slos=[{"metric": "latency", "percentile": 99, "threshold_ms": 2000}],
                           decision={"variants": ["embed", "embed-full"], "capacity_rps": {"embed": 400,
                                                                                            "embed-full": 300}})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    analysis = analyze_run(run.run_dir)
    every = analysis.requests
    assert len(every) > 120 and (every["status"] == "ok").all(), every["error"].unique()
    ranked = every[every["endpoint"] == "rerank"]
    # each document scored as one pair with the query: its tokens are the query's and the document's
    assert ranked["batch_size"].between(2, 16).all() and (ranked["input_tokens"] == 46 * ranked["batch_size"]).all()
    df = every[every["endpoint"] == "embed"]
    assert (every.loc[every["endpoint"] == "embed-full", "batch_size"] == 4).all()
    assert set(df["batch_size"].unique()) == set(range(1, 9))
    # the embedded vocabulary is a token a word: each request's tokens are its texts' words, as the server counted
    assert (df["input_tokens"] >= 8 * df["batch_size"]).all() and (df["input_tokens"] <= 32 * df["batch_size"]).all()
    s = analysis.summary
    rows = {r.region: r for r in s.embeddings if r.endpoint == "embed"}
    assert set(rows) == {"near", "far", "*"}
    rerank = {r.region: r for r in s.rerank}
    assert rerank["*"].inputs == int(ranked.loc[ranked["phase"] > 0, "batch_size"].sum())
    measured = df[df["phase"] > 0]
    assert rows["*"].inputs == int(measured["batch_size"].sum()) and rows["*"].ok == len(measured)
    assert rows["*"].input_tokens == int(measured["input_tokens"].sum())
    assert rows["*"].inputs_per_s == pytest.approx(measured["batch_size"].sum() / 6)
    assert rows["near"].good_inputs_per_s == pytest.approx(rows["near"].inputs_per_s)  # all well within 2 s
    assert sum(b.requests for r in ("near", "far") for b in rows[r].by_batch) == len(measured)
    assert rows["*"].by_batch == []  # per region only
    write_outputs(analysis, run.run_dir / "report")
    page = (run.run_dir / "report" / "index.html").read_text()
    assert "id='embeddings'" in page and "Latency by batch size" in page
    assert "id='rerank'" in page and "Latency by document count" in page
    assert s.embedding_row("embed").endpoint == "embed"
    # a decision between two embedding models: each variant's latency, the ranking (no capacity estimated from a
    # continuous batch's compute: the profile's measured capacities)
    decision = s.decision
    assert [v.name for v in decision.variants] == ["embed", "embed-full"] and set(decision.ranking) == {"embed",
                                                                                                         "embed-full"}
    assert all(v.p50_ms is not None and v.capacity_source == "measured (profile)" for v in decision.variants)
    assert decision.recommended in ("embed", "embed-full") and decision.pairwise  # each pair tested


def test_a_rag_file_without_candidates_exits_2_naming_its_line_and_sends_nothing(model_repo, tmp_path):
    rag = tmp_path / "rag.jsonl"
    rag.write_text('{"query": "what is tailrace", "documents": ["a load tester"]}\n{"query": "and this"}\n')
    profile = tmp_path / "p.toml"
    profile.write_text(f'name="x"\n[[endpoints]]\nname="rerank"\nurl="embedded"\nprotocol="rerank"\n'
                       f'model="synthetic_lm"\nrerank={{ file = "{rag}" }}\n[[regions]]\nname="a"\nshare=1\n'
                       f'[load]\nrate=5\nduration_s=2\n[embedded]\nmodels_dir="{model_repo}"\n')
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert f"endpoint rerank: {rag}:2: no candidates" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not list((tmp_path / "runs").glob("*/regions/*/*/requests-*"))  # nothing was sent


def test_probe_embeddings_and_rerank(server):
    for args, words in ((["--protocol", "openai-embeddings", "--inputs", "4", "--input-tokens", "12"],
                         ["4 texts (48 tokens, 384 dimensions", "/v1/embeddings"]),
                        (["--protocol", "rerank", "--documents", "5", "--rerank-api", "score"],
                         ["5 documents (", "rerank to /score"])):
        r = subprocess.run([sys.executable, "-m", "tailrace.cli", "probe", server, "--model", "synthetic_lm",
                            "--requests", "2", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "request 2: ok" in r.stdout and all(w in r.stdout for w in words), r.stdout
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "probe", server, "--model", "nope", "--protocol",
                        "rerank"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "model 'nope' is not served" in r.stderr, r.stderr
