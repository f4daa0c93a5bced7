"""Pure statistics for latencies that are not independent: queueing makes neighbouring requests' latencies
correlated, so n requests carry less information than n independent samples.

The information a time-ordered series carries about its q-quantile is that of the indicator series
z_t = 1{x_t ≤ x̂_q}: the sample quantile's variance is Var(mean z) / f(x_q)². Batch means estimate
Var(mean z) whatever the correlation (Law & Kelton, ch. 9): split the series into k batches of b requests;
when the batches are long enough to be nearly independent, Var(mean z) ≈ Var(batch means) / k. The ratio to
the independent variance q(1 − q)/n is the integrated autocorrelation time τ, and n / τ the effective sample
size. Batches are lengthened (k halved) while their means are still correlated at lag 1, as Fishman's
batch-size rules do; the estimate is inflated by (t_{k−1} / z)² for the batch variance's own uncertainty.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy import stats

from tailrace.analysis.stats.estimators import (
    SUM_BLOCK,
    OrderStatistics,
    SortedUnion,
    order_statistics,
    pairwise_sum,
    sorted_percentile,
    sorted_percentile_ci,
)
from tailrace.analysis.stats.sorting import TIME_SORT

MAX_BATCHES = 64
MIN_BATCHES = 16
MIN_BATCH_SIZE = 8
ALPHA = 0.05
# stationarity: windows of the measured phase, and what counts as a trend worth reporting
WINDOWS = 20
MIN_WINDOWS = 8
MIN_PER_WINDOW = 20
TREND_ALPHA = 0.001
TREND_MIN_CHANGE = 0.2


def lag1_autocorrelation(x: np.ndarray) -> float | None:
    """Lag-1 autocorrelation of a time-ordered series (None below 3 values or when constant)."""
    x = np.asarray(x, dtype=float)
    if len(x) < 3:
        return None
    d = x - x.mean()
    denominator = float(np.dot(d, d))
    return float(np.dot(d[:-1], d[1:]) / denominator) if denominator > 0 else None


SPARSE = 0.05  # below this share of one kind, choosing by branch beats a table's gather (few mispredictions)


def _squares_leaf(z: np.ndarray, squares: np.ndarray, block: np.ndarray, by_branch: bool, a: int, b: int) -> float:
    """numpy's float sum of squares[z[a:b]] (z boolean), written into `block`. `by_branch`: one of the two values is
    rare, so a branch per value beats a gather."""
    leaf = block[:b - a]
    if by_branch:
        leaf[:] = np.where(z[a:b], squares[1], squares[0])
    else:  # a branch per value would mispredict often: gather from the two squares by the byte
        np.take(squares, z[a:b].view(np.uint8), out=leaf)
    return float(leaf.sum())


def _variance(z: np.ndarray) -> float:
    """z.var() as numpy computes it for z as floats (the same sums, so the same bits), with no temporary the size
    of z: numpy's own var of a boolean array makes two of eight bytes a value. A boolean z's squared deviations
    take one of two values (the same values numpy's subtract and multiply make), summed a block at a time in
    numpy's pairwise order (estimators.pairwise_sum)."""
    n = len(z)
    if z.dtype == bool:
        mean = np.count_nonzero(z) / n  # the count numpy's float sum of the 0s and 1s gives, exactly
        low, high = 0.0 - mean, 1.0 - mean
        squares = np.array([low * low, high * high])
        by_branch = bool(min(mean, 1.0 - mean) < SPARSE)
        return float(pairwise_sum(n, partial(_squares_leaf, z, squares, np.empty(min(n, SUM_BLOCK)), by_branch)) / n)
    deviations = np.subtract(z, z.sum(dtype=np.float64) / n, dtype=np.float64)
    np.multiply(deviations, deviations, out=deviations)
    return float(deviations.sum() / n)


def _batch_means(z: np.ndarray, k: int, b: int) -> np.ndarray:
    """The means of the last k·b values of `z` in k batches of b: a boolean z's as counts over b (numpy's float
    mean of 0s and 1s is that exact count over b), without converting every value to a float."""
    start = len(z) - b * k
    if z.dtype == bool:  # one count a batch: numpy counts a 1-D boolean run without converting it (axis=1 does)
        return np.array([np.count_nonzero(z[start + i * b:start + (i + 1) * b]) for i in range(k)], dtype=np.int64) / b
    return z[start:].reshape(k, b).mean(axis=1)


def integrated_time(z: np.ndarray, alpha: float = ALPHA) -> float:
    """τ ≥ 1 of a time-ordered series by batch means: n / τ of its samples are worth independent ones.
    1 when the series is too short to tell (fewer than MIN_BATCHES × MIN_BATCH_SIZE values) or constant."""
    z = np.asarray(z)
    if z.dtype != bool:  # an indicator stays one byte a value: a day's run holds a hundred million of them
        z = z.astype(float, copy=False)
    n = len(z)
    if n < MIN_BATCHES * MIN_BATCH_SIZE:
        return 1.0
    variance = _variance(z)
    if variance <= 0:
        return 1.0
    k = MAX_BATCHES
    while n // k < MIN_BATCH_SIZE:
        k //= 2
    while True:
        b = n // k
        means = _batch_means(z, k, b)  # the last k·b values: the end of a run is kept
        r1 = lag1_autocorrelation(means)
        if k // 2 < MIN_BATCHES or r1 is None or r1 <= 2 / math.sqrt(k):
            break
        k //= 2
    z_crit = stats.norm.ppf(1 - alpha / 2)
    inflation = (stats.t.ppf(1 - alpha / 2, k - 1) / z_crit) ** 2
    return max(1.0, b * float(means.var(ddof=1)) / variance * inflation)


def effective_size(n: int, tau: float) -> int:
    """The number of independent samples n correlated ones are worth (at least 1 when n ≥ 1)."""
    return max(min(n, 1), int(n / max(tau, 1.0)))


def quantile_tau(x_time_ordered: np.ndarray, value: float) -> float:
    """τ of the indicator series 1{x_t ≤ value}: the correlation that matters for a quantile at `value`."""
    return integrated_time(np.asarray(x_time_ordered) <= value)


@dataclass(frozen=True)
class Stationarity:
    """Did a time-ordered series keep one level over the measured phase? A Mann–Kendall test (Kendall's τ
    against time) on windowed medians, reported as non-stationary only when significant at TREND_ALPHA and
    the Theil–Sen line changes by more than TREND_MIN_CHANGE of the first window's median across the run.

    A trend found is then told apart by the phase's last half (its windows alone, docs/METHODS.md "Trends"):
    *settled* — it moved, then held (no trend at TAIL_ALPHA there, and its slope's 95% interval under half the
    whole phase's slope) — or
    still moving to the phase's end (`end_low_ms`, `end_high_ms`: the last half's line carried to the phase's
    end with its slope's 95% interval)."""

    stationary: bool | None  # None: too few samples to tell
    trend_pvalue: float | None
    first_ms: float | None  # the fitted median at the start and at the end of the series
    last_ms: float | None
    windows: int
    tail_from_s: float | None = None  # where the phase's last half begins (the series' time unit)
    tail_pvalue: float | None = None  # Mann–Kendall on the last half's windowed medians
    tail_level_ms: float | None = None  # the median of the last half's windowed medians (its centre's level)
    tail_slope_ms: tuple[float, float] | None = None  # the last half's Theil–Sen slope's 95% interval, ms a window
    tail_to_end_windows: float | None = None  # from the last half's centre to the phase's end, in windows
    settled: bool | None = None  # a trend found that held through the last half; None: no trend

    @property
    def change(self) -> float | None:
        """The relative change of the fitted median (None where its start is not above 0: a steep rise can fit a
        start below 0; `rising` still says which way it went)."""
        if self.first_ms is None or self.last_ms is None or self.first_ms <= 0:
            return None
        return self.last_ms / self.first_ms - 1

    @property
    def rising(self) -> bool:
        """The fitted median ended above where it began."""
        return self.first_ms is not None and self.last_ms is not None and self.last_ms > self.first_ms

    @property
    def kind(self) -> str | None:
        """"settled" (moved, then held) or "growing" (still moving at the phase's end); None when stationary."""
        if self.stationary is not False:
            return None
        return "settled" if self.settled else "growing"

    def trend_words(self) -> str:
        """The trend found, with its size and p-value, and what the phase's last half did."""
        direction = "rose" if self.rising else "fell"
        words = (f"latency {direction} through the run: the median went from {self.first_ms:.3g} ms to "
                 f"{self.last_ms:.3g} ms (trend p = {self.trend_pvalue:.2g})")
        if self.tail_pvalue is None:
            return words
        if self.settled:
            return f"{words}, then held through the phase's last half (trend there p = {self.tail_pvalue:.2g})"
        still = "rising" if self.rising else "falling"
        if self.tail_pvalue < TAIL_ALPHA:
            return f"{words}, still {still} in the phase's last half (p = {self.tail_pvalue:.2g})"
        return (f"{words}; its last half does not show it held (trend there p = {self.tail_pvalue:.2g}, too few "
                f"requests to rule out a {still} slope)")

    def reason(self) -> str | None:
        """Why the series is not stationary, in words; None when it is (or cannot be told)."""
        if self.stationary is not False:
            return None
        if self.settled:
            cause = "a level that settled after a change (not a backlog)"
        elif self.rising:
            cause = "backlog growing: the endpoint did not keep up with the offered load"
        else:
            cause = "the system was still settling (a longer warm-up may be needed)"
        return f"{self.trend_words()} — {cause}"

    def as_dict(self) -> dict:
        return {"stationary": self.stationary, "trend_pvalue": self.trend_pvalue, "first_median_ms": self.first_ms,
                "last_median_ms": self.last_ms, "change": self.change, "windows": self.windows,
                "trend_kind": self.kind, "tail_pvalue": self.tail_pvalue, "reason": self.reason()}


TAIL_ALPHA = 0.01  # a trend still moving in the phase's last half (fewer windows: a looser level than TREND_ALPHA)


def _kendall_p(y: np.ndarray) -> float:
    tau = stats.kendalltau(np.arange(len(y), dtype=float), y)
    return float(tau.pvalue) if np.isfinite(tau.pvalue) else 1.0


def stationarity(times: np.ndarray, values_ms: np.ndarray, windows: int = WINDOWS) -> Stationarity:
    """Stationarity of `values_ms` over `times` (both in time order): medians of up to `windows` equal-time
    windows of at least MIN_PER_WINDOW values each (MIN_WINDOWS at least), a trend test on them (a level shift
    part-way is a monotone change too, so it is caught the same way); a trend found is told settled or growing
    by the last half of the windows."""
    times = np.asarray(times, dtype=float)
    values = np.asarray(values_ms, dtype=float)
    finite = np.isfinite(values)
    times, values = times[finite], values[finite]
    windows = min(windows, len(values) // (MIN_PER_WINDOW + MIN_PER_WINDOW // 2))  # slack for uneven windows
    if windows < MIN_WINDOWS or times[-1] <= times[0]:
        return Stationarity(None, None, None, None, 0)
    edges = np.linspace(times[0], times[-1], windows + 1)
    cut = np.searchsorted(times, edges[1:-1])
    parts = np.split(values, cut)
    if min(len(p) for p in parts) < MIN_PER_WINDOW:
        return Stationarity(None, None, None, None, 0)
    medians = np.array([np.median(p) for p in parts])
    centre = np.arange(windows, dtype=float)
    pvalue = _kendall_p(medians)
    slope, intercept, _, _ = stats.theilslopes(medians, centre)
    first, last = float(intercept), float(intercept + slope * (windows - 1))
    base = max(abs(first), 1e-9)
    stationary = not (pvalue < TREND_ALPHA and abs(last - first) / base > TREND_MIN_CHANGE)
    if stationary:
        return Stationarity(True, pvalue, first, last, windows)
    start = windows // 2
    tail = medians[start:]
    tail_p = _kendall_p(tail)
    tail_slope, _, slope_low, slope_high = stats.theilslopes(tail, np.arange(len(tail), dtype=float))
    # settled only where the last half shows it held: no trend there, and even its slope's far bound in the
    # trend's direction under half the whole phase's (too few requests to show that: still moving)
    far = slope_high if slope > 0 else -slope_low
    still_moving = tail_p < TAIL_ALPHA or far >= abs(slope) / 2
    return Stationarity(False, pvalue, first, last, windows, tail_from_s=float(edges[start]), tail_pvalue=tail_p,
                        tail_level_ms=float(np.median(tail)), tail_slope_ms=(float(slope_low), float(slope_high)),
                        tail_to_end_windows=len(tail) / 2, settled=not still_moving)


def time_order(times: np.ndarray) -> np.ndarray:
    """Positions that put `times` in ascending order (stable: a worker's rows arrive nearly sorted)."""
    return np.argsort(times, kind="stable")


MASK_SHARE = 4  # without ranks, rows under 1/MASK_SHARE of the log sort their times rather than pass over the order
RANK_MASK_SHARE = 8  # with ranks, rows from 1/RANK_MASK_SHARE of the log are marked by rank rather than sorted


class TimeOrder:
    """A log's rows in time order (time_order of its time column: equal times in row order), sorted once. Any rows'
    time order is then read off it by their ranks — an eighth of the log or more marked by rank and read in rank
    order, fewer sorted (small distinct integers, nearly in order already: TIME_SORT, analysis/stats/sorting.py) — for the
    statistics that each put their rows in time order (the latency table's rows, the phases, the endpoint × region
    groups). `ranks=False` (a log that does not fit in memory: a day's run) keeps the order alone, half the memory,
    and reads a set of rows' order by the mask — at 100 M rows ~0.4–0.7 s, against 0.3–17 s to sort their times —
    or, under a quarter of the log, by sorting their times (docs/DECISIONS.md "One time order for a long run")."""

    def __init__(self, times: np.ndarray, ranks: bool = True) -> None:
        small = np.int32 if len(times) < 2**31 else np.int64
        self.order = time_order(times).astype(small)
        self.rank: np.ndarray | None = None
        if ranks:
            self.rank = np.empty(len(times), dtype=small)
            self.rank[self.order] = np.arange(len(times), dtype=small)

    def of(self, rows: np.ndarray, times: np.ndarray | None = None) -> np.ndarray:
        """Distinct positions `rows` in time order: rows[time_order(times[rows])], the same positions. An eighth of
        the log or more marks their ranks and reads them in order, one pass (10 M rows: 31 ms for half of them, 53
        ms for 8 M, against 0.08–0.15 s to timsort their ranks and 0.2–0.34 s to quicksort them); fewer sort their
        ranks (~11 ms for 0.5 M). Without ranks, rows are picked out of the whole time order by a mask, except that
        under a quarter of the log sort their `times` (the log's time column, where the caller has it): at
        100 M rows 0.33 s for a ninth of them against 0.5 s for the mask's pass over the whole order."""
        if self.rank is None and times is not None and MASK_SHARE * len(rows) < len(self.order):
            return rows[time_order(times[rows])]
        if self.rank is None:
            chosen = np.zeros(len(self.order), dtype=bool)
            chosen[rows] = True
            return self.order[chosen[self.order]]
        if RANK_MASK_SHARE * len(rows) >= len(self.order):  # their ranks marked, read in rank order: no sort
            at_rank = np.zeros(len(self.order), dtype=bool)
            at_rank[self.rank[rows]] = True
            return self.order[np.flatnonzero(at_rank)]
        return self.order[np.sort(self.rank[rows], kind=TIME_SORT)]  # distinct: the same by any sort


def correlated_percentiles_ci(time_ordered: np.ndarray, percentiles,
                              sorted_values: np.ndarray | SortedUnion | OrderStatistics | None = None,
                              alpha: float = ALPHA) -> dict:
    """numpy's percentiles of a time-ordered series, each with the order-statistic interval of the independent
    samples the series is worth for that percentile (its indicator's τ). `sorted_values`: the same values
    sorted, when the caller has them; else only the order statistics read are found (order_statistics)."""
    x = order_statistics(time_ordered) if sorted_values is None else sorted_values
    out = {}
    for p in percentiles:
        tau = 1.0
        if len(x):
            value = sorted_percentile(x, p / 100)
            tau = quantile_tau(time_ordered, value) if np.isfinite(value) else 1.0
        out[p] = sorted_percentile_ci(x, p, alpha, effective_size(len(x), tau))
    return out


def _sparsity(x_sorted: np.ndarray, q: float, alpha: float = ALPHA) -> float:
    """1 / density at the q-quantile from the spacing of order statistics around it (Hall–Sheather bandwidth)."""
    n = len(x_sorted)
    z = stats.norm.ppf(1 - alpha / 2)
    xq = stats.norm.ppf(q)
    h = n ** (-1 / 3) * z ** (2 / 3) * (1.5 * stats.norm.pdf(xq) ** 2 / (2 * xq ** 2 + 1)) ** (1 / 3)
    lo, hi = max(q - h, 0.0), min(q + h, 1.0)
    return (sorted_percentile(x_sorted, hi) - sorted_percentile(x_sorted, lo)) / max(hi - lo, 1e-12)


def quantile_influence(x_time_ordered: np.ndarray, x_sorted: np.ndarray, q: float) -> tuple[float, np.ndarray]:
    """(x̂_q, ψ_t): the sample quantile and each observation's influence on it, (q − 1{x_t ≤ x̂_q}) / f(x̂_q);
    the quantile's error is ≈ mean ψ, so its variance is batch-means' estimate of Var(mean ψ)."""
    value = sorted_percentile(x_sorted, q)
    return value, (q - (x_time_ordered <= value)) * _sparsity(x_sorted, q)


SECTIONS = 10


def _sectioned_half_width(a: np.ndarray, b: np.ndarray, percentile: float, alpha: float) -> float:
    """Half-width of the sectioning CI (Asmussen & Glynn): the spread of the difference computed on SECTIONS
    contiguous sections of the pairs, with t on SECTIONS − 1 degrees of freedom; 0 when a section would hold
    too few requests for the percentile."""
    size = len(a) // SECTIONS
    if size * (1 - percentile / 100) < 5:
        return 0.0
    n = size * SECTIONS
    parts = (np.percentile(b[-n:].reshape(SECTIONS, size), percentile, axis=1)
             - np.percentile(a[-n:].reshape(SECTIONS, size), percentile, axis=1))
    return float(stats.t.ppf(1 - alpha / 2, SECTIONS - 1) * parts.std(ddof=1) / math.sqrt(SECTIONS))


def paired_quantile_difference(a: np.ndarray, b: np.ndarray, percentile: float, alpha: float = ALPHA
                               ) -> tuple[float, float, float]:
    """Percentile(b) − percentile(a) of paired, time-ordered samples (a_t and b_t: the same scheduled request in
    two runs with one seed — common random numbers) with its CI. The difference's error is ≈ the mean of
    ψ_b − ψ_a, whose variance batch means estimate with the pairs' covariance and the series' correlation in
    it; that linearisation leaves out a second-order error that matters when pairing makes the difference
    this precise, so the half-width is the larger of it and the sectioning one. Coverage is measured by
    bench/paired_coverage.py (95% with many pairs; too narrow with few pairs near saturation) and checked by
    tests/unit/analysis/stats/test_correlation.py."""
    q = percentile / 100
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    value_a, psi_a = quantile_influence(a, np.sort(a), q)
    value_b, psi_b = quantile_influence(b, np.sort(b), q)
    psi = psi_b - psi_a
    half = stats.norm.ppf(1 - alpha / 2) * math.sqrt(integrated_time(psi) * float(psi.var()) / len(psi))
    half = max(half, _sectioned_half_width(a, b, percentile, alpha))
    diff = value_b - value_a
    return diff, diff - half, diff + half
