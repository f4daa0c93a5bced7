"""The servers' own spans, read back and joined to the run's requests by trace ID (pure but for reading files).

Sources: the run's OTLP receiver (server-spans/received.jsonl, harness/services/otlp_receiver.py) and any file of OTLP
JSON an OpenTelemetry Collector's file exporter wrote (`tailrace analyze RUN --server-spans FILE`): one export request
(`{"resourceSpans": [...]}`) a line, trace and span IDs in hex.

A request's server span is the one whose parent is the request's own span (its `traceparent` named it): vLLM's
`llm_request` (its attributes, in seconds: `gen_ai.latency.time_in_queue`, `…time_to_first_token`,
`…time_in_model_prefill`, `…time_in_model_decode`, `…e2e`); Triton's `InferRequest`, under which its OpenTelemetry
trace mode puts a span per model request (events REQUEST_START, QUEUE_START, REQUEST_END) and under that a `compute`
span (COMPUTE_START … COMPUTE_END) — the events of every span under the request's count. Spans of traces no request of
the run carries are counted and left out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import strings
from tailrace.contract.summary.tables import ServerSpanRow, ServerSpans

VLLM = {"server_queue_ms": "gen_ai.latency.time_in_queue", "server_ttft_ms": "gen_ai.latency.time_to_first_token",
        "server_prefill_ms": "gen_ai.latency.time_in_model_prefill",
        "server_decode_ms": "gen_ai.latency.time_in_model_decode", "server_e2e_ms": "gen_ai.latency.e2e"}
SERVER_SPAN_COLUMNS = ("trace_id", "span_id", "endpoint", "status", "send_lag_ns")  # and ttft_ns where streams are
TIMING_COLUMNS = ("server_queue_ms", "server_compute_ms", "server_ttft_ms", "server_prefill_ms", "server_decode_ms",
                  "server_e2e_ms")


class SpanFileError(ValueError):
    """A span file that is not OTLP JSON: the message names the file and the line."""


@dataclass
class ServerSpan:
    """One span as the join needs it."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    service: str
    start_ns: int
    end_ns: int
    attributes: dict = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)  # event name → its first instant (ns)


def _value(v: dict):
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    return None


def _attributes(items) -> dict:
    return {a["key"]: _value(a.get("value", {})) for a in items or [] if isinstance(a, dict) and "key" in a}


def spans_of_request(doc: dict) -> list[ServerSpan]:
    """The spans of one OTLP JSON export request (ValueError: not one)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans", []), list):
        raise ValueError("not an OTLP export request (no resourceSpans list)")
    out = []
    for resource in doc.get("resourceSpans", []):
        service = str(_attributes(resource.get("resource", {}).get("attributes")).get("service.name", ""))
        for scope in resource.get("scopeSpans", []):
            for s in scope.get("spans", []):
                out.append(ServerSpan(
                    str(s["traceId"]).lower(), str(s["spanId"]).lower(), str(s.get("parentSpanId", "")).lower(),
                    str(s.get("name", "")), service, int(s["startTimeUnixNano"]), int(s.get("endTimeUnixNano", 0)),
                    _attributes(s.get("attributes")),
                    {e["name"]: int(e["timeUnixNano"]) for e in reversed(s.get("events", []))
                     if "name" in e and "timeUnixNano" in e}))
    return out


def read_span_file(path: Path, tolerate_last: bool = False) -> list[ServerSpan]:
    """Every span of a file of OTLP JSON lines (SpanFileError names the file and line; `tolerate_last`: a last line
    cut short — a receiver stopped mid-write — is left out)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        raise SpanFileError(f"{path}: cannot be read ({exc.strerror})") from None
    spans = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            spans += spans_of_request(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            if tolerate_last and n == len(lines):
                break
            why = f"missing {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0][:120]
            raise SpanFileError(f"{path}:{n}: not an OTLP JSON export request ({why})") from None
    return spans


def _timing(span: ServerSpan, family: list[ServerSpan]) -> dict:
    """What the server's spans say of one request's time (ms)."""
    out = {k: float(span.attributes[a]) * 1e3 for k, a in VLLM.items() if isinstance(span.attributes.get(a), float | int)}
    events: dict[str, int] = {}
    for s in family:
        for name, t in s.events.items():
            events.setdefault(name, t)
    if "COMPUTE_START" in events and "QUEUE_START" in events:
        out.setdefault("server_queue_ms", (events["COMPUTE_START"] - events["QUEUE_START"]) / 1e6)
    if "COMPUTE_END" in events and "COMPUTE_START" in events:
        out["server_compute_ms"] = (events["COMPUTE_END"] - events["COMPUTE_START"]) / 1e6
    return out


@dataclass
class Joined:
    """Per request (its position in the frame given) what its server span says; the spans counted."""

    timing: pd.DataFrame  # index: request positions; TIMING_COLUMNS, server_span, server_service
    spans: int = 0
    unknown_trace_spans: int = 0


def join(spans: list[ServerSpan], trace_ids: np.ndarray, span_ids: np.ndarray) -> Joined:
    """Match spans to requests (`trace_ids`, `span_ids`: the requests', by position): a request's server span is the
    span whose parent is its span; the spans under that one are its family."""
    by_parent: dict[tuple[str, str], list[ServerSpan]] = {}
    known = set(trace_ids.tolist())
    unknown = 0
    for s in spans:
        if s.trace_id not in known:
            unknown += 1
            continue
        by_parent.setdefault((s.trace_id, s.parent_span_id), []).append(s)
    rows, index = [], []
    for i, (trace, span) in enumerate(zip(trace_ids.tolist(), span_ids.tolist())):
        found = by_parent.get((trace, span))
        if not found:
            continue
        top = min(found, key=lambda s: s.start_ns)
        family, frontier = [top], [top]
        while frontier:  # every span under it (Triton: InferRequest → the model's request span → compute)
            frontier = [c for f in frontier for c in by_parent.get((trace, f.span_id), [])]
            family += frontier
        rows.append({"server_span": top.name, "server_service": top.service, **_timing(top, family)})
        index.append(i)
    timing = pd.DataFrame(rows, index=pd.Index(index, dtype=np.int64),
                          columns=["server_span", "server_service", *TIMING_COLUMNS])
    return Joined(timing, len(spans), unknown)


def _ms(values: pd.Series) -> dict:
    v = values.dropna().to_numpy(dtype=float)
    return {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)), "mean": float(v.mean())} \
        if len(v) else {}


