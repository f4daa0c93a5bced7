"""Token-level statistics of streamed requests: ITL spreading, TPOT, TTFT from the intended time, groups."""
from __future__ import annotations

from array import array

import numpy as np
import pandas as pd
import pytest

from tailrace.analysis.stats.tokens import _metric_values, inter_token_gaps_ms, stream_gaps, token_table


def test_an_event_of_k_tokens_counts_as_k_gaps_of_gap_over_k():
    offsets = np.array([0, 20_000, 40_000, 60_000], dtype=np.int32)  # µs after the first token
    counts = np.array([1, 1, 2, 4], dtype=np.uint16)
    assert inter_token_gaps_ms(offsets, counts).tolist() == [20.0, 10.0, 10.0, 5.0, 5.0, 5.0, 5.0]
    assert inter_token_gaps_ms(offsets[:1], counts[:1]).size == 0  # one event: no gap


def _random_streams(seed: int, n: int) -> tuple[list[bytes], list[bytes]]:
    """Streams of 0 to 40 token events: µs offsets with ties, jitter and now and then one going back, events of 1 to
    5 tokens (a count of 0 now and then: carried as 1)."""
    rng = np.random.default_rng(seed)
    offsets, counts = [], []
    for _ in range(n):
        events = int(rng.integers(0, 41))
        t = np.cumsum(rng.integers(-50, 40_000, size=events)).astype("<i4")
        offsets.append(t.tobytes())
        counts.append(rng.integers(0, 6, size=events).astype("<u2").tobytes())
    return offsets, counts


def _one_at_a_time(offsets: list[bytes], counts: list[bytes]) -> list[np.ndarray]:
    return [inter_token_gaps_ms(np.frombuffer(o, dtype="<i4"), np.frombuffer(c, dtype="<u2"))
            for o, c in zip(offsets, counts)]


@pytest.mark.parametrize("seed", range(5))
def test_every_streams_gaps_at_once_are_each_streams_own_to_the_bit(seed):
    offsets, counts = _random_streams(seed, 300)
    alone = _one_at_a_time(offsets, counts)
    gaps = stream_gaps(np.array(offsets, dtype=object), np.array(counts, dtype=object))
    assert gaps.values.tobytes() == np.concatenate(alone).tobytes()  # the same floats, in the same order
    assert gaps.count.tolist() == [len(g) for g in alone]
    assert gaps.largest().tobytes() == np.array([g.max(initial=0.0) for g in alone]).tobytes()
    empty = stream_gaps(np.array([], dtype=object), np.array([], dtype=object))
    assert empty.values.size == 0 and empty.count.size == 0 and empty.largest().size == 0


def test_a_stream_whose_counts_do_not_match_its_events_is_computed_alone_and_raises_as_before():
    offsets, counts = _random_streams(7, 3)
    counts[1] = counts[1] + b"\x01\x00"  # one count more than events
    with pytest.raises(ValueError):
        stream_gaps(np.array(offsets, dtype=object), np.array(counts, dtype=object))


def test_the_itl_verdicts_values_keep_a_failed_requests_inf_in_its_place():
    offsets, counts = _random_streams(3, 50)
    status = np.where(np.arange(50) % 7 == 3, "timeout", "ok")
    df = pd.DataFrame({"status": status, "token_event_us": offsets, "token_event_counts": counts})
    values, own, streams = _metric_values(df, np.arange(50), "itl")
    expected = [g if s == "ok" else np.array([np.inf]) for g, s in zip(_one_at_a_time(offsets, counts), status)]
    assert values.tobytes() == np.concatenate(expected).tobytes() and own.all()
    assert streams == sum(len(g) > 0 for g in expected)


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
    rows = {(r.endpoint, r.region): r for r in token_table(df, 400, {"llm"})}
    near, far, overall = rows[("llm", "near")], rows[("llm", "far")], rows[("*", "*")]
    assert near.ttft_ms.p50.value == 50 and far.ttft_ms.p50.value == 80
    assert near.tpot_ms.p50.value == 20 and near.itl_ms.p99.value == 20
    assert near.e2e_ms.p50.value == 250
    assert (far.requests, far.ok, overall.ok) == (405, 400, 800)
    assert far.outcomes == {"complete": 400, "not streamed": 5}
    assert overall.output_tokens_per_s == 800 * 11 / 400
    # ITL pools 10 gaps a stream; its interval counts each stream once (400 streams: a p99 interval exists)
    assert near.itl_ms.p99.effective_n == 400 and near.itl_ms.p99.ci_low is not None


