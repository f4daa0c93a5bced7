"""Intervals and verdicts under correlated latencies (analysis/stats/correlation.py, analysis/stats/validity.py): coverage on
series with a known p99, stationarity, and what a trend does to verdicts and capacity trials."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import signal
from scipy import stats as sps

from tailrace.analysis.decide.capacity_search import FAIL, classify_trial
from tailrace.analysis.stats.correlation import effective_size, quantile_tau, stationarity
from tailrace.analysis.stats.estimators import dispersion_pvalue, proportion_verdict, sorted_percentile, sorted_percentile_ci
from tailrace.analysis.stats.slo import evaluate_slos
from tailrace.contract.summary import SloVerdict

REPS = 200


def mm1_sojourn(rng: np.random.Generator, n: int, rho: float = 0.9, mu: float = 1.0) -> tuple[np.ndarray, float]:
    """Time in system of n consecutive customers of a stationary M/M/1 queue (Lindley's recursion, started from
    the stationary waiting time) and its true p99: the sojourn time is Exp(μ − λ)."""
    lam = rho * mu
    service = rng.exponential(1 / mu, n)
    steps = service[:-1] - rng.exponential(1 / lam, n - 1)
    w0 = rng.exponential(1 / (mu - lam)) if rng.random() < rho else 0.0
    walk = np.concatenate([[0.0], np.cumsum(steps)])
    wait = np.maximum(walk + w0, walk - np.minimum.accumulate(walk))  # W_k = max(W_0 + S_k, S_k − min S_j)
    return wait + service, float(np.log(100) / (mu - lam))


def ar1(rng: np.random.Generator, n: int, phi: float = 0.9) -> tuple[np.ndarray, float]:
    """A stationary Gaussian AR(1) series and its true p99."""
    e = rng.normal(size=n)
    x0 = rng.normal() / np.sqrt(1 - phi ** 2)
    x = signal.lfilter([1], [1, -phi], e, zi=[phi * x0])[0]
    return x, float(sps.norm.ppf(0.99) / np.sqrt(1 - phi ** 2))


def iid_exponential(rng: np.random.Generator, n: int) -> tuple[np.ndarray, float]:
    return rng.exponential(1.0, n), float(np.log(100))


def _coverage(generate, n: int, seed: int = 1) -> tuple[float, float, list[float]]:
    """(independent-sample coverage, correlated coverage, width ratios new / old) of the p99 interval."""
    rng = np.random.default_rng(seed)
    old_hits = new_hits = 0
    ratios = []
    for _ in range(REPS):
        x, truth = generate(rng, n)
        xs = np.sort(x)
        old = sorted_percentile_ci(xs, 99)
        tau = quantile_tau(x, sorted_percentile(xs, 0.99))
        new = sorted_percentile_ci(xs, 99, effective_n=effective_size(n, tau))
        old_hits += old.ci_low <= truth <= old.ci_high
        new_hits += new.has_interval and new.ci_low <= truth <= new.ci_high
        ratios.append((new.ci_high - new.ci_low) / (old.ci_high - old.ci_low))
    return old_hits / REPS, new_hits / REPS, ratios


@pytest.mark.parametrize(("name", "generate", "n"), [("M/M/1 at ρ = 0.9", mm1_sojourn, 1_000_000),
                                                     ("AR(1), φ = 0.9", ar1, 100_000)])
def test_the_p99_interval_covers_the_truth_on_correlated_series(name, generate, n):
    old, new, _ = _coverage(generate, n)
    print(f"{name}, n = {n:,}: p99 interval coverage over {REPS} repetitions — independent-sample {old:.1%}, "
          f"correlation-aware {new:.1%}")
    assert new >= 0.93
    assert old < 0.7  # the independent-sample interval is far too narrow here: the test has teeth


def test_on_independent_data_the_interval_is_at_most_a_fifth_wider():
    old, new, ratios = _coverage(iid_exponential, 20_000)
    print(f"independent: coverage {old:.1%} → {new:.1%}, width ratio mean {np.mean(ratios):.3f}, "
          f"max {np.max(ratios):.3f}")
    assert np.mean(ratios) <= 1.2
    assert new >= 0.93


def test_effective_n_equal_to_n_is_the_order_statistic_interval():
    x = np.sort(np.random.default_rng(3).lognormal(0, 1, 5000))
    assert sorted_percentile_ci(x, 99, effective_n=5000) == sorted_percentile_ci(x, 99)
    fewer = sorted_percentile_ci(x, 99, effective_n=500)
    assert fewer.ci_low <= sorted_percentile_ci(x, 99).ci_low and fewer.ci_high >= sorted_percentile_ci(x, 99).ci_high
    few = sorted_percentile_ci(x, 99, effective_n=100)  # the value stands; its interval needs more
    assert few.reportable and not few.has_interval and few.value == sorted_percentile_ci(x, 99).value
    assert few.ci_low is None and "worth 100" in few.as_dict()["note"]
    assert not sorted_percentile_ci(x[:100], 99).reportable  # too few values: no estimate at all


def test_a_verdict_on_correlated_exceedances_needs_more_samples():
    independent = proportion_verdict(40, 10_000, 0.01)
    correlated = proportion_verdict(40, 10_000, 0.01, tau=25.0)
    assert independent.verdict == "PASS" and correlated.verdict == "INCONCLUSIVE"
    assert correlated.effective_n == 400 and correlated.more_samples_needed > 10_000


def test_stationarity_flags_a_drift_and_not_a_level_series():
    rng = np.random.default_rng(5)
    t = np.sort(rng.uniform(0, 60, 6000))
    flat = stationarity(t, rng.exponential(10, 6000))
    assert flat.stationary is True and flat.reason() is None
    drifting = stationarity(t, rng.exponential(10, 6000) * (1 + t / 20))
    assert drifting.stationary is False
    assert "rose" in drifting.reason() and "backlog growing" in drifting.reason()
    assert stationarity(t[:100], rng.exponential(10, 100)).stationary is None  # too few to tell


def _measured(latency_ms: np.ndarray, seconds: float = 60.0) -> pd.DataFrame:
    n = len(latency_ms)
    t = np.sort(np.random.default_rng(7).uniform(0, seconds, n))
    return pd.DataFrame({"endpoint": "e", "region": "r", "status": "ok", "phase": 1,
                         "latency_ns": (latency_ms * 1e6).astype(np.int64), "t_intended_ref": (t * 1e9).astype(np.int64)})


def _latency_slo(percentile: float, threshold_ms: float) -> list[dict]:
    return [{"metric": "latency", "percentile": percentile, "threshold_ms": threshold_ms, "endpoint": "*",
             "region": "*"}]


def test_a_drift_that_could_cross_its_threshold_is_inconclusive_and_fails_a_capacity_trial():
    rng = np.random.default_rng(11)
    steady = evaluate_slos(_measured(rng.exponential(5, 8000)), _latency_slo(99, 150), ["e"], ["r"])
    assert steady[0].verdict == "PASS" and steady[0].trend is None
    drift = np.random.default_rng(11).exponential(5, 8000) * np.linspace(1, 6, 8000)  # p99 ≈ 97 ms, rising
    verdicts = evaluate_slos(_measured(drift), _latency_slo(99, 150), ["e"], ["r"])
    v = verdicts[0]
    assert v.measured < 150 and v.verdict == "INCONCLUSIVE", v
    assert (v.trend, v.trend_kind, v.trend_changed_verdict) == ("rising", "growing", True)
    assert "latency rose through the run" in v.reason and "backlog growing" in v.reason
    assert "could reach 150 ms" in v.reason
    outcome, why = classify_trial([SloVerdict.model_validate(v) for v in verdicts], True, [])
    assert outcome == FAIL and why.startswith("backlog growing")


def test_a_drift_too_small_to_matter_keeps_its_pass_is_reported_and_still_fails_a_capacity_trial():
    """The same drift against 500 ms: its projection to the phase's end stays far under, so the PASS stands (the
    previous rule made it INCONCLUSIVE); the trend is reported with its size and p-value; a capacity trial still
    fails on it: a queue still growing at the trial's end gets slower in a longer one."""
    drift = np.random.default_rng(11).exponential(5, 8000) * np.linspace(1, 6, 8000)
    verdicts = evaluate_slos(_measured(drift), _latency_slo(99, 500), ["e"], ["r"])
    v = verdicts[0]
    assert v.verdict == "PASS", v
    assert (v.trend, v.trend_kind, v.trend_changed_verdict) == ("rising", "growing", False)
    assert "a drift too small to matter" in v.reason and "trend p = " in v.reason
    assert "the verdict stands" in v.reason
    outcome, why = classify_trial([SloVerdict.model_validate(v) for v in verdicts], True, [])
    assert outcome == FAIL and why.startswith("backlog growing")