def server_span_section(df: pd.DataFrame, joined: Joined, sources: list[str]) -> ServerSpans:
    """Per endpoint: the share of its requests that found their server span, the server's split beside the client's
    TTFT and send lag, and the client-side rest (TTFT − send lag − server TTFT: the network there and back and the
    client's reading). `df`: the requests joined (status, endpoint, ttft_ns, send_lag_ns, latency_ns) by position."""
    rows = []
    t = joined.timing
    for endpoint in sorted(df["endpoint"].astype(str).unique()):
        mine = np.flatnonzero((df["endpoint"].astype(str) == endpoint).to_numpy())
        found = t.loc[t.index.intersection(mine)]
        row: dict = {"endpoint": endpoint, "requests": int(len(mine)), "with_server_span": int(len(found)),
               "share": len(found) / len(mine) if len(mine) else None,
               "span_names": sorted(found["server_span"].unique().tolist())}
        for column in TIMING_COLUMNS:
            if column in found and found[column].notna().any():
                row[column] = _ms(found[column])
        if "ttft_ns" in df and len(found) and found["server_ttft_ms"].notna().any():
            ttft = df["ttft_ns"].to_numpy()[found.index]
            lag = df["send_lag_ns"].to_numpy()[found.index] / 1e6
            rest = pd.Series(np.where(ttft >= 0, ttft / 1e6 - lag - found["server_ttft_ms"].to_numpy(), np.nan))
            row |= {"client_ttft_ms": _ms(pd.Series(np.where(ttft >= 0, ttft / 1e6, np.nan))),
                    "client_rest_ms": _ms(rest)}
        rows.append(ServerSpanRow(**row))
    return ServerSpans(rows=rows, spans=joined.spans, unknown_trace_spans=joined.unknown_trace_spans, sources=sources)


@dataclass(frozen=True)
class JoinedSpans:
    """The run's requests joined with the servers' spans: the summary's section, and per log row what its server
    span says (`timing`: for the slowest requests)."""

    section: ServerSpans
    timing: dict[int, dict[str, Any]] = field(default_factory=dict)


def joined_server_spans(df: pd.DataFrame, spans: list[ServerSpan], sources: list[str]) -> JoinedSpans:
    """The run's requests (`df`: SERVER_SPAN_COLUMNS, indexed by log row) joined with the servers' spans."""
    joined = join(spans, strings(df["trace_id"]), strings(df["span_id"]))
    rows = df.index.to_numpy()
    timing = {int(rows[i]): {k: v for k, v in row.items() if v == v and v is not None}
              for i, row in zip(joined.timing.index, joined.timing.to_dict(orient="records"))}
    return JoinedSpans(server_span_section(df.reset_index(drop=True), joined, sources), timing)