def test_a_run_without_generative_endpoints_has_no_token_rows():
    assert token_table(stream_rows(10, "near", 50, 20, 3), 10, set()) == []


def test_token_slos_pass_fail_and_undecided():
    from tailrace.analysis.stats.tokens import token_verdicts

    df = pd.concat([stream_rows(400, "near", 50, 20, 11), stream_rows(20, "far", 80, 20, 11)], ignore_index=True)
    slos = [{"metric": "ttft", "percentile": 99, "threshold_ms": 60, "endpoint": "*", "region": "*"},
            {"metric": "itl", "percentile": 50, "threshold_ms": 15, "endpoint": "llm", "region": "near"},
            {"metric": "latency", "percentile": 99, "threshold_ms": 1, "endpoint": "*", "region": "*"}]
    got = {(v.metric, v.region): v for v in token_verdicts(df, slos, {"llm"}, ["near", "far"])}
    assert got[("ttft", "near")].verdict == "PASS"  # 400 of 50 ms against 60
    assert got[("ttft", "far")].verdict == "FAIL"  # every one 80 ms
    itl = got[("itl", "near")]
    assert itl.verdict == "FAIL" and itl.n == 4000 and itl.effective_n <= 400  # a stream counts once
    assert ("latency", "near") not in got  # analysis/stats/slo.py judges those


def test_goodput_counts_the_streams_within_every_token_slo_that_applies():
    df = pd.concat([stream_rows(100, "near", 50, 20, 11), stream_rows(100, "far", 80, 20, 11),
                    stream_rows(10, "far", 80, 20, 11, status="timeout")], ignore_index=True)
    slos = [{"metric": "ttft", "threshold_ms": 60, "endpoint": "*", "region": "*", "percentile": 90},
            {"metric": "itl", "threshold_ms": 25, "endpoint": "llm", "region": "near", "percentile": 90}]
    rows = {(r.endpoint, r.region): r for r in token_table(df, 10, {"llm"}, slos)}
    assert rows[("llm", "near")].goodput_rps == 10  # 100 streams in 10 s, all within 60 ms TTFT and 25 ms gaps
    assert rows[("llm", "far")].goodput_rps == 0  # TTFT 80 ms > 60 ms
    tight = [{**slos[1], "threshold_ms": 15}]
    assert {(r.endpoint, r.region): r for r in token_table(df, 10, {"llm"}, tight)}[("llm", "near")].goodput_rps \
        == 0  # every gap is 20 ms
    assert rows[("*", "*")].goodput_rps == 10 and token_table(df, 10, {"llm"})[-1].goodput_rps == 20


def test_ttft_splits_into_network_queue_prefill_and_back_adding_up_to_the_mean():
    from tailrace.analysis.stats.decomposition import ttft_decomposition

    n = 50
    sent = np.arange(n, dtype=np.int64) * 10**8 + 10**18  # worker clock, 5 ms behind the reference
    df = pd.DataFrame({
        "endpoint": "llm", "region": "far", "phase": 1, "status": "ok", "send_lag_ns": np.full(n, 200_000),
        "t_sent": sent, "t_sent_ref": sent + 5_000_000, "server_receive_ns": sent + 5_000_000 + 12_000_000,
        "server_queue_ns": np.full(n, 3_000_000), "server_compute_ns": np.full(n, 9_000_000),
        "server_send_ns": sent + 5_000_000 + 12_000_000 + 12_500_000,
        "t_first_token": sent + 12_000_000 + 12_500_000 + 12_000_000, "ttft_ns": np.full(n, 36_700_000)})
    (row,) = ttft_decomposition(df, {"llm"})
    assert row.network_up_ms == 12 and row.network_down_ms == 12 and row.server_queue_ms == 3
    assert row.server_prefill_ms == 9 and row.server_other_ms == 0.5
    assert row.sum_ms == row.ttft_mean_ms == 36.7 and row.count == n
    assert ttft_decomposition(df.assign(server_receive_ns=-1), {"llm"}) == []  # no server timing: no split


def test_token_timeline_places_each_token_event_at_its_own_second():
    from tailrace.analysis.stats.tokens import token_timeline

    df = stream_rows(4, "near", 500, 400, 5)  # one stream a second: tokens at 0.5, 0.9, 1.3, 1.7, 2.1 s after
    df["t_intended_ref"] = np.arange(4, dtype=np.int64) * 10**9
    line = token_timeline(df, {"llm"})
    assert line is not None and line.whole_s == 6 and line.tokens_per_s["near"].tolist() == [2, 4, 5, 5, 3, 1]
    assert line.ttft_p99_ms["near"][:4].tolist() == [500, 500, 500, 500]


