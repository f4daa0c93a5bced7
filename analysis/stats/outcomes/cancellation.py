"""Streams abandoned by their clients (an endpoint's declared `cancel`): how many, when, what they were served.

A cancelled request is neither ok nor an error: it is in no latency percentile, no goodput and no error rate (its
client never waited for the end; docs/METHODS.md). This table is where it is counted: per endpoint × region and over
every region ('*'), in the measured phases, of the requests that may be cancelled (a pipeline's stages are not) —
the cancel rate with its exact (Clopper-Pearson) interval, what closed them, how many had no first token yet, the
output tokens the server streamed to them, and how long after the intended send they were closed. Beside it, the
server's own count of aborted requests over the whole run (analysis/read/server_metrics.py), against tailrace's
cancelled requests over what that count covers: the whole run, every endpoint of the same server and model.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import group_positions, strings
from tailrace.analysis.stats.estimators import clopper_pearson
from tailrace.contract.records import CANCELLED
from tailrace.contract.summary.tables import CancellationRow

CANCEL_COLUMNS = ("endpoint", "region", "phase", "status", "code", "output_tokens", "latency_ns", "ttft_ns", "pipeline")
ALL = "*"


def cancellation_table(df: pd.DataFrame, declared: Mapping[str, str], aborted: dict[str, tuple[float, str]],
                       servers: dict[str, tuple[str, str]]) -> list[CancellationRow]:
    """Rows for the endpoints that declare a cancel (`declared`: endpoint → what closes a stream), per region and
    '*'; `aborted`: endpoint → (the server's aborted requests of its model over the run, the metric's name);
    `servers`: endpoint → (url, model), which endpoints one server's count covers."""
    if not declared or df.empty:
        return []
    endpoint = strings(df["endpoint"])
    ours = np.isin(endpoint, list(declared))
    if "pipeline" in df:  # a pipeline's stages are never cancelled: not among the requests that may be
        ours &= strings(df["pipeline"]) == ""
    cancelled_all = pd.Series(endpoint[ours & (df["status"] == CANCELLED).to_numpy()]).value_counts().to_dict()
    measured = df.loc[ours & (df["phase"].to_numpy() > 0)].reset_index(drop=True)
    out = []
    by_endpoint = group_positions(measured, ["endpoint"])
    by_region = group_positions(measured, ["endpoint", "region"])
    for name in sorted(declared):
        rows = by_endpoint.get(name, np.empty(0, dtype=np.int64))
        regions = sorted(r for e, r in by_region if e == name)
        for region, at in [*((r, by_region[(name, r)]) for r in regions), (ALL, rows)]:
            row = _row(measured, at) | {"endpoint": name, "region": region, "after": declared[name]}
            if region == ALL and name in aborted:
                row["cancelled_server_scope"] = sum(int(cancelled_all.get(e, 0)) for e in declared
                                                    if servers.get(e) == servers.get(name))
                row["server_aborted"], row["server_metric"] = int(round(aborted[name][0])), aborted[name][1]
            out.append(CancellationRow(**row))
    return out


def _row(df: pd.DataFrame, rows: np.ndarray) -> dict:
    """One group's numbers (pure)."""
    n = len(rows)
    status = df["status"].to_numpy()[rows]
    gone = rows[status == CANCELLED]
    k = len(gone)
    low, high = clopper_pearson(k, n) if n else (None, None)
    tokens = np.maximum(df["output_tokens"].to_numpy()[gone].astype(np.int64), 0)
    after_ms = np.sort(df["latency_ns"].to_numpy()[gone] / 1e6)
    codes = strings(df["code"])[gone]
    return {
        "requests": int(n), "cancelled": int(k), "cancel_rate": float(k / n) if n else None,
        "cancel_rate_ci_low": low, "cancel_rate_ci_high": high,
        "by_trigger": {str(c): int(v) for c, v in zip(*np.unique(codes, return_counts=True))},
        "before_first_token": int(np.count_nonzero(df["ttft_ns"].to_numpy()[gone] < 0)),
        "tokens_received": int(tokens.sum()), "mean_tokens_received": float(tokens.mean()) if k else None,
        "closed_after_p50_ms": float(np.percentile(after_ms, 50)) if k else None,
        "closed_after_p90_ms": float(np.percentile(after_ms, 90)) if k else None,
    }
