"""Every route over HTTP and gRPC through Triton's own clients (tritonclient), unchanged."""
from __future__ import annotations

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tailrace.contract.trace_context import format_traceparent, new_ids
from tailrace.endpoints.models.model_build import ONNX_MODELS, load_heldout

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)


@pytest.fixture(scope="module")
def clients(endpoint):
    http = httpclient.InferenceServerClient(endpoint.http_addr)
    grpc = grpcclient.InferenceServerClient(endpoint.grpc_addr)
    yield {"http": (http, httpclient), "grpc": (grpc, grpcclient)}
    http.close()
    grpc.close()


@pytest.fixture(scope="module")
def heldout(model_repo):
    return load_heldout(model_repo)


def _infer(client, mod, model, X, **kw):
    inp = mod.InferInput("input", list(X.shape), "FP32")
    inp.set_data_from_numpy(X)
    return client.infer(model, [inp], **kw)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_health_and_metadata(clients, proto):
    client, _ = clients[proto]
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    meta = meta if isinstance(meta, dict) else {"name": meta.name, "extensions": list(meta.extensions)}
    assert meta["name"] == "tailrace" and "statistics" in meta["extensions"]
    for model in ONNX_MODELS + ("synthetic_mm1",):
        assert client.is_model_ready(model)
        md = client.get_model_metadata(model)
        inputs = md["inputs"] if isinstance(md, dict) else [{"name": i.name, "datatype": i.datatype,
                                                              "shape": list(i.shape)} for i in md.inputs]
        assert inputs == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]
        cfg = client.get_model_config(model)
        cfg = cfg if isinstance(cfg, dict) else {"name": cfg.config.name}
        assert cfg["name"] == model
    if proto == "http":
        assert client.is_model_ready("no_such_model") is False  # 404 → not ready
    else:
        with pytest.raises(InferenceServerException) as err:
            client.is_model_ready("no_such_model")
        assert err.value.status() == "StatusCode.NOT_FOUND" and "no_such_model" in str(err.value)


@pytest.mark.parametrize("proto", ["http", "grpc"])
@pytest.mark.parametrize("model", ONNX_MODELS)
def test_infer_matches_labels(clients, heldout, proto, model):
    client, mod = clients[proto]
    X, y = heldout
    result = _infer(client, mod, model, X[:64])
    labels = result.as_numpy("label")
    probs = result.as_numpy("probabilities")
    assert labels.shape == (64,) and probs.shape == (64, 10)
    assert np.mean(labels == y[:64]) > 0.9
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-4)


def test_http_json_outputs_without_binary(clients, heldout):
    client, mod = clients["http"]
    X, y = heldout
    inp = mod.InferInput("input", [4, 64], "FP32")
    inp.set_data_from_numpy(X[:4], binary_data=False)
    out = mod.InferRequestedOutput("label", binary_data=False)
    result = client.infer("digits_mlp_fp32", [inp], outputs=[out])
    assert result.as_numpy("label").tolist() == y[:4].tolist()
    assert result.get_output("probabilities") is None


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_unknown_model_is_not_found(clients, heldout, proto):
    client, mod = clients[proto]
    with pytest.raises(InferenceServerException) as err:
        _infer(client, mod, "no_such_model", heldout[0][:1])
    assert "no_such_model" in str(err.value)
    if proto == "grpc":
        assert err.value.status() == "StatusCode.NOT_FOUND"
    else:
        assert err.value.status() == "404"


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_statistics_delta_equals_requests(clients, heldout, proto):
    client, mod = clients[proto]
    model = "digits_logreg_fp32"

    def snapshot():
        stats = client.get_inference_statistics(model, as_json=True) if proto == "grpc" else \
            client.get_inference_statistics(model)
        entry = stats["model_stats"][0]
        return int(entry["inference_stats"]["success"].get("count", 0)), int(entry.get("inference_count", 0)), entry

    before, before_inf, _ = snapshot()
    n = 25
    for i in range(n):
        _infer(client, mod, model, heldout[0][i:i + 2])
    after, after_inf, entry = snapshot()
    assert after - before == n
    assert after_inf - before_inf == 2 * n
    for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert int(entry["inference_stats"][stage]["count"]) >= n
        assert int(entry["inference_stats"][stage].get("ns", 0)) > 0 or stage == "queue"
    assert any(int(b["batch_size"]) == 2 for b in entry["batch_stats"])


