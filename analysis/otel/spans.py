"""A run's requests as OpenTelemetry spans (the OpenTelemetry SDK's `ReadableSpan`, ready for any span exporter).

Each request is a CLIENT span whose trace and span IDs are its `traceparent`'s — the server's own span for it (vLLM's
`llm_request`, Triton's) is its child. Its start is the *intended* send on the reference clock (the open loop's
promise: send lag is inside the span, and an attribute), its end the last byte (`t_done` on the reference clock);
events mark the actual send and the first token. A session's turns and a pipeline's stages share one trace
(contract/trace_context.py) under a session span from the first turn's intended send to the last one's end.

Which requests: every one, or a declared sample — `slowest:N` (by latency from the intended send), `errors` (every
request that failed), `share:F` (a fixed fraction chosen by trace ID, so the same requests in every export) — any
several, joined by commas.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from tailrace.contract.trace_context import Sample, session_span_id

SPAN_COLUMNS = ("trace_id", "span_id", "endpoint", "region", "worker", "model", "protocol", "phase", "status", "code",
                "t_intended_ref", "t_sent_ref", "t_done_ref", "latency_ns", "send_lag_ns", "ttft_ns",
                "output_tokens", "input_tokens", "clock_offset_ns", "clock_uncertainty_ns", "session_id", "turn",
                "pipeline")
SCOPE = InstrumentationScope("tailrace", "1")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def sample_rows(sample: Sample, df: pd.DataFrame) -> np.ndarray:
    """The positions of `df`'s rows `sample` chooses, in time order."""
    if sample.all:
        return np.argsort(df["t_intended_ref"].to_numpy(), kind="stable")
    keep = np.zeros(len(df), dtype=bool)
    if sample.slowest:
        keep[np.argsort(-df["latency_ns"].to_numpy(), kind="stable")[:sample.slowest]] = True
    if sample.errors:
        keep |= ~df["status"].isin(["ok", "cancelled"]).to_numpy()
    if sample.share:
        bound = int(sample.share * 2**32)
        keep |= np.array([int(t[:8], 16) < bound for t in df["trace_id"].astype(str)], dtype=bool)
    chosen = np.flatnonzero(keep)
    return chosen[np.argsort(df["t_intended_ref"].to_numpy()[chosen], kind="stable")]


def _context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=False, trace_flags=_SAMPLED)


def _status(status: str, code: str) -> Status:
    if status == "ok":
        return Status(StatusCode.OK)
    if status == "cancelled":  # the client closed it, as declared: neither ok nor an error
        return Status(StatusCode.UNSET)
    return Status(StatusCode.ERROR, f"{status}: {code}" if code else status)


def request_span(r, resource: Resource) -> ReadableSpan:
    """One request (a row of SPAN_COLUMNS, as itertuples gives it) as its span."""
    attributes = {"tailrace.region": r.region, "tailrace.worker": r.worker, "tailrace.endpoint": r.endpoint,
                  "tailrace.phase": int(r.phase), "tailrace.status": r.status, "tailrace.code": r.code,
                  "tailrace.latency_ms": r.latency_ns / 1e6, "tailrace.send_lag_ms": r.send_lag_ns / 1e6,
                  "tailrace.clock_offset_ms": r.clock_offset_ns / 1e6,
                  "tailrace.clock_uncertainty_ms": r.clock_uncertainty_ns / 1e6,
                  "tailrace.protocol": r.protocol, "gen_ai.request.model": r.model}
    if r.status not in ("ok", "cancelled"):
        attributes["error.type"] = r.code or r.status
    events = [Event("send", timestamp=int(r.t_sent_ref))]
    if r.ttft_ns >= 0:
        attributes["tailrace.ttft_ms"] = r.ttft_ns / 1e6
        events.append(Event("first_token", timestamp=int(r.t_intended_ref + r.ttft_ns)))
    if r.output_tokens >= 0:
        attributes["gen_ai.usage.output_tokens"] = int(r.output_tokens)
    if r.input_tokens >= 0:
        attributes["gen_ai.usage.input_tokens"] = int(r.input_tokens)
    parent = None
    if r.session_id >= 0:
        attributes |= {"tailrace.session_id": int(r.session_id), "tailrace.turn": int(r.turn)}
        if r.pipeline:
            attributes["tailrace.pipeline"] = r.pipeline
        parent = _context(r.trace_id, session_span_id(r.trace_id))
    return ReadableSpan(f"{r.protocol} {r.endpoint}", _context(r.trace_id, r.span_id), parent, resource, attributes,
                        events, kind=SpanKind.CLIENT, status=_status(r.status, r.code),
                        start_time=int(r.t_intended_ref), end_time=int(max(r.t_done_ref, r.t_intended_ref)),
                        instrumentation_scope=SCOPE)


def session_spans(df: pd.DataFrame, resource: Resource) -> list[ReadableSpan]:
    """The session (pipeline) spans of the chosen rows: one per trace of a session, over its chosen turns."""
    turns = df[df["session_id"] >= 0]
    out = []
    for trace_id, g in turns.groupby("trace_id", sort=False):
        pipeline = str(g["pipeline"].iloc[0])
        name = f"pipeline {pipeline}" if pipeline else "session"
        attributes: dict[str, str | int] = {"tailrace.session_id": int(g["session_id"].iloc[0]),
                                            "tailrace.region": str(g["region"].iloc[0]),
                      "tailrace.turns": int(len(g)), "tailrace.endpoint": str(g["endpoint"].iloc[0])}
        out.append(ReadableSpan(name, _context(str(trace_id), session_span_id(str(trace_id))), None, resource,
                                attributes, kind=SpanKind.INTERNAL, start_time=int(g["t_intended_ref"].min()),
                                end_time=int(g["t_done_ref"].max()), instrumentation_scope=SCOPE))
    return out


def run_resource(run_id: str, profile: str) -> Resource:
    """The resource every span of a run carries."""
    return Resource.create({"service.name": "tailrace", "service.instance.id": run_id, "tailrace.run_id": run_id,
                            "tailrace.profile": profile})


def spans_of(df: pd.DataFrame, rows: np.ndarray, resource: Resource, batch: int = 2048) -> Iterator[list[ReadableSpan]]:
    """The chosen rows' spans in batches (their session spans in the batch of the session's first chosen turn)."""
    chosen = df.iloc[rows]
    started: set[str] = set()
    for at in range(0, len(chosen), batch):
        part = chosen.iloc[at:at + batch]
        spans = [request_span(r, resource) for r in part[list(SPAN_COLUMNS)].itertuples(index=False)]
        new = part[(part["session_id"] >= 0) & ~part["trace_id"].isin(started)]
        if len(new):
            whole = chosen[chosen["trace_id"].isin(new["trace_id"].unique())]
            spans += session_spans(whole, resource)
            started |= set(new["trace_id"].astype(str))
        yield spans
