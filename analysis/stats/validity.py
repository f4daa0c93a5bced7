"""Is each endpoint × region's sample fit for the numbers drawn from it? After Lancet (Kogias et al., USENIX ATC
2019), which tests stationarity, independence and the arrival process before it reports a percentile:

- stationarity: did latency keep one level through each measured phase (analysis/stats/correlation.py)? A trend
  found is one of three things (docs/METHODS.md, "Trends and verdicts"): a level that settled after a phase change
  or warm-up (it moved, then held through the phase's last half: the held level is that half's percentile); a
  drift too small to matter (still moving, but its projection to the phase's end, with its interval, stays on the
  verdict's side of the threshold); or a backlog (still rising, its projection reaching the threshold). Only a
  trend that could change the verdict turns a latency SLO's PASS into INCONCLUSIVE (judge_trends); every trend
  found is reported with its size and p-value. A capacity trial fails when latency is still rising at its end;
- independence: the lag-1 autocorrelation of the time-ordered latencies and the effective sample size of
  their p99, which the intervals and verdicts already use;
- arrivals: analysis/stats/poisson_checks.py (KS, Anderson–Darling, dispersion of the send gaps).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import endpoint_region_positions
from tailrace.analysis.read.threads import map_in_threads
from tailrace.analysis.stats.correlation import (
    Stationarity,
    TimeOrder,
    correlated_percentiles_ci,
    effective_size,
    lag1_autocorrelation,
    quantile_tau,
    stationarity,
    time_order,
)
from tailrace.analysis.stats.estimators import sorted_percentile
from tailrace.contract.records import CANCELLED
from tailrace.contract.summary.tables import ValidityRow

CHECKS = {
    "stationarity": "Did latency keep one level through each measured phase? A trend in the windowed medians "
                    "(Mann–Kendall, p < 0.001, and a change of more than 20%) is told apart by the phase's last "
                    "half: a level that settled, a drift, or a backlog still growing. A passing SLO becomes "
                    "INCONCLUSIVE only where the trend could carry its percentile across the threshold by the "
                    "phase's end.",
    "independence": "Neighbouring requests' latencies are correlated when they queue behind each other; the "
                    "intervals and verdicts count the independent samples the requests are worth (effective n, "
                    "from batch means), so a correlated run gets honestly wider intervals.",
    "arrivals": "Were the send gaps exponential at the profile's rate (KS and Anderson–Darling on the gaps, "
                "within each constant-rate phase, against the achieved and the intended rate), and were counts per "
                "second Poisson (Fisher's dispersion test: index ≈ 1)?",
}


@dataclass(frozen=True)
class PhaseSeries:
    """One measured phase of a group: its values (ms; +inf for a request that missed every goal) in time order,
    their times (the unit the phase's `Stationarity` was computed in) and that stationarity."""

    phase: int
    times: np.ndarray
    values_ms: np.ndarray
    stationarity: Stationarity


@dataclass(frozen=True)
class TrendJudgement:
    """A trend found in one phase and what it did to one SLO's verdict."""

    phase: int
    direction: str  # "rising" | "falling"
    kind: str  # "settled" | "growing"
    projected_ms: tuple[float, float] | None  # the percentile at the phase's end, with its interval (None: unknown)
    changes_verdict: bool
    reason: str


def projected_percentile(series: PhaseSeries, q: float) -> tuple[float, float] | None:
    """The `q`-th percentile's 95% interval at the phase's end: the last half's own interval where the trend
    settled; where it is still moving, that interval carried from the last half's centre to the phase's end along
    its Theil–Sen slope's interval, both as a shift and as a scaling of the level (the wider of the two). None when
    the last half is too short for an interval."""
    st = series.stationarity
    if st.tail_from_s is None or st.tail_slope_ms is None or st.tail_to_end_windows is None:
        return None
    tail = series.values_ms[series.times >= st.tail_from_s]
    if not len(tail):
        return None
    estimate = correlated_percentiles_ci(tail, (q,))[q]
    if not estimate.has_interval:
        return None
    low, high = float(estimate.ci_low), float(estimate.ci_high)
    if st.settled:
        return low, high
    level, (s_low, s_high), h = st.tail_level_ms, st.tail_slope_ms, st.tail_to_end_windows
    if level is None or level <= 0:
        return low + s_low * h, high + s_high * h
    scale_low, scale_high = (level + s_low * h) / level, (level + s_high * h) / level
    return (min(low * max(scale_low, 0.0), low + s_low * h),
            max(high * max(scale_high, 0.0), high + s_high * h))


def judge_trend(series: PhaseSeries, q: float, threshold_ms: float, verdict: str) -> TrendJudgement:
    """What one phase's trend (its stationarity is not stationary) does to the verdict of "p`q` < threshold":
    only a PASS can become INCONCLUSIVE, and only where the percentile's projection to the phase's end reaches
    the threshold (or cannot be told)."""
    st = series.stationarity
    direction = "rising" if st.rising else "falling"
    kind = st.kind or "growing"
    projected = projected_percentile(series, q)
    could_cross = projected is None or projected[1] >= threshold_ms
    changes = verdict == "PASS" and could_cross
    where = (f"p{q:g} at the phase's end [{projected[0]:.3g}, {projected[1]:.3g}] ms" if projected is not None
             else f"p{q:g} at the phase's end cannot be told (too few requests in its last half)")
    side = f"under {threshold_ms:g} ms" if not could_cross else f"could reach {threshold_ms:g} ms"
    if kind == "settled":
        what = "a level that settled after a change, not a backlog"
    elif direction == "rising" and could_cross:
        what = "backlog growing: the endpoint did not keep up with the offered load"
    elif direction == "rising":
        what = "a drift too small to matter"
    else:
        what = "still settling (a longer warm-up may be needed)"
    effect = ("so the PASS is INCONCLUSIVE" if changes else "the verdict stands" if verdict == "PASS"
              else f"reported beside the {verdict}")
    reason = f"phase {series.phase}: {st.trend_words()} — {what}; {where}, {side}: {effect}"
    return TrendJudgement(series.phase, direction, kind, projected, changes, reason)


def judge_trends(phases: list[PhaseSeries], q: float, threshold_ms: float, verdict: str) -> TrendJudgement | None:
    """The trend that decides the verdict's fate among a group's measured phases: the first that changes it, else
    the first found (None when every phase held one level or could not be tested)."""
    judged = [judge_trend(p, q, threshold_ms, verdict) for p in phases if p.stationarity.stationary is False]
    changing = [j for j in judged if j.changes_verdict]
    return (changing or judged)[0] if judged else None


class Group:
    """One endpoint × region's measured rows in time order."""

    def __init__(self, time_ns: np.ndarray, latency_ns: np.ndarray, ok: np.ndarray, phase: np.ndarray,
                 in_order: bool = False) -> None:
        order = slice(None) if in_order else time_order(time_ns)  # `in_order`: the arrays come time-ordered
        self.latency_ns, self.ok, self.phase = (a[order] for a in (latency_ns, ok, phase))
        self.time_ns: np.ndarray | None = time_ns[order]  # until find_trends(), or while a phase trends
        self._per_phase: dict[int, Stationarity] | None = None

    def find_trends(self) -> Group:
        """Find each phase's stationarity now, and let go of the times unless a phase trends (only phase_series
        reads them then): a day's groups hold 8 bytes a row less through the verdicts and the validity table."""
        if not any(st.stationary is False for st in self.per_phase().values()):
            self.time_ns = None
        return self

    @property
    def n(self) -> int:
        return len(self.latency_ns)

    def per_phase(self) -> dict[int, Stationarity]:
        """The stationarity of each measured phase's successful latencies (computed once: the SLO verdicts and
        the validity table both read it)."""
        if self._per_phase is None:
            self._per_phase = {}
            measured = self.phase[self.phase > 0]  # the phases present, ascending: counted, not sorted (np.unique)
            phases = np.flatnonzero(np.bincount(measured)) if measured.dtype.kind in "iu" and len(measured) \
                else np.unique(measured)
            for phase in phases:
                rows = (self.phase == phase) & self.ok
                self._per_phase[int(phase)] = stationarity(self._times()[rows] / 1e9, self.latency_ns[rows] / 1e6)
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

    def phase_series(self) -> list[PhaseSeries]:
        """Each measured phase with a trend: its latencies (ms, +inf for a failed request: it met no goal) in time
        order, their times (s) and the phase's stationarity — what judge_trends judges (nothing is built for a
        group whose phases held one level, the common case)."""
        trending = {phase: st for phase, st in self.per_phase().items() if st.stationary is False}
        if not trending:
            return []
        in_time_ms = np.where(self.ok, self.latency_ns / 1e6, np.inf)
        out = []
        for phase, st in trending.items():
            rows = self.phase == phase
            out.append(PhaseSeries(phase, self._times()[rows] / 1e9, in_time_ms[rows], st))
        return out

    def _times(self) -> np.ndarray:
        if self.time_ns is None:
            raise RuntimeError("a group's times, let go of by find_trends: no phase trends")
        return self.time_ns


def groups_of(measured: pd.DataFrame, positions: dict | None = None, order: TimeOrder | None = None,
              threads: int = 1) -> dict[tuple[str, str], Group]:
    """The measured rows of each endpoint × region, time-ordered (reference time when it was computed), each with
    its trends found (Group.find_trends). `positions`: analysis/read/frames.py endpoint_region_positions(measured), when the caller
    has it; `order`: the time order of `measured`'s rows (TimeOrder of its t_intended_ref), when the caller found it;
    `threads`: how many groups are built at once (each holds its rows' temporaries)."""
    time_column = "t_intended_ref" if "t_intended_ref" in measured else "t_intended"
    arrays = {c: measured[c].to_numpy() for c in (time_column, "latency_ns", "phase")}
    ok = (measured["status"] == "ok").to_numpy()
    cancelled = (measured["status"] == CANCELLED).to_numpy()
    any_cancelled = bool(cancelled.any())
    ordered = order is not None and time_column == "t_intended_ref"  # the order is of t_intended_ref

    def group(idx: np.ndarray) -> Group:
        at = order.of(idx, arrays[time_column]) if ordered and order is not None else idx
        if any_cancelled:  # abandoned by their client: neither met nor missed a goal (docs/METHODS.md)
            at = at[~cancelled[at]]
        return Group(arrays[time_column][at], arrays["latency_ns"][at], ok[at], arrays["phase"][at],
                     in_order=ordered).find_trends()

    found = endpoint_region_positions(measured) if positions is None else positions
    return {(str(e), str(r)): g for (e, r), g in zip(found, map_in_threads(group, found.values(), threads))}


def validity_rows(groups: dict[tuple[str, str], Group], ok_sorted: dict[tuple[str, str], np.ndarray] | None = None,
                  threads: int = 1, names: dict[int, str] | None = None) -> list[ValidityRow]:
    """One row per endpoint × region: stationarity (per phase, the worst), independence, effective n of p99;
    `names`: phase number → name (analysis/stats/scenarios.py's phase_names).
    `ok_sorted`: each group's successful latencies (ms) sorted, as analysis/stats/latency.py's latency_table returns them
    (keyed by the groups' values), when the caller has them; `threads`: how many groups are computed at once."""
    sorted_of = {(str(e), str(r)): v for (e, r), v in (ok_sorted or {}).items()}
    return map_in_threads(lambda item: _validity_row(*item, sorted_of.get(item[0]), names or {}),
                          sorted(groups.items()), threads)


def _validity_row(key: tuple[str, str], g: Group, ok_sorted: np.ndarray | None, names: dict[int, str]) -> ValidityRow:
    endpoint, region = key
    latency_ms = g.latency_ns[g.ok] / 1e6
    per_phase = g.per_phase()
    phase, st = g.stationarity()
    tau = 1.0
    if len(latency_ms):
        in_order = ok_sorted if ok_sorted is not None and len(ok_sorted) == len(latency_ms) else np.sort(latency_ms)
        tau = quantile_tau(latency_ms, sorted_percentile(in_order, 0.99))
    r1 = lag1_autocorrelation(latency_ms)
    tested = [p for p, r in per_phase.items() if r.stationary is not None]
    return ValidityRow(endpoint=endpoint, region=region, n=int(len(latency_ms)), lag1_autocorrelation=r1, tau_p99=tau,
                       effective_n_p99=effective_size(len(latency_ms), tau),
                       independence=_independence_words(len(latency_ms), tau, r1), phase=phase,
                       phase_name=names.get(phase, str(phase)) if phase is not None else None,
                       phases=", ".join(names.get(p, str(p)) for p in tested) or None, **st.as_dict())


def _independence_words(n: int, tau: float, r1: float | None) -> str:
    if n == 0:
        return "no successful requests"
    if tau <= 1.0:
        return "no correlation that matters for p99: intervals as for independent samples"
    return (f"correlated (lag-1 r = {r1:.2f}): for p99 the {n:,} requests are worth {effective_size(n, tau):,} "
            f"independent ones; intervals and verdicts use that")
