"""Cold start: how long an endpoint the harness started took to serve, and its first requests vs steady state."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tailrace.contract.summary.tables import ColdStart


def cold_start_table(df: pd.DataFrame, cold_starts: dict[str, dict], first_k: int) -> list[ColdStart]:
    """Per endpoint whose server the run started: spawn → ready → first successful response (s), and the
    latency of its first `first_k` requests (by intended time, all regions) next to the measured phase's."""
    rows = []
    for endpoint, cs in sorted(cold_starts.items()):
        g = df[df["endpoint"] == endpoint].sort_values("t_intended_ref")
        model = g["model"].iloc[0] if len(g) else None
        probe: dict = next((p for p in cs.get("per_model", []) if p.get("model") == model), {})
        first = g.head(first_k)
        first_ok = first[first["status"] == "ok"]["latency_ns"].to_numpy(dtype=float) / 1e6
        steady = g.iloc[first_k:]
        steady = steady[(steady["phase"] > 0) & (steady["status"] == "ok")]["latency_ns"].to_numpy(dtype=float) / 1e6
        first_mean = float(first_ok.mean()) if len(first_ok) else None
        steady_mean = float(steady.mean()) if len(steady) else None
        rows.append(ColdStart(
            endpoint=endpoint, server=cs.get("kind"), ready_s=cs.get("ready_s"),
            first_success_s=probe.get("first_success_s", cs.get("first_success_s")),
            first_request_ms=probe.get("first_request_ms"), first_k=int(len(first)),
            first_k_errors=int((first["status"] != "ok").sum()), first_k_mean_ms=first_mean,
            first_k_max_ms=float(first_ok.max()) if len(first_ok) else None, steady_mean_ms=steady_mean,
            steady_p50_ms=float(np.percentile(steady, 50)) if len(steady) else None,
            first_k_vs_steady=first_mean / steady_mean if first_mean and steady_mean else None))
    return rows