def test_compare_pairs_streams_by_schedule_and_compares_ttft_and_tpot():
    from tailrace.analysis.decide.compare import compare_paired, pair_requests

    def run(ttft_ms: float, gap_ms: float) -> pd.DataFrame:
        df = stream_rows(60, "near", ttft_ms, gap_ms, 11)
        return df.assign(worker="near-w0", t_intended=np.arange(60, dtype=np.int64) * 10**8, sample_index=np.arange(60))

    pairs = pair_requests(run(50, 20), run(65, 20))
    assert {"ttft_a_ms", "ttft_b_ms", "tpot_a_ms", "tpot_b_ms", "latency_a_ms"} <= set(pairs.columns)
    ttft = compare_paired(pairs["ttft_a_ms"].to_numpy(), pairs["ttft_b_ms"].to_numpy())
    tpot = compare_paired(pairs["tpot_a_ms"].to_numpy(), pairs["tpot_b_ms"].to_numpy())
    assert ttft.p50_diff_ms == 15 and ttft.verdict == "B slower" and tpot.p50_diff_ms == 0


def test_whole_responses_have_e2e_and_tokens_but_no_tpot_or_ttft():
    whole = stream_rows(40, "near", 50, 20, 11).assign(t_first_token=-1, t_last_token=-1, ttft_ns=-1,
                                                       token_event_us=b"", token_event_counts=b"")
    (row, *_) = token_table(whole, 10, {"llm"})
    assert row.tpot_ms.p50.value is None and row.ttft_ms.p50.value is None
    assert row.e2e_ms.p50.value == 250 and row.output_tokens == 440


def test_a_ttft_slo_on_whole_responses_is_refused_where_the_profile_is_read():
    from tailrace.contract.profile import ProfileError, parse_profile

    chat = {"name": "c", "url": "http://h:1", "protocol": "openai-chat", "model": "m", "prompts": {"stream": False}}
    base = {"name": "g", "regions": [{"name": "a", "share": 1}], "load": {"rate": 1, "duration_s": 1},
            "endpoints": [chat]}
    import pytest

    with pytest.raises(ProfileError, match="ttft needs streamed responses"):
        parse_profile({**base, "slos": [{"metric": "ttft", "percentile": 90, "threshold_ms": 5}]}, "g.toml")
    parse_profile({**base, "slos": [{"metric": "e2e", "percentile": 90, "threshold_ms": 5}]}, "g.toml")


def test_a_ttft_that_rises_through_the_run_is_a_growing_queue_never_a_pass():
    """TTFT rising from 20 to 180 ms across the run (a queue growing above capacity), its median (100 ms) under a
    150 ms SLO: the rise carries it past 150 ms by the phase's end, so the verdict is INCONCLUSIVE with trend
    'rising', and a capacity trial with it fails on its backlog; the same TTFTs without the trend pass. Against
    500 ms the same rise cannot cross: the PASS stands, the trend reported, the capacity trial still fails."""
    from tailrace.analysis.decide.capacity_search import FAIL, PASS, classify_trial
    from tailrace.analysis.stats.tokens import token_verdicts
    from tailrace.contract.summary import SloVerdict

    df = stream_rows(600, "near", 20, 10, 5)
    df["t_intended_ref"] = np.arange(600, dtype=np.int64) * 50_000_000
    slos = [{"metric": "ttft", "percentile": 50, "threshold_ms": 150, "endpoint": "*", "region": "*"}]
    flat = token_verdicts(df, slos, {"llm"}, ["near"])[0]
    assert (flat.verdict, flat.trend) == ("PASS", None)
    df["ttft_ns"] = np.linspace(20e6, 180e6, 600).astype(np.int64)
    rising = token_verdicts(df, slos, {"llm"}, ["near"])[0]
    assert (rising.verdict, rising.trend) == ("INCONCLUSIVE", "rising") and "backlog growing" in rising.reason
    assert classify_trial([SloVerdict.model_validate(flat)], True, [])[0] == PASS
    outcome, why = classify_trial([SloVerdict.model_validate(rising)], True, [])
    assert outcome == FAIL and why.startswith("backlog growing"), why
    loose = token_verdicts(df, [{**slos[0], "threshold_ms": 500}], {"llm"}, ["near"])[0]
    assert (loose.verdict, loose.trend, loose.trend_changed_verdict) == ("PASS", "rising", False)
    assert "a drift too small to matter" in loose.reason
    assert classify_trial([SloVerdict.model_validate(loose)], True, [])[0] == FAIL
