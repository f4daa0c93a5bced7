"""An OTLP trace receiver the master opens for the run, so that the servers under test send it their spans (vLLM's
`--otlp-traces-endpoint`, Triton's OpenTelemetry trace mode, any OpenTelemetry SDK): gRPC (the OTLP default, port
4317 by convention) and HTTP (`POST /v1/traces`, protobuf or JSON, 4318) on loopback or a declared address.

Every export request received is appended to the run directory as one line of OTLP JSON (server-spans/received.jsonl,
trace and span IDs in hex as OTLP JSON spells them) — the same format an OpenTelemetry Collector's file exporter
writes, so the analysis reads both alike (analysis/otel/server_spans.py). The receiver answers every request it
could decode, refuses what it could not (HTTP 400, gRPC INVALID_ARGUMENT), and counts both.
"""
from __future__ import annotations

import base64
import json
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tailrace.contract.layout import append_line

MAX_BODY = 64 * 2**20
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(node) -> None:
    """protobuf's JSON spells bytes in base64; OTLP JSON spells trace and span IDs in hex (in place)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def otlp_json(request: trace_service_pb2.ExportTraceServiceRequest) -> str:
    """An export request as one line of OTLP JSON."""
    doc = MessageToDict(request)
    _hex_ids(doc)
    return json.dumps(doc, separators=(",", ":"))


def span_count(request: trace_service_pb2.ExportTraceServiceRequest) -> int:
    return sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)


class ReceiverBindError(OSError):
    """The receiver's address cannot be bound (a port in use): the message names the profile's field."""


class OtlpReceiver:
    """The run's receiver: `start()` binds gRPC and HTTP, `stop()` closes them; `spans` and `refused` count."""

    def __init__(self, path: Path, host: str = "127.0.0.1", grpc_port: int = 0, http_port: int = 0) -> None:
        self.path, self.host = path, host
        self.spans = self.refused = 0
        self._lock = threading.Lock()
        self._grpc_port, self._http_port = grpc_port, http_port
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None

    def keep(self, line: str, spans: int) -> None:
        with self._lock:
            append_line(self.path, line)
            self.spans += spans

    def refuse(self) -> None:
        with self._lock:
            self.refused += 1

    def start(self) -> tuple[int, int]:
        """Bind both; returns (gRPC port, HTTP port)."""
        receiver = self

        class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802 — the OTLP service's name
                receiver.keep(otlp_json(request), span_count(request))
                return trace_service_pb2.ExportTraceServiceResponse()

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-grpc"),
                                 options=[("grpc.max_receive_message_length", MAX_BODY)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), self._grpc)
        try:
            self._grpc_port = self._grpc.add_insecure_port(f"{self.host}:{self._grpc_port}")
        except RuntimeError:
            raise ReceiverBindError(f"otel.receive.grpc_port: cannot bind {self.host}:{self._grpc_port} (in use, or "
                                    "not this host's address)") from None
        self._grpc.start()
        try:
            self._http = ThreadingHTTPServer((self.host, self._http_port), _handler(self))
        except OSError as exc:
            self._grpc.stop(None)
            raise ReceiverBindError(f"otel.receive.http_port: cannot bind {self.host}:{self._http_port} "
                                    f"({exc.strerror})") from None
        self._http.daemon_threads = True
        self._http_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, name="otlp-http", daemon=True).start()
        return self._grpc_port, self._http_port

    @property
    def grpc_url(self) -> str:
        return f"http://{self.host}:{self._grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self._http_port}/v1/traces"

    def stop(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=1.0).wait(2.0)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()


def _handler(receiver: OtlpReceiver):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # the run's terminal is not the receiver's log
            pass

        def do_POST(self) -> None:  # noqa: N802 — http.server's name
            length = int(self.headers.get("Content-Length") or 0)
            if self.path.rstrip("/") != "/v1/traces" or not 0 < length <= MAX_BODY:
                return self._answer(404 if self.path.rstrip("/") != "/v1/traces" else 400, b"")
            body = self.rfile.read(length)
            try:
                if "json" in (self.headers.get("Content-Type") or ""):
                    doc = json.loads(body)
                    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans", []), list):
                        raise ValueError("not an OTLP export request")
                    count = sum(len(s.get("spans", [])) for r in doc.get("resourceSpans", [])
                                for s in r.get("scopeSpans", []))
                    receiver.keep(json.dumps(doc, separators=(",", ":")), count)
                    return self._answer(200, b"{}", "application/json")
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            except (ValueError, DecodeError):
                receiver.refuse()
                return self._answer(400, b"")
            receiver.keep(otlp_json(request), span_count(request))
            self._answer(200, trace_service_pb2.ExportTraceServiceResponse().SerializeToString(),
                         "application/x-protobuf")

        def _answer(self, code: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
