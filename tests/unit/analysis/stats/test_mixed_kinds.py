"""A run that mixes one-shot endpoints with a streamed (generative) one: every number is defined for its endpoint's
kind — a stream's goodput is judged by its token SLOs, and no pooled row, curve or line mixes a one-shot latency
with a stream's E2E."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import frame_of
from tailrace.analysis.stats.latency import add_goodput, latency_table, region_cdfs, with_stream_goodput
from tailrace.analysis.stats.scenarios import per_phase_table
from tailrace.analysis.stats.timeline import timeline
from tailrace.analysis.stats.tokens import token_table
from tests.unit.analysis.stats.test_tokens import stream_rows

DURATION_S = 10.0
LLM = frozenset({"llm"})


def mixed_frame(n_one_shot: int = 600, n_stream: int = 200) -> pd.DataFrame:
    """One-shot requests of 5–15 ms to "mlp" and streams of 250 ms E2E (TTFT 50 ms) to "llm", in two regions."""
    rng = np.random.default_rng(7)
    one_shot = pd.DataFrame({
        "endpoint": "mlp", "region": rng.choice(["near", "far"], n_one_shot), "phase": 1, "status": "ok",
        "latency_ns": rng.integers(5_000_000, 15_000_000, n_one_shot)})
    streams = pd.concat([stream_rows(n_stream // 2, "near", 50, 20, 11), stream_rows(n_stream // 2, "far", 50, 20, 11)],
                        ignore_index=True)
    df = pd.concat([one_shot, streams], ignore_index=True)
    n = len(df)
    df["t_intended_ref"] = rng.permutation(n).astype(np.int64) * 10_000_000
    df["send_lag_ns"] = np.zeros(n, dtype=np.int64)
    df["correct"] = np.ones(n, dtype=bool)
    for column in ("endpoint", "region", "status"):
        df[column] = pd.Categorical(df[column])
    return df


def profile(weights: dict[str, float]) -> SimpleNamespace:
    endpoints = [SimpleNamespace(name=name, weight=w, generative=name in LLM) for name, w in weights.items()]
    return SimpleNamespace(load=SimpleNamespace(scenario="offline", warmup_s=0), endpoints=endpoints, regions=[])


def test_the_overall_row_pools_the_one_shot_endpoints_only_and_each_row_says_its_kind():
    df = mixed_frame()
    base = frame_of({c: df[c].to_numpy() if c not in ("endpoint", "region", "status") else df[c] for c in df},
                    pd.RangeIndex(len(df)))
    rows, ok_sorted = latency_table(base, profile({"mlp": 3, "llm": 1}), DURATION_S, streamed=LLM)
    by = {(r.endpoint, r.region): r for r in rows}
    overall = by[("*", "*")]
    one_shot_ms = df.loc[df["endpoint"] == "mlp", "latency_ns"].to_numpy() / 1e6
    assert overall.kind == "one-shot" and overall.count == len(one_shot_ms)
    assert overall.p99.value == float(np.percentile(one_shot_ms, 99))
    assert overall.max_ms < 15  # no stream's 250 ms E2E in it
    assert {by[("llm", r)].kind for r in ("near", "far", "*")} == {"stream"}
    assert {by[("mlp", r)].kind for r in ("near", "far", "*")} == {"one-shot"}
    # the region curves hold the one-shot requests only: every one of a small run's is a point
    curves = region_cdfs(ok_sorted, LLM)
    for region, (x, _) in curves.items():
        assert len(x) == int(((df["endpoint"] == "mlp") & (df["region"] == region)).sum()) and x.max() < 15
    # a run of streams only: its overall row and curves are the streams'
    streams_only = base.loc[(df["endpoint"] == "llm").to_numpy()].reset_index(drop=True)
    streams_only["endpoint"] = streams_only["endpoint"].cat.remove_unused_categories()
    rows, ok_sorted = latency_table(streams_only, profile({"llm": 1}), DURATION_S, streamed=LLM)
    assert rows[-1].kind == "stream" and rows[-1].count == 200
    assert min(x.min() for x, _ in region_cdfs(ok_sorted, LLM).values()) >= 250


def test_a_streams_goodput_is_its_token_slos_and_the_two_tables_agree():
    """The demo's case: a latency SLO over every endpoint (p99 < 200 ms) that a stream's E2E (250 ms) exceeds by
    design; the stream's goodput is judged by its TTFT SLO, and is the same in both tables."""
    df = mixed_frame()
    slos = [{"metric": "latency", "percentile": 99, "threshold_ms": 200, "endpoint": "*", "region": "*"},
            {"metric": "ttft", "percentile": 90, "threshold_ms": 100, "endpoint": "llm", "region": "*"}]
    rows, _ = latency_table(df, profile({"mlp": 3, "llm": 1}), DURATION_S, streamed=LLM)
    add_goodput(rows, df, slos, DURATION_S, streamed=LLM)
    tokens = token_table(df, DURATION_S, set(LLM), slos)
    rows = with_stream_goodput(rows, tokens)
    by = {(r.endpoint, r.region): r for r in rows}
    token_by = {(r.endpoint, r.region): r for r in tokens}
    for key, row in by.items():
        ok_rate = row.ok / DURATION_S
        assert row.goodput_rps <= ok_rate + 1e-9, key
        assert row.goodput_rps == ok_rate, key  # every request ok and far inside every SLO that applies
        if row.kind == "stream":
            assert row.goodput_rps == token_by[key].goodput_rps == (20.0 if key[1] == "*" else 10.0), key
    assert by[("*", "*")].goodput_rps == 600 / DURATION_S  # the one-shot endpoints' rate, as its count
    # a latency SLO that names the stream applies to it as its E2E: 250 ms > 200 ms, no stream is good
    named = [{**slos[0], "endpoint": "llm"}]
    assert {r.goodput_rps for r in token_table(df, DURATION_S, set(LLM), named)} == {0.0}


