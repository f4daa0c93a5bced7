"""The worker's live digest: log-bucketed histograms (merged exactly, quantiles within 1%), one interval's digest
from the request log's rows — one-shot and streamed — and the arrivals asked from the schedule."""
from __future__ import annotations

import numpy as np
import pytest

from tailrace.contract.layout import RunLayout
from tailrace.contract.records import RequestRow
from tailrace.harness.spool.recorder import request_writer
from tailrace.harness.worker.live_report import (
    LiveReporter,
    endpoint_digest,
    gaps_ns,
    histogram,
    merge,
    quantile_ns,
)


def row(endpoint="e", status="ok", latency_ms=10.0, lag_ms=0.1, **stream) -> RequestRow:
    base = {name: 0 for name in RequestRow._fields[:35] if name not in stream}
    base.update(run_id="r", trace_id="t", span_id="s", region="eu", worker="eu-w0", endpoint=endpoint, model="m",
                protocol="kserve-http", status=status, code="", error="", echoed_trace_id="", correct=True,
                latency_ns=int(latency_ms * 1e6), send_lag_ns=int(lag_ms * 1e6))
    return RequestRow(**base, **stream)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99, 0.999])
def test_a_histogram_quantile_is_within_one_percent_of_the_exact_one(q):
    values = np.random.default_rng(3).lognormal(np.log(20e6), 0.8, 50_000)
    exact = np.quantile(values, q, method="inverted_cdf")
    assert quantile_ns(histogram(values), q) == pytest.approx(exact, rel=0.0101)


def test_histograms_merge_exactly_across_workers_and_seconds():
    values = np.random.default_rng(4).exponential(5e6, 10_000)
    whole = histogram(values)
    parts = merge(merge({}, histogram(values[:3000])), histogram(values[3000:]))
    assert parts == whole
    assert quantile_ns({}, 0.5) is None


def test_a_one_shot_interval_counts_statuses_and_keeps_only_answered_latencies():
    rows = [row(latency_ms=10), row(latency_ms=12), row(status="timeout", latency_ms=5000), row(status="http_error")]
    d = endpoint_digest(rows, asked=5)
    assert (d["asked"], d["done"], d["ok"]) == (5, 4, 2)
    assert d["errors"] == {"timeout": 1, "http_error": 1}
    assert sum(n for _, n in d["latency"]) == 2 and sum(n for _, n in d["send_lag"]) == 4
    assert "ttft" not in d  # no stream: no token fields


def test_a_cancelled_stream_is_counted_apart_never_as_an_error():
    """Abandoned by its client as the endpoint declares: the report puts it in no error rate, nor does LIVE."""
    rows = [row(latency_ms=10), row(status="cancelled", latency_ms=40), row(status="cancelled", latency_ms=30),
            row(status="timeout", latency_ms=5000)]
    d = endpoint_digest(rows, asked=4)
    assert (d["done"], d["ok"], d["cancelled"]) == (4, 1, 2) and d["errors"] == {"timeout": 1}
    assert endpoint_digest([row(latency_ms=10)], asked=1)["cancelled"] == 0


def test_a_streamed_interval_has_ttft_tpot_itl_and_tokens():
    offsets = np.array([0, 8000, 16000, 40000], dtype="<i4").tobytes()  # µs after the first event
    counts = np.array([1, 1, 1, 2], dtype="<u2").tobytes()
    stream = dict(t_first_token=1_000_000_000, t_last_token=1_040_000_000, ttft_ns=50_000_000, output_tokens=5,
                  input_tokens=10, token_source="usage", finish_reason="stop", stream_outcome="complete",
                  token_event_us=offsets, token_event_counts=counts)
    d = endpoint_digest([row(**stream), row(status="timeout", **{**stream, "stream_outcome": "ttft_timeout"})],
                        asked=None)
    assert d["outcomes"] == {"complete": 1, "ttft_timeout": 1} and d["output_tokens"] == 10
    ttft = merge({}, d["ttft"])
    assert quantile_ns(ttft, 0.5) == pytest.approx(50e6, rel=0.01)
    assert quantile_ns(merge({}, d["tpot"]), 0.5) == pytest.approx(10e6, rel=0.01)  # 40 ms over 4 gaps
    itl = merge({}, d["itl"])  # gaps 8, 8, then 24 ms over the 2 tokens of the last event: 8, 8, 12, 12
    assert sum(itl.values()) == 4 and quantile_ns(itl, 0.99) == pytest.approx(12e6, rel=0.01)



