"""KServe v2 request senders for the generator (gevent-cooperative), behind one small interface (`Sender`,
after httpx's BaseTransport): plain HTTP through harness/worker/http1.py's keep-alive pool, HTTPS through
geventhttpclient, gRPC through grpcio, and the model run inside the worker (no network) as a baseline.

Each sender pre-encodes one request body per held-out sample, sends it with the trace headers, and
returns what the record needs: status, code, error, prediction, server timings, echoed trace ID, bytes.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

import numpy as np
import orjson

from contract.profile import Endpoint
from harness.worker.classify import classify_exception, classify_http_status


@dataclass
class Outcome:
    """What one request produced."""

    status: str = "ok"
    code: str = ""
    error: str = ""
    prediction: int = -1
    server_queue_ns: int = -1
    server_compute_ns: int = -1
    server_receive_ns: int = -1
    server_send_ns: int = -1
    echoed_trace_id: str = ""
    bytes_out: int = 0
    bytes_in: int = 0
    predictions: np.ndarray | None = None  # one label per row of the batch


INPUT, OUTPUT = "input", "label"  # the tensors the senders exchange with the model (FP32 rows in, INT64 labels out)


def request_signature(n_features: int, batch_size: int) -> tuple[list[tuple[str, str, tuple[int, ...]]], list[str]]:
    """What one request sends (input name, datatype, shape) and which outputs it asks for."""
    return [(INPUT, "FP32", (batch_size, n_features))], [OUTPUT]


class Sender(Protocol):
    """What the worker's request path needs of a protocol: send one pre-encoded request, classified."""

    def send(self, sample: int, headers: dict[str, str], on_sent: Callable[[], None]) -> "Outcome":
        """Send the request for held-out row `sample` with `headers`; call `on_sent` just before the bytes
        leave; never raise for a failed request (it is an Outcome with a status class)."""

    def warm_up(self) -> None:
        """Open and check connections before the start instant (raises if the endpoint is unreachable)."""

    def close(self) -> None:
        """Release connections / sessions."""


def _apply_parameters(outcome: Outcome, params: dict) -> None:
    for key, attr in (("queue_ns", "server_queue_ns"), ("compute_ns", "server_compute_ns"),
                      ("server_receive_ns", "server_receive_ns"), ("server_send_ns", "server_send_ns")):
        value = params.get(key)
        if isinstance(value, int):
            setattr(outcome, attr, value)
    trace = params.get("trace_id")
    if isinstance(trace, str):
        outcome.echoed_trace_id = trace


def _set_labels(out: Outcome, values, rows: int) -> None:
    """The batch's predicted labels (ValueError if the output has fewer than one per row)."""
    arr = np.asarray(values, dtype=np.int64).reshape(-1)
    if arr.size < rows:
        raise ValueError(f"label output has {arr.size} values for {rows} rows")
    out.predictions = arr[:rows]
    out.prediction = int(arr[0])


def batch_rows(X: np.ndarray, start: int, batch_size: int) -> np.ndarray:
    """Rows start, start+1, … of X (wrapping around), as float32."""
    return np.ascontiguousarray(np.take(X, range(start, start + batch_size), axis=0, mode="wrap"), dtype=np.float32)


def encoded_starts(n_samples: int, stride: int) -> range:
    """The sample indices a sender pre-encodes: every `stride`-th (large batches start at multiples of it)."""
    return range(0, n_samples, stride)


