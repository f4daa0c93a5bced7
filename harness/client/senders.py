"""KServe v2 request senders for the generator (gevent-cooperative), behind one small interface (`Sender`,
after httpx's BaseTransport): HTTP and HTTPS through harness/client/http1.py's keep-alive pool, gRPC (plain or
TLS, harness/client/tls.py) through grpcio, and the model run inside the worker (no network) as a baseline.
Credentials (contract/credentials.py) are read at send time.

Each sender sends requests encoded before the run (harness/client/payloads.py) with the trace headers, and
returns what the record needs: status, code, error, the outputs a check reads, server timings, echoed trace
ID, bytes.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import orjson

from tailrace.contract.credentials import Credential, CredentialError
from tailrace.contract.plan import EndpointTimeouts, PoolLimits
from tailrace.contract.profile import Tls
from tailrace.contract.requests import RequestSpec
from tailrace.harness.client.http_transport import HttpTransport
from tailrace.harness.client.outcome import Outcome, Send, classify_exception, classify_http_status
from tailrace.harness.client.payloads import Payloads, decode_grpc_outputs, decode_http_outputs, grpc_request, http_body
from tailrace.harness.client.request_data import SampleSet
from tailrace.harness.client.tls import grpc_channel


class Sender(Protocol):
    """What the worker's request path needs of a protocol: send one pre-encoded request, classified."""

    payloads: Payloads

    def send(self, request: Send) -> "Outcome":
        """Send one request (harness/client/outcome.py's `Send`: a sample encoded before the run or a body built for
        it, its headers, what it carries); call its `on_sent` just before the bytes leave; never raise for a failed
        request (it is an Outcome with a status class)."""

    def warm_up(self) -> None:
        """Open and check connections before the start instant (raises if the endpoint is unreachable)."""

    def close(self) -> None:
        """Release connections / sessions."""


@runtime_checkable
class InlineSender(Protocol):
    """A sender whose plain-HTTP requests the open loop can drive itself (harness/worker/inline_sends.py): the pool it
    sends them on (None: this sender's requests cannot go inline — TLS, say), each request encoded with its headers,
    and its answer or its failure made into the Outcome the greenlet path would have made."""

    def attach_inline(self, poller, done) -> object | None:
        """This sender's inline pool on `poller` (harness/client/inline_http1.py), each exchange ending through `done`."""

    def encode(self, sample: int, headers: dict[str, str]) -> tuple[object, bytes | tuple[bytes, ...] | None]:
        """(what the reading needs — or the Outcome of a request that could not be encoded —, the request's bytes)."""

    def answered(self, pending: object, response) -> Outcome:
        """The Outcome of a request whose response was read to its end."""

    def failed(self, pending: object, failure: BaseException) -> Outcome:
        """The Outcome of a request that failed (what a blocking send would have raised)."""


def _apply_parameters(outcome: Outcome, params: dict) -> None:
    for key, attr in (("queue_ns", "server_queue_ns"), ("compute_ns", "server_compute_ns"),
                      ("server_receive_ns", "server_receive_ns"), ("server_send_ns", "server_send_ns")):
        value = params.get(key)
        if isinstance(value, int):
            setattr(outcome, attr, value)
    trace = params.get("trace_id")
    if isinstance(trace, str):
        outcome.echoed_trace_id = trace


def _model_path(model: str, version: str) -> str:
    return f"/v2/models/{model}" + (f"/versions/{version}" if version else "")


class HttpSender:
    """POST /v2/models/{model}[/versions/{v}]/infer: JSON tensors, or the binary tensor extension; over TLS for
    https:// (the endpoint's `tls`: CA, client certificate, server name)."""

    def __init__(self, url: str, model: str, samples: SampleSet, request: RequestSpec, timeouts: EndpointTimeouts,
                 pool: PoolLimits, credential: Credential | None, stride: int = 1, binary: bool | str = "auto",
                 version: str = "", wanted: tuple[str, ...] = (), tls: Tls | None = None) -> None:
        self.transport = HttpTransport(url, timeouts, credential, tls, pool)
        self.client, self.warm_connections = self.transport.client, self.transport.warm_connections
        self.path = f"{self.transport.base_path}{_model_path(model, version)}/infer"
        self.wanted = wanted
        self.inline = None  # the issue loop's own connections, once attached (attach_inline)
        self.payloads = Payloads.build(samples, request, stride, lambda arrays: http_body(arrays, request, binary))
        self._head = self.transport.head("POST", self.path, "Content-Type: application/json", "Connection: keep-alive")

    def encode(self, sample: int, headers: dict[str, str]) -> tuple[Outcome, bytes | tuple[bytes, bytes] | None]:
        """The request for `sample` with `headers`, as bytes (or head and body: a large body is never joined), and
        its outcome so far; None when it cannot be sent (the credential cannot be read: the outcome says so)."""
        body, header_length = self.payloads.encoded[self.payloads.index(sample)]
        if header_length is not None:
            headers = {**headers, "Inference-Header-Content-Length": str(header_length)}
        out = Outcome()
        return out, self.transport.request(self._head, headers, body, out)

    def send(self, request: Send) -> Outcome:
        out, raw = self.encode(request.sample, request.headers)
        if raw is None:
            return out
        request.on_sent()
        try:
            response = self.client.request(raw)
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            out.status, out.code, out.error = classify_exception(exc)
            return out
        return self.answered(out, response)

    def answered(self, out: Outcome, response) -> Outcome:
        """`out` completed from a whole response (harness/client/http1.py's HttpResponse)."""
        return self._parse(out, response.status, response.body, response.header_length)

    def failed(self, out: Outcome, failure: BaseException) -> Outcome:
        """`out` completed from the failure an inline exchange ended with (what a blocking request raises)."""
        out.status, out.code, out.error = classify_exception(failure)
        return out

    def attach_inline(self, poller, done):
        """This endpoint's connections driven by the issue loop (harness/client/inline_http1.py) from now on:
        plain HTTP only (None over TLS, whose handshakes and records stay on the greenlet path)."""
        if self.client.tls is not None:
            return None
        from tailrace.harness.client.inline_http1 import InlineHttp1Pool

        self.inline = InlineHttp1Pool(poller, self.client.host, self.client.port, self.client.timeout_s, done)
        return self.inline

    def _parse(self, out: Outcome, status: int, payload: bytes, header_length: str | None) -> Outcome:
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
            out.outputs, params = decode_http_outputs(payload, int(header_length) if header_length else None,
                                                      self.wanted)
            _apply_parameters(out, params)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            out.status, out.code, out.error = "bad_response", out.code, f"{type(exc).__name__}: {exc}"[:200]
        return out

    def warm_up(self) -> None:
        """One connection opened and checked (GET /v2/health/ready, with the credential), then the pool filled;
        raises when the endpoint is unreachable, refuses the TLS handshake or the credential cannot be read."""
        self.transport.check_and_fill("/v2/health/ready", self.inline)

    def close(self) -> None:
        self.client.close()
        if self.inline is not None:
            self.inline.close()


