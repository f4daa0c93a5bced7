"""The embedded server's /v1/embeddings pieces (endpoints/generation/pooling.py): inputs read and checked, the
vectors deterministic and unit length, the reply in OpenAI's shape."""
from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest

from tailrace.endpoints.generation.pooling import (
    EMBEDDING_DIM,
    embedding_inputs,
    embedding_vector,
    embeddings_body,
    rerank_body,
    rerank_request,
    score_body,
    score_request,
)
from tailrace.endpoints.serving.errors import InferenceError


def test_inputs_in_every_shape_openai_takes():
    assert embedding_inputs({"input": "a b"}) == ["a b"]
    assert embedding_inputs({"input": ["a", "b c"]}) == ["a", "b c"]
    assert embedding_inputs({"input": [1, 2, 3]}) == [[1, 2, 3]]
    assert embedding_inputs({"input": [[1, 2], [3]]}) == [[1, 2], [3]]


@pytest.mark.parametrize("body, message", [
    ({}, "input: required"), ({"input": []}, "input: required"), ({"input": ["a", "  "]}, "input[1]: empty"),
    ({"input": ["a", 3.5]}, "input[1]: must be"), ({"input": ["x"] * 2049}, "at most 2048"),
])
def test_bad_inputs_are_named(body, message):
    with pytest.raises(InferenceError, match=message.replace("[", r"\[").replace("]", r"\]")):
        embedding_inputs(body)


def test_vectors_are_deterministic_unit_and_truncated_as_matryoshka():
    tokens = np.array([5, 9, 2])
    full, again = embedding_vector(tokens, EMBEDDING_DIM), embedding_vector(tokens.copy(), EMBEDDING_DIM)
    assert full.shape == (EMBEDDING_DIM,) and np.array_equal(full, again)
    assert abs(float(np.linalg.norm(full)) - 1.0) < 1e-5
    short = embedding_vector(tokens, 64)
    assert abs(float(np.linalg.norm(short)) - 1.0) < 1e-5
    assert np.allclose(short, full[:64] / np.linalg.norm(full[:64]))
    assert not np.array_equal(embedding_vector(np.array([5, 9, 3]), 64), short)


def test_the_reply_in_both_encodings():
    vectors = [embedding_vector(np.array([1, 2]), 8), embedding_vector(np.array([3]), 8)]
    floats = orjson.loads(embeddings_body("m", vectors, "float", 3))
    assert floats["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert [d["index"] for d in floats["data"]] == [0, 1] and len(floats["data"][1]["embedding"]) == 8
    packed = orjson.loads(embeddings_body("m", vectors, "base64", 3))
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, floats["data"][0]["embedding"], atol=1e-6)


def test_rerank_and_score_requests_are_read_and_checked():
    assert rerank_request({"query": "q", "documents": ["a", {"text": "b"}], "top_n": 1}) == ("q", ["a", "b"], 1, False)
    assert score_request({"text_1": "q", "text_2": ["a", "b"]}) == ("q", ["a", "b"], 0, False)
    for body, message in (({"documents": ["a"]}, "query: required"), ({"query": "q", "documents": []}, "documents"),
                          ({"query": "q", "documents": ["a"], "top_n": -1}, "top_n")):
        with pytest.raises(InferenceError, match=message):
            rerank_request(body)
    with pytest.raises(InferenceError, match="text_1: one text"):
        score_request({"text_1": ["a", "b"], "text_2": ["c"]})


def test_a_rerank_reply_holds_the_best_top_n_best_first():
    reply = orjson.loads(rerank_body("m", ["a", "b", "c"], [0.1, 0.9, 0.5], 2, True, 11))
    assert [(r["index"], r["document"]["text"]) for r in reply["results"]] == [(1, "b"), (2, "c")]
    assert reply["usage"]["prompt_tokens"] == 11
    everything = orjson.loads(rerank_body("m", ["a", "b", "c"], [0.1, 0.9, 0.5], 0, False, 11))["results"]
    assert [r["index"] for r in everything] == [1, 2, 0] and everything[0]["document"] is None
    assert [d["index"] for d in orjson.loads(score_body("m", [0.3, 0.2], 4))["data"]] == [0, 1]
