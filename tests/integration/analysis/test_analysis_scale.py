"""A 1,000,000-row synthetic run directory (bench/synthetic_run.py) through `tailrace analyze` and `tailrace
compare`: the percentiles are numpy's on the same rows, read independently of the analysis."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bench.synthetic_run import ENDPOINTS, REGIONS, Shape, latencies_ms, write_synthetic_run
from tailrace.analysis.analyze_command import analyze_and_report
from tailrace.analysis.decide.compare import compare_runs
from tailrace.analysis.stats.estimators import order_statistic_ranks

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)

ROWS = 1_000_000


@pytest.fixture(scope="module")
def large_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("large") / "run"
    write_synthetic_run(run_dir, Shape(ROWS, chunks=60, seed=7))
    code = analyze_and_report(run_dir, None, quiet=True)
    return run_dir, code, json.loads((run_dir / "report" / "summary.json").read_text())


def test_a_million_rows_are_all_read(large_run):
    run_dir, code, summary = large_run
    assert summary["input"]["rows_read"] == ROWS and not summary["input"]["chunks_skipped"]
    assert code == summary["exit_code"] and summary["verdict"] in ("PASS", "FAIL")
    assert (run_dir / "report" / "index.html").stat().st_size < 3_000_000  # plots are not one point per request


def test_percentiles_are_numpys_on_the_same_rows(large_run):
    run_dir, _, summary = large_run
    rows = {(r["endpoint"], r["region"]): r for r in summary["latency"]}
    for endpoint, *_ in ENDPOINTS:
        per_region = []
        for region, *_ in REGIONS:
            truth = latencies_ms(run_dir, endpoint, region)
            per_region.append(truth)
            row = rows[(endpoint, region)]
            assert row["ok"] == len(truth)
            for name, est in row["percentiles"].items():
                q = float(name[1:])
                assert est["value"] == np.percentile(truth, q), (endpoint, region, name)
                # the interval: the order statistics of the effective sample size's ranks, read off these rows
                m, n = est["effective_n"], len(truth)
                lo, hi = order_statistic_ranks(m, q / 100)
                if m < n:
                    lo, hi = max(1, int(np.floor(lo * n / m))), min(n, int(np.ceil(hi * n / m)))
                ordered = np.sort(truth)
                assert (est["ci_low"], est["ci_high"]) == (ordered[lo - 1], ordered[hi - 1])
        merged = np.concatenate(per_region)
        assert rows[(endpoint, "*")]["percentiles"]["p99"]["value"] == np.percentile(merged, 99)
        assert rows[(endpoint, "*")]["mean_ms"] == pytest.approx(merged.mean(), rel=1e-12)


def test_compare_reports_numpys_percentiles(large_run, tmp_path):
    run_dir, _, _ = large_run
    other = tmp_path / "other"
    write_synthetic_run(other, Shape(ROWS, chunks=60, seed=8))
    rows = compare_runs(run_dir, other)
    assert len(rows) == len(ENDPOINTS) * len(REGIONS)
    for r in rows:
        a, b = latencies_ms(run_dir, r.endpoint, r.region), latencies_ms(other, r.endpoint, r.region)
        assert (r.n_a, r.n_b) == (len(a), len(b))
        assert r.p99_a_ms == np.percentile(a, 99) and r.p99_b_ms == np.percentile(b, 99)
        assert r.p99_ci_low <= r.p99_diff_ms <= r.p99_ci_high
