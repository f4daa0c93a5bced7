"""Bad input never crashes the endpoint nor returns 5xx: a table of malformed requests, and a fuzzer."""
from __future__ import annotations

import socket
import time

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.support import start_endpoint

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)

ROW = [0.0] * 64
GOOD_INPUT = {"name": "input", "datatype": "FP32", "shape": [1, 64], "data": ROW}


def _body(**changes):
    return {"inputs": [{**GOOD_INPUT, **changes}]}


_BINARY_HEADER = b'{"inputs":[{"name":"input","datatype":"FP32","shape":[1,64],"parameters":{"binary_data_size":256}}]}'

# (id, path model, raw body or JSON, extra headers, expected status, words the error must contain)
MALFORMED = [
    ("unknown-model", "nope", _body(), {}, 404, ["unknown model", "nope"]),
    ("not-json", "digits_mlp_fp32", b"{inputs: [", {}, 400, ["not valid JSON"]),
    ("json-array", "digits_mlp_fp32", [1, 2], {}, 400, ["JSON object"]),
    ("no-inputs", "digits_mlp_fp32", {"inputs": []}, {}, 400, ["inputs"]),
    ("inputs-not-list", "digits_mlp_fp32", {"inputs": "x"}, {}, 400, ["inputs"]),
    ("unknown-input", "digits_mlp_fp32", _body(name="pixels"), {}, 400, ["no input", "pixels"]),
    ("wrong-datatype", "digits_mlp_fp32", _body(datatype="INT32"), {}, 400, ["datatype", "INT32", "FP32"]),
    ("unknown-datatype", "digits_mlp_fp32", _body(datatype="FLOAT"), {}, 400, ["datatype"]),
    ("wrong-rank", "digits_mlp_fp32", _body(shape=[64]), {}, 400, ["rank"]),
    ("wrong-dim", "digits_mlp_fp32", _body(shape=[1, 63], data=ROW[:63]), {}, 400, ["shape", "63"]),
    ("negative-dim", "digits_mlp_fp32", _body(shape=[-1, 64]), {}, 400, ["-1 in dimension 0", "concrete sizes"]),
    ("zero-batch", "digits_mlp_fp32", _body(shape=[0, 64], data=[]), {}, 400, ["batch"]),
    ("shape-not-ints", "digits_mlp_fp32", _body(shape=["1", 64]), {}, 400, ["shape"]),
    ("too-few-elements", "digits_mlp_fp32", _body(data=ROW[:10]), {}, 400, ["10 elements", "64"]),
    ("too-many-elements", "digits_mlp_fp32", _body(data=ROW * 2), {}, 400, ["128 elements"]),
    ("data-not-numbers", "digits_mlp_fp32", _body(data=["a"] * 64), {}, 400, ["FP32"]),
    ("data-not-list", "digits_mlp_fp32", _body(data="zeros"), {}, 400, ["'data' must be a list"]),
    ("no-data", "digits_mlp_fp32", {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64]}]}, {}, 400,
     ["neither 'data'"]),
    ("duplicate-input", "digits_mlp_fp32", {"inputs": [GOOD_INPUT, GOOD_INPUT]}, {}, 400, ["twice"]),
    ("unknown-output", "digits_mlp_fp32", {**_body(), "outputs": [{"name": "logits"}]}, {}, 400,
     ["no output", "logits"]),
    ("binary-size-past-end", "digits_mlp_fp32", _BINARY_HEADER + bytes(100),
     {"inference-header-content-length": str(len(_BINARY_HEADER))}, 400, ["binary_data_size"]),
    ("binary-trailing-bytes", "digits_mlp_fp32", _BINARY_HEADER + bytes(300),
     {"inference-header-content-length": str(len(_BINARY_HEADER))}, 400, ["trailing binary bytes"]),
    ("header-length-not-int", "digits_mlp_fp32", _body(), {"inference-header-content-length": "abc"}, 400,
     ["Inference-Header-Content-Length"]),
    ("header-length-too-big", "digits_mlp_fp32", _body(), {"inference-header-content-length": "99999"}, 400,
     ["outside the body"]),
    ("oversize-body", "digits_mlp_fp32", b"[" + b"0," * 40000 + b"0]", {}, 400, ["exceeds the limit"]),
    ("bad-version", "digits_mlp_fp32/versions/7", _body(), {}, 404, ["version"]),
]


