"""The API's typed results read summary.json's content as written, keep the dict, and say what there is when a
row is asked for that is not there."""
from __future__ import annotations

import json

import pytest

from tailrace.results import ALL, CompareRow, Comparison, Summary


def _estimate(value, low=None, high=None, note=None):
    return {"value": value, "ci_low": low, "ci_high": high, "note": note, "n": 500}


def _latency(endpoint, region, kind, p99):
    return {"endpoint": endpoint, "region": region, "kind": kind, "count": 500, "ok": 499, "errors": 1,
            "error_rate": 0.002, "achieved_rate": 10.0, "send_lag_p99_ms": 0.4, "goodput_rps": 9.8,
            "percentiles": {"p50": _estimate(3.0, 2.9, 3.1), "p95": _estimate(5.0, 4.8, 5.3),
                            "p99": _estimate(p99, None, None, "p99's interval needs ≥ 368 independent samples")}}


BASE = {"profile": "p", "input": {"rows_read": 550, "chunks_read": 2, "chunks_skipped": []}, "duration_s": 50.0,
        "scenario": {"scenario": "server"}}
SUMMARY = {"verdict": "FAIL", "exit_code": 1, "valid": True, "invalid_reasons": [], "run_id": "r",
           "latency": [_latency("a", "eu", "one-shot", 8.0), _latency("llm", "eu", "stream", 400.0),
                       _latency("* (one-shot)", ALL, "one-shot", 8.5), _latency("* (stream)", ALL, "stream", 401.0)],
           "tokens": [{"endpoint": "llm", "region": "eu", "requests": 50, "ok": 50, "output_tokens": 800,
                       "output_tokens_per_s": 80.0, "goodput_rps": 5.0, "token_sources": ["usage"],
                       "ttft_ms": {"p50": _estimate(20.0, 19.0, 21.0), "mean": 20.5}, "tpot_ms": {}, "itl_ms": {},
                       "e2e_ms": {"p99": _estimate(400.0)}}],
           "slos": [{"description": "p99 < 5 ms", "metric": "latency", "endpoint": "a", "region": "eu",
                     "verdict": "FAIL", "measured": 8.0, "ci_low": 7.0, "ci_high": 9.0, "implicit": False,
                     "reason": None, "slo": 0, "n": 500},
                    {"description": "errors < 1%", "metric": "error_rate", "endpoint": "a", "region": "eu",
                     "verdict": "PASS", "measured": 0.002, "ci_low": None, "ci_high": None, "implicit": True,
                     "slo": 1, "n": 500}]}


def test_a_summary_is_typed_where_it_is_read_and_round_trips_as_it_was_written():
    s = Summary.from_json(json.dumps(SUMMARY | BASE))
    assert s.verdict == "FAIL" and s.exit_code == 1 and s.valid and s.invalid_reasons == []
    assert s.to_dict() == SUMMARY | BASE and json.loads(s.to_json()) == SUMMARY | BASE
    row = s.latency_row("a", "eu")
    assert (row.kind, row.count, row.p50.value, row.p50.ci_low) == ("one-shot", 500, 3.0, 2.9)
    assert row.p99.value == 8.0 and row.p99.ci_low is None and "368" in row.p99.note and str(row.p99) == "8.00 ms"
    assert str(row.p50) == "3.00 ms [2.90, 3.10]"
    assert s.latency_row(kind="stream").endpoint == "* (stream)" and s.latency_row().endpoint == "* (one-shot)"
    tokens = s.token_row("llm", "eu")
    assert tokens.ttft.p50.value == 20.0 and tokens.ttft.mean == 20.5 and tokens.e2e.at("p99").value == 400.0
    assert tokens.tpot.at("p50").value is None
    assert [v.description for v in s.failing()] == ["p99 < 5 ms"] and s.slos[1].implicit


def test_a_row_that_is_not_there_names_the_rows_that_are():
    s = Summary.of(SUMMARY | BASE)
    with pytest.raises(KeyError, match=r"no latency row for endpoint 'b', region 'eu'; the rows are .*\('a', 'eu'\)"):
        s.latency_row("b", "eu")
    with pytest.raises(KeyError, match="no tokens row for endpoint 'a'"):
        s.token_row("a", "eu")


def test_compare_rows_are_typed_and_a_table():
    raw = {"endpoint": "a", "region": "eu", "metric": "latency", "paired": True, "n_a": 900, "n_b": 900,
           "p50_diff_ms": 0.1, "p50_ci_low": -0.1, "p50_ci_high": 0.3, "p95_diff_ms": 0.5, "p95_ci_low": 0.2,
           "p95_ci_high": 0.9, "p99_diff_ms": None, "p99_ci_low": None, "p99_ci_high": None,
           "test": "Wilcoxon signed-rank", "test_p": 0.2, "cohens_d": 0.01, "verdict": "no significant difference"}
    c = Comparison([CompareRow(**raw)], ["run B: INVALID (send lag)"])
    row = c.row("a", "eu")
    assert row.paired and row.differences["p95"].ci_low == 0.2 and row.differences["p99"].value is None
    assert not c.valid and c.table().loc[0, "p95_diff_ms"] == 0.5
    with pytest.raises(KeyError):
        c.row("a", "eu", "ttft")
