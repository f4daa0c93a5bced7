"""Latency statistics per group (endpoint × region, per phase, overall)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.stats import percentiles_ci
from contract.profile import Profile
from contract.rates import rate_segments

PERCENTILES = (50, 90, 95, 99, 99.9)
ACCURACY_COLUMNS = ("correct", "correct_count", "batch_size")
LATENCY_COLUMNS = ("endpoint", "region", "status", "latency_ns", "send_lag_ns", *ACCURACY_COLUMNS)


def intended_rate(profile: Profile, region: str | None, endpoint: str | None) -> float | None:
    """Mean intended arrival rate over the measured window for a region / endpoint (None = all); None for
    the closed-loop scenarios, whose rate is whatever the endpoint sustains."""
    load = profile.load
    if load.scenario != "server":
        return None
    segments = rate_segments(load.rate, load.phases, 0.0, load.duration_s)
    rate = sum(s.expected for s in segments) / load.duration_s
    if region is not None:
        rate *= next(r.share for r in profile.regions if r.name == region)
    if endpoint is not None:
        rate *= next(e.weight for e in profile.endpoints if e.name == endpoint) / sum(e.weight for e in profile.endpoints)
    return rate


def accuracy_of(ok: pd.DataFrame) -> float | None:
    """Right answers over the rows of checked requests, counting every row of batched requests; None when no
    request was checked (correct_count -1: the endpoint has no check)."""
    if ok.empty:
        return None
    if "correct_count" in ok and "batch_size" in ok and ok["correct_count"].notna().all():
        checked = ok[ok["correct_count"] >= 0]
        return float(checked["correct_count"].sum() / checked["batch_size"].sum()) if len(checked) else None
    return float(ok["correct"].mean())


def summarize_latency(g: pd.DataFrame, duration_s: float) -> dict:
    """Count, rate, errors, accuracy, mean/max and percentiles with CIs (ms) of one group's rows."""
    ok = g["status"] == "ok"
    lat_ms = g.loc[ok, "latency_ns"].to_numpy(dtype=float) / 1e6
    out = {"count": int(len(g)), "ok": int(ok.sum()), "errors": int((~ok).sum()),
           "error_rate": float((~ok).mean()) if len(g) else 0.0,
           "achieved_rate": float(len(g) / duration_s) if duration_s else None,
           "accuracy": accuracy_of(g.loc[ok, [c for c in ACCURACY_COLUMNS if c in g]]),
           "mean_ms": float(lat_ms.mean()) if len(lat_ms) else None,
           "max_ms": float(lat_ms.max()) if len(lat_ms) else None,
           "send_lag_p99_ms": float(np.percentile(g["send_lag_ns"], 99) / 1e6) if len(g) else None,
           "percentiles": {}}
    for p, estimate in percentiles_ci(lat_ms, PERCENTILES).items():
        out["percentiles"][f"p{p:g}"] = estimate.as_dict()
    return out


def latency_table(df: pd.DataFrame, profile: Profile, duration_s: float) -> list[dict]:
    """Rows per endpoint × region, per endpoint (all regions), and overall."""
    rows = []
    df = df[[c for c in LATENCY_COLUMNS if c in df]]  # group only what the statistics read
    groups = [(("endpoint", "region"), df.groupby(["endpoint", "region"], sort=True)),
              (("endpoint",), df.groupby(["endpoint"], sort=True))]
    for keys, grouped in groups:
        for key, g in grouped:
            key = key if isinstance(key, tuple) else (key,)
            ident = dict(zip(keys, key))
            row = {"endpoint": ident.get("endpoint", "*"), "region": ident.get("region", "*"),
                   **summarize_latency(g, duration_s)}
            row["intended_rate"] = intended_rate(profile, ident.get("region"), ident.get("endpoint"))
            rows.append(row)
    overall = {"endpoint": "*", "region": "*", **summarize_latency(df, duration_s),
               "intended_rate": intended_rate(profile, None, None)}
    rows.append(overall)
    return rows


def flat_rows(rows: list[dict]) -> pd.DataFrame:
    """The latency table as flat columns for CSV."""
    flat = []
    for r in rows:
        f = {k: v for k, v in r.items() if k != "percentiles"}
        for name, est in r["percentiles"].items():
            f[f"{name}_ms"] = est["value"]
            f[f"{name}_ci_low_ms"] = est["ci_low"]
            f[f"{name}_ci_high_ms"] = est["ci_high"]
        flat.append(f)
    return pd.DataFrame(flat)
