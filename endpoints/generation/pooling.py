"""The embedded server's pooling routes, as vLLM's pooling runner answers them: POST /v1/embeddings, and rerank
(/rerank, /v1/rerank, /v2/rerank: Cohere's shape) and score (/score, /v1/score: vLLM's). Each text — for rerank and
score each (query, document) pair, as a cross-encoder reads it — is prefilled by a generative model's
continuous-batching engine (the cost a pooling model pays: its prompt's prefill, in the same batches as everything
else the engine runs). A vector is made from the text's tokens — deterministic, unit length, `dimensions` long
(Matryoshka: the first `dimensions` of the full vector, renormalised); a pair's score is its two vectors' cosine.

The numbers are synthetic: equal texts get equal vectors and nothing more is promised. What the routes are for is
the load: batch sizes, document counts, lengths, queueing behind generations, the reply's size and encoding.
"""
from __future__ import annotations

import base64
import hashlib
import time

import numpy as np
import orjson

from tailrace.endpoints.generation.chunks import error_body
from tailrace.endpoints.generation.hub import StreamHub, echoed_traceparent, read_body, send_whole
from tailrace.endpoints.generation.requests import json_object, whole_number
from tailrace.endpoints.serving.continuous import Generation
from tailrace.endpoints.serving.core import RequestClock
from tailrace.endpoints.serving.errors import InferenceError, not_found

EMBEDDINGS = "/v1/embeddings"
RERANK = ("/rerank", "/v1/rerank", "/v2/rerank")
SCORE = ("/score", "/v1/score")
EMBEDDING_DIM = 384  # the full vector's dimension (a MiniLM-sized model's)
MAX_INPUTS = 2048  # inputs one request may carry (OpenAI's limit)


def embedding_inputs(body: dict) -> list[str | list[int]]:
    """`input` as a list of texts or of token-id lists; InferenceError naming what is wrong."""
    value = body.get("input")
    if isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(t, int) for t in value)):
        value = [value]
    if not isinstance(value, list) or not value:
        raise InferenceError("input: required (a text, a list of texts, or token ids)")
    if len(value) > MAX_INPUTS:
        raise InferenceError(f"input: at most {MAX_INPUTS} inputs a request, got {len(value)}")
    for i, item in enumerate(value):
        if isinstance(item, str):
            if not item.strip():
                raise InferenceError(f"input[{i}]: empty text")
        elif not (isinstance(item, list) and item and all(isinstance(t, int) and t >= 0 for t in item)):
            raise InferenceError(f"input[{i}]: must be a text or a list of token ids")
    return value


def embedding_vector(tokens: np.ndarray, dimensions: int) -> np.ndarray:
    """The synthetic vector of `tokens`: seeded by their ids, unit length, its first `dimensions` renormalised."""
    seed = int.from_bytes(hashlib.blake2b(np.ascontiguousarray(tokens, dtype=np.int64).tobytes(),
                                          digest_size=8).digest(), "little")
    full = np.random.default_rng(seed).standard_normal(EMBEDDING_DIM).astype(np.float32)
    head = full[:dimensions]
    return head / np.float32(np.linalg.norm(head) or 1.0)


