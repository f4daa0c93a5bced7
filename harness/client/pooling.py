"""Senders of the pooling APIs — texts in, numbers out, one whole JSON reply: embeddings (POST /v1/embeddings: one
text or a batch) and rerank (a query and N documents: the Cohere / Jina route vLLM, Infinity and Cohere serve, TEI's,
and vLLM's /score). Bodies are encoded before the run and sent over the generator's keep-alive HTTP/1.1 pool (TLS for
https://), driven inline by the open loop like any plain-HTTP request. Each reply is checked before it is ok —
embeddings: one vector per text at every index, the dimension asked for (or the run's first reply's), finite
numbers; rerank: as many results as asked (N, or top_n), each index valid and once, finite scores — and its token
usage recorded: a reply that fails a check is a `bad_response` naming what was wrong.
"""
from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from tailrace.contract.credentials import Credential
from tailrace.contract.plan import EndpointTimeouts, PoolLimits
from tailrace.contract.profile import Tls
from tailrace.harness.client.generative import OneRequest, PromptSamples, error_text, server_timing
from tailrace.harness.client.http_transport import HttpTransport
from tailrace.harness.client.outcome import Outcome, Send, classify_exception, classify_http_status

EMBEDDINGS_PATH = "/v1/embeddings"
RERANK_PATHS = {"cohere": "/v1/rerank", "tei": "/rerank", "score": "/score"}  # each rerank API's default route


@dataclass(frozen=True)
class PoolingBody:
    """One request's encoded body and how many inputs it carries (an embeddings request's texts, a rerank
    request's documents)."""

    body: bytes
    inputs: int


class PoolingPayloads:
    """A pooling endpoint's encoded bodies, seen as the request path sees a KServe endpoint's payloads (as a
    generative endpoint's prompts are: samples without labels, one request of one row each)."""

    request = OneRequest()

    def __init__(self, bodies: Sequence[PoolingBody]) -> None:
        if not bodies:
            raise ValueError("a pooling endpoint needs at least one request body")
        self.bodies = list(bodies)
        self.samples = PromptSamples(len(self.bodies))

    def index(self, sample: int) -> int:
        return sample % len(self.bodies)

    def first_row(self, sample: int) -> int:
        return self.index(sample)


