"""SLO verdicts from the profile's [[slos]]: PASS / FAIL / INCONCLUSIVE (with the samples still needed)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from tailrace.analysis.read.threads import map_in_threads
from tailrace.analysis.stats.correlation import correlated_percentiles_ci, integrated_time
from tailrace.analysis.stats.estimators import proportion_verdict, sorted_percentile
from tailrace.analysis.stats.validity import Group, groups_of, judge_trends
from tailrace.contract import exit_codes
from tailrace.contract.summary.tables import SloVerdict

# the error-rate bound of each endpoint × region no declared error_rate SLO covers (docs/METHODS.md, "The implicit error-rate SLO")
IMPLICIT_ERROR_RATE = 0.01


def _covers(slo: dict, endpoint: str, region: str) -> bool:
    return slo["endpoint"] in ("*", endpoint) and slo["region"] in ("*", region)


def with_implicit_slos(slos: list[dict], endpoints: list[str], regions: list[str]) -> list[dict]:
    """The declared SLOs plus an implicit "error rate ≤ 1%" for each endpoint × region that no declared
    error_rate SLO covers, so that a run whose requests were refused never passes for want of a goal. With no
    error_rate SLO declared it is one entry over every endpoint × region."""
    declared = [s for s in slos if s["metric"] == "error_rate"]
    implicit = {"metric": "error_rate", "percentile": None, "threshold_ms": None, "threshold": IMPLICIT_ERROR_RATE,
                "implicit": True}
    if not declared:
        return [*slos, implicit | {"endpoint": "*", "region": "*"}]
    return [*slos, *(implicit | {"endpoint": e, "region": r} for e in endpoints for r in regions
                     if not any(_covers(s, e, r) for s in declared))]


def _matching(groups: dict[tuple[str, str], Group], slo: dict, endpoints: list[str], regions: list[str],
              streamed: frozenset[str] = frozenset()) -> list[tuple[str, str, Group]]:
    """The groups an SLO applies to: each endpoint × region it names ('*' = each one the plan has, whether or
    not it has rows: a group that sent nothing is never silently absent from the verdict). A latency SLO over
    every endpoint ('*') leaves the `streamed` (generative) endpoints out: their goals are ttft, tpot, itl and e2e
    (naming one of them applies it: its latency is its E2E)."""
    present_e, present_r = {e for e, _ in groups}, {r for _, r in groups}
    endpoints = sorted(set(endpoints) | present_e) if slo["endpoint"] == "*" else [slo["endpoint"]]
    if slo["metric"] == "latency" and slo["endpoint"] == "*":
        endpoints = [e for e in endpoints if e not in streamed]
    regions = sorted(set(regions) | present_r) if slo["region"] == "*" else [slo["region"]]
    empty = Group(*(np.empty(0, dtype=np.int64),) * 2, np.empty(0, dtype=bool), np.empty(0, dtype=np.int32))
    return [(e, r, groups.get((e, r), empty)) for e in endpoints for r in regions]


def _sorted_with_errors(in_time_ms: np.ndarray, ok_sorted: np.ndarray | None) -> np.ndarray:
    """np.sort(in_time_ms), where errors are +inf: the successful latencies already sorted (`ok_sorted`, of the
    same requests), then one +inf per error. Sorted afresh when `ok_sorted` does not hold exactly the finite
    entries' count, or some latency is NaN (numpy sorts NaN after inf)."""
    successes = int(np.count_nonzero(in_time_ms != np.inf))
    if ok_sorted is None or len(ok_sorted) != successes or (successes and np.isnan(ok_sorted[-1])):
        return np.sort(in_time_ms)
    return np.concatenate([ok_sorted, np.full(len(in_time_ms) - successes, np.inf)])