def _settling(rise_to_ms: float, n: int = 8000) -> np.ndarray:
    """30 ms rising to `rise_to_ms` over the first 40% of the phase, then held (a batch growing to a new size)."""
    level = 30 + (rise_to_ms - 30) * np.minimum(np.linspace(0, 1, n) / 0.4, 1)
    return level * np.random.default_rng(3).lognormal(0, 0.2, n)


def test_a_level_that_settles_after_a_step_keeps_its_pass_and_is_no_backlog():
    """The demo's case: latency rises after a rate step, then holds far under the threshold. The trend is found
    and reported (the previous rule made this PASS INCONCLUSIVE, and failed a capacity trial on it)."""
    verdicts = evaluate_slos(_measured(_settling(45)), _latency_slo(90, 250), ["e"], ["r"])
    v = verdicts[0]
    assert v.verdict == "PASS", v
    assert (v.trend, v.trend_kind, v.trend_changed_verdict) == ("rising", "settled", False)
    assert "then held through the phase's last half" in v.reason and "not a backlog" in v.reason
    assert classify_trial([SloVerdict.model_validate(v) for v in verdicts], True, [])[0] == "pass"


def test_a_settled_level_whose_interval_reaches_the_threshold_is_inconclusive():
    """Settled, but at p90 ≈ 58.5 ms: the held level's interval straddles a 58.5 ms threshold the whole phase's
    p90 (≈ 56 ms, pooled with the lower start) passes."""
    verdicts = evaluate_slos(_measured(_settling(45)), _latency_slo(90, 58.5), ["e"], ["r"])
    v = verdicts[0]
    assert v.measured < 58.5 and v.verdict == "INCONCLUSIVE", v
    assert (v.trend_kind, v.trend_changed_verdict) == ("settled", True)
    assert "could reach 58.5 ms" in v.reason