class HttpSender:
    """POST /v2/models/{model}/infer with JSON tensors, asking for the label output as JSON."""

    def __init__(self, url: str, model: str, X: np.ndarray, batch_size: int, timeout_s: float, pool: int,
                 auth: tuple[str, str] | None, stride: int = 1) -> None:
        parsed = urlparse(url)
        self.path = f"{parsed.path.rstrip('/')}/v2/models/{model}/infer"
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.tls = parsed.scheme == "https"
        if self.tls:  # TLS endpoints use geventhttpclient; plain HTTP uses the lean pool below
            from geventhttpclient import HTTPClient

            self.client = HTTPClient(parsed.hostname, port, ssl=True, concurrency=pool,
                                     connection_timeout=timeout_s, network_timeout=timeout_s)
        else:
            from harness.worker.http1 import Http1Pool

            self.client = Http1Pool(parsed.hostname, port, timeout_s)
        self.batch_size, self.stride = batch_size, stride
        self.bodies = [self._body(X, i) for i in encoded_starts(len(X), stride)]
        self.auth = auth
        self.warm_connections = min(16, pool)
        static = [f"POST {self.path} HTTP/1.1", f"Host: {parsed.hostname}:{port}", "Content-Type: application/json",
                  "Connection: keep-alive"]
        if auth:
            static.append(f"{auth[0]}: {auth[1]}")
        self._head = ("\r\n".join(static) + "\r\n").encode("latin-1")

    def _body(self, X: np.ndarray, i: int) -> bytes:
        rows = batch_rows(X, i, self.batch_size)
        return orjson.dumps({"inputs": [{"name": INPUT, "datatype": "FP32", "shape": list(rows.shape),
                                         "data": rows.ravel().tolist()}],
                             "outputs": [{"name": OUTPUT, "parameters": {"binary_data": False}}]})

    def send(self, sample: int, headers: dict[str, str], on_sent) -> Outcome:
        body = self.bodies[sample // self.stride]
        if self.tls:
            return self._send_tls(body, headers, on_sent)
        raw = b"".join((self._head, "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1"),
                        b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n", body))
        out = Outcome(bytes_out=len(raw))
        on_sent()
        try:
            response = self.client.request(raw)
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            out.status, out.code, out.error = classify_exception(exc)
            return out
        return self._parse(out, response.status, response.body)

    def _send_tls(self, body: bytes, headers: dict[str, str], on_sent) -> Outcome:
        hdrs = {"Content-Type": "application/json", **headers}
        if self.auth:
            hdrs[self.auth[0]] = self.auth[1]
        out = Outcome(bytes_out=len(body))
        on_sent()
        try:
            response = self.client.request("POST", self.path, body=body, headers=hdrs)
            payload = response.read()
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            out.status, out.code, out.error = classify_exception(exc)
            return out
        return self._parse(out, response.status_code, payload)

    def _parse(self, out: Outcome, status: int, payload: bytes) -> Outcome:
        out.bytes_in = len(payload)
        out.code = str(status)
        out.status = classify_http_status(status)
        if out.status != "ok":
            try:
                out.error = str(orjson.loads(payload).get("error", ""))[:200]
            except (orjson.JSONDecodeError, AttributeError):
                out.error = payload[:200].decode("utf-8", "replace")
            return out
        try:
            doc = orjson.loads(payload)
            outputs = {o["name"]: o for o in doc["outputs"]}
            _set_labels(out, outputs[OUTPUT]["data"], self.batch_size)
            _apply_parameters(out, doc.get("parameters") or {})
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            out.status, out.code, out.error = "bad_response", out.code, f"{type(exc).__name__}: {exc}"[:200]
        return out

    def warm_up(self) -> None:
        """One connection opened and checked (GET /v2/health/ready)."""
        ready = self.path.rsplit("/v2/models/", 1)[0] + "/v2/health/ready"
        if self.tls:
            self.client.get(ready).read()
            return
        head = self._head.decode("latin-1").replace(f"POST {self.path}", f"GET {ready}", 1).encode("latin-1")
        response = self.client.request(head + b"Content-Length: 0\r\n\r\n")
        if response.status != 200:
            raise ConnectionError(f"GET {ready} answered {response.status}")
        self.client.prewarm(self.warm_connections)

    def close(self) -> None:
        self.client.close()


class GrpcSender:
    """GRPCInferenceService/ModelInfer with raw_input_contents; trace headers as metadata."""

    def __init__(self, url: str, model: str, X: np.ndarray, batch_size: int, timeout_s: float,
                 auth: tuple[str, str] | None, stride: int = 1) -> None:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        target = urlparse(url).netloc
        # Reconnect within ~0.5 s of a server coming back (gRPC's default backoff grows to 120 s): an outage
        # window then measures the server, not the client's backoff.
        self.channel = grpc.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", 64 << 20), ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 500)])
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.timeout_s = timeout_s
        self.batch_size, self.stride = batch_size, stride
        self.auth = auth
        self.requests = []
        for i in encoded_starts(len(X), stride):
            rows = batch_rows(X, i, batch_size)
            req = service_pb2.ModelInferRequest(model_name=model)
            req.inputs.add(name=INPUT, datatype="FP32", shape=list(rows.shape))
            req.outputs.add(name=OUTPUT)
            req.raw_input_contents.append(rows.tobytes())
            self.requests.append(req)

    def send(self, sample: int, headers: dict[str, str], on_sent) -> Outcome:
        req = self.requests[sample // self.stride]
        metadata = [(k.lower(), v) for k, v in headers.items()]
        if self.auth:
            metadata.append((self.auth[0].lower(), self.auth[1]))
        out = Outcome(bytes_out=req.ByteSize())
        on_sent()
        try:
            response, call = self.stub.ModelInfer.with_call(req, metadata=metadata, timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            out.status, out.code, out.error = classify_exception(exc)
            return out
        out.code = "OK"
        out.bytes_in = response.ByteSize()
        try:
            names = [o.name for o in response.outputs]
            raw = response.raw_output_contents[names.index(OUTPUT)]
            _set_labels(out, np.frombuffer(raw, dtype=np.int64), self.batch_size)
            params = {k: (v.int64_param if v.WhichOneof("parameter_choice") == "int64_param" else v.string_param)
                      for k, v in response.parameters.items()}
            _apply_parameters(out, params)
        except (ValueError, IndexError) as exc:
            out.status, out.code, out.error = "bad_response", "OK", f"{type(exc).__name__}: {exc}"[:200]
        return out

    def warm_up(self) -> None:
        """Channel connected before the first scheduled request."""
        import grpc

        grpc.channel_ready_future(self.channel).result(timeout=10)

    def close(self) -> None:
        self.channel.close()


class InProcessSender:
    """The same ONNX file run inside the worker with onnxruntime: no network, no server — the model's own cost,
    to separate it from serving cost. Blocks the worker's event loop while it computes (keep its rate low)."""

    def __init__(self, model_path: str, X: np.ndarray, batch_size: int, stride: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        names = [o.name for o in self.session.get_outputs()]
        self.outputs = [names[0]]
        self.batch_size, self.stride = batch_size, stride
        self.inputs = [batch_rows(X, i, batch_size) for i in encoded_starts(len(X), stride)]

    def send(self, sample: int, headers: dict[str, str], on_sent) -> Outcome:
        import time

        x = self.inputs[sample // self.stride]
        out = Outcome(code="OK", bytes_out=x.nbytes)
        on_sent()
        start = time.perf_counter_ns()
        try:
            (labels,) = self.session.run(self.outputs, {self.input_name: x})
            _set_labels(out, labels, self.batch_size)
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            out.status, out.code, out.error = "bad_response", "exception", f"{type(exc).__name__}: {exc}"[:200]
        out.server_queue_ns, out.server_compute_ns = 0, time.perf_counter_ns() - start
        return out

    def warm_up(self) -> None:
        self.session.run(self.outputs, {self.input_name: self.inputs[0]})

    def close(self) -> None:
        self.session = None


def build_sender(endpoint: Endpoint, url: str, X: np.ndarray, batch_size: int, stride: int, pool: int,
                 models_dir: Path) -> Sender:
    """The sender for one endpoint of the plan, reaching it at `url`."""
    auth = (endpoint.auth_header, endpoint.auth_value() or "") if endpoint.auth_header else None
    timeout_s = endpoint.timeout_ms / 1000
    if endpoint.protocol == "kserve-http":
        return HttpSender(url, endpoint.model, X, batch_size, timeout_s, pool, auth, stride)
    if endpoint.protocol == "kserve-grpc":
        return GrpcSender(url, endpoint.model, X, batch_size, timeout_s, auth, stride)
    path = models_dir / endpoint.model / "1" / "model.onnx"
    if not path.exists():
        raise RuntimeError(f"endpoint {endpoint.name}: inprocess needs {path} (an ONNX model)")
    return InProcessSender(str(path), X, batch_size, stride)
