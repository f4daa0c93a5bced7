"""The SLO verdicts at a glance (terminal, report)."""
from __future__ import annotations

from tailrace.analysis.report.verdict_grid import not_passing, verdict_grid, why_words
from tailrace.contract.summary import SloVerdict


def _v(slo: int, description: str, endpoint: str, region: str, verdict: str, measured: float, **more) -> SloVerdict:
    return SloVerdict(slo=slo, description=description, metric=more.pop("metric", "ttft"), endpoint=endpoint,
                      region=region, n=1000, verdict=verdict, measured=measured, **more)


def test_one_row_per_slo_and_endpoint_one_column_per_region_and_star():
    slos = [_v(0, "TTFT p90 < 250 ms", "llm", r, "PASS", m) for r, m in (("eu", 43.4), ("us", 77.0))]
    slos.append(_v(1, "error rate < 1.000%", "llm", "eu", "FAIL", 0.031, metric="error_rate"))
    slos.append(_v(1, "error rate < 1.000%", "llm", "us", "PASS", 0.0, metric="error_rate"))
    regions, rows = verdict_grid(slos)
    assert regions == ["eu", "us", "*"] and len(rows) == 2
    assert [rows[0].cell(r) for r in regions] == ["PASS 43.4 ms", "PASS 77 ms", "PASS"]
    assert [rows[1].cell(r) for r in regions] == ["FAIL 3.10%", "PASS 0.00%", "FAIL (1 of 2)"]


def test_a_region_the_slo_does_not_name_is_an_empty_cell_and_the_worst_leads_the_list():
    slos = [_v(0, "p50 < 60 ms", "mlp", "eu", "INCONCLUSIVE", 55.0, metric="latency", reason="phase 2: drift"),
            _v(1, "p99 < 200 ms", "mlp", "eu", "FAIL", 250.0, metric="latency", ci_low=240.0, ci_high=260.0),
            _v(1, "p99 < 200 ms", "mlp", "us", "PASS", 150.0, metric="latency")]
    regions, rows = verdict_grid(slos)
    assert rows[0].cell("us") == "" and rows[0].cell("*") == "INCONCLUSIVE (1 of 1)"
    bad = not_passing(slos)
    assert [v.verdict for v in bad] == ["FAIL", "INCONCLUSIVE"]
    assert why_words(bad[0]) == ("p99 < 200 ms · mlp · eu: FAIL, measured 250 ms [240, 260] — its interval lies "
                                 "over the threshold")
    assert why_words(bad[1]).endswith("— phase 2: drift")
