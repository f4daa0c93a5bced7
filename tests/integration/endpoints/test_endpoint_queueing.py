"""The concurrency model: bounded queue per model in front of fixed slots; queue full → 503 / UNAVAILABLE."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.support import start_endpoint

ROW = [0.0] * 64
BODY = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": ROW}]}


@pytest.fixture(scope="module")
def slow_endpoint(model_repo, tmp_path_factory):
    ep = start_endpoint(model_repo, tmp_path_factory.mktemp("slow"), [
        "--model", "synthetic_mm1", "--slots", "synthetic_mm1=1", "--queue-depth", "synthetic_mm1=2",
        "--mm1-mean-ms", "1000"])
    yield ep
    ep.proc.stop()


def _post(url: str) -> tuple[int, float, str]:
    t0 = time.perf_counter()
    r = httpx.post(url, json=BODY, timeout=30)
    return r.status_code, time.perf_counter() - t0, r.text


def test_queue_full_rejects_at_once_http(slow_endpoint):
    url = f"{slow_endpoint.http_url}/v2/models/synthetic_mm1/infer"
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda _: _post(url), range(10)))
    rejected = [r for r in results if r[0] == 503]
    accepted = [r for r in results if r[0] == 200]
    # one slot + two queue places: at most 3 in the system, every other request refused
    assert len(rejected) >= 6 and len(accepted) >= 1 and len(rejected) + len(accepted) == 10
    assert all("queue is full" in r[2] for r in rejected)
    assert max(r[1] for r in rejected) < 0.5, "a rejection must not wait for a slot (service takes ~1 s)"
    stats = httpx.get(f"{slow_endpoint.http_url}/v2/models/synthetic_mm1/stats").json()["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] >= len(rejected)


def test_queue_full_grpc_unavailable(slow_endpoint):
    def call(_):
        with grpc.insecure_channel(slow_endpoint.grpc_addr) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            req = service_pb2.ModelInferRequest(model_name="synthetic_mm1")
            req.inputs.add(name="input", datatype="FP32", shape=[1, 64])
            req.raw_input_contents.append(np.zeros(64, np.float32).tobytes())
            try:
                stub.ModelInfer(req, timeout=30)
                return "OK"
            except grpc.RpcError as exc:
                return exc.code().name

    with ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(call, range(10)))
    assert codes.count("UNAVAILABLE") >= 6 and "OK" in codes


def test_stall_injection_delays_then_recovers(endpoint):
    url = f"{endpoint.http_url}/v2/models/digits_logreg_fp32/infer"
    r = httpx.post(f"{endpoint.http_url}/v2/debug/stall", json={"seconds": 0.5, "model": "digits_logreg_fp32"})
    assert r.status_code == 200
    status, elapsed, text = _post(url)
    assert status == 200 and elapsed >= 0.4
    params = httpx.post(url, json=BODY).json()["parameters"]
    assert params["queue_ns"] < 250_000_000  # recovered: under half the 500 ms stall, far from a loaded machine's
    bad = httpx.post(f"{endpoint.http_url}/v2/debug/stall", json={"seconds": -1})
    assert bad.status_code == 400 and "seconds" in bad.json()["error"]