def test_the_dispersion_test_accepts_poisson_counts_and_rejects_clumps():
    rng = np.random.default_rng(2)
    poisson = np.cumsum(rng.exponential(1 / 100, 5000))
    assert dispersion_pvalue(poisson) > 0.001
    clumped = np.sort(np.concatenate([rng.uniform(s, s + 0.05, rng.integers(0, 400)) for s in range(50)]))
    assert dispersion_pvalue(clumped) < 0.001


def test_the_paired_p99_difference_interval_covers_the_truth_with_enough_pairs():
    """Common-random-number pairs of M/M/1 series at ρ = 0.5, B's service 5% slower (bench/paired_coverage.py,
    where fewer pairs or a busier queue cover less: docs/BENCHMARKS.md): with 50,000 pairs the 95% interval of
    Δp99 covers the true difference in at least 35 of 40 repetitions."""
    from bench.paired_coverage import crn_mm1_pair
    from tailrace.analysis.stats.correlation import paired_quantile_difference

    rng = np.random.default_rng(21)
    covered = 0
    for _ in range(40):
        a, b, truth = crn_mm1_pair(rng, 50_000, 0.5)
        _, low, high = paired_quantile_difference(a, b, 99)
        covered += low <= truth <= high
    assert covered >= 35


def test_the_unpaired_p99_difference_interval_counts_the_correlation():
    """Two independent M/M/1 runs at ρ = 0.8 (B 5% slower), 20,000 requests each: the bootstrap resamples each
    run at the size its time-ordered latencies are worth, and covers the true Δp99 in ≥ 35 of 40 repetitions.
    Resampling all n (as if independent) covered 14% at 100,000 requests (docs/BENCHMARKS.md)."""
    from bench.paired_coverage import crn_mm1_pair
    from tailrace.analysis.decide.compare import compare_groups

    rng = np.random.default_rng(8)
    covered = 0
    for _ in range(40):
        a, _, _ = crn_mm1_pair(rng, 20_000, 0.8)
        _, b, truth = crn_mm1_pair(rng, 20_000, 0.8)  # another draw: the runs are independent
        row = compare_groups(a, b)
        covered += row.p99_ci_low <= truth <= row.p99_ci_high
    assert covered >= 35


