"""A run's requests as OpenTelemetry spans (analysis/otel/spans.py): the traceparent's IDs, the intended send to the
last byte, send and first-token events, a session's turns under its span; the samples; and the export through the
SDK's own OTLP exporter to tailrace's receiver, over HTTP and gRPC, and to a receiver that is not there."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tailrace.analysis.otel.export import OtlpTarget, export_command
from tailrace.analysis.otel.spans import run_resource, sample_rows, spans_of
from tailrace.contract.trace_context import Sample, SampleError, session_span_id, session_trace_id
from tailrace.harness.services.otlp_receiver import OtlpReceiver
from tests.support import profile_dict, write_run

T0 = 1_790_000_000_000_000_000


def frame() -> pd.DataFrame:
    session_trace = session_trace_id("run-1", 7)
    rows = [dict(trace_id="a" * 32, span_id="1" * 16, status="ok", code="200", latency_ns=30_000_000, ttft_ns=8_000_000,
                 session_id=-1, turn=0, pipeline=""),
            dict(trace_id="b" * 32, span_id="2" * 16, status="timeout", code="ttft_timeout", latency_ns=90_000_000,
                 ttft_ns=-1, session_id=-1, turn=0, pipeline=""),
            dict(trace_id=session_trace, span_id="3" * 16, status="ok", code="200", latency_ns=20_000_000,
                 ttft_ns=5_000_000, session_id=7, turn=1, pipeline=""),
            dict(trace_id=session_trace, span_id="4" * 16, status="ok", code="200", latency_ns=25_000_000,
                 ttft_ns=6_000_000, session_id=7, turn=2, pipeline="")]
    df = pd.DataFrame(rows)
    df["t_intended_ref"] = T0 + np.arange(4) * 100_000_000
    df["send_lag_ns"] = 200_000
    df["t_sent_ref"] = df["t_intended_ref"] + df["send_lag_ns"]
    df["t_done_ref"] = df["t_intended_ref"] + df["latency_ns"]
    return df.assign(endpoint="chat", region="eu", worker="eu-w0", model="m", protocol="openai-chat", phase=1,
                     output_tokens=[12, -1, 10, 11], input_tokens=[40, -1, 30, 60], clock_offset_ns=1_500_000,
                     clock_uncertainty_ns=20_000)


def test_a_request_is_a_span_with_its_traceparents_ids_from_the_intended_send():
    df = frame()
    [spans] = list(spans_of(df, sample_rows(Sample(), df), run_resource("run-1", "p")))
    by_id = {f"{s.context.span_id:016x}": s for s in spans}
    first = by_id["1" * 16]
    assert f"{first.context.trace_id:032x}" == "a" * 32 and first.parent is None
    assert first.start_time == T0 and first.end_time == T0 + 30_000_000 and first.kind.name == "CLIENT"
    assert [(e.name, e.timestamp - T0) for e in first.events] == [("send", 200_000), ("first_token", 8_000_000)]
    assert first.attributes["tailrace.send_lag_ms"] == 0.2 and first.attributes["gen_ai.usage.output_tokens"] == 12
    assert first.attributes["tailrace.clock_offset_ms"] == 1.5 and first.status.status_code.name == "OK"
    failed = by_id["2" * 16]
    assert failed.status.status_code.name == "ERROR" and failed.attributes["error.type"] == "ttft_timeout"
    # a session's turns: one trace, each turn's span under the session's span, which covers them all
    session = by_id[session_span_id(session_trace_id("run-1", 7))]
    assert session.name == "session" and session.start_time == T0 + 200_000_000
    assert session.end_time == T0 + 300_000_000 + 25_000_000
    for turn in ("3" * 16, "4" * 16):
        assert by_id[turn].parent.span_id == session.context.span_id
        assert by_id[turn].context.trace_id == session.context.trace_id
    assert len(spans) == 5 and first.resource.attributes["tailrace.run_id"] == "run-1"


def test_samples_slowest_errors_and_a_share_fixed_by_trace_id():
    df = frame()
    assert sample_rows(Sample.parse("slowest:1"), df).tolist() == [1]
    assert sample_rows(Sample.parse("errors"), df).tolist() == [1]
    assert sample_rows(Sample.parse("slowest:2,errors"), df).tolist() == [0, 1]
    share = sample_rows(Sample.parse("share:0.7"), df).tolist()
    assert share == sample_rows(Sample.parse("share:0.7"), df).tolist() and 1 not in share  # 'bbbb…' is above 0.7
    for bad in ("slowest:0", "share:1.5", "fastest:3", "errors:2"):
        with pytest.raises(SampleError, match="is not all, slowest:N"):
            Sample.parse(bad)


@pytest.fixture
def run_dir(tmp_path):
    profile = profile_dict(50, 4, regions=("r1",))
    write_run(tmp_path / "run", workers={"w1": {"region": "r1", "rate": 50, "duration_s": 4, "latency_ms": 5,
                                                 "errors": 0.1}}, profile=profile)
    return tmp_path / "run"


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_the_sdks_exporter_delivers_every_request_to_an_otlp_receiver(run_dir, tmp_path, protocol, capsys):
    receiver = OtlpReceiver(tmp_path / "got.jsonl")
    grpc_port, http_port = receiver.start()
    try:
        url = f"http://127.0.0.1:{http_port}" if protocol == "http/protobuf" else f"http://127.0.0.1:{grpc_port}"
        assert export_command(run_dir, OtlpTarget(url, protocol, {"x-team": "serving"}), "all") == 0
    finally:
        receiver.stop()
    assert receiver.spans == 200 and "200 spans of 200 requests" in capsys.readouterr().out
    got = [s for line in (tmp_path / "got.jsonl").read_text().splitlines()
           for r in json.loads(line)["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in got)  # hex, as OTLP JSON spells IDs


def test_a_receiver_that_is_not_there_is_one_line_and_exit_1(run_dir, capsys):
    code = export_command(run_dir, OtlpTarget("http://127.0.0.1:9", "http/protobuf", timeout_s=1), "errors")
    err = capsys.readouterr().err
    assert code == 1 and "spans not exported: http://127.0.0.1:9 did not accept a batch" in err
    assert export_command(run_dir, OtlpTarget("http://127.0.0.1:9", "zipkin"), "all") == 2
    assert "--protocol: 'zipkin'" in capsys.readouterr().err


def test_tls_and_a_token_as_for_endpoints(run_dir, tmp_path, capsys):
    """An https:// OTLP receiver with its own CA and a bearer token: exported with --tls-ca and the token's header;
    without the CA the certificate is refused — one line, exit 1."""
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    got: list[tuple[str, int]] = []

    class Receiver(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            got.append((self.headers.get("Authorization", ""), len(self.rfile.read(int(self.headers["Content-Length"])))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        token = {"Authorization": "Bearer s3cret"}
        assert export_command(run_dir, OtlpTarget(url, "http/protobuf", token, ca=ca_file), "errors") == 0
        assert got and all(auth == "Bearer s3cret" and size > 0 for auth, size in got)
        assert export_command(run_dir, OtlpTarget(url, "http/protobuf", token, timeout_s=1), "errors") == 1
        assert "spans not exported" in capsys.readouterr().err
    finally:
        server.shutdown()
