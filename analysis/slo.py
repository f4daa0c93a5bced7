"""SLO verdicts from the profile's [[slos]]: PASS / FAIL / INCONCLUSIVE (with the samples still needed)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.stats import proportion_verdict, sorted_percentile_ci


class _Group:
    """One endpoint × region's measured rows, as the verdicts read them (sorted latencies made once)."""

    def __init__(self, latency_ns: np.ndarray, ok: np.ndarray) -> None:
        self.latency_ns, self.ok = latency_ns, ok
        self._sorted_ms: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.latency_ns)

    def sorted_ms(self) -> np.ndarray:
        """Latencies in ms, errors as +inf (a failed request never met a latency goal), sorted."""
        if self._sorted_ms is None:
            self._sorted_ms = np.sort(np.where(self.ok, self.latency_ns / 1e6, np.inf))
        return self._sorted_ms


def _groups(df: pd.DataFrame) -> dict[tuple[str, str], _Group]:
    latency = df["latency_ns"].to_numpy()
    ok = (df["status"] == "ok").to_numpy()
    return {(str(e), str(r)): _Group(latency[idx], ok[idx])
            for (e, r), idx in df.groupby(["endpoint", "region"], observed=True, sort=False).indices.items()}


def _matching(groups: dict[tuple[str, str], _Group], slo: dict, endpoints: list[str], regions: list[str]
              ) -> list[tuple[str, str, _Group]]:
    """The groups an SLO applies to: each endpoint × region it names ('*' = each one the plan has, whether or
    not it has rows: a group that sent nothing is never silently absent from the verdict)."""
    present_e, present_r = {e for e, _ in groups}, {r for _, r in groups}
    endpoints = sorted(set(endpoints) | present_e) if slo["endpoint"] == "*" else [slo["endpoint"]]
    regions = sorted(set(regions) | present_r) if slo["region"] == "*" else [slo["region"]]
    empty = _Group(np.empty(0, dtype=np.int64), np.empty(0, dtype=bool))
    return [(e, r, groups.get((e, r), empty)) for e in endpoints for r in regions]


def evaluate_slos(df: pd.DataFrame, slos: list[dict], endpoints: list[str] = (), regions: list[str] = ()
                  ) -> list[dict]:
    """One verdict per SLO × endpoint × region (`endpoints` and `regions`: every one the plan has), on the
    measured phases. A group with no measured requests is INCONCLUSIVE.

    Latency SLO "p<q> < T ms": k = requests slower than T (errors count as slower: a failed request
    never met the latency goal), bound = 1 − q/100; PASS when the exact binomial CI of k/n lies below
    the bound, i.e. the percentile's distribution-free CI lies below T. Error-rate SLO: k = errors.
    """
    out = []
    groups = _groups(df)
    for i, slo in enumerate(slos):
        for endpoint, region, g in _matching(groups, slo, list(endpoints), list(regions)):
            n = g.n
            if slo["metric"] == "latency":
                q = slo["percentile"]
                threshold_ns = slo["threshold_ms"] * 1e6
                k = int(((g.latency_ns > threshold_ns) | ~g.ok).sum())
                v = proportion_verdict(k, n, 1 - q / 100)
                est = sorted_percentile_ci(g.sorted_ms(), q) if n else None
                desc = f"p{q:g} < {slo['threshold_ms']:g} ms"
                measured = est.value if est and est.reportable else None
                ci = (est.ci_low, est.ci_high) if est and est.reportable else (None, None)
            else:
                k = int((~g.ok).sum())
                v = proportion_verdict(k, n, slo["threshold"])
                desc = f"error rate < {slo['threshold']:.3%}"
                measured, ci = v.observed, (v.ci_low, v.ci_high)
            out.append({"slo": i, "description": desc, "metric": slo["metric"], "endpoint": endpoint,
                        "region": region, "n": n, "exceeding": k, "verdict": v.verdict, "measured": measured,
                        "ci_low": ci[0], "ci_high": ci[1], "more_samples_needed": v.more_samples_needed})
    return out


def overall_verdict(verdicts: list[dict], valid: bool) -> tuple[str, int]:
    """(verdict, exit code): INVALID 4, FAIL 1, INCONCLUSIVE 3, PASS 0."""
    if not valid:
        return "INVALID", 4
    kinds = {v["verdict"] for v in verdicts}
    if "FAIL" in kinds:
        return "FAIL", 1
    if "INCONCLUSIVE" in kinds:
        return "INCONCLUSIVE", 3
    return "PASS", 0
