"""A real run against a server whose embeddings and rerank replies go wrong in every way the checks name
(harness/client/pooling.py): a vector missing, a vector of another dimension, a NaN, a body that is not JSON, a rerank
index out of range, a score that is not a number — each request a classified bad_response with its code, never ok,
and the run's error table says which. Functional checks at a low rate: it shares the machine."""
from __future__ import annotations

import base64
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.harness.services.processes import free_port
from tests.support import make_profile, run_with

pytestmark = pytest.mark.shares_machine


def _vector(values) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


EMBEDDINGS = [  # one text a request, base64 — in turn: right, one vector short, a dimension off, a NaN, not JSON
    {"data": [{"index": 0, "embedding": _vector([0.1, 0.2, 0.3])}], "usage": {"prompt_tokens": 5}},
    {"data": [], "usage": {"prompt_tokens": 5}},
    {"data": [{"index": 0, "embedding": _vector([0.1, 0.2])}]},
    {"data": [{"index": 0, "embedding": _vector([0.1, float("nan"), 0.3])}]},
    None,
]
RERANK = [  # three documents — in turn: right, an index out of range, a score that is not a number
    {"results": [{"index": 2, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.5},
                 {"index": 1, "relevance_score": 0.1}], "usage": {"prompt_tokens": 30, "total_tokens": 30}},
    {"results": [{"index": 3, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.5},
                 {"index": 1, "relevance_score": 0.1}]},
    {"results": [{"index": 2, "relevance_score": "high"}, {"index": 0, "relevance_score": 0.5},
                 {"index": 1, "relevance_score": 0.1}]},
]


@pytest.fixture(scope="module")
def faulty():
    replies = {"/v1/embeddings": itertools.cycle(EMBEDDINGS), "/v1/rerank": itertools.cycle(RERANK)}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode())

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                reply = next(replies[self.path])
            self._send(b"<html>busy</html>" if reply is None else json.dumps(reply).encode())

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_every_wrong_reply_is_a_classified_error_never_ok(faulty, model_repo, tmp_path):
    endpoints = [{"name": "embed", "url": faulty, "protocol": "openai-embeddings", "model": "m",
                  "prompts": {"input_tokens": 8, "count": 8}, "embeddings": {"encoding_format": "base64"}},
                 {"name": "rerank", "url": faulty, "protocol": "rerank", "model": "m",
                  "prompts": {"input_tokens": 4, "count": 8}, "rerank": {"documents": 3, "document_tokens": 6}}]
    profile = make_profile(model_repo, endpoints=endpoints, regions=[{"name": "here", "share": 1.0}],
                           load={"rate": 30, "duration_s": 3, "warmup_s": 0, "seed": 2})
    run, manifest = run_with(profile, tmp_path)
    a = analyze_run(run.run_dir)
    df = a.requests
    codes = {e: set(df.loc[(df["endpoint"] == e) & (df["status"] != "ok"), "code"].astype(str)) for e in
             ("embed", "rerank")}
    assert codes == {"embed": {"vectors", "dimension", "not_finite", "body"}, "rerank": {"index", "score"}}, codes
    failed = df[df["status"] != "ok"]
    assert set(failed["status"].astype(str)) == {"bad_response"}
    ok = df[df["status"] == "ok"]
    assert len(ok) > 10 and (ok.loc[ok["endpoint"] == "rerank", "input_tokens"] == 30).all()
    # the first embeddings reply of each connection sets the run's dimension (3): a 2-dimension vector never passes
    assert not ((df["endpoint"] == "embed") & (df["status"] == "ok") & (df["input_tokens"] != 5)).any()
    errors = {(r.status, r.code) for r in a.summary.errors}
    assert {("bad_response", c) for c in ("vectors", "dimension", "not_finite", "body", "index", "score")} <= errors
