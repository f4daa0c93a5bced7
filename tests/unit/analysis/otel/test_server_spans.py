"""The servers' spans read back and joined (analysis/otel/server_spans.py): vLLM's llm_request attributes and
Triton's request events, as those servers emit them; spans of unknown traces counted; a span file that is not OTLP
JSON named with its line; and the receiver's HTTP side for JSON and for a body it cannot read."""
from __future__ import annotations

import json

import httpx
import numpy as np
import pandas as pd
import pytest

from tailrace.analysis.otel.server_spans import SpanFileError, join, read_span_file, server_span_section
from tailrace.harness.services.otlp_receiver import OtlpReceiver

T0 = 1_790_000_000_000_000_000


def attr(key, value):
    kind = "doubleValue" if isinstance(value, float) else "intValue" if isinstance(value, int) else "stringValue"
    return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}


def export_request(service: str, spans: list[dict]) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": [attr("service.name", service)]},
                               "scopeSpans": [{"scope": {"name": service}, "spans": spans}]}]}


def vllm_span(trace, parent, span):
    """vLLM 0.32's llm_request span (vllm/v1/engine/output_processor.py: do_tracing), seconds as it sets them."""
    return {"traceId": trace, "spanId": span, "parentSpanId": parent, "name": "llm_request", "kind": 2,
            "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 90_000_000),
            "attributes": [attr("gen_ai.latency.time_in_queue", 0.004), attr("gen_ai.latency.time_to_first_token",
                                                                             0.021),
                           attr("gen_ai.latency.time_in_model_prefill", 0.015),
                           attr("gen_ai.latency.time_in_model_decode", 0.060), attr("gen_ai.latency.e2e", 0.089),
                           attr("gen_ai.usage.prompt_tokens", 32), attr("gen_ai.request.id", "chatcmpl-1")]}


def triton_spans(trace, parent):
    """Triton's OpenTelemetry trace mode (src/tracer.cc): the root InferRequest span (the traceparent's child), a span
    named for the model with the request's timestamps as events, and under it a compute span with its own."""
    root = {"traceId": trace, "spanId": "c" * 16, "parentSpanId": parent, "name": "InferRequest",
            "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 9_000_000)}
    request = {"traceId": trace, "spanId": "e" * 16, "parentSpanId": "c" * 16, "name": "resnet50",
               "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 9_000_000),
               "events": [{"name": "REQUEST_START", "timeUnixNano": str(T0)},
                          {"name": "QUEUE_START", "timeUnixNano": str(T0 + 100_000)},
                          {"name": "REQUEST_END", "timeUnixNano": str(T0 + 9_000_000)}]}
    compute = {"traceId": trace, "spanId": "d" * 16, "parentSpanId": "e" * 16, "name": "compute",
               "startTimeUnixNano": str(T0 + 2_100_000), "endTimeUnixNano": str(T0 + 8_100_000),
               "events": [{"name": "COMPUTE_START", "timeUnixNano": str(T0 + 2_100_000)},
                          {"name": "COMPUTE_INPUT_END", "timeUnixNano": str(T0 + 2_300_000)},
                          {"name": "COMPUTE_OUTPUT_START", "timeUnixNano": str(T0 + 7_900_000)},
                          {"name": "COMPUTE_END", "timeUnixNano": str(T0 + 8_100_000)}]}
    return [root, request, compute]


def test_vllm_and_triton_spans_joined_to_their_requests(tmp_path):
    lines = [export_request("vllm", [vllm_span("a" * 32, "1" * 16, "9" * 16)]),
             export_request("triton", triton_spans("b" * 32, "2" * 16)),
             export_request("other", [vllm_span("f" * 32, "3" * 16, "8" * 16)])]  # a trace no request carries
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    spans = read_span_file(path)
    trace_ids = np.array(["a" * 32, "b" * 32, "e" * 32])
    joined = join(spans, trace_ids, np.array(["1" * 16, "2" * 16, "5" * 16]))
    assert joined.spans == 5 and joined.unknown_trace_spans == 1 and joined.timing.index.tolist() == [0, 1]
    vllm, triton = joined.timing.loc[0], joined.timing.loc[1]
    assert (vllm["server_queue_ms"], vllm["server_ttft_ms"], vllm["server_prefill_ms"], vllm["server_decode_ms"]) == \
        pytest.approx((4, 21, 15, 60))
    assert vllm["server_service"] == "vllm" and triton["server_span"] == "InferRequest"
    assert triton["server_queue_ms"] == pytest.approx(2.0) and triton["server_compute_ms"] == pytest.approx(6.0)
    df = pd.DataFrame({"endpoint": ["chat", "resnet", "chat"], "status": "ok", "send_lag_ns": [1_000_000, 0, 0],
                       "ttft_ns": [30_000_000, -1, 25_000_000]})
    section = server_span_section(df, joined, [str(path)])
    chat = next(r for r in section.rows if r.endpoint == "chat")
    assert chat.share == 0.5 and chat.client_rest_ms["p50"] == pytest.approx(30 - 1 - 21)


def test_a_span_file_that_is_not_otlp_json_is_named_with_its_line(tmp_path):
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(export_request("vllm", [vllm_span("a" * 32, "1" * 16, "9" * 16)])) + "\n"
                    + '{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "no ids"}]}]}]}\n')
    with pytest.raises(SpanFileError, match=r"spans.jsonl:2: not an OTLP JSON export request \(missing 'traceId'\)"):
        read_span_file(path)
    path.write_text(path.read_text().splitlines()[0] + "\n" + '{"resourceSpans": [{"scopeSp')  # cut mid-write
    assert len(read_span_file(path, tolerate_last=True)) == 1


def test_the_receiver_keeps_otlp_json_and_refuses_what_it_cannot_read(tmp_path):
    receiver = OtlpReceiver(tmp_path / "got.jsonl")
    _, port = receiver.start()
    try:
        url = f"http://127.0.0.1:{port}/v1/traces"
        body = json.dumps(export_request("vllm", [vllm_span("a" * 32, "1" * 16, "9" * 16)]))
        assert httpx.post(url, content=body, headers={"Content-Type": "application/json"}).status_code == 200
        bad = httpx.post(url, content=b"\x0a\xff\xff", headers={"Content-Type": "application/x-protobuf"})
        assert bad.status_code == 400
        assert httpx.post(f"http://127.0.0.1:{port}/v1/logs", content=b"{}").status_code == 404
    finally:
        receiver.stop()
    assert receiver.spans == 1 and receiver.refused == 1
    assert read_span_file(tmp_path / "got.jsonl")[0].attributes["gen_ai.latency.time_to_first_token"] == 0.021
