"""The embeddings sender's reply checks (harness/client/pooling.py): a reply that is not what was asked for is a
classified bad_response, never ok."""
from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest

from tailrace.contract.plan import EndpointTimeouts
from tailrace.harness.client.pooling import (
    EmbeddingsSender,
    PoolingBody,
    ReplyError,
    RerankSender,
    check_reply,
    check_rerank,
)


def reply(vectors, tokens: int | None = 7, encoding: str = "float", indices=None) -> bytes:
    data = []
    for i, v in enumerate(vectors):
        embedding = base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() if encoding == "base64" else v
        data.append({"object": "embedding", "index": i if indices is None else indices[i], "embedding": embedding})
    doc = {"object": "list", "data": data, "model": "m"}
    if tokens is not None:
        doc["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return orjson.dumps(doc)


def test_a_right_reply_gives_its_dimension_and_prompt_tokens():
    assert check_reply(reply([[0.1, 0.2, 0.3], [0.0, 1.0, 0.0]]), 2, None) == (3, 7)
    assert check_reply(reply([[0.1, 0.2]], tokens=None), 1, 2) == (2, -1)
    assert check_reply(reply([[0.5, -0.5, 0.25, 1.0]], encoding="base64"), 1, 4) == (4, 7)


@pytest.mark.parametrize("payload, inputs, dimensions, code", [
    (reply([[0.1, 0.2]]), 2, None, "vectors"),
    (reply([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]), 2, None, "vectors"),
    (reply([[0.1, 0.2], [0.3, 0.4]], indices=[0, 0]), 2, None, "index"),
    (reply([[0.1, 0.2], [0.3, 0.4]], indices=[0, 2]), 2, None, "index"),
    (reply([[0.1, 0.2], [0.3]]), 2, None, "dimension"),
    (reply([[0.1, 0.2, 0.3]]), 1, 2, "dimension"),
    (reply([[np.nan, 1.0]], encoding="base64"), 1, None, "not_finite"),
    (reply([[np.inf, 1.0]], encoding="base64"), 1, None, "not_finite"),
    (b"<html>busy</html>", 1, None, "body"),
    (orjson.dumps({"data": [{"index": 0, "embedding": "%%%"}]}), 1, None, "body"),
    (orjson.dumps({"data": [{"index": 0, "embedding": ["a", "b"]}]}), 1, None, "body"),
    (orjson.dumps({"object": "list"}), 1, None, "body"),
])
def test_a_wrong_reply_is_named(payload, inputs, dimensions, code):
    with pytest.raises(ReplyError) as err:
        check_reply(payload, inputs, dimensions)
    assert err.value.code == code


class Response:
    def __init__(self, status: int, body: bytes, timing: bytes = b"") -> None:
        self.status, self.body, self.server_timing = status, body, timing


def sender(dimensions: int | None = None) -> EmbeddingsSender:
    bodies = [PoolingBody(b'{"model":"m","input":"a b"}', 1), PoolingBody(b'{"model":"m","input":["a","b"]}', 2)]
    return EmbeddingsSender("http://127.0.0.1:9", bodies, EndpointTimeouts(5.0), None, dimensions=dimensions)


def test_the_outcome_carries_the_batch_tokens_and_server_timing():
    s = sender()
    out, raw = s.encode(1, {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
    assert out.batch == 2 and raw.startswith(b"POST /v1/embeddings HTTP/1.1\r\n") and b"traceparent: 00-" in raw
    assert raw.endswith(b'{"model":"m","input":["a","b"]}')
    out = s.answered(out, Response(200, reply([[1.0, 0.0], [0.0, 1.0]], tokens=4), b"queue;dur=1.5, prefill;dur=2"))
    assert (out.status, out.input_tokens, out.server_queue_ns, out.server_compute_ns) == ("ok", 4, 1_500_000, 2_000_000)


def test_the_first_reply_fixes_the_dimension_every_later_one_must_have():
    s = sender()
    first, _ = s.encode(0, {})
    assert s.answered(first, Response(200, reply([[1.0, 0.0, 0.0]]))).status == "ok"
    later, _ = s.encode(0, {})
    out = s.answered(later, Response(200, reply([[1.0, 0.0]])))
    assert (out.status, out.code) == ("bad_response", "dimension")


def test_a_server_error_keeps_its_message():
    s = sender(dimensions=3)
    out, _ = s.encode(0, {})
    out = s.answered(out, Response(400, orjson.dumps({"error": {"message": "input: too long", "code": 400}})))
    assert (out.status, out.code, out.error) == ("http_error", "400", "input: too long")


def rerank_reply(indices, scores=None, api: str = "cohere", tokens: int | None = 30) -> bytes:
    scores = scores if scores is not None else [1.0 - 0.1 * k for k in range(len(indices))]
    if api == "tei":
        return orjson.dumps([{"index": i, "score": s} for i, s in zip(indices, scores)])
    key, score = ("results", "relevance_score") if api == "cohere" else ("data", "score")
    doc: dict = {key: [{"index": i, score: s} for i, s in zip(indices, scores)]}
    if tokens is not None:
        doc["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return orjson.dumps(doc)


@pytest.mark.parametrize("api", ["cohere", "tei", "score"])
def test_a_right_rerank_reply_in_each_api(api):
    tokens, ranked = check_rerank(rerank_reply([2, 0, 1], api=api), api, 3, None)
    assert tokens == (-1 if api == "tei" else 30)
    assert ranked == [2, 0, 1]  # best score first


def test_the_ranking_follows_the_scores_not_the_order_of_the_results():
    """vLLM's /score returns the documents in their order: the best passages are the highest scores."""
    _, ranked = check_rerank(rerank_reply([0, 1, 2, 3], scores=[0.1, 0.9, -2.0, 0.5], api="score"), "score", 4, None)
    assert ranked == [1, 3, 0, 2]


def test_top_n_asks_for_the_best_only():
    assert check_rerank(rerank_reply([4, 1]), "cohere", 5, 2) == (30, [4, 1])
    assert check_rerank(rerank_reply([1, 0]), "cohere", 2, 10)[0] == 30  # top_n above the documents: all of them
    with pytest.raises(ReplyError) as err:
        check_rerank(rerank_reply([4, 1, 0]), "cohere", 5, 2)
    assert err.value.code == "results"


@pytest.mark.parametrize("payload, api, documents, code", [
    (rerank_reply([0, 1]), "cohere", 3, "results"),
    (rerank_reply([0, 3, 1]), "cohere", 3, "index"),
    (rerank_reply([0, 0, 1], api="score"), "score", 3, "index"),
    (rerank_reply([0, 1], scores=[0.5, None], api="tei"), "tei", 2, "score"),
    (rerank_reply([0, 1], scores=[0.5, "high"]), "cohere", 2, "score"),
    (b"oops", "cohere", 1, "body"),
    (orjson.dumps({"data": []}), "cohere", 1, "body"),
    (orjson.dumps({"results": []}), "tei", 1, "body"),
])
def test_a_wrong_rerank_reply_is_named(payload, api, documents, code):
    with pytest.raises(ReplyError) as err:
        check_rerank(payload, api, documents, None)
    assert err.value.code == code


def test_the_rerank_sender_posts_to_its_apis_route_and_records_documents_and_tokens():
    bodies = [PoolingBody(b'{"query":"q","documents":["a","b","c"]}', 3)]
    for api, path in (("cohere", b"/v1/rerank"), ("tei", b"/rerank"), ("score", b"/score")):
        s = RerankSender("http://127.0.0.1:9", api, None, bodies, EndpointTimeouts(5.0), None)
        out, raw = s.encode(0, {})
        assert raw.startswith(b"POST " + path + b" HTTP/1.1") and out.batch == 3
    s = RerankSender("http://127.0.0.1:9/base", "cohere", "/v2/rerank", bodies, EndpointTimeouts(5.0), None, top_n=1)
    out, raw = s.encode(0, {})
    assert raw.startswith(b"POST /base/v2/rerank HTTP/1.1")
    out = s.answered(out, Response(200, rerank_reply([2], tokens=12)))
    assert (out.status, out.batch, out.input_tokens) == ("ok", 3, 12)
    out, _ = s.encode(0, {})
    assert s.answered(out, Response(200, rerank_reply([2, 1]))).code == "results"