def test_the_timeline_line_and_the_phases_table_never_pool_the_two_kinds():
    df = mixed_frame()
    line = timeline(df, LLM)
    assert max(np.nanmax(v) for v in line.p99_ms.values()) < 15  # one-shot latencies only
    assert sum(int(v.sum()) for v in line.requests.values()) >= 700  # the counts hold every request
    only_streams = timeline(df[df["endpoint"] == "llm"], LLM)
    assert min(np.nanmin(v) for v in only_streams.p99_ms.values()) >= 250
    rows = per_phase_table(df, profile({"mlp": 3, "llm": 1}), streamed=LLM)
    assert {(r.phase, r.kind) for r in rows} == {(1, "one-shot"), (1, "stream")}
    kinds = {r.kind: r for r in rows}
    assert kinds["one-shot"].count == 600 and (kinds["one-shot"].p99_ms or 0) < 15
    assert kinds["stream"].count == 200 and kinds["stream"].p50_ms == 250


def test_the_phases_table_counts_cancelled_streams_apart_from_errors_as_the_latency_table_does():
    """A stream its client abandoned failed nothing: per phase it is counted as cancelled, not as an error — the
    latency table's errors and the phases table's add up to the same number for the same requests."""
    df = mixed_frame()
    status = df["status"].astype(str).to_numpy()
    streams = np.flatnonzero(df["endpoint"].astype(str).to_numpy() == "llm")
    status[streams[:12]] = "cancelled"
    status[streams[12:15]] = "timeout"
    df["status"] = pd.Categorical(status)
    rows = {r.kind: r for r in per_phase_table(df, profile({"mlp": 3, "llm": 1}), streamed=LLM)}
    assert (rows["stream"].errors, rows["stream"].cancelled, rows["stream"].count) == (3, 12, 200)
    assert (rows["one-shot"].errors, rows["one-shot"].cancelled) == (0, 0)
    table, _ = latency_table(df, profile({"mlp": 3, "llm": 1}), DURATION_S, streamed=LLM)
    llm = [r for r in table if r.endpoint == "llm" and r.region != "*"]  # its regions (the "*" row: their sum)
    assert sum(r.errors for r in llm) == rows["stream"].errors and sum(r.cancelled for r in llm) == 12
