"""Token-level statistics of streamed requests: ITL spreading, TPOT, TTFT from the intended time, groups."""
from __future__ import annotations

from array import array

import numpy as np
import pandas as pd

from analysis.stats.tokens import inter_token_gaps_ms, token_table


def test_an_event_of_k_tokens_counts_as_k_gaps_of_gap_over_k():
    offsets = np.array([0, 20_000, 40_000, 60_000], dtype=np.int32)  # µs after the first token
    counts = np.array([1, 1, 2, 4], dtype=np.uint16)
    assert inter_token_gaps_ms(offsets, counts).tolist() == [20.0, 10.0, 10.0, 5.0, 5.0, 5.0, 5.0]
    assert inter_token_gaps_ms(offsets[:1], counts[:1]).size == 0  # one event: no gap


def stream_rows(n: int, region: str, ttft_ms: float, gap_ms: float, events: int, status: str = "ok") -> pd.DataFrame:
    first = np.arange(n, dtype=np.int64) * 10**9 + int(ttft_ms * 1e6)
    offsets = array("i", [int(k * gap_ms * 1000) for k in range(events)]).tobytes()
    counts = array("H", [1] * events).tobytes()
    return pd.DataFrame({
        "endpoint": "llm", "region": region, "phase": 1, "status": status, "stream_outcome": "complete",
        "ttft_ns": np.full(n, int(ttft_ms * 1e6)), "t_first_token": first,
        "t_last_token": first + int((events - 1) * gap_ms * 1e6), "output_tokens": events, "input_tokens": 12,
        "token_source": "usage", "latency_ns": np.full(n, int((ttft_ms + (events - 1) * gap_ms) * 1e6)),
        "token_event_us": [offsets] * n, "token_event_counts": [counts] * n})


def test_token_table_per_region_endpoint_and_overall():
    refused = stream_rows(5, "far", 80, 20, 11, status="http_error")
    refused["stream_outcome"] = ""  # 429 before any stream
    df = pd.concat([stream_rows(400, "near", 50, 20, 11), stream_rows(400, "far", 80, 20, 11), refused],
                   ignore_index=True)
    rows = {(r["endpoint"], r["region"]): r for r in token_table(df, 400, {"llm"})}
    near, far, overall = rows[("llm", "near")], rows[("llm", "far")], rows[("*", "*")]
    assert near["ttft_ms"]["p50"]["value"] == 50 and far["ttft_ms"]["p50"]["value"] == 80
    assert near["tpot_ms"]["p50"]["value"] == 20 and near["itl_ms"]["p99"]["value"] == 20
    assert near["e2e_ms"]["p50"]["value"] == 250
    assert (far["requests"], far["ok"], overall["ok"]) == (405, 400, 800)
    assert far["outcomes"] == {"complete": 400, "not streamed": 5}
    assert overall["output_tokens_per_s"] == 800 * 11 / 400
    # ITL pools 10 gaps a stream; its interval counts each stream once (400 streams: a p99 interval exists)
    assert near["itl_ms"]["p99"]["effective_n"] == 400 and near["itl_ms"]["p99"]["ci_low"] is not None


def test_a_run_without_generative_endpoints_has_no_token_rows():
    assert token_table(stream_rows(10, "near", 50, 20, 3), 10, set()) == []


def test_token_slos_pass_fail_and_undecided():
    from analysis.stats.tokens import token_verdicts

    df = pd.concat([stream_rows(400, "near", 50, 20, 11), stream_rows(20, "far", 80, 20, 11)], ignore_index=True)
    slos = [{"metric": "ttft", "percentile": 99, "threshold_ms": 60, "endpoint": "*", "region": "*"},
            {"metric": "itl", "percentile": 50, "threshold_ms": 15, "endpoint": "llm", "region": "near"},
            {"metric": "latency", "percentile": 99, "threshold_ms": 1, "endpoint": "*", "region": "*"}]
    got = {(v["metric"], v["region"]): v for v in token_verdicts(df, slos, {"llm"}, ["near", "far"])}
    assert got[("ttft", "near")]["verdict"] == "PASS"  # 400 of 50 ms against 60
    assert got[("ttft", "far")]["verdict"] == "FAIL"  # every one 80 ms
    itl = got[("itl", "near")]
    assert itl["verdict"] == "FAIL" and itl["n"] == 4000 and itl["effective_n"] <= 400  # a stream counts once
    assert ("latency", "near") not in got  # analysis/stats/slo.py judges those