def test_http_stats_route_shape(endpoint):
    body = httpx.get(f"{endpoint.http_url}/v2/models/stats").json()
    names = {m["name"] for m in body["model_stats"]}
    assert set(ONNX_MODELS) <= names
    stats = body["model_stats"][0]["inference_stats"]
    assert set(stats) >= {"success", "fail", "queue", "compute_input", "compute_infer", "compute_output"}
    assert set(stats["success"]) == {"count", "ns"}


def test_traceparent_echo_and_server_timing_http(endpoint, heldout):
    X, _ = heldout
    trace_id, span_id = new_ids()
    tp = format_traceparent(trace_id, span_id)
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": X[0].tolist()}]}
    r = httpx.post(f"{endpoint.http_url}/v2/models/digits_mlp_fp32/infer", json=body, headers={"traceparent": tp})
    assert r.status_code == 200
    assert r.headers["traceparent"] == tp
    params = r.json()["parameters"]
    assert params["trace_id"] == trace_id
    residence = params["server_send_ns"] - params["server_receive_ns"]
    assert params["queue_ns"] >= 0 and params["compute_ns"] > 0
    assert params["queue_ns"] + params["compute_ns"] <= residence
    assert params["compute_input_ns"] + params["compute_infer_ns"] + params["compute_output_ns"] == params["compute_ns"]
    timing = r.headers["server-timing"]
    assert "queue;dur=" in timing and "compute;dur=" in timing and str(params["server_send_ns"]) in timing


def test_traceparent_echo_and_server_timing_grpc(endpoint, heldout):
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    X, _ = heldout
    trace_id, span_id = new_ids()
    tp = format_traceparent(trace_id, span_id)
    with grpc.insecure_channel(endpoint.grpc_addr) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        req = service_pb2.ModelInferRequest(model_name="digits_mlp_int8")
        req.inputs.add(name="input", datatype="FP32", shape=[1, 64])
        req.raw_input_contents.append(X[0].tobytes())
        response, call = stub.ModelInfer.with_call(req, metadata=(("traceparent", tp),))
    assert dict(call.initial_metadata())["traceparent"] == tp
    trailing = dict(call.trailing_metadata())
    assert "compute;dur=" in trailing["server-timing"]
    p = {k: v.int64_param or v.string_param for k, v in response.parameters.items()}
    assert p["trace_id"] == trace_id
    assert p["queue_ns"] + p["compute_ns"] <= p["server_send_ns"] - p["server_receive_ns"]


def test_invalid_traceparent_is_ignored_not_echoed(endpoint, heldout):
    X, _ = heldout
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], "data": X[0].tolist()}]}
    r = httpx.post(f"{endpoint.http_url}/v2/models/digits_mlp_fp32/infer", json=body,
                   headers={"traceparent": "00-zz-bad-01"})
    assert r.status_code == 200 and "traceparent" not in r.headers and "trace_id" not in r.json()["parameters"]


def test_prometheus_metrics(endpoint, clients, heldout):
    client, mod = clients["http"]
    _infer(client, mod, "digits_mlp_fp32", heldout[0][:1])
    text = httpx.get(f"{endpoint.http_url}/metrics").text
    for name in ("tailrace_server_requests_total",
                 'tailrace_server_stage_duration_seconds_total{model="digits_mlp_fp32",stage="queue"}',
                 'stage="compute_infer"', 'tailrace_server_request_duration_seconds_total{model="digits_mlp_fp32"}',
                 "tailrace_server_success_total", "tailrace_server_in_flight_requests",
                 "tailrace_server_failures_total", "process_resident_memory_bytes"):
        assert name in text, name
    assert 'stage="success"' not in text  # the whole request is its own metric, never summed with its stages
    assert 'model="digits_mlp_fp32"' in text
