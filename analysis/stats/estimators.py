"""Pure statistics for latency reports.

Percentiles use numpy's default definition (linear interpolation between order statistics, Hyndman &
Fan type 7). Confidence intervals are distribution-free order-statistic intervals: with B ~ Bin(n, q)
the number of samples at or below the true q-quantile, [x(l), x(u)] covers it with probability
P(l ≤ B ≤ u−1) ≥ 1 − α.
"""
from __future__ import annotations

import bisect
import math
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np
from scipy import special, stats

from tailrace.analysis.stats.sorting import INTEGER_SORT
from tailrace.contract.summary.base import Estimate

ALPHA = 0.05


@dataclass(frozen=True)
class PercentileEstimate:
    """A percentile with its confidence interval, or why it is not reported as a number."""

    percentile: float
    n: int
    value: float | None
    ci_low: float | None
    ci_high: float | None
    min_samples: int
    effective_n: int | None = None  # independent samples the n are worth (None: treated as independent)

    @property
    def reportable(self) -> bool:
        """A point estimate exists: at least min_samples values."""
        return self.value is not None

    @property
    def has_interval(self) -> bool:
        """Its interval exists too: the values are worth at least min_samples independent ones."""
        return self.ci_low is not None

    def as_dict(self) -> dict:
        return self.estimate().model_dump()

    def estimate(self) -> Estimate:
        """The summary's Estimate of it (a note where it has no value or no interval)."""
        return Estimate(percentile=self.percentile, n=self.n, value=self.value, ci_low=self.ci_low,
                        ci_high=self.ci_high, min_samples=self.min_samples, effective_n=self.effective_n,
                        note=None if self.has_interval else self._note())

    def _note(self) -> str:
        if not self.reportable:
            return f"p{self.percentile:g} needs ≥ {self.min_samples} samples"
        return (f"p{self.percentile:g}'s interval needs ≥ {self.min_samples} independent samples; the {self.n} "
                f"correlated ones are worth {self.effective_n}")


def order_statistic_ranks(n: int, q: float, alpha: float = ALPHA) -> tuple[int, int]:
    """1-based ranks (l, u) of the distribution-free CI for the q-quantile; l = 0 or u > n when unavailable."""
    lo = int(stats.binom.ppf(alpha / 2, n, q))
    hi = int(stats.binom.ppf(1 - alpha / 2, n, q)) + 1
    return lo, hi


@lru_cache(maxsize=256)
def min_samples_for(q: float, alpha: float = ALPHA) -> int:
    """Smallest n for which both ends of the order-statistic interval of the q-quantile exist."""
    n = max(2, int(math.ceil(math.log(alpha / 2) / math.log(max(q, 1 - q)))))
    while True:
        lo, hi = order_statistic_ranks(n, q, alpha)
        if lo >= 1 and hi <= n:
            return n
        n += 1


def percentile_ci(values: np.ndarray, percentile: float, alpha: float = ALPHA) -> PercentileEstimate:
    """numpy's percentile of `values` with an order-statistic CI; not reported below the minimum n."""
    return sorted_percentile_ci(np.sort(np.asarray(values, dtype=float)), percentile, alpha)


def percentiles_ci(values: np.ndarray, percentiles, alpha: float = ALPHA) -> dict[float, PercentileEstimate]:
    """`percentile_ci` for several percentiles of the same values, sorting them once."""
    x = np.sort(np.asarray(values, dtype=float))
    return {p: sorted_percentile_ci(x, p, alpha) for p in percentiles}


