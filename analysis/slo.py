"""SLO verdicts from the profile's [[slos]]: PASS / FAIL / INCONCLUSIVE (with the samples still needed)."""
from __future__ import annotations

import pandas as pd

from analysis.stats import percentile_ci, proportion_verdict


def _matching(df: pd.DataFrame, slo: dict, endpoints: list[str], regions: list[str]
              ) -> list[tuple[str, str, pd.DataFrame]]:
    """The groups an SLO applies to: each endpoint × region it names ('*' = each one the plan has, whether or
    not it has rows: a group that sent nothing is never silently absent from the verdict)."""
    endpoints = sorted(set(endpoints) | set(df["endpoint"].unique())) if slo["endpoint"] == "*" else [slo["endpoint"]]
    regions = sorted(set(regions) | set(df["region"].unique())) if slo["region"] == "*" else [slo["region"]]
    return [(e, r, df[(df["endpoint"] == e) & (df["region"] == r)]) for e in endpoints for r in regions]


def evaluate_slos(df: pd.DataFrame, slos: list[dict], endpoints: list[str] = (), regions: list[str] = ()
                  ) -> list[dict]:
    """One verdict per SLO × endpoint × region (`endpoints` and `regions`: every one the plan has), on the
    measured phases. A group with no measured requests is INCONCLUSIVE.

    Latency SLO "p<q> < T ms": k = requests slower than T (errors count as slower: a failed request
    never met the latency goal), bound = 1 − q/100; PASS when the exact binomial CI of k/n lies below
    the bound, i.e. the percentile's distribution-free CI lies below T. Error-rate SLO: k = errors.
    """
    out = []
    for i, slo in enumerate(slos):
        for endpoint, region, g in _matching(df, slo, list(endpoints), list(regions)):
            n = int(len(g))
            if slo["metric"] == "latency":
                q = slo["percentile"]
                threshold_ns = slo["threshold_ms"] * 1e6
                k = int(((g["latency_ns"] > threshold_ns) | (g["status"] != "ok")).sum())
                v = proportion_verdict(k, n, 1 - q / 100)
                lat = g["latency_ns"].where(g["status"] == "ok", float("inf")).to_numpy() / 1e6
                est = percentile_ci(lat, q) if n else None
                desc = f"p{q:g} < {slo['threshold_ms']:g} ms"
                measured = est.value if est and est.reportable else None
                ci = (est.ci_low, est.ci_high) if est and est.reportable else (None, None)
            else:
                k = int((g["status"] != "ok").sum())
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