def evaluate_slos(df: pd.DataFrame, slos: list[dict], endpoints: Sequence[str] = (), regions: Sequence[str] = (),
                  groups: dict[tuple[str, str], Group] | None = None,
                  ok_sorted: dict[tuple[str, str], np.ndarray] | None = None, threads: int = 1,
                  streamed: frozenset[str] = frozenset()) -> list[SloVerdict]:
    """One verdict per SLO × endpoint × region (`endpoints` and `regions`: every one the plan has), on the
    measured phases. A group with no measured requests is INCONCLUSIVE. `groups`: groups_of(df)
    (analysis/stats/validity.py), when the caller has it; `ok_sorted`: each group's successful latencies (ms) sorted,
    as analysis/stats/latency.py's latency_table returns them, when the caller has them (not sorted again). `threads`:
    how many groups' verdicts are computed at once (numpy's work releases the GIL; each holds a group's temporaries).

    Latency SLO "p<q> < T ms": k = requests slower than T (errors count as slower: a failed request
    never met the latency goal), bound = 1 − q/100; PASS when the exact binomial CI of k/n lies below
    the bound, i.e. the percentile's distribution-free CI lies below T. Error-rate SLO: k = errors. Both
    count the independent samples the time-ordered requests are worth (analysis/stats/correlation.py). A latency
    PASS on a group whose latency trended through a phase is INCONCLUSIVE where the trend could carry the percentile
    across the threshold by the phase's end (analysis/stats/validity.py); every trend found is reported, with why. An implicit
    error-rate SLO (with_implicit_slos) states no goal of the user's, so it is judged on the observed rate:
    FAIL above its bound, else PASS; a group with no measured requests has no implicit verdict.
    """
    groups = groups_of(df) if groups is None else groups
    # each verdict its own: the same numbers in any order (each group's trends found once, as groups_of built it)
    tasks = [(i, slo, e, r, g) for i, slo in enumerate(slos) for e, r, g in _matching(groups, slo, list(endpoints),
                                                                                       list(regions), streamed)]
    return [v for v in map_in_threads(lambda t: _verdict(*t, ok_sorted), tasks, threads) if v is not None]


def _verdict(i: int, slo: dict, endpoint: str, region: str, g: Group,
             ok_sorted: dict[tuple[str, str], np.ndarray] | None) -> SloVerdict | None:
    """evaluate_slos' row for the `i`-th SLO on one endpoint × region's measured rows `g` (None: no verdict)."""
    n = g.n
    reason, trend, trend_kind, trend_changed = None, None, None, None
    if slo["metric"] == "latency":
        q = slo["percentile"]
        exceeding = (g.latency_ns > slo["threshold_ms"] * 1e6) | ~g.ok
        k = int(exceeding.sum())
        v = proportion_verdict(k, n, 1 - q / 100, tau=integrated_time(exceeding))
        in_time_ms = np.where(g.ok, g.latency_ns / 1e6, np.inf)
        sorted_ms = _sorted_with_errors(in_time_ms, (ok_sorted or {}).get((endpoint, region)))
        est = correlated_percentiles_ci(in_time_ms, (q,), sorted_ms)[q] if n else None
        desc = f"p{q:g} < {slo['threshold_ms']:g} ms"
        measured = sorted_percentile(sorted_ms, q / 100) if n else None  # with or without a CI
        del sorted_ms
        ci = (est.ci_low, est.ci_high) if est and est.reportable else (None, None)
        judged = judge_trends(g.phase_series(), q, slo["threshold_ms"], v.verdict) if n else None
        if judged is not None:
            trend, trend_kind, trend_changed, reason = (judged.direction, judged.kind, judged.changes_verdict,
                                                        judged.reason)
            if judged.changes_verdict:
                v = replace(v, verdict="INCONCLUSIVE")
    else:
        k = int((~g.ok).sum())
        v = proportion_verdict(k, n, slo["threshold"], tau=integrated_time(~g.ok))
        desc = f"error rate < {slo['threshold']:.3%}"
        if slo.get("implicit"):
            if not n:
                return None  # nothing sent: no error rate to judge (a declared SLO makes it INCONCLUSIVE)
            desc = f"error rate ≤ {slo['threshold']:.0%} (implicit: no error_rate SLO declared)"
            v = replace(v, verdict="FAIL" if k / n > slo["threshold"] else "PASS", more_samples_needed=None)
        measured, ci = v.observed, (v.ci_low, v.ci_high)
    return SloVerdict(slo=i, description=desc, metric=slo["metric"], implicit=bool(slo.get("implicit")),
                      endpoint=endpoint, region=region, n=n, effective_n=v.effective_n, exceeding=k, verdict=v.verdict,
                      measured=measured, ci_low=ci[0], ci_high=ci[1], more_samples_needed=v.more_samples_needed,
                      trend=trend, trend_kind=trend_kind, trend_changed_verdict=trend_changed, reason=reason)


def overall_verdict(verdicts: Sequence[SloVerdict], valid: bool) -> tuple[str, int]:
    """(verdict, exit code): INVALID 4, FAIL 1, INCONCLUSIVE 3, PASS 0."""
    if not valid:
        return "INVALID", exit_codes.INVALID
    kinds = {v.verdict for v in verdicts}
    if "FAIL" in kinds:
        return "FAIL", exit_codes.FAIL
    if "INCONCLUSIVE" in kinds:
        return "INCONCLUSIVE", exit_codes.INCONCLUSIVE
    return "PASS", exit_codes.PASS
