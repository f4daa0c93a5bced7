"""Estimators: percentiles and their intervals, minimum samples, proportion verdicts, effect sizes."""


from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from tailrace.analysis.stats.estimators import cohens_d, min_samples_for, percentile_ci, proportion_verdict


@pytest.mark.parametrize("n", [400, 1000, 3001])
@pytest.mark.parametrize("p", [50, 90, 95, 99])
def test_percentile_is_numpys(n, p):
    x = np.random.default_rng(n).exponential(3.0, n)
    assert percentile_ci(x, p).value == np.percentile(x, p)


def test_p99_ci_coverage_at_95_nominal():
    rng = np.random.default_rng(7)
    true_p99 = float(np.exp(sps.norm.ppf(0.99)))  # lognormal(0, 1)
    hits = 0
    for _ in range(200):
        est = percentile_ci(rng.lognormal(0, 1, 2000), 99)
        hits += est.ci_low <= true_p99 <= est.ci_high
    assert hits / 200 >= 0.93, hits


def test_percentile_not_reported_below_min_samples():
    est = percentile_ci(np.arange(1000.0), 99.9)
    assert est.value is None and est.min_samples == min_samples_for(0.999) == 3688
    assert "p99.9 needs ≥ 3688 samples" == est.as_dict()["note"]


@pytest.mark.parametrize("k,n,bound,verdict", [(10, 5000, 0.01, "PASS"), (120, 5000, 0.01, "FAIL"),
                                               (52, 5000, 0.01, "INCONCLUSIVE"), (0, 100, 0.01, "INCONCLUSIVE"),
                                               (0, 1000, 0.01, "PASS"), (3, 100, 0.001, "FAIL")])
def test_proportion_verdicts(k, n, bound, verdict):
    v = proportion_verdict(k, n, bound)
    assert v.verdict == verdict
    if verdict == "INCONCLUSIVE":
        assert v.more_samples_needed and v.more_samples_needed > 0
        # the promised sample count does decide it when the observed proportion holds
        m = n + v.more_samples_needed
        assert proportion_verdict(round(k / n * m), m, bound).verdict != "INCONCLUSIVE"


def test_cohens_d_sign_and_size():
    rng = np.random.default_rng(0)
    a, b = rng.normal(10, 1, 5000), rng.normal(11, 1, 5000)
    assert 0.9 < cohens_d(a, b) < 1.1


def test_a_percentile_that_reaches_the_errors_is_infinite_not_nan():
    from tailrace.analysis.stats.estimators import percentile_ci

    ok = np.linspace(1.0, 100.0, 990)
    with_errors = np.concatenate([ok, np.full(10, np.inf)])  # 1% errors: infinitely slow
    assert percentile_ci(with_errors, 99.5).value == float("inf")
    assert percentile_ci(np.concatenate([ok, np.full(20, np.inf)]), 99).value == float("inf")
    # below the errors, numpy's own linear percentile (type 7), unchanged
    assert percentile_ci(with_errors, 50).value == np.percentile(with_errors[:-10].tolist() + [1e9] * 10, 50)
    assert percentile_ci(with_errors, 98.9).value == np.percentile(with_errors[:-10].tolist() + [1e9] * 10, 98.9)
    assert percentile_ci(ok, 99).value == np.percentile(ok, 99)


def test_order_statistic_bootstrap_matches_resampling():
    """bootstrap_percentiles draws a percentile's bootstrap replicates without resampling: their distribution is
    the resampling bootstrap's (two-sample KS on 4,000 replicates each, for a median and a tail percentile)."""
    from scipy import stats as sps

    from tailrace.analysis.stats.estimators import bootstrap_percentiles

    rng = np.random.default_rng(11)
    x = np.sort(rng.lognormal(0, 1, 400))
    resamples = x[np.random.default_rng(2).integers(0, len(x), size=(4000, len(x)))]
    for p in (50, 99):
        fast = bootstrap_percentiles(x, p, 4000, np.random.default_rng(1))
        assert sps.ks_2samp(fast, np.percentile(resamples, p, axis=1)).pvalue > 0.01, p
    shifted = bootstrap_percentiles(np.sort(x * 1.1), 50, 4000, np.random.default_rng(1))
    assert sps.ks_2samp(shifted, np.percentile(resamples, 50, axis=1)).pvalue < 1e-6  # it tells a 10% shift


def test_pairwise_mean_is_numpys_mean_to_the_bit():
    """pairwise_mean of values handed a stretch at a time is `.mean()` of the whole array, bit for bit, at lengths
    within a block, around it and far beyond — where summing the blocks one after another is not."""
    from tailrace.analysis.stats.estimators import SUM_BLOCK, pairwise_mean

    rng = np.random.default_rng(21)
    for n in (1, 7, 129, SUM_BLOCK, SUM_BLOCK + 1, 5 * SUM_BLOCK + 13):
        x = rng.lognormal(0, 2, n) * 1e3
        assert pairwise_mean(n, lambda a, b: x[a:b]) == x.mean()
    x = rng.normal(0, 1, 5 * SUM_BLOCK + 13) * 10 ** rng.uniform(-3, 6, 5 * SUM_BLOCK + 13)  # wide: rounding shows
    assert pairwise_mean(len(x), lambda a, b: x[a:b]) == x.mean()
    in_turn = sum(float(x[a:a + SUM_BLOCK].sum()) for a in range(0, len(x), SUM_BLOCK)) / len(x)
    assert in_turn != x.mean()  # the order matters: this test would see a mean summed another way