class ReplyError(ValueError):
    """A 200 reply that is not what was asked for; `code` classifies it (vectors, index, dimension, not_finite,
    body)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_reply(payload: bytes, inputs: int, dimensions: int | None) -> tuple[int, int]:
    """(the vectors' dimension, usage.prompt_tokens or -1) of a /v1/embeddings reply to `inputs` texts; ReplyError
    when it has the wrong number of vectors, a missing or repeated index, a vector of another dimension than
    `dimensions` (None: than its first), or a number that is not finite."""
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ReplyError("body", f"the reply is not JSON: {exc}") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise ReplyError("body", "the reply has no `data` list")
    if len(data) != inputs:
        raise ReplyError("vectors", f"{len(data)} vectors for {inputs} inputs")
    seen = set()
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        if not isinstance(index, int) or not 0 <= index < inputs or index in seen:
            raise ReplyError("index", f"index {index!r} out of range or repeated (inputs 0..{inputs - 1})")
        seen.add(index)
        vector = _vector(item.get("embedding"), index)
        if dimensions is None:
            dimensions = len(vector)
        if len(vector) != dimensions:
            raise ReplyError("dimension", f"vector {index} has {len(vector)} dimensions, not {dimensions}")
        if not np.isfinite(vector).all():
            raise ReplyError("not_finite", f"vector {index} holds a number that is not finite")
    usage = doc.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return dimensions or 0, tokens if isinstance(tokens, int) and tokens >= 0 else -1


def _vector(value, index: int) -> np.ndarray:
    if isinstance(value, str):  # encoding_format = base64: little-endian float32
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ReplyError("body", f"vector {index}: not base64") from None
        if len(raw) % 4:
            raise ReplyError("body", f"vector {index}: {len(raw)} bytes, not float32s")
        return np.frombuffer(raw, dtype="<f4")
    if isinstance(value, list) and value:
        try:
            return np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ReplyError("body", f"vector {index}: not a list of numbers") from None
    raise ReplyError("body", f"vector {index}: no embedding")


class PoolingSender:
    """One POST route of JSON bodies built before the run and whole JSON replies, checked by `check`: InlineSender
    (the open loop's own path) and Sender (the greenlet path) alike."""

    def __init__(self, url: str, path: str, bodies: Sequence[PoolingBody], timeouts: EndpointTimeouts,
                 credential: Credential | None, tls: Tls | None = None, pool: PoolLimits = PoolLimits.sized(16)
                 ) -> None:
        self.transport = HttpTransport(url, timeouts, credential, tls, pool)
        self.client, self.warm_connections = self.transport.client, self.transport.warm_connections
        self.timeouts = timeouts
        self.check_path = "/v1/models"  # what warm_up asks before the run
        self.payloads = PoolingPayloads(bodies)
        self.inline = None
        self.path = path  # the route, under the URL's own path
        self._head = self.transport.head("POST", self.transport.base_path + path, "Content-Type: application/json",
                                         "Connection: keep-alive")

    def check(self, out: Outcome, payload: bytes) -> None:
        """Check a 200 reply to `out`'s request and record what it says (ReplyError: not what was asked for)."""
        raise NotImplementedError

    def encode(self, sample: int, headers: dict[str, str]) -> tuple[Outcome, bytes | tuple[bytes, bytes] | None]:
        """Request `sample`'s bytes with `headers` and its outcome so far (its batch size); None when it cannot be
        sent (the credential cannot be read: the outcome says so)."""
        item = self.payloads.bodies[self.payloads.index(sample)]
        out = Outcome(batch=item.inputs)
        return out, self.transport.request(self._head, headers, item.body, out)

    def send(self, request: Send) -> Outcome:
        """Send one request: its `sample`, encoded before the run, or the `body` built for it (a pipeline's stage)
        that carries `inputs` texts or documents."""
        if request.body is None:
            out, raw = self.encode(request.sample, request.headers)
        else:
            out = Outcome(batch=request.inputs)
            raw = self.transport.request(self._head, request.headers, request.body, out)
        return out if raw is None else self._exchange(out, raw, request.on_sent)

    def _exchange(self, out: Outcome, raw, on_sent) -> Outcome:
        on_sent()
        try:
            response = self.client.request(raw)
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            return self.failed(out, exc)
        return self.answered(out, response)

    def answered(self, out: Outcome, response) -> Outcome:
        """`out` completed from the whole reply: status, server timing, the checks, the prompt tokens."""
        payload = response.body
        out.bytes_in, out.code = len(payload), str(response.status)
        out.status = classify_http_status(response.status)
        for name, value in server_timing(response.server_timing).items():
            setattr(out, name, value)
        if out.status != "ok":
            out.error = error_text(payload)
            return out
        try:
            self.check(out, payload)
        except ReplyError as exc:
            out.status, out.code, out.error = "bad_response", exc.code, str(exc)[:200]
        return out

    def failed(self, out: Outcome, failure: BaseException) -> Outcome:
        out.status, out.code, out.error = classify_exception(failure)
        return out

    def attach_inline(self, poller, done):
        """Driven by the issue loop from now on: plain HTTP only (None over TLS: the greenlet path)."""
        if self.client.tls is not None:
            return None
        from tailrace.harness.client.inline_http1 import InlineHttp1Pool

        self.inline = InlineHttp1Pool(poller, self.client.host, self.client.port, self.timeouts.total_s, done)
        return self.inline

    def warm_up(self) -> None:
        """GET /v1/models (TEI: /health) with the credential, then the pool filled."""
        self.transport.check_and_fill(self.check_path, self.inline)

    def close(self) -> None:
        self.client.close()
        if self.inline is not None:
            self.inline.close()


class EmbeddingsSender(PoolingSender):
    """POST /v1/embeddings; `dimensions`: asked for (else the first reply's, which every later one must match)."""

    def __init__(self, url: str, bodies: Sequence[PoolingBody], timeouts: EndpointTimeouts,
                 credential: Credential | None, tls: Tls | None = None, pool: PoolLimits = PoolLimits.sized(16),
                 dimensions: int | None = None) -> None:
        super().__init__(url, EMBEDDINGS_PATH, bodies, timeouts, credential, tls, pool)
        self.dimensions = dimensions

    def check(self, out: Outcome, payload: bytes) -> None:
        dimension, out.input_tokens = check_reply(payload, out.batch, self.dimensions)
        if self.dimensions is None:
            self.dimensions = dimension


class RerankSender(PoolingSender):
    """A rerank route (`api`: cohere, tei or score; `path`: its route, default RERANK_PATHS), asked for `top_n`
    results (None: every document)."""

    def __init__(self, url: str, api: str, path: str | None, bodies: Sequence[PoolingBody],
                 timeouts: EndpointTimeouts, credential: Credential | None, tls: Tls | None = None,
                 pool: PoolLimits = PoolLimits.sized(16), top_n: int | None = None) -> None:
        super().__init__(url, path or RERANK_PATHS[api], bodies, timeouts, credential, tls, pool)
        self.api, self.top_n = api, top_n
        if api == "tei":
            self.check_path = "/health"  # TEI lists no models

    def check(self, out: Outcome, payload: bytes) -> None:
        out.input_tokens, out.ranked = check_rerank(payload, self.api, out.batch, self.top_n)


def check_rerank(payload: bytes, api: str, documents: int, top_n: int | None) -> tuple[int, list[int]]:
    """(the prompt tokens of a rerank reply (-1: not reported), the documents' indices best score first) to
    `documents` documents; ReplyError when it has
    another number of results than min(top_n, documents) (cohere; else every document), an index out of range or
    repeated, or a score that is not a finite number."""
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ReplyError("body", f"the reply is not JSON: {exc}") from None
    if api == "tei":  # a bare list of {index, score}
        results, score_key, usage = doc, "score", None
    else:
        key, score_key = ("results", "relevance_score") if api == "cohere" else ("data", "score")
        results = doc.get(key) if isinstance(doc, dict) else None
        usage = doc.get("usage") if isinstance(doc, dict) else None
        if not isinstance(results, list):
            raise ReplyError("body", f"the reply has no `{key}` list")
    if not isinstance(results, list):
        raise ReplyError("body", "the reply is not a list of results")
    wanted = min(top_n, documents) if top_n and api == "cohere" else documents
    if len(results) != wanted:
        raise ReplyError("results", f"{len(results)} results for {documents} documents"
                         + (f" (top_n {top_n})" if top_n and api == "cohere" else ""))
    scores: dict[int, float] = {}
    for item in results:
        index = item.get("index") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < documents or index in scores:
            raise ReplyError("index", f"index {index!r} out of range or repeated (documents 0..{documents - 1})")
        score = item.get(score_key)
        if not isinstance(score, (int, float)) or isinstance(score, bool) or not np.isfinite(score):
            raise ReplyError("score", f"document {index}: score {score!r} is not a finite number")
        scores[index] = score
    ranked = sorted(scores, key=scores.__getitem__, reverse=True)
    if isinstance(usage, dict):
        for name in ("prompt_tokens", "total_tokens"):
            tokens = usage.get(name)
            if isinstance(tokens, int) and tokens >= 0:
                return tokens, ranked
    return -1, ranked