class GrpcSender:
    """GRPCInferenceService/ModelInfer with raw_input_contents; trace headers as metadata."""

    def __init__(self, url: str, model: str, samples: SampleSet, request: RequestSpec, timeouts: EndpointTimeouts,
                 credential: Credential | None, stride: int = 1, version: str = "", wanted: tuple[str, ...] = (),
                 tls: Tls | None = None) -> None:
        from tritonclient.grpc import service_pb2_grpc

        # Reconnect within ~0.5 s of a server coming back (gRPC's default backoff grows to 120 s): an outage
        # window then measures the server, not the client's backoff.
        self.channel = grpc_channel(url, tls, [
            ("grpc.max_receive_message_length", 64 << 20), ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 500)])
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.timeout_s = timeouts.total_s
        self.credential, self.wanted = credential, wanted
        self.payloads = Payloads.build(samples, request, stride,
                                       lambda arrays: grpc_request(arrays, request, model, version))

    def send(self, request: Send) -> Outcome:
        req, on_sent = self.payloads.encoded[self.payloads.index(request.sample)], request.on_sent
        metadata = [(k.lower(), v) for k, v in request.headers.items()]
        out = Outcome(bytes_out=req.ByteSize())
        if self.credential is not None:
            try:
                metadata.append((self.credential.header.lower(), self.credential.value()))
            except CredentialError as exc:
                out.status, out.code, out.error = "client_error", "credential", str(exc)[:200]
                return out
        on_sent()
        try:
            response, call = self.stub.ModelInfer.with_call(req, metadata=metadata, timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            out.status, out.code, out.error = classify_exception(exc)
            return out
        out.code = "OK"
        out.bytes_in = response.ByteSize()
        try:
            out.outputs = decode_grpc_outputs(response, self.wanted)
            params = {k: (v.int64_param if v.WhichOneof("parameter_choice") == "int64_param" else v.string_param)
                      for k, v in response.parameters.items()}
            _apply_parameters(out, params)
        except (ValueError, IndexError) as exc:
            out.status, out.code, out.error = "bad_response", "OK", f"{type(exc).__name__}: {exc}"[:200]
        return out

    def warm_up(self) -> None:
        """Channel connected (and its TLS handshake done) before the first scheduled request; the credential
        read once."""
        import grpc

        if self.credential is not None:
            self.credential.value()
        grpc.channel_ready_future(self.channel).result(timeout=10)

    def close(self) -> None:
        self.channel.close()


class InProcessSender:
    """The same ONNX file run inside the worker with onnxruntime: no network, no server — the model's own cost,
    to separate it from serving cost. Blocks the worker's event loop while it computes (keep its rate low)."""

    def __init__(self, model_path: str, samples: SampleSet, request: RequestSpec, stride: int = 1,
                 wanted: tuple[str, ...] = ()) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        self.outputs = list(request.outputs)
        self.wanted = wanted
        strings = {s.name for s in request.inputs if s.datatype == "BYTES"}
        self.payloads = Payloads.build(samples, request, stride, lambda arrays: {
            k: (np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(v) if k in strings else v)
            for k, v in arrays.items()})

    def send(self, request: Send) -> Outcome:
        import time

        feed = self.payloads.encoded[self.payloads.index(request.sample)]
        out = Outcome(code="OK", bytes_out=sum(v.nbytes for v in feed.values()))
        request.on_sent()
        start = time.perf_counter_ns()
        try:
            results = dict(zip(self.outputs, self.session.run(self.outputs, feed)))
            out.outputs = {k: results[k] for k in self.wanted}
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            out.status, out.code, out.error = "bad_response", "exception", f"{type(exc).__name__}: {exc}"[:200]
        out.server_queue_ns, out.server_compute_ns = 0, time.perf_counter_ns() - start
        return out

    def warm_up(self) -> None:
        self.session.run(self.outputs, self.payloads.encoded[0])

    def close(self) -> None:
        self.session = None