@pytest.mark.parametrize("case", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_http_request(endpoint, case):
    _, model, body, headers, status, words = case
    content = body if isinstance(body, bytes) else __import__("orjson").dumps(body)
    r = httpx.post(f"{endpoint.http_url}/v2/models/{model}/infer", content=content,
                   headers={"content-type": "application/json", **headers})
    assert r.status_code == status, r.text
    message = r.json()["error"]
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def _grpc_request(**changes):
    req = service_pb2.ModelInferRequest(model_name=changes.pop("model", "digits_mlp_fp32"))
    spec = {"name": "input", "datatype": "FP32", "shape": [1, 64], **changes}
    raw = spec.pop("raw", bytes(256))
    req.inputs.add(**spec)
    req.raw_input_contents.append(raw)
    return req


GRPC_MALFORMED = [
    ("unknown-model", _grpc_request(model="nope"), grpc.StatusCode.NOT_FOUND, "nope"),
    ("wrong-datatype", _grpc_request(datatype="FP64"), grpc.StatusCode.INVALID_ARGUMENT, "datatype"),
    ("wrong-shape", _grpc_request(shape=[1, 32]), grpc.StatusCode.INVALID_ARGUMENT, "shape"),
    ("dynamic-dim", _grpc_request(shape=[-1, 64]), grpc.StatusCode.INVALID_ARGUMENT, "concrete sizes"),
    ("short-raw", _grpc_request(raw=bytes(100)), grpc.StatusCode.INVALID_ARGUMENT, "100 bytes"),
    ("unknown-input", _grpc_request(name="x"), grpc.StatusCode.INVALID_ARGUMENT, "no input"),
    ("oversize", _grpc_request(shape=[300, 64], raw=bytes(300 * 256)), grpc.StatusCode.INVALID_ARGUMENT,
     "exceeds the limit"),
]


@pytest.mark.parametrize("case", GRPC_MALFORMED, ids=[c[0] for c in GRPC_MALFORMED])
def test_malformed_grpc_request(endpoint, case):
    _, req, code, word = case
    with grpc.insecure_channel(endpoint.grpc_addr) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.ModelInfer(req, timeout=10)
    assert err.value.code() == code
    assert word in err.value.details()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)
input_objects = st.fixed_dictionaries({}, optional={
    "name": st.sampled_from(["input", "x", ""]) | st.text(max_size=5),
    "datatype": st.sampled_from(["FP32", "INT64", "BYTES", "FP16"]) | json_values,
    "shape": st.lists(st.integers(-3, 70), max_size=3) | json_values,
    "data": st.lists(st.floats(allow_nan=True, width=32), max_size=130) | json_values,
    "parameters": st.fixed_dictionaries({}, optional={"binary_data_size": st.integers(-5, 300) | json_values}),
})
bodies = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda inputs, extra: {"inputs": inputs, **extra}, st.lists(input_objects, max_size=3),
              st.dictionaries(st.sampled_from(["outputs", "parameters", "id"]), json_values, max_size=2)),
    json_values,
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=bodies, header_len=st.none() | st.integers(-5, 400).map(str) | st.text(max_size=4))
def test_fuzz_http_infer_never_5xx(endpoint, body, header_len):
    content = body if isinstance(body, bytes) else __import__("orjson").dumps(body, option=0) \
        if _json_safe(body) else b"{}"
    # a value h11 will send: printable ASCII without the surrounding whitespace it refuses (" " once failed here)
    headers = {"inference-header-content-length": header_len} if header_len is not None and header_len.isascii() \
        and header_len.isprintable() and header_len == header_len.strip() else {}
    r = httpx.post(f"{endpoint.http_url}/v2/models/digits_mlp_fp32/infer", content=content, headers=headers)
    assert r.status_code < 500, (r.status_code, r.text)
    if r.status_code != 200:
        assert r.json()["error"]


def _json_safe(value) -> bool:
    try:
        __import__("orjson").dumps(value)
        return True
    except TypeError:
        return False


def test_server_up_after_fuzzing(endpoint):
    assert endpoint.proc.alive()
    assert httpx.get(f"{endpoint.http_url}/v2/health/ready").status_code == 200


def test_connections_that_send_no_request_are_closed_after_the_header_timeout(model_repo, tmp_path):
    """Slowloris: idle and trickling connections are closed; the endpoint keeps answering everyone else."""
    ep = start_endpoint(model_repo, tmp_path, ["--header-timeout-s", "1", "--idle-timeout-s", "2"])
    try:
        idle = [socket.create_connection((ep.host, ep.http_port), timeout=5) for _ in range(50)]
        trickle = socket.create_connection((ep.host, ep.http_port), timeout=5)
        trickle.sendall(b"POST /v2/models/digits_mlp_fp32/infer HTTP/1.1\r\nHost: x\r\n")  # never finishes
        assert httpx.get(f"{ep.http_url}/v2/health/ready").status_code == 200
        started = time.monotonic()
        for s in [*idle, trickle]:
            assert s.recv(1) == b""  # closed by the server
        assert time.monotonic() - started < 4
        kept = socket.create_connection((ep.host, ep.http_port), timeout=10)  # one request, then idle
        kept.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        idle_from = time.monotonic()
        assert kept.recv(1) == b""  # closed after the idle timeout
        assert 1.5 < time.monotonic() - idle_from < 5
    finally:
        ep.proc.stop()