def test_gaps_of_many_streams_at_once_are_each_streams_own_gaps():
    """No gap spans two streams: each stream's first event starts afresh (one event: no gap at all)."""
    def stream(offsets_us, counts):
        return np.array(offsets_us, dtype="<i4").tobytes(), np.array(counts, dtype="<u2").tobytes()

    streams = [stream([0, 8000, 40000], [1, 1, 2]), stream([0], [1]), stream([0, 5000], [1, 0])]
    # 8 ms; 32 ms over 2 tokens: 16, 16; (the lone event: none); 5 ms over an event that carried no count: 5
    assert gaps_ns(streams).tolist() == [8e6, 16e6, 16e6, 5e6]
    assert gaps_ns([stream([0], [1])]).size == 0

def test_the_reporter_sees_every_row_once_across_chunk_flushes_and_counts_asked_arrivals(tmp_path):
    log = request_writer(RunLayout(tmp_path).worker("eu", "eu-w0"), 1000, 60.0, streams=False)
    sent = []
    offsets = [np.array([0.2e9, 0.5e9, 1.5e9, 2.5e9], dtype=np.int64), np.array([0.9e9], dtype=np.int64)]
    reporter = LiveReporter(["a", "b"], offsets, lambda: {"sent": 7}, sent.append, log)
    for _ in range(3):
        log.add(row(endpoint="a"))
    log.take()  # a chunk leaves the buffer between two reports: its rows were tapped first
    log.add(row(endpoint="b"))
    first = reporter.report(1.0)
    log.add(row(endpoint="a"))
    second = reporter.report(2.0)
    assert sent == [first, second] and first["sent"] == 7
    assert (first["endpoints"]["a"]["done"], first["endpoints"]["b"]["done"]) == (3, 1)
    assert (first["endpoints"]["a"]["asked"], first["endpoints"]["b"]["asked"]) == (2, 1)
    assert (second["endpoints"]["a"]["done"], second["endpoints"]["a"]["asked"]) == (1, 1)
    assert second["endpoints"]["b"] == {**second["endpoints"]["b"], "done": 0, "asked": 0}


def test_a_busy_second_is_digested_in_slices_that_add_up_to_the_whole(tmp_path):
    rows = [row(endpoint="a", latency_ms=1 + k % 50, status="ok" if k % 7 else "timeout") for k in range(1000)]
    yields = []
    reporter = LiveReporter(["a"], None, lambda: {}, lambda d: None, yield_fn=lambda: yields.append(1))
    reporter.observe(rows)
    sliced = reporter.report(1.0)["endpoints"]["a"]
    assert len(yields) == 3 + 2  # 1000 rows: 4 slices of 256; then the digests, then the message
    assert sliced == endpoint_digest(rows, None)


def test_slices_add_up_when_only_some_of_them_hold_streams_and_errors():
    offsets = np.array([0, 8000, 16000], dtype="<i4").tobytes()
    counts = np.array([1, 1, 2], dtype="<u2").tobytes()
    stream = dict(t_first_token=1_000_000_000, t_last_token=1_016_000_000, ttft_ns=30_000_000, output_tokens=4,
                  input_tokens=10, token_source="usage", finish_reason="stop", stream_outcome="complete",
                  token_event_us=offsets, token_event_counts=counts)
    plain = [row(endpoint="a", latency_ms=1 + k % 9) for k in range(300)]  # the first slice: no stream, no error
    streams = [row(endpoint="a", status="ok" if k % 5 else "timeout", latency_ms=20 + k % 30,
                   **{**stream, "ttft_ns": (10 + k % 40) * 1_000_000,
                      "stream_outcome": "complete" if k % 5 else "ttft_timeout"}) for k in range(300)]
    rows = plain + streams
    reporter = LiveReporter(["a"], None, lambda: {}, lambda d: None)
    reporter.observe(rows)
    sliced = reporter.report(1.0)["endpoints"]["a"]
    whole = endpoint_digest(rows, None)
    assert sliced == whole
    assert whole["errors"] == {"timeout": 60} and whole["outcomes"] == {"complete": 240, "ttft_timeout": 60}


def test_a_stream_whose_counts_do_not_match_its_instants_is_left_out_of_the_gaps_alone():
    good = dict(t_first_token=1_000_000_000, t_last_token=1_016_000_000, ttft_ns=50_000_000, output_tokens=3,
                input_tokens=10, token_source="usage", finish_reason="stop", stream_outcome="complete",
                token_event_us=np.array([0, 8000, 16000], dtype="<i4").tobytes(),
                token_event_counts=np.array([1, 1, 1], dtype="<u2").tobytes())
    broken = {**good, "token_event_counts": np.array([1, 1], dtype="<u2").tobytes()}
    d = endpoint_digest([row(**good), row(**broken)], asked=None)
    assert sum(merge({}, d["itl"]).values()) == 2  # the good stream's two gaps, 8 ms each