def sorted_percentile_ci(x: np.ndarray | SortedUnion | OrderStatistics, percentile: float, alpha: float = ALPHA,
                         effective_n: int | None = None) -> PercentileEstimate:
    """`percentile_ci` of values already sorted ascending (float). `effective_n` (analysis/stats/correlation.py): the
    number of independent samples correlated ones are worth; the interval then spans the quantile levels
    the order-statistic interval of `effective_n` samples spans, read off these n values. With
    effective_n = n (independent samples) it is exactly the order-statistic interval. Fewer than min_samples
    values: no estimate; fewer independent ones: the estimate without an interval."""
    n = len(x)
    m = n if effective_n is None else min(n, effective_n)
    q = percentile / 100
    need = min_samples_for(q, alpha)
    if n < need:
        return PercentileEstimate(percentile, n, None, None, None, need, m)
    if m < need:  # enough values for the percentile, too few independent ones for its interval
        return PercentileEstimate(percentile, n, sorted_percentile(x, q), None, None, need, m)
    lo, hi = order_statistic_ranks(m, q, alpha)
    if m < n:  # the same levels, lo/m and hi/m, among n values
        lo, hi = max(1, int(math.floor(lo * n / m))), min(n, int(math.ceil(hi * n / m)))
    return PercentileEstimate(percentile, n, sorted_percentile(x, q), float(x[lo - 1]), float(x[hi - 1]), need, m)


def sorted_percentile(x: np.ndarray | SortedUnion | OrderStatistics, q: float) -> float:
    """numpy's default (linear) quantile q of sorted `x`, which may end in +inf (errors count as infinitely
    slow): a quantile that reaches an infinite value is +inf (numpy's interpolation gives nan there). Reads
    only the two order statistics around q (numpy's own arithmetic on them), never the whole array again."""
    h = (len(x) - 1) * q
    i = int(np.floor(h))
    pair = x[i:i + 2]
    if not np.isinf(pair[-1]):
        return float(np.quantile(pair, h - i if len(pair) == 2 else 0.0))
    a, b, t = x[i], x[min(i + 1, len(x) - 1)], h - i
    return float(a) if t == 0 or a == b else float(a + t * (b - a))


def tail_needed(n: int, q: float) -> int:
    """How many of the largest of n values hold numpy's linear q-quantile of them: the order statistics from
    rank floor((n − 1)q) up (0 when n is 0)."""
    return n - int(np.floor((n - 1) * q)) if n else 0


def tail_quantile(top: np.ndarray, n: int, q: float) -> float:
    """numpy's linear q-quantile of n values (no NaN), read from `top`: at least the tail_needed(n, q) largest of
    them, in any order (e.g. the largest values of each of several groups whose union the n values are). The
    two order statistics around q are found in `top` and numpy's own arithmetic is applied to them, as
    sorted_percentile does: the same number as np.percentile of all n values."""
    h = (n - 1) * q
    i = int(np.floor(h))
    above = len(top) - (n - i)  # the position in `top`, ascending, of the n values' order statistic i
    pair = np.partition(top, [above, above + 1])[above:above + 2] if i + 1 < n else np.partition(top, above)[above:]
    return float(np.quantile(pair, h - i if len(pair) == 2 else 0.0))


SUM_BLOCK = 1 << 16  # values a leaf of pairwise_sum sums at once: 512 kB of floats, within the core's cache


def pairwise_sum(n: int, leaf: Callable[[int, int], float], block: int = SUM_BLOCK, start: int = 0) -> float:
    """The float sum numpy gives (np.add.reduce of a contiguous float64 array) of n values that `leaf(a, b)` hands
    over a stretch [a, b) at a time, as numpy's float sum of that stretch — never more than `block` of them at once.
    numpy splits an array of more than 128 values at n/2 rounded down to a multiple of 8 and adds the halves' sums;
    this splits the same way down to a block's length and lets numpy sum each leaf: the same additions in the same
    order, the same bits."""
    if n > block:
        half = n // 2
        half -= half % 8
        return pairwise_sum(half, leaf, block, start) + pairwise_sum(n - half, leaf, block, start + half)
    return leaf(start, start + n)


def pairwise_mean(n: int, values: Callable[[int, int], np.ndarray], block: int = SUM_BLOCK) -> float:
    """numpy's mean of n float64 values (at least one) that `values(a, b)` computes a stretch [a, b) at a time —
    pairwise_sum of each stretch's numpy sum, over n: the same bits as `.mean()` of the whole array, which is never
    made (a day's endpoint has tens of millions of values; a block stays in the cache)."""
    return pairwise_sum(n, lambda a, b: float(np.add.reduce(values(a, b))), block) / n


