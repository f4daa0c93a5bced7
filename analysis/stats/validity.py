"""Is each endpoint × region's sample fit for the numbers drawn from it? After Lancet (Kogias et al., USENIX ATC
2019), which tests stationarity, independence and the arrival process before it reports a percentile:

- stationarity: did latency keep one level through each measured phase (analysis/stats/correlation.py)? A trend
  turns a latency SLO's PASS into INCONCLUSIVE, and fails a capacity trial when latency rises (backlog);
- independence: the lag-1 autocorrelation of the time-ordered latencies and the effective sample size of
  their p99, which the intervals and verdicts already use;
- arrivals: analysis/stats/poisson_checks.py (KS, Anderson–Darling, dispersion of the send gaps).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import endpoint_region_positions
from tailrace.analysis.read.threads import map_in_threads
from tailrace.analysis.stats.correlation import (
    Stationarity,
    TimeOrder,
    effective_size,
    lag1_autocorrelation,
    quantile_tau,
    stationarity,
    time_order,
)
from tailrace.analysis.stats.estimators import sorted_percentile
from tailrace.contract.records import CANCELLED

CHECKS = {
    "stationarity": "Did latency keep one level through each measured phase? A trend in the windowed medians "
                    "(Mann–Kendall, p < 0.001, and a change of more than 20%) means the numbers describe a "
                    "moving target: a passing SLO becomes INCONCLUSIVE.",
    "independence": "Neighbouring requests' latencies are correlated when they queue behind each other; the "
                    "intervals and verdicts count the independent samples the requests are worth (effective n, "
                    "from batch means), so a correlated run gets honestly wider intervals.",
    "arrivals": "Were the send gaps exponential at the profile's rate (KS and Anderson–Darling on the gaps, "
                "within each constant-rate phase, against the achieved and the intended rate), and were counts per "
                "second Poisson (Fisher's dispersion test: index ≈ 1)?",
}


class Group:
    """One endpoint × region's measured rows in time order."""

    def __init__(self, time_ns: np.ndarray, latency_ns: np.ndarray, ok: np.ndarray, phase: np.ndarray,
                 in_order: bool = False) -> None:
        order = slice(None) if in_order else time_order(time_ns)  # `in_order`: the arrays come time-ordered
        self.time_ns, self.latency_ns, self.ok, self.phase = (a[order] for a in (time_ns, latency_ns, ok, phase))
        self._per_phase: dict[int, Stationarity] | None = None

    @property
    def n(self) -> int:
        return len(self.latency_ns)

    def per_phase(self) -> dict[int, Stationarity]:
        """The stationarity of each measured phase's successful latencies (computed once: the SLO verdicts and
        the validity table both read it)."""
        if self._per_phase is None:
            self._per_phase = {}
            for phase in np.unique(self.phase[self.phase > 0]):
                rows = (self.phase == phase) & self.ok
                self._per_phase[int(phase)] = stationarity(self.time_ns[rows] / 1e9, self.latency_ns[rows] / 1e6)
        return dict(self._per_phase)

    def stationarity(self) -> tuple[int | None, Stationarity]:
        """(phase, result): the first measured phase whose latency trends, else the first one that could be
        tested (phase None when none had enough requests)."""
        results = self.per_phase()
        for phase, result in results.items():
            if result.stationary is False:
                return phase, result
        tested = [(p, r) for p, r in results.items() if r.stationary is not None]
        return tested[0] if tested else (None, Stationarity(None, None, None, None, 0))


def groups_of(measured: pd.DataFrame, positions: dict | None = None, order: TimeOrder | None = None
              ) -> dict[tuple[str, str], Group]:
    """The measured rows of each endpoint × region, time-ordered (reference time when it was computed).
    `positions`: analysis/read/frames.py endpoint_region_positions(measured), when the caller has it; `order`: the
    time order of `measured`'s rows (TimeOrder of its t_intended_ref), when the caller found it."""
    time_column = "t_intended_ref" if "t_intended_ref" in measured else "t_intended"
    arrays = {c: measured[c].to_numpy() for c in (time_column, "latency_ns", "phase")}
    ok = (measured["status"] == "ok").to_numpy()
    cancelled = (measured["status"] == CANCELLED).to_numpy()
    ordered = order is not None and time_column == "t_intended_ref"  # the order is of t_intended_ref
    groups = {}
    for (e, r), idx in (endpoint_region_positions(measured) if positions is None else positions).items():
        at = order.of(idx) if ordered else idx
        if cancelled.any():  # abandoned by their client: neither met nor missed a goal (docs/METHODS.md)
            at = at[~cancelled[at]]
        groups[(str(e), str(r))] = Group(arrays[time_column][at], arrays["latency_ns"][at], ok[at], arrays["phase"][at],
                                         in_order=ordered)
    return groups


def validity_rows(groups: dict[tuple[str, str], Group], ok_sorted: dict[tuple[str, str], np.ndarray] | None = None,
                  threads: int = 1) -> list[dict]:
    """One row per endpoint × region: stationarity (per phase, the worst), independence, effective n of p99.
    `ok_sorted`: each group's successful latencies (ms) sorted, as analysis/stats/latency.py's latency_table returns them
    (keyed by the groups' values), when the caller has them; `threads`: how many groups are computed at once."""
    sorted_of = {(str(e), str(r)): v for (e, r), v in (ok_sorted or {}).items()}
    return map_in_threads(lambda item: _validity_row(*item, sorted_of.get(item[0])), sorted(groups.items()), threads)


def _validity_row(key: tuple[str, str], g: Group, ok_sorted: np.ndarray | None) -> dict:
    endpoint, region = key
    latency_ms = g.latency_ns[g.ok] / 1e6
    per_phase = g.per_phase()
    phase, st = g.stationarity()
    tau = 1.0
    if len(latency_ms):
        in_order = ok_sorted if ok_sorted is not None and len(ok_sorted) == len(latency_ms) else np.sort(latency_ms)
        tau = quantile_tau(latency_ms, sorted_percentile(in_order, 0.99))
    r1 = lag1_autocorrelation(latency_ms)
    return {"endpoint": endpoint, "region": region, "n": int(len(latency_ms)),
            "lag1_autocorrelation": r1, "tau_p99": tau, "effective_n_p99": effective_size(len(latency_ms), tau),
            "independence": _independence_words(len(latency_ms), tau, r1),
            "phase": phase, "phases_tested": [p for p, r in per_phase.items() if r.stationary is not None],
            **st.as_dict()}


def _independence_words(n: int, tau: float, r1: float | None) -> str:
    if n == 0:
        return "no successful requests"
    if tau <= 1.0:
        return "no correlation that matters for p99: intervals as for independent samples"
    return (f"correlated (lag-1 r = {r1:.2f}): for p99 the {n:,} requests are worth {effective_size(n, tau):,} "
            f"independent ones; intervals and verdicts use that")
