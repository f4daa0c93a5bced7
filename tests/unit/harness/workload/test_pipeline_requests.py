"""A pipeline's stage requests (harness/workload/pipeline_requests.py): the query embedded, the passages carried
reranked, the best top_n by the reply's scores in the answer's prompt."""
from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tailrace.contract.profile import parse_profile
from tailrace.harness.workload.pipeline_requests import PipelineRequests
from tailrace.harness.workload.prompts import PromptFileError

ROOT = Path(__file__).resolve().parents[4]


def rag_profile(file: str | None = "profiles/rag/questions.jsonl", api: str = "cohere", stream: bool = True):
    endpoints = [{"name": "embed", "url": "http://127.0.0.1:9", "protocol": "openai-embeddings", "model": "bge",
                  "weight": 0, "embeddings": {"encoding_format": "base64"}},
                 {"name": "rerank", "url": "http://127.0.0.1:9", "protocol": "rerank", "model": "bge-rr", "weight": 0,
                  "rerank": {"api": api, "documents": 6, "document_tokens": 20}},
                 {"name": "chat", "url": "http://127.0.0.1:9", "protocol": "openai-chat", "model": "llm",
                  "weight": 0, "prompts": {"output_tokens": 40, "stream": stream}}]
    stages = [{"endpoint": "embed"}, {"endpoint": "rerank", "pause_ms": 15, "top_n": 2}, {"endpoint": "chat"}]
    return parse_profile({"name": "p", "endpoints": endpoints, "regions": [{"name": "r", "share": 1.0}],
                          "load": {"rate": 10, "duration_s": 5},
                          "pipelines": [{"name": "rag", "stages": stages, **({"file": file} if file else {})}]},
                         "p.toml")


def test_the_stages_embed_the_query_rerank_its_candidates_and_ask_with_the_best_passages():
    p = rag_profile()
    requests = PipelineRequests(p.pipelines[0], p, 7, ROOT)
    query, candidates = requests.item(3)
    assert [s.kind for s in requests.stages] == ["embed", "rerank", "generate"]
    assert [s.endpoint_index for s in requests.stages] == [0, 1, 2] and requests.stages[1].pause_ns == 15_000_000
    embed = requests.request(0, 3, candidates)
    assert orjson.loads(embed.body) == {"model": "bge", "input": query, "encoding_format": "base64"}
    assert embed.inputs == 1
    rerank = requests.request(1, 3, candidates)
    doc = orjson.loads(rerank.body)
    assert doc["query"] == query and doc["documents"] == candidates and rerank.inputs == len(candidates)
    best = requests.carried(1, candidates, [4, 0, 2, 1, 3])  # best score first
    assert best == [candidates[4], candidates[0]]  # the stage's top_n
    answer = requests.request(2, 3, best)
    chat = orjson.loads(answer.body)
    prompt = chat["messages"][0]["content"]
    assert chat["model"] == "llm" and chat["max_tokens"] == 40 and chat["stream"] is True
    assert f"[1] {candidates[4]}" in prompt and f"[2] {candidates[0]}" in prompt and prompt.endswith(
        f"Question: {query}\nAnswer:")
    assert answer.inputs == 0 and answer.prompt_tokens == len(prompt.split())
    assert requests.carried(0, candidates, None) == candidates  # an embed stage narrows nothing


def test_without_a_file_the_rerank_endpoints_drawn_items_are_the_pipelines():
    p = rag_profile(file=None, api="tei")
    requests = PipelineRequests(p.pipelines[0], p, 7, ROOT)
    query, candidates = requests.item(0)
    assert len(candidates) == 6 and all(len(c.split()) == 20 for c in candidates)
    doc = orjson.loads(requests.request(1, 0, candidates).body)
    assert doc == {"query": query, "texts": candidates, "return_text": False}  # TEI's shape
    again = PipelineRequests(p.pipelines[0], p, 7, ROOT)
    assert again.items == requests.items  # the same on every worker


def test_a_rag_file_with_no_candidates_names_its_line(tmp_path):
    bad = tmp_path / "rag.jsonl"
    bad.write_text('{"query": "a", "documents": ["x"]}\n{"query": "b", "passages": []}\n')
    p = rag_profile(file=str(bad))
    with pytest.raises(PromptFileError, match=r"rag.jsonl:2: no candidates"):
        PipelineRequests(p.pipelines[0], p, 7, ROOT)