def embeddings_body(model: str, vectors: list[np.ndarray], encoding: str, prompt_tokens: int) -> bytes:
    """The reply, in OpenAI's shape (vLLM's `id` and `created` beside)."""
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if encoding == "base64" else v}
            for i, v in enumerate(vectors)]
    return orjson.dumps({"object": "list", "data": data, "model": model,
                         "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}},
                        option=orjson.OPT_SERIALIZE_NUMPY)


class PoolingRoutes:
    """POST /v1/embeddings, the rerank routes and the score routes over the server's generative engines."""

    def __init__(self, hub: StreamHub) -> None:
        self.hub, self.server = hub, hub.server

    def serves(self, path: str) -> bool:
        return path == EMBEDDINGS or path in RERANK or path in SCORE

    async def __call__(self, scope, receive, send) -> None:
        clock = RequestClock()
        echo = echoed_traceparent(scope)
        path = scope["path"].rstrip("/")
        try:
            payload = await read_body(receive, self.server.options.max_body_bytes)
            if payload is None:
                return
            body = json_object(payload, "the body must be a JSON object")
            model = body.get("model")
            if not isinstance(model, str) or not model:
                raise InferenceError("model: required (a model /v1/models lists)")
            engine = self.server.generators.get(model)
            if engine is None:
                raise not_found(f"the model '{model}' does not exist (models: "
                                f"{', '.join(sorted(self.server.generators)) or 'none'})")
            if path == EMBEDDINGS:
                reply = await self._embeddings(body, model, engine, clock, receive)
            else:
                reply = await self._scores(body, model, engine, clock, receive, path in RERANK)
            if reply is not None:
                await send_whole(send, 200, reply[0], [(b"server-timing", _timing(reply[1], clock)), *echo])
        except InferenceError as exc:
            await send_whole(send, exc.http_status, error_body(exc.message, exc.http_status), echo)

    async def _prefilled(self, engine, prompts: list[np.ndarray], clock: RequestClock, receive
                         ) -> list[Generation] | None:
        """Each prompt prefilled (a 1-token generation) in the engine's batches; None when the client left."""
        limit = engine.limits.max_model_len
        for i, p in enumerate(prompts):
            if len(p) >= limit:
                raise InferenceError(f"input[{i}]: {len(p)} tokens, over the model's {limit - 1}")
        runs = [Generation(prompt=p, max_tokens=1, ignore_eos=True, arrival_ns=clock.receive_mono_ns)
                for p in prompts]
        async with self.hub.generating_all(engine, runs, receive):
            for g in runs:
                if not await self.hub.finished(g):
                    return None  # the client left: every sequence is cancelled on the way out
        return runs

    async def _embeddings(self, body: dict, model: str, engine, clock: RequestClock, receive
                          ) -> tuple[bytes, list[Generation]] | None:
        inputs = embedding_inputs(body)
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise InferenceError(f"encoding_format: 'float' or 'base64', got {encoding!r}")
        dimensions = whole_number(body, "dimensions", EMBEDDING_DIM, 1)
        if dimensions > EMBEDDING_DIM:
            raise InferenceError(f"dimensions: at most {EMBEDDING_DIM} for {model}, got {dimensions}")
        vocabulary = engine.decoder.vocabulary
        prompts = [vocabulary.encode(t) if isinstance(t, str) else np.asarray(t, dtype=np.int64) for t in inputs]
        runs = await self._prefilled(engine, prompts, clock, receive)
        if runs is None:
            return None
        vectors = [embedding_vector(p, dimensions) for p in prompts]
        return embeddings_body(model, vectors, encoding, sum(len(p) for p in prompts)), runs

    async def _scores(self, body: dict, model: str, engine, clock: RequestClock, receive, rerank: bool
                      ) -> tuple[bytes, list[Generation]] | None:
        query, documents, top_n, keep_text = rerank_request(body) if rerank else score_request(body)
        encode = engine.decoder.vocabulary.encode
        q = encode(query)
        pairs = [np.concatenate([q, encode(d)]) for d in documents]  # a cross-encoder reads the pair as one text
        runs = await self._prefilled(engine, pairs, clock, receive)
        if runs is None:
            return None
        anchor = embedding_vector(q, EMBEDDING_DIM)
        scores = [float(np.dot(anchor, embedding_vector(encode(d), EMBEDDING_DIM))) for d in documents]
        tokens = sum(len(p) for p in pairs)
        return (rerank_body(model, documents, scores, top_n, keep_text, tokens) if rerank
                else score_body(model, scores, tokens)), runs


def _texts(value, name: str) -> list[str]:
    """A text or a list of texts (a document may be {"text": …}); InferenceError naming `name`."""
    items = value if isinstance(value, list) else [value]
    texts = [d.get("text") if isinstance(d, dict) else d for d in items]
    if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
        raise InferenceError(f"{name}: a non-empty text or list of texts")
    return texts


def rerank_request(body: dict) -> tuple[str, list[str], int, bool]:
    """(query, documents, top_n — 0: all —, return_documents) of a Cohere-shaped rerank body."""
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise InferenceError("query: required (a text)")
    documents = _texts(body.get("documents"), "documents")
    top_n = whole_number(body, "top_n", 0, 0)
    keep = body.get("return_documents", False)
    return query, documents, top_n, bool(keep)


def score_request(body: dict) -> tuple[str, list[str], int, bool]:
    """(text_1, text_2 as a list, 0, False) of vLLM's score body (one text_1 against each text_2)."""
    first = _texts(body.get("text_1"), "text_1")
    if len(first) != 1:
        raise InferenceError("text_1: one text (scored against each text_2)")
    return first[0], _texts(body.get("text_2"), "text_2"), 0, False


def rerank_body(model: str, documents: list[str], scores: list[float], top_n: int, keep_text: bool,
                tokens: int) -> bytes:
    """The rerank reply (Cohere's shape, as vLLM answers): the best top_n (0: all), best first."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[:top_n or None]
    results = [{"index": i, "relevance_score": scores[i], "document": {"text": documents[i]} if keep_text else None}
               for i in order]
    return orjson.dumps({"id": f"rerank-{abs(hash((model, tokens, len(scores))))}", "model": model,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}, "results": results})


def score_body(model: str, scores: list[float], tokens: int) -> bytes:
    """vLLM's /score reply: a score per text_2, in order."""
    return orjson.dumps({"object": "list", "model": model,
                         "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


def _timing(runs: list[Generation], clock: RequestClock) -> bytes:
    """Server-Timing of a batch, as a generation's (hub.timing_header): its longest queue and its longest prefill
    (ms), and the server's receive and send instants (epoch ns), so that the client can split a request's latency
    into network, queue and compute."""
    queue = max((g.timings_ms().get("queue_ms", 0.0) for g in runs), default=0.0)
    prefill = max((g.timings_ms().get("prefill_ms", 0.0) for g in runs), default=0.0)
    sent_wall = clock.receive_wall_ns + (time.perf_counter_ns() - clock.receive_mono_ns)
    return b'queue;dur=%.3f, prefill;dur=%.3f, recv;desc="%d", send;desc="%d"' % (
        queue, prefill, clock.receive_wall_ns, sent_wall)