def test_dispersion_counts_of_sorted_times_are_numpys_histogram():
    """The sorted path of the dispersion checks counts by binary search: np.histogram's counts, bin edges
    (events exactly on an edge, the closed last bin) included."""
    from tailrace.analysis.stats.estimators import _bin_counts

    rng = np.random.default_rng(4)
    cases = [np.sort(rng.uniform(0, span, n) + 1.7e9) for n in (2, 3, 50, 20_000) for span in (0.5, 3, 40)]
    cases += [np.array([0.0, 1, 1, 2, 2, 3, 3]), np.arange(0, 10, 0.5), np.repeat(np.arange(5.0), 3)]
    for t in cases:
        fast, numpys = _bin_counts(t, 1.0, is_sorted=True), _bin_counts(t, 1.0)
        assert (fast is None and numpys is None) or np.array_equal(fast, numpys), t[:5]


def _whole_frame_checks(df):
    """arrival_checks_by_column of a whole frame (its phase, worker and region; its time and lag columns)."""
    from tailrace.analysis.stats.poisson_checks import arrival_checks_by_column

    return arrival_checks_by_column(df[["phase", "worker", "region"]], lambda name: df[name].to_numpy())


def test_arrival_checks_are_the_same_from_runs_of_rows_and_from_positions(monkeypatch):
    """A worker's phases come as runs of rows (no position arrays); a log whose rows change worker or phase
    too often falls back to positions. Both give the same rows, in the same order."""
    import tailrace.analysis.stats.poisson_checks as arrivals

    rng = np.random.default_rng(2)
    n = 6000
    intended = np.sort(rng.uniform(0, 60e9, n)).astype(np.int64) + 1_700_000_000 * 10**9
    df = pd.DataFrame({"t_intended": intended, "t_intended_ref": intended + 5, "t_sent": intended + 1000,
                       "t_sent_ref": intended + 1005, "send_lag_ns": np.full(n, 1000),
                       "phase": np.where(intended < intended[n // 3], 0, np.where(intended < intended[2 * n // 3], 1, 2)
                                         ).astype(np.int32),
                       "worker": pd.Categorical(np.repeat(["w0", "w1"], n // 2)),
                       "region": pd.Categorical(np.repeat(["r0", "r1"], n // 2))})
    from_runs = _whole_frame_checks(df)
    monkeypatch.setattr(arrivals, "key_runs", lambda df, keys: None)
    from_positions = _whole_frame_checks(df)
    assert len(from_runs) == 5 and from_runs == from_positions  # phase 1: w0, w1, merged; phase 2: w1, merged


def test_arrival_checks_hold_at_most_two_time_columns(monkeypatch):
    """arrival_checks_by_column asks for the five time and lag columns one at a time and spares each once read:
    never more than two held (a worker-clock column and its reference-clock twin), and the rows those of the whole
    frame."""
    import tailrace.analysis.stats.poisson_checks as arrivals

    rng = np.random.default_rng(3)
    n = 4000
    intended = np.sort(rng.uniform(0, 40e9, n)).astype(np.int64) + 1_700_000_000 * 10**9
    df = pd.DataFrame({"t_intended": intended, "t_intended_ref": intended - 7, "t_sent": intended + 900,
                       "t_sent_ref": intended + 893, "send_lag_ns": rng.integers(0, 2000, n),
                       "phase": np.where(intended < intended[n // 4], 0, 1).astype(np.int32),
                       "worker": pd.Categorical(np.repeat(["w0", "w1"], n // 2)),
                       "region": pd.Categorical(np.repeat(["r0", "r1"], n // 2))})
    held: set[str] = set()
    most = []

    def column(name: str) -> np.ndarray:
        held.add(name)
        most.append(len(held))
        return df[name].to_numpy()

    def spare(*names: str) -> None:
        held.difference_update(names)

    rows = arrivals.arrival_checks_by_column(df[["phase", "worker", "region"]], column, None, spare)
    assert rows == _whole_frame_checks(df) and len(rows) == 3  # phase 1: w0, w1, merged
    assert max(most) == 2 and held == set()


@pytest.mark.parametrize("p", [0.001, 0.3, 0.99])
def test_tau_of_a_boolean_indicator_is_the_same_bits_as_of_its_floats(p):
    """integrated_time keeps an indicator as booleans (one byte a value, not eight): its variance and batch means
    are numpy's float ones to the last bit, on an independent and on a correlated series."""
    rng = np.random.default_rng(7)
    from tailrace.analysis.stats.correlation import _variance, integrated_time
    for z in (rng.random(200_003) < p, mm1_sojourn(rng, 200_003)[0] <= np.quantile(mm1_sojourn(rng, 1000)[0], p)):
        assert _variance(z) == float(z.astype(float).var())
        assert integrated_time(z) == integrated_time(z.astype(float))
    assert integrated_time(np.ones(1000, dtype=bool)) == 1.0


def test_boolean_variance_and_batch_means_are_numpys_at_every_length():
    """The one-pass variance of a boolean series and its batch means as counts are numpy's float var and mean to
    the last bit at lengths that exercise each branch of numpy's pairwise sum (under 8, within one block of 128,
    odd remainders, many blocks), at several densities."""
    rng = np.random.default_rng(11)
    from tailrace.analysis.stats.correlation import _batch_means, _variance
    for n in (1, 5, 8, 127, 129, 1000, 4099, 65_541, 300_007):
        for p in (0.0, 0.01, 0.5, 0.97):
            z = rng.random(n) < p
            assert _variance(z) == float(z.astype(float).var()), (n, p)
            for k in (1, 3, 64):
                if n // k:
                    b = n // k
                    assert np.array_equal(_batch_means(z, k, b), z[n - b * k:].reshape(k, b).astype(float).mean(axis=1))


def test_verdicts_sorted_from_the_latency_tables_arrays_are_numpys_sort():
    """evaluate_slos appends errors (+inf) to the latency table's sorted successes instead of sorting again:
    the same array as np.sort, NaN latencies (sorted after inf) falling back to the sort, and the same verdicts."""
    from tailrace.analysis.stats.slo import _sorted_with_errors
    from tailrace.analysis.stats.validity import groups_of

    rng = np.random.default_rng(11)
    latency = rng.exponential(5, 50_000)
    ok = rng.random(len(latency)) > 0.03
    in_time = np.where(ok, latency, np.inf)
    assert np.array_equal(_sorted_with_errors(in_time, np.sort(latency[ok])), np.sort(in_time))
    # successes of other requests (one fewer): not appended to, sorted afresh
    assert np.array_equal(_sorted_with_errors(in_time, np.sort(latency[ok])[1:]), np.sort(in_time))
    latency[ok.nonzero()[0][:3]] = np.nan
    in_time = np.where(ok, latency, np.inf)
    assert np.array_equal(_sorted_with_errors(in_time, np.sort(latency[ok])), np.sort(in_time), equal_nan=True)
    df = _measured(rng.exponential(5, 8000))
    df["status"] = np.where(rng.random(len(df)) < 0.005, "error", "ok")
    slo = [{"metric": "latency", "percentile": 99, "threshold_ms": 40, "endpoint": "*", "region": "*"}]
    ok_sorted = {("e", "r"): np.sort(df["latency_ns"].to_numpy()[(df["status"] == "ok").to_numpy()] / 1e6)}
    assert evaluate_slos(df, slo, ["e"], ["r"], groups_of(df), ok_sorted) == evaluate_slos(df, slo, ["e"], ["r"])


def test_poisson_checks_sort_what_is_out_of_order_and_take_what_is_in_order_as_it_is():
    from tailrace.analysis.stats.poisson_checks import poisson_checks

    rng = np.random.default_rng(11)
    times = 1_764_000_000_000_000_000 + np.cumsum(rng.exponential(1e6, 20_000)).astype(np.int64)
    shuffled = rng.permutation(times)
    in_order = poisson_checks(times)
    assert in_order["poisson_ok"] and in_order["count"] == len(times)
    assert poisson_checks(shuffled) == in_order  # the shuffled sends are the same sends
    assert not np.array_equal(shuffled, times)  # and the caller's array is left as it was


def test_compare_groups_sorts_once_and_bootstraps_the_sorted_latencies():
    """compare_groups hands its sorted copies to the bootstrap (not sorted again): the intervals are those of
    bootstrap_diff_ci sorting the time-ordered latencies itself."""
    from tailrace.analysis.decide.compare import compare_groups
    from tailrace.analysis.stats.correlation import quantile_tau
    from tailrace.analysis.stats.estimators import bootstrap_diff_ci, sorted_percentile

    rng = np.random.default_rng(11)
    a, b = rng.exponential(10, 20_000), rng.exponential(10.5, 20_000)  # in time order: not sorted
    row = compare_groups(a, b, seed=3)
    for p in (50, 95, 99):
        sizes = tuple(effective_size(len(x), quantile_tau(x, sorted_percentile(np.sort(x), p / 100))) for x in (a, b))
        d = row.difference(p)
        assert (d.value, d.ci_low, d.ci_high) == bootstrap_diff_ci(a, b, p, seed=3, sizes=sizes)
        assert row.a_ms(p) == np.percentile(a, p) and getattr(row, f"p{p}_b_ms") == np.percentile(b, p)


def test_a_sorted_union_reads_the_order_statistics_of_np_sort_of_its_parts():
    """SortedUnion gives, by rank, the values np.sort of the concatenated parts holds — with ties, empty parts, one
    part — and so the same percentiles and intervals (sorted_percentile, sorted_percentile_ci) as the merge."""
    from tailrace.analysis.stats.estimators import SortedUnion, sorted_percentile, sorted_percentile_ci

    rng = np.random.default_rng(1)
    for trial in range(200):
        parts = [np.sort(np.round(rng.exponential(size=int(rng.integers(0, 2000))), int(rng.integers(0, 4))))
                 for _ in range(int(rng.integers(1, 10)))]
        union, merged = SortedUnion(parts), np.sort(np.concatenate(parts))
        assert len(union) == len(merged)
        if not len(merged):
            continue
        ranks = rng.integers(0, len(merged), 20)
        assert [union[int(k)] for k in ranks] == merged[ranks].tolist() and union[-1] == merged[-1]
        assert np.array_equal(union[3:5], merged[3:5])
        for p in (50, 90, 99, 99.9):
            assert sorted_percentile(union, p / 100) == sorted_percentile(merged, p / 100)
            assert sorted_percentile_ci(union, p, 0.05, len(merged) // 3) == sorted_percentile_ci(merged, p, 0.05,
                                                                                                   len(merged) // 3)


@pytest.mark.parametrize("selected", [False, True])
def test_order_statistics_read_by_rank_are_np_sorts_in_any_order_of_reading(selected, monkeypatch):
    """OrderStatistics of unsorted values gives, by rank, what np.sort of them holds — ranks read in any order,
    again, with ties, infinities (errors) and a single value — so the same percentiles and intervals as the sort,
    and the caller's values are left as they were. So does SelectedOrderStatistics (no copy: buckets of the values'
    keys), which correlated_percentiles_ci takes from SELECT_FROM values, with negative values and -inf too, in
    buckets of every width (few key bits: many values a bucket), its blocks many or one."""
    from tailrace.analysis.stats import estimators
    from tailrace.analysis.stats.correlation import correlated_percentiles_ci
    from tailrace.analysis.stats.estimators import sorted_percentile, sorted_percentile_ci

    rng = np.random.default_rng(7)
    OrderStatistics = estimators.SelectedOrderStatistics if selected else estimators.OrderStatistics
    if selected:
        monkeypatch.setattr(estimators, "SELECT_FROM", 0)
        monkeypatch.setattr(estimators, "SELECT_BLOCK", 256)
    for trial in range(100 if selected else 300):
        if selected:  # (the default's 2^20 buckets in the first trials only: each pass counts them all)
            monkeypatch.setattr(estimators, "KEY_BITS", 20 if trial < 4 else int(rng.choice([3, 8, 12])))
            monkeypatch.setattr(estimators, "SEGMENT_SHARE", int(rng.choice([1, 32, 10**6])))
        values = np.round(rng.lognormal(size=int(rng.integers(1, 3000))), int(rng.integers(0, 4)))
        values[rng.random(len(values)) < 0.02] = np.inf
        if selected and trial % 2:
            values = values * rng.choice([1.0, -1.0], len(values))  # negative values, -inf
        kept = values.copy()
        stats_, ordered = OrderStatistics(values), np.sort(values)
        ranks = rng.integers(0, len(values), 25)
        assert [stats_[int(k)] for k in ranks] == ordered[ranks].tolist() and stats_[-1] == ordered[-1]
        assert np.array_equal(stats_[len(values) // 2:len(values) // 2 + 2], ordered[len(values) // 2:len(values) // 2 + 2])
        for p in (50, 90, 99, 99.9):
            assert sorted_percentile(OrderStatistics(values), p / 100) == sorted_percentile(ordered, p / 100)
            assert sorted_percentile_ci(OrderStatistics(values), p, 0.05, len(values) // 3) == \
                sorted_percentile_ci(ordered, p, 0.05, len(values) // 3)
        assert correlated_percentiles_ci(values, (50, 95, 99)) == correlated_percentiles_ci(values, (50, 95, 99), ordered)
        assert np.array_equal(values, kept)


def test_a_percentile_read_from_each_groups_largest_values_is_numpys():
    """tail_quantile of the tail_needed largest values of each of several groups is np.quantile of all their
    values, to the last bit, integers and floats, at every quantile level the analysis reads."""
    from tailrace.analysis.stats.estimators import tail_needed, tail_quantile

    rng = np.random.default_rng(3)
    for trial in range(1000):
        n = int(rng.integers(1, 3000))
        x = rng.integers(0, int(rng.integers(1, 50_000)), n) if trial % 2 else rng.exponential(size=n)
        q = float(rng.choice([0.0, 0.5, 0.9, 0.99, 0.999, 1.0]))
        keep = tail_needed(n, q)
        tops = [p[len(p) - min(keep, len(p)):] for p in (np.partition(p, len(p) - min(keep, len(p))) if len(p) else p
                                                          for p in np.array_split(rng.permutation(x),
                                                                                  int(rng.integers(1, 5))))]
        assert tail_quantile(np.concatenate(tops), n, q) == float(np.quantile(x, q)), (trial, n, q)
    assert tail_quantile(np.array([5, 7, 9]), 3, 99 / 100) == float(np.percentile([5, 7, 9], 99))


def test_rows_put_in_time_order_by_rank_are_those_sorted_by_time():
    """TimeOrder.of gives the positions a stable sort of the rows' own times gives — equal times in row order — for
    random subsets of a log whose workers' times interleave and tie; and the endpoint × region groups built on
    it (groups_of) and their verdicts are those built by sorting each group."""
    import pandas as pd

    from tailrace.analysis.read.frames import frame_of
    from tailrace.analysis.stats.correlation import TimeOrder, time_order
    from tailrace.analysis.stats.validity import groups_of

    rng = np.random.default_rng(4)
    n = 40_000
    times = np.concatenate([np.sort(rng.integers(0, 10**6, n // 2)), np.sort(rng.integers(0, 10**6, n // 2))])
    times[rng.random(n) < 0.01] += rng.integers(-50, 50)  # completion order: a little out of order
    order, order_alone = TimeOrder(times), TimeOrder(times, ranks=False)
    assert order_alone.rank is None
    for p in (1.0, 0.6, 0.2, 0.1, 0.01):  # an eighth of the log or more: marked by rank; fewer: ranks sorted
        rows = np.flatnonzero(rng.random(n) < p).astype(np.int32)
        assert np.array_equal(order.of(rows), rows[time_order(times[rows])])
        assert np.array_equal(order_alone.of(rows), rows[time_order(times[rows])])
        assert np.array_equal(order_alone.of(rows, times), rows[time_order(times[rows])])  # few rows: their times
    df = frame_of({"endpoint": pd.Categorical(rng.choice(["a", "b"], n)), "region": pd.Categorical(rng.choice(["r"], n)),
                   "status": pd.Categorical(np.where(rng.random(n) < 0.02, "timeout", "ok")),
                   "latency_ns": rng.integers(10**6, 10**8, n), "t_intended_ref": times,
                   "phase": np.where(np.arange(n) % (n // 2) < 2000, 0, 1).astype(np.int32)}, pd.RangeIndex(n))
    plain, ordered = groups_of(df), groups_of(df, order=order)
    for key, g in plain.items():
        for column in ("time_ns", "latency_ns", "ok", "phase"):
            assert np.array_equal(getattr(g, column), getattr(ordered[key], column)), (key, column)


def test_boolean_variance_split_in_blocks_is_numpys_on_long_series():
    """A boolean series longer than the variance's block is summed block by block in numpy's pairwise order: the
    same bits as numpy's float var, at lengths whose halves land on and off multiples of 8 and of the block, at
    densities taking either leaf (a branch or a gather), and on a series that is not independent."""
    from tailrace.analysis.stats.correlation import SUM_BLOCK, _variance
    rng = np.random.default_rng(19)
    for n in (SUM_BLOCK + 1, 2 * SUM_BLOCK, 2 * SUM_BLOCK + 7, 5 * SUM_BLOCK + 3, 1_000_003):
        for p in (0.0005, 0.03, 0.5, 0.9, 0.999):
            z = rng.random(n) < p
            assert _variance(z) == float(z.astype(float).var()), (n, p)
    runs = np.repeat(rng.random(3_000) < 0.2, rng.integers(1, 700, 3_000))  # long runs of each value
    assert _variance(runs) == float(runs.astype(float).var())


def test_blockwise_sum_of_two_values_adds_in_numpys_pairwise_order():
    """Two values of unlike size, whose sum depends on the order of the additions: the blockwise sum is numpy's to
    the last bit at many lengths beyond a block, by either leaf (a split off numpy's by a few values fails here)."""
    from functools import partial

    from tailrace.analysis.stats.correlation import _squares_leaf
    from tailrace.analysis.stats.estimators import SUM_BLOCK, pairwise_sum
    rng = np.random.default_rng(23)
    squares = np.array([0.7, 3.1e-9])
    for n in rng.integers(SUM_BLOCK + 1, 6 * SUM_BLOCK, 40):
        for p in (0.03, 0.5):
            z = rng.random(int(n)) < p
            expected = float(np.where(z, squares[1], squares[0]).sum())
            for by_branch in (True, False):
                leaf = partial(_squares_leaf, z, squares, np.empty(SUM_BLOCK), by_branch)
                assert pairwise_sum(len(z), leaf) == expected, (n, p)


def test_pairwise_sum_of_floats_is_numpys_to_the_bit():
    """Floats of wildly unlike sizes (their sum depends on the order of the additions), handed over a stretch at a
    time: numpy's own float sum and mean, to the last bit, at lengths below, at and across a block's, with small
    blocks too."""
    from tailrace.analysis.stats.estimators import SUM_BLOCK, pairwise_sum
    rng = np.random.default_rng(29)
    for n in (1, 7, 128, 129, SUM_BLOCK, SUM_BLOCK + 1, 3 * SUM_BLOCK + 5, *rng.integers(SUM_BLOCK, 8 * SUM_BLOCK, 8)):
        x = rng.lognormal(0, 6, int(n)) * rng.choice([1, -1], int(n))
        for block in (SUM_BLOCK, 1000):
            total = pairwise_sum(len(x), lambda a, b: float(x[a:b].sum()), block)
            assert total == float(x.sum()) and total / len(x) == float(x.mean()), (n, block)


def test_a_group_keeps_its_times_only_where_a_phase_trends():
    """groups_of finds each group's trends as it builds it: its phases' stationarity found once, its times let go
    where every phase held one level, kept where one trends — whose series (judged by the SLO verdicts) is the one
    a group built alone gives; built in two threads, the same groups."""
    from tailrace.analysis.read.frames import frame_of
    from tailrace.analysis.stats.validity import Group, groups_of

    rng = np.random.default_rng(12)
    n = 24_000
    endpoint = np.where(np.arange(n) % 2 == 0, "steady", "drifting")
    latency = rng.exponential(5e6, n) + np.where(endpoint == "drifting", np.linspace(1e6, 4e7, n), 1e6)
    df = frame_of({"endpoint": pd.Categorical(endpoint), "region": pd.Categorical(np.full(n, "r")),
                   "status": pd.Categorical(np.full(n, "ok")), "latency_ns": latency.astype(np.int64),
                   "t_intended_ref": np.arange(n, dtype=np.int64) * 10**6,
                   "phase": np.ones(n, dtype=np.int32)}, pd.RangeIndex(n))
    groups = groups_of(df)
    assert groups[("steady", "r")].time_ns is None and groups[("drifting", "r")].time_ns is not None
    drifting = df[df["endpoint"] == "drifting"]
    alone = Group(drifting["t_intended_ref"].to_numpy(), drifting["latency_ns"].to_numpy(),
                      np.ones(len(drifting), dtype=bool), drifting["phase"].to_numpy())
    [series], [again] = groups[("drifting", "r")].phase_series(), alone.phase_series()
    assert np.array_equal(series.times, again.times) and np.array_equal(series.values_ms, again.values_ms)
    assert series.stationarity == again.stationarity
    assert groups[("steady", "r")].phase_series() == []
    for key, g in groups_of(df, threads=2).items():
        assert g.per_phase() == groups[key].per_phase() and np.array_equal(g.latency_ns, groups[key].latency_ns)
