"""`tailrace compare`'s plain verdict (analysis/decide/compare.py): a test that finds a difference and the percentiles
whose interval excludes 0 — a tail that slowed while the median held is "B slower at p95, p99", not "no significant
difference" (a sweep's two max_num_seqs: TTFT Δp95 +565 ms [+303, +827], p = 6e-11, had been called that)."""
from __future__ import annotations

import numpy as np

from tailrace.analysis.decide.compare import _verdict, compare_groups
from tailrace.contract.summary.compare import CompareRow


def row(**intervals: tuple[float, float]) -> CompareRow:
    out = CompareRow(endpoint="*", region="*", metric="latency", paired=False, n_a=1000, n_b=1000)
    for p, (low, high) in intervals.items():
        setattr(out, f"{p}_ci_low", low)
        setattr(out, f"{p}_ci_high", high)
        setattr(out, f"{p}_diff_ms", (low + high) / 2)
    return out


def test_the_verdict_names_where_b_differs():
    assert _verdict(row(p50=(1, 3), p95=(2, 9), p99=(-1, 20)), 1e-6) == "B slower"
    assert _verdict(row(p50=(-3, -1)), 1e-6) == "B faster"
    assert _verdict(row(p50=(-1, 1), p95=(300, 800), p99=(400, 900)), 1e-6) == "B slower at p95, p99"
    assert _verdict(row(p50=(-5, -1), p99=(10, 50)), 1e-6) == "mixed: B slower at p99, faster at p50"
    assert _verdict(row(p50=(-1, 1), p95=(-2, 5)), 1e-6) == "no significant difference"
    assert _verdict(row(p95=(300, 800)), 0.2) == "no significant difference"  # the test does not see it


def test_a_tail_that_slowed_while_the_median_held_is_called_slower_at_the_tail():
    rng = np.random.default_rng(3)
    a = rng.normal(100, 5, 4000)
    b = a.copy()
    b[rng.random(4000) < 0.04] += 400  # 4% of B's requests 400 ms later: the median holds, the p95 and p99 do not
    compared = compare_groups(a, b)
    assert compared.p50_ci_low < 0 < compared.p50_ci_high and compared.test_p < 0.05
    assert compared.verdict == "B slower at p95, p99", compared
