"""Dynamic batching (`--max-batch`): concurrent batch-1 requests run as one execution, each request gets
its own rows back, and the statistics count executions and batch sizes the way Triton does."""
from __future__ import annotations

import asyncio

import grpc
import httpx
import numpy as np
import onnxruntime as ort
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tailrace.endpoints.models.model_build import load_heldout
from tests.support import start_endpoint

MODEL = "digits_mlp_fp32"


@pytest.fixture(scope="module")
def batching_endpoint(model_repo, tmp_path_factory):
    ep = start_endpoint(model_repo, tmp_path_factory.mktemp("batching"), [
        "--model", MODEL, "--model", "synthetic_mm1", "--max-batch", f"{MODEL}=8",
        "--max-batch", "synthetic_mm1=4", "--mm1-mean-ms", "20"])
    yield ep
    ep.proc.stop()


def _stats(ep, model: str) -> dict:
    return httpx.get(f"{ep.http_url}/v2/models/{model}/stats").json()["model_stats"][0]


def _delta(after: dict, before: dict) -> dict:
    sizes = lambda s: {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in s["batch_stats"]}  # noqa
    a, b = sizes(after), sizes(before)
    return {"inferences": after["inference_count"] - before["inference_count"],
            "executions": after["execution_count"] - before["execution_count"],
            "success": after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"],
            "batches": {k: a[k] - b.get(k, 0) for k in a if a[k] - b.get(k, 0)}}


async def _post_all(url: str, rows: np.ndarray) -> list[dict]:
    limits = httpx.Limits(max_connections=len(rows))
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        async def one(i: int) -> dict:
            body = {"id": str(i), "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                              "data": rows[i].tolist()}]}
            r = await client.post(url, json=body)
            assert r.status_code == 200, r.text
            return r.json()
        return await asyncio.gather(*(one(i) for i in range(len(rows))))


def test_concurrent_requests_run_batched_and_each_gets_its_own_answer(batching_endpoint, model_repo):
    X, _ = load_heldout(model_repo)
    rows = np.asarray(X[:64], dtype=np.float32)
    session = ort.InferenceSession(str(model_repo / MODEL / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    expected_labels, expected_probs = session.run(["label", "probabilities"], {"input": rows})
    before = _stats(batching_endpoint, MODEL)
    responses = []
    for _ in range(3):  # three rounds of 64 concurrent requests
        responses = asyncio.run(_post_all(f"{batching_endpoint.http_url}/v2/models/{MODEL}/infer", rows))
        for i, resp in enumerate(responses):
            out = {o["name"]: o for o in resp["outputs"]}
            assert resp["id"] == str(i)
            assert out["label"]["data"] == [int(expected_labels[i])], f"request {i} got another request's row"
            assert out["probabilities"]["shape"] == [1, 10]
            np.testing.assert_allclose(out["probabilities"]["data"], expected_probs[i], rtol=1e-5, atol=1e-6)
    d = _delta(_stats(batching_endpoint, MODEL), before)
    assert d["inferences"] == d["success"] == 3 * 64
    assert sum(size * n for size, n in d["batches"].items()) == d["inferences"]
    assert sum(d["batches"].values()) == d["executions"] < d["inferences"], d  # some requests shared an execution
    assert max(d["batches"]) > 1 and max(d["batches"]) <= 8, d
    params = responses[0]["parameters"]
    assert params["queue_ns"] + params["compute_ns"] <= params["server_send_ns"] - params["server_receive_ns"]


def test_slot_thread_models_batch_queued_requests_over_grpc(batching_endpoint):
    """synthetic_mm1 runs on a slot thread: what waits in its queue when the slot frees runs as one batch."""
    before = _stats(batching_endpoint, "synthetic_mm1")

    def call(i: int) -> int:
        with grpc.insecure_channel(batching_endpoint.grpc_addr) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            req = service_pb2.ModelInferRequest(model_name="synthetic_mm1", id=str(i))
            req.inputs.add(name="input", datatype="FP32", shape=[1, 64])
            req.raw_input_contents.append(np.full(64, i % 16, np.float32).tobytes())
            resp = stub.ModelInfer(req, timeout=30)
            assert resp.id == str(i)
            return len(resp.raw_output_contents)

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(16) as pool:
        assert list(pool.map(call, range(48))) == [2] * 48
    d = _delta(_stats(batching_endpoint, "synthetic_mm1"), before)
    assert d["inferences"] == d["success"] == 48
    assert max(d["batches"]) > 1 and max(d["batches"]) <= 4, d
    assert sum(size * n for size, n in d["batches"].items()) == 48


class _SumRunner:
    """A compute-only runner (runs inline) whose output is each row's sum; counts its executions."""

    compute_only = True

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []

    def run(self, inputs, started_ns=None):
        x = inputs["x"]
        self.batch_sizes.append(len(x))
        return {"sum": x.reshape(len(x), -1).sum(axis=1)}


def _run_concurrently(scheduler, arrays: list[np.ndarray]) -> list:
    from tailrace.endpoints.serving.scheduler import Timings

    async def main():  # bounded: a request the drainer loses must fail the test, not hang it
        return await asyncio.wait_for(asyncio.gather(*(scheduler.infer_async({"x": a}, Timings(), len(a))
                                                       for a in arrays)), timeout=30)
    return asyncio.run(main())


def test_requests_whose_shapes_do_not_stack_run_one_by_one():
    """A variable non-batch dimension ([1, 3] next to [1, 5]) cannot be concatenated: each request runs on its
    own, inside the same slot turn, and still gets its answer."""
    from tailrace.endpoints.serving.scheduler import ModelScheduler

    runner = _SumRunner()
    scheduler = ModelScheduler("m", runner, slots=1, queue_depth=64, max_batch=8)
    arrays = [np.ones((1, 3)), np.ones((1, 5)), np.ones((1, 3))]
    results = _run_concurrently(scheduler, arrays)
    assert [float(r["sum"][0]) for r in results] == [3.0, 5.0, 3.0]
    assert runner.batch_sizes == [1, 1, 1]
    assert scheduler.statistics.execution_count == 3 and scheduler.statistics.inference_count == 3


def test_a_long_backlog_drains_batch_after_batch():
    """1,000 waiting requests at max_batch 2: 500 executions, each request answered with its own row."""
    from tailrace.endpoints.serving.scheduler import ModelScheduler

    runner = _SumRunner()
    scheduler = ModelScheduler("m", runner, slots=1, queue_depth=2048, max_batch=2)
    arrays = [np.full((1, 4), i, dtype=float) for i in range(1000)]
    results = _run_concurrently(scheduler, arrays)
    assert [float(r["sum"][0]) for r in results] == [4.0 * i for i in range(1000)]
    assert runner.batch_sizes == [2] * 500
    assert scheduler.statistics.in_flight == 0
