"""The sort chosen for a log's integers changes the time, never a number: each statistic that sorts with
INTEGER_SORT or TIME_SORT gives the same result, to the bit, under either choice — on times as a log holds them (completion
order, one nearly sorted run per worker, ties) — and the choice follows the CPU."""
from __future__ import annotations

import numpy as np
import pytest
from numpy._core import _multiarray_umath

from tailrace.analysis.stats import arrival_process, correlation, estimators, poisson_checks, queueing, sorting
from tailrace.analysis.stats.correlation import TimeOrder
from tailrace.analysis.stats.estimators import grouped_quantile
from tailrace.analysis.stats.poisson_checks import poisson_checks as checks_of
from tailrace.analysis.stats.queueing import interarrival_cv2

USERS = (arrival_process, correlation, estimators, poisson_checks, queueing)


def a_logs_times(rows: int = 60_000, workers: int = 6, seed: int = 3) -> np.ndarray:
    """Intended times (ns) in the order a log holds them: each worker's in completion order (nearly sorted), the
    workers' chunks interleaved, some times equal."""
    rng = np.random.default_rng(seed)
    per_worker = []
    for _ in range(workers):
        t = np.sort(rng.integers(0, 60 * 10**9, rows // workers)) // 1000 * 1000  # µs steps: ties
        done = t + rng.integers(0, 50_000_000, len(t))
        per_worker.append(t[np.argsort(done, kind="stable")])
    chunks = [w[i:i + 500] for i in range(0, rows // workers, 500) for w in per_worker]
    return np.concatenate(chunks)


def under(kind: str, monkeypatch: pytest.MonkeyPatch, compute):
    for module in USERS:
        for name in ("INTEGER_SORT", "TIME_SORT"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, kind)
    return compute()


@pytest.mark.parametrize("statistic", ["poisson", "cv2", "grouped", "order"])
def test_each_statistic_that_sorts_integers_is_the_same_under_either_sort(statistic, monkeypatch):
    times = a_logs_times()
    rng = np.random.default_rng(4)
    latency = rng.integers(1_000_000, 90_000_000, len(times))
    # under an eighth: their ranks sorted (an eighth or more: marked by rank, no sort)
    rows = np.sort(rng.choice(len(times), len(times) // 10, replace=False))

    def compute():
        if statistic == "poisson":
            return checks_of(times)
        if statistic == "cv2":
            return interarrival_cv2(times.copy(), overwrite_input=True)
        if statistic == "grouped":  # many keys: the packed sort, not the radix one
            keys = (times - times.min()) // 1_000_000  # per millisecond
            return [a.tolist() for a in grouped_quantile(keys, latency, 0.99)]
        return TimeOrder(times).of(rows).tolist()

    stable, quick = (under(kind, monkeypatch, compute) for kind in ("stable", "quicksort"))
    assert stable == quick


def test_the_sort_follows_the_cpu(monkeypatch):
    monkeypatch.setitem(_multiarray_umath.__cpu_features__, "AVX512_SKX", True)
    assert sorting._vectorised_quicksort()
    monkeypatch.setitem(_multiarray_umath.__cpu_features__, "AVX512_SKX", False)
    assert not sorting._vectorised_quicksort()