class SortedUnion:
    """The sorted union of sorted arrays (`parts`, no NaN), read by rank without merging them: `len`, `x[i]`
    and short slices `x[i:j]` — what sorted_percentile and sorted_percentile_ci read of a sorted array (a few
    order statistics), for a row whose latencies are its groups' (an endpoint's, the overall row). Each order
    statistic is found by narrowing a window in each part around it (searchsorted), never by a pass over the
    values: the same numbers as np.sort of the concatenation, at ~1 ms a rank (nine parts of 1.1 M values)."""

    def __init__(self, parts: list[np.ndarray]) -> None:
        self.parts = [p for p in parts if len(p)]
        self._n = sum(len(p) for p in self.parts)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, key):
        if isinstance(key, slice):
            return np.array([self.kth(i) for i in range(*key.indices(self._n))], dtype=np.float64)
        i = int(key)
        return self.kth(i + self._n if i < 0 else i)

    def kth(self, k: int) -> float:
        """The k-th smallest value (0-based) of the union."""
        if not 0 <= k < self._n:
            raise IndexError(f"rank {k} of {self._n} values")
        lo, hi = [0] * len(self.parts), [len(p) for p in self.parts]
        while True:  # the k-th value lies in the windows [lo, hi) of the parts; the widest one is halved each turn
            widest = max(range(len(self.parts)), key=lambda j: hi[j] - lo[j])
            pivot = self.parts[widest][(lo[widest] + hi[widest]) // 2]
            below = [int(np.searchsorted(p, pivot, side="left")) for p in self.parts]
            through = [int(np.searchsorted(p, pivot, side="right")) for p in self.parts]
            if sum(below) <= k < sum(through):
                return pivot
            if k < sum(below):
                hi = [min(h, b) for h, b in zip(hi, below)]
            else:
                lo = [max(lo_, t) for lo_, t in zip(lo, through)]


class OrderStatistics:
    """Values in any order (no NaN), read by rank as if sorted: `len`, `x[i]` and short slices `x[i:j]` — what
    sorted_percentile and sorted_percentile_ci read (a few order statistics), without sorting them all. Each rank
    is put in place by a partition of the narrowest stretch that holds it, between the ranks already found (a
    percentile's interval ends lie near it): the same numbers as np.sort's at those ranks, in a few linear passes
    instead of a sort. `values` is copied once; the copy is partitioned in place."""

    def __init__(self, values: np.ndarray) -> None:
        self._x = np.array(values, dtype=np.float64)
        self._found: list[int] = []  # ranks already in place, ascending

    def __len__(self) -> int:
        return len(self._x)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return np.array([self.kth(i) for i in range(*key.indices(len(self._x)))], dtype=np.float64)
        i = int(key)
        return self.kth(i + len(self._x) if i < 0 else i)

    def kth(self, k: int) -> float:
        """The k-th smallest value (0-based)."""
        n = len(self._x)
        if not 0 <= k < n:
            raise IndexError(f"rank {k} of {n} values")
        at = bisect.bisect_left(self._found, k)
        if at == len(self._found) or self._found[at] != k:
            lo = self._found[at - 1] + 1 if at else 0
            hi = self._found[at] if at < len(self._found) else n
            self._x[lo:hi].partition(k - lo)  # a view: in place
            self._found.insert(at, k)
        return float(self._x[k])


SELECT_FROM = 1 << 24  # values from which order statistics are selected by buckets (SelectedOrderStatistics)
KEY_BITS = 20  # a value's bucket: the top bits of its order-preserving key (1/256 of an octave)
SELECT_BLOCK = 1 << 22  # values keyed at a time: no temporary the size of the values
SEGMENT_SHARE = 32  # a bucket's neighbours are collected with it up to 1/SEGMENT_SHARE of the values


def _bucket_keys(block: np.ndarray) -> np.ndarray:
    """Each float64's bucket, in the values' order: the IEEE bits made order-preserving as unsigned integers (a
    negative value's bits all flipped, a positive one's sign bit set; -0.0 before 0.0), their top KEY_BITS bits —
    read from each value's high 32 bits (little-endian: the second word)."""
    high = block.view(np.uint32)[1::2] if sys.byteorder == "little" else block.view(np.uint32)[::2]
    keys = high >> np.uint32(32 - KEY_BITS)  # a positive value's key, less its sign bit
    if (high >= np.uint32(1 << 31)).any():  # negative values (or -0.0): theirs flipped
        keys = np.where(high >> np.uint32(31), ~high >> np.uint32(32 - KEY_BITS), keys | np.uint32(1 << (KEY_BITS - 1)))
    else:
        keys |= np.uint32(1 << (KEY_BITS - 1))
    return keys


class SelectedOrderStatistics(OrderStatistics):
    """OrderStatistics' reads of values in any order (float64, no NaN), without a copy of them: one pass counts
    the values in each bucket (the top bits of an order-preserving key, a block at a time), which says the bucket
    a rank is in; a pass then collects that bucket's values and its neighbours' (up to 1/SEGMENT_SHARE of the
    values) and sorts them — the same numbers np.sort gives at those ranks. For a day's run's latencies: a few
    passes of ~0.3 s instead of 800 MB of fresh pages to copy and partition."""

    def __init__(self, values: np.ndarray) -> None:  # (no copy: OrderStatistics' partitions are not made)
        self._x = np.asarray(values, dtype=np.float64)
        self._starts: np.ndarray | None = None  # the rank each bucket starts at (one more: the end)
        self._segments: list[tuple[int, np.ndarray]] = []  # (first rank, the sorted values of a run of buckets)

    def _blocks(self):
        for start in range(0, len(self._x), SELECT_BLOCK):
            block = self._x[start:start + SELECT_BLOCK]
            yield block, _bucket_keys(block)

    def kth(self, k: int) -> float:
        """The k-th smallest value (0-based)."""
        n = len(self._x)
        if not 0 <= k < n:
            raise IndexError(f"rank {k} of {n} values")
        for first, values in self._segments:
            if first <= k < first + len(values):
                return float(values[k - first])
        if self._starts is None:
            counts = np.zeros(1 << KEY_BITS, dtype=np.int64)
            for _, keys in self._blocks():
                counts += np.bincount(keys.astype(np.intp), minlength=1 << KEY_BITS)
            self._starts = np.concatenate([[0], np.cumsum(counts)])
        starts = self._starts
        lo = int(np.searchsorted(starts, k, side="right")) - 1  # the bucket holding rank k
        hi = lo + 1
        budget = max(int(starts[hi] - starts[lo]), n // SEGMENT_SHARE)
        while True:  # its neighbours too, either side, while they fit the budget
            grown = False
            if lo > 0 and starts[hi] - starts[lo - 1] <= budget:
                lo, grown = lo - 1, True
            if hi < len(starts) - 1 and starts[hi + 1] - starts[lo] <= budget:
                hi, grown = hi + 1, True
            if not grown:
                break
        values = np.concatenate([block[(keys >= lo) & (keys < hi)] for block, keys in self._blocks()])
        values.sort()
        self._segments.append((int(starts[lo]), values))
        return float(values[k - starts[lo]])


def order_statistics(values: np.ndarray) -> OrderStatistics:
    """Values in any order (no NaN) read by rank as if sorted: a partitioned copy (OrderStatistics), or from
    SELECT_FROM values on, selected by buckets without a copy (SelectedOrderStatistics) — the same numbers."""
    return (SelectedOrderStatistics if len(values) >= SELECT_FROM else OrderStatistics)(values)


FEW_KEYS = 1 << 16  # integer keys below this are grouped by a radix sort of their 16 bits
MIN_GROUP_ROWS = 64  # rows a group on average for a partition of each group to beat one sort of every value


def _quantile_from_order_statistics(k: np.ndarray, starts: np.ndarray, q: float, statistic) -> tuple[np.ndarray,
                                                                                                       np.ndarray]:
    """grouped_quantile's result from keys `k` in groups starting at `starts`, and `statistic(below, above)`: each
    group's values at those 0-based ranks (arrays, a rank a group), as if sorted — numpy's linear interpolation
    between the two."""
    counts = np.diff(np.append(starts, len(k)))
    h = (counts - 1) * q
    below = np.floor(h).astype(np.int64)
    above = np.minimum(below + 1, counts - 1)
    a, b = statistic(below, above)
    return k[starts], a + (h - below) * (b - a)


def _grouped_by_radix(keys: np.ndarray, values: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray] | None:
    """grouped_quantile of integer values under few non-negative integer keys (FEW_KEYS; groups of MIN_GROUP_ROWS
    rows on average or more): the rows grouped by a stable radix sort of their keys, each group's two order
    statistics found by a partition of its values — no sort of every value, no packed copy of them. None where
    the keys are too many or the groups too small."""
    if keys.dtype.kind not in "iu" or values.dtype.kind not in "iu" or keys.min() < 0 or keys.max() >= FEW_KEYS:
        return None
    order = np.argsort(keys.astype(np.uint16), kind="stable")  # a radix sort of 16-bit integers
    k = keys[order]
    starts = np.concatenate([[0], np.flatnonzero(k[1:] != k[:-1]) + 1])
    if len(k) < MIN_GROUP_ROWS * len(starts):
        return None
    v = values[order]
    del order

    def statistic(below: np.ndarray, above: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, b = np.empty(len(starts)), np.empty(len(starts))
        stops = np.append(starts[1:], len(v))
        for i, (start, stop, low, high) in enumerate(zip(starts.tolist(), stops.tolist(), below.tolist(),
                                                         above.tolist())):
            group = v[start:stop]  # a view: partitioned in place
            group.partition((low, high) if high != low else low)
            a[i], b[i] = group[low], group[high]
        return a, b
    return _quantile_from_order_statistics(k, starts, q, statistic)


def grouped_quantile(keys: np.ndarray, values: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    """(each distinct key, ascending; the linear q-quantile of its values — numpy's definition, as pandas'
    groupby().quantile). Integer values under few small keys (per-second lines): each group's order statistics by a
    partition (_grouped_by_radix); else one sort of all the values: non-negative integer keys and values below 2^62
    in all are packed into one int64 and sorted as one (~3× faster than a lexsort), anything else is lexsorted."""
    keys, values = np.asarray(keys), np.asarray(values)
    if not len(keys):
        return keys[:0], np.empty(0)
    if (by_radix := _grouped_by_radix(keys, values, q)) is not None:
        return by_radix
    shift = int(values.max()).bit_length() if values.dtype.kind in "iu" and values.min() >= 0 else None
    if shift is not None and keys.dtype.kind in "iu" and keys.min() >= 0 and \
            int(keys.max()).bit_length() + shift < 63:
        packed = np.sort((keys.astype(np.int64) << shift) | values.astype(np.int64), kind=INTEGER_SORT)
        k, v = packed >> shift, packed & ((1 << shift) - 1)
    else:
        order = np.lexsort((values, keys))
        k, v = keys[order], values[order]
    starts = np.concatenate([[0], np.flatnonzero(k[1:] != k[:-1]) + 1])
    return _quantile_from_order_statistics(k, starts, q, lambda below, above: (
        v[starts + below].astype(float), v[starts + above].astype(float)))


def clopper_pearson(k: float, n: float, alpha: float = ALPHA) -> tuple[float, float]:
    """Exact binomial CI of a proportion k/n (the beta form, which also takes an effective, fractional n)."""
    if n == 0:
        return 0.0, 1.0
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


@dataclass(frozen=True)
class Verdict:
    verdict: str  # PASS | FAIL | INCONCLUSIVE
    observed: float  # fraction exceeding / error rate
    ci_low: float
    ci_high: float
    bound: float  # the allowed fraction
    n: int
    more_samples_needed: int | None
    effective_n: int | None = None  # independent samples the n are worth


def proportion_verdict(k: int, n: int, bound: float, alpha: float = ALPHA, tau: float = 1.0) -> Verdict:
    """PASS if the CI of k/n lies below `bound`, FAIL if above, else INCONCLUSIVE with the samples needed.

    For a latency SLO "p99 < T", k counts samples above T and bound = 0.01: this is the order-statistic
    test of the percentile against T (the early-stopping idea of MLPerf LoadGen). `tau` (≥ 1): the integrated
    autocorrelation time of the time-ordered exceedances (analysis/stats/correlation.py); the CI is that of n / tau
    independent samples with the same proportion. The samples needed assume the observed proportion (and
    tau) hold as the run gets longer.
    """
    tau = max(1.0, tau)
    m = n / tau
    lo, hi = clopper_pearson(k / tau, m, alpha) if tau > 1 else clopper_pearson(k, n, alpha)
    p = k / n if n else 0.0
    effective = int(m) if n else 0
    if n and hi < bound:
        return Verdict("PASS", p, lo, hi, bound, n, None, effective)
    if n and lo > bound:
        return Verdict("FAIL", p, lo, hi, bound, n, None, effective)
    more = _samples_to_decide(p, max(1, int(m)), bound, alpha)
    return Verdict("INCONCLUSIVE", p, lo, hi, bound, n, None if more is None else int(math.ceil(more * tau)),
                   effective)


def _samples_to_decide(p: float, n: int, bound: float, alpha: float) -> int | None:
    if abs(p - bound) < 1e-12:
        return None  # sits on the bound: no finite run decides it
    def decided(m: int) -> bool:
        k = int(round(p * m))
        lo, hi = clopper_pearson(k, m, alpha)
        return hi < bound or lo > bound

    hi_n = max(n, 10)
    while not decided(hi_n):
        hi_n *= 2
        if hi_n > 10**9:
            return None
    lo_n = max(n, 1)
    while lo_n < hi_n:
        mid = (lo_n + hi_n) // 2
        if decided(mid):
            hi_n = mid
        else:
            lo_n = mid + 1
    return max(0, hi_n - n)


def bootstrap_percentiles(x_sorted: np.ndarray, percentile: float, reps: int, rng: np.random.Generator,
                          size: int | None = None) -> np.ndarray:
    """`reps` bootstrap replicates of numpy's (linear) percentile of a sample, drawn without resampling it.

    A resample of m values is x[⌊n·U_i⌋] for m uniforms U_i, so its k-th smallest value is x(⌊n·U_(k)⌋), with
    U_(k) ~ Beta(k, m + 1 − k), and the next one lies at U_(k+1) = U_(k) + (1 − U_(k))·Beta(1, m − k). Drawing
    those two order statistics gives each replicate exactly the distribution of the percentile of a resample
    (the percentile bootstrap), in O(1) instead of O(m) per replicate. `size`: m, the resample's size (default
    n); the effective size of a correlated sample makes the replicates spread as its percentile does.
    """
    n = len(x_sorted)
    m = n if size is None else max(1, min(int(size), n))
    h = (m - 1) * percentile / 100
    i = int(np.floor(h))
    u = rng.beta(i + 1, m - i, size=reps)
    lower = x_sorted[np.minimum((n * u).astype(np.int64), n - 1)]
    if i + 1 >= m or h == i:
        return lower
    u_next = u + (1 - u) * rng.beta(1, m - i - 1, size=reps)
    upper = x_sorted[np.minimum((n * u_next).astype(np.int64), n - 1)]
    return lower + (h - i) * (upper - lower)


def bootstrap_diff_ci(a: np.ndarray, b: np.ndarray, percentile: float, reps: int = 2000, seed: int = 0,
                      alpha: float = ALPHA, sizes: tuple[int, int] | None = None, is_sorted: bool = False
                      ) -> tuple[float, float, float]:
    """Percentile(b) − percentile(a) and its percentile-bootstrap CI (bootstrap_percentiles: memory and time
    independent of the sample sizes, so two runs of millions of requests compare in seconds). `sizes`: the
    independent samples a and b are worth (correlated latencies), each run's resample size. `is_sorted`: a and b
    are sorted float arrays already (not sorted again)."""
    rng = np.random.default_rng(seed)
    if not is_sorted:
        a = np.sort(np.asarray(a, dtype=float))
        b = np.sort(np.asarray(b, dtype=float))
    size_a, size_b = sizes if sizes is not None else (None, None)
    diff = float(np.percentile(b, percentile) - np.percentile(a, percentile))
    boots = (bootstrap_percentiles(b, percentile, reps, rng, size_b)
             - bootstrap_percentiles(a, percentile, reps, rng, size_a))
    return diff, float(np.percentile(boots, 100 * alpha / 2)), float(np.percentile(boots, 100 * (1 - alpha / 2)))


def cohens_d(a: np.ndarray, b: np.ndarray) -> float:
    """(mean b − mean a) / pooled standard deviation."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    pooled = math.sqrt(((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / (len(a) + len(b) - 2))
    return float((b.mean() - a.mean()) / pooled) if pooled > 0 else 0.0


def _bin_counts(event_times_s: np.ndarray, bin_s: float, is_sorted: bool = False) -> np.ndarray | None:
    """Events per bin from the first event on, the last (partial) bin dropped; np.histogram's counts, found
    by binary search when the times are sorted (millions of events: no pass over them per bin edge)."""
    t = np.asarray(event_times_s, dtype=float)
    if len(t) < 2:
        return None
    edges = np.arange(t[0] if is_sorted else t.min(), (t[-1] if is_sorted else t.max()) + bin_s, bin_s)
    if len(edges) < 3:
        return None
    if is_sorted:  # bins [e_i, e_i+1), the last one closed, as np.histogram's
        at = np.searchsorted(t, edges, side="left")
        at[-1] = np.searchsorted(t, edges[-1], side="right")
        counts = np.diff(at)
    else:
        counts, _ = np.histogram(t, bins=edges)
    return counts[:-1] if len(counts) > 2 else counts  # the last bin is partial


def index_of_dispersion(event_times_s: np.ndarray, bin_s: float = 1.0, is_sorted: bool = False) -> float | None:
    """Variance / mean of counts in fixed bins (1 for a Poisson process)."""
    counts = _bin_counts(event_times_s, bin_s, is_sorted)
    if counts is None or counts.mean() <= 0:
        return None
    return float(counts.var(ddof=1) / counts.mean())


def dispersion_pvalue(event_times_s: np.ndarray, bin_s: float = 1.0, is_sorted: bool = False) -> float | None:
    """Two-sided p-value of the index of dispersion against Poisson counting: (k − 1)·index ~ χ²(k − 1) for k
    bins (Fisher's dispersion test). With 25 one-second bins an index of 0.5 or 1.5 is still ordinary."""
    counts = _bin_counts(event_times_s, bin_s, is_sorted)
    if counts is None or len(counts) < 3 or counts.mean() <= 0:
        return None
    statistic = (len(counts) - 1) * counts.var(ddof=1) / counts.mean()
    cdf = stats.chi2.cdf(statistic, len(counts) - 1)
    return float(min(1.0, 2 * min(cdf, 1 - cdf)))


def ks_exponential(gaps_s: np.ndarray) -> tuple[float, float] | None:
    """KS statistic and p-value of gaps against the exponential with their own mean rate."""
    g = np.asarray(gaps_s, dtype=float)
    if len(g) < 20:
        return None
    scale = g.mean()
    # the exponential's CDF as scipy's expon computes it, without its per-call argument machinery (seconds at
    # millions of gaps): same statistic, same p-value
    res = stats.kstest(g, lambda x: -special.expm1(-(x / scale)))
    return float(res.statistic), float(res.pvalue)
