"""Pooling endpoints' bodies (harness/workload/pooling_requests.py): embeddings' texts in turn, batches drawn;
rerank's queries and documents, drawn or from a RAG file."""
from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tailrace.contract.profile import Endpoint
from tailrace.harness.workload.pooling_requests import embedding_bodies, rerank_bodies
from tailrace.harness.workload.prompts import PromptFileError


def endpoint(**fields) -> Endpoint:
    return Endpoint.model_validate({"name": "e", "url": "http://127.0.0.1:8000", "protocol": "openai-embeddings",
                                    "model": "bge", **fields})


def test_one_text_a_request_by_default_as_a_string():
    bodies = embedding_bodies(endpoint(prompts={"input_tokens": 12, "count": 5}), 3, Path("."))
    assert len(bodies) == 5 and all(b.inputs == 1 for b in bodies)
    doc = orjson.loads(bodies[0].body)
    assert doc["model"] == "bge" and isinstance(doc["input"], str) and len(doc["input"].split()) == 12
    assert doc["encoding_format"] == "float" and "dimensions" not in doc


def test_drawn_batches_take_the_texts_in_turn_and_ask_for_the_dimension():
    ep = endpoint(prompts={"input_tokens": 4, "count": 40},
                  embeddings={"inputs": {"distribution": "uniform", "mean": 8, "min": 1, "max": 16},
                              "encoding_format": "base64", "dimensions": 256})
    bodies = embedding_bodies(ep, 3, Path("."))
    docs = [orjson.loads(b.body) for b in bodies]
    assert [len(d["input"]) for d in docs] == [b.inputs for b in bodies]
    assert len({b.inputs for b in bodies}) > 4 and min(b.inputs for b in bodies) >= 1 and max(b.inputs for b in bodies) <= 16
    assert all(d["dimensions"] == 256 and d["encoding_format"] == "base64" for d in docs)
    texts = [t for d in docs for t in d["input"]]
    assert texts[40:80] == texts[:40]  # the 40 texts, in turn
    assert [b.body for b in embedding_bodies(ep, 3, Path("."))] == [b.body for b in bodies]  # the same on every worker
    assert [b.body for b in embedding_bodies(ep, 4, Path("."))] != [b.body for b in bodies]


def test_a_file_of_prompts_gives_its_texts(tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_text('{"prompt": "what is a vector"}\n{"messages": [{"role": "user", "content": "hello there"}]}\n')
    bodies = embedding_bodies(endpoint(prompts={"file": str(f), "count": 2}), 1, tmp_path)
    assert [orjson.loads(b.body)["input"] for b in bodies] == ["what is a vector", "hello there"]


def rerank_endpoint(**fields) -> Endpoint:
    return Endpoint.model_validate({"name": "r", "url": "http://127.0.0.1:8000", "protocol": "rerank",
                                    "model": "bge-reranker", **fields})


def test_rerank_bodies_draw_documents_per_query_in_each_apis_shape():
    spec = {"documents": {"distribution": "uniform", "mean": 8, "min": 2, "max": 12}, "document_tokens": 30}
    cohere = rerank_bodies(rerank_endpoint(prompts={"input_tokens": 10, "count": 20}, rerank={**spec, "top_n": 3}),
                           1, Path("."))
    docs = [orjson.loads(b.body) for b in cohere]
    assert [len(d["documents"]) for d in docs] == [b.inputs for b in cohere] and len(cohere) == 20
    assert len({b.inputs for b in cohere}) > 3 and all(2 <= b.inputs <= 12 for b in cohere)
    assert all(len(d["query"].split()) == 10 and d["top_n"] == 3 and d["model"] == "bge-reranker" for d in docs)
    assert all(len(t.split()) == 30 for d in docs for t in d["documents"])
    tei = orjson.loads(rerank_bodies(rerank_endpoint(rerank={**spec, "api": "tei"}), 1, Path("."))[0].body)
    assert set(tei) == {"query", "texts", "return_text"}
    score = orjson.loads(rerank_bodies(rerank_endpoint(rerank={**spec, "api": "score"}), 1, Path("."))[0].body)
    assert set(score) == {"model", "text_1", "text_2"} and isinstance(score["text_2"], list)


def test_a_rag_file_gives_each_lines_query_and_candidates(tmp_path):
    f = tmp_path / "rag.jsonl"
    f.write_text('{"query": "what is tailrace", "documents": ["a load tester", "a river"]}\n\n'
                 '{"query": "ms marco", "passages": [{"text": "one"}, {"text": "two"}, {"text": "three"}]}\n')
    bodies = rerank_bodies(rerank_endpoint(rerank={"file": "rag.jsonl"}), 1, tmp_path)
    assert [b.inputs for b in bodies] == [2, 3]
    assert orjson.loads(bodies[1].body)["documents"] == ["one", "two", "three"]


@pytest.mark.parametrize("lines, message", [
    ('{"query": "q"}\n', "rag.jsonl:1: no candidates"),
    ('{"query": "q", "documents": []}\n', "rag.jsonl:1: no candidates"),
    ('{"documents": ["a"]}\n', "rag.jsonl:1: query"),
    ('{"query": "q", "passages": ["a", 3]}\n', "rag.jsonl:1: passages\\[1\\]"),
    ('{"query": "q", "documents": ["a"]}\nnot json\n', "rag.jsonl:2: not JSON"),
    ("\n", "rag.jsonl: no queries"),
])
def test_a_bad_rag_file_is_named_with_its_line(tmp_path, lines, message):
    (tmp_path / "rag.jsonl").write_text(lines)
    with pytest.raises(PromptFileError, match=message):
        rerank_bodies(rerank_endpoint(rerank={"file": "rag.jsonl"}), 1, tmp_path)
