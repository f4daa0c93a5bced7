"""Pooling endpoints — embeddings (inputs: the texts a request carries) and rerank (inputs: its documents): what a
request's latency bought — inputs and their tokens per second, the inputs that met the latency SLOs, and latency by
inputs per request (batch size, document count). Pure functions of the measured rows."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import strings
from tailrace.analysis.stats.estimators import percentiles_ci
from tailrace.contract.summary.tables import EmbeddingRow

POOLING_COLUMNS = ("endpoint", "region", "status", "latency_ns", "batch_size", "input_tokens")
BATCH_PERCENTILES = (50.0, 99.0)


def batch_bucket(size: int) -> str:
    """A batch size's bucket: the size itself up to 4, then powers of two (5–8, 9–16, …)."""
    if size <= 4:
        return str(size)
    high = 1 << int(np.ceil(np.log2(size)))
    return f"{high // 2 + 1}–{high}"


def _latency_threshold_ns(slos: list[dict], endpoint: str, region: str) -> float:
    limits = [s["threshold_ms"] * 1e6 for s in slos if s["metric"] == "latency"
              and s["endpoint"] in ("*", endpoint) and s["region"] in ("*", region)]
    return min(limits, default=np.inf)


def _row(endpoint: str, region: str, df: pd.DataFrame, duration_s: float, limit_ns: float) -> dict:
    ok = (df["status"] == "ok").to_numpy()
    inputs = df["batch_size"].to_numpy()[ok].astype(np.int64)
    tokens = df["input_tokens"].to_numpy()[ok].astype(np.int64)
    reported = tokens >= 0
    latency = df["latency_ns"].to_numpy()
    good = ok & (latency <= limit_ns)
    rate = (lambda n: n / duration_s) if duration_s else (lambda n: None)
    by_batch = []
    sizes = df["batch_size"].to_numpy()[ok]
    buckets = np.array([batch_bucket(int(s)) for s in sizes]) if len(sizes) else np.array([], dtype=str)
    for bucket in sorted(set(buckets.tolist()), key=lambda b: int(b.split("–")[0])):
        values = latency[ok][buckets == bucket] / 1e6
        estimates = percentiles_ci(values, BATCH_PERCENTILES)
        by_batch.append({"batch": bucket, "requests": int(len(values)),
                         **{f"p{p:g}_ms": estimates[p].value for p in BATCH_PERCENTILES}})
    return {"endpoint": endpoint, "region": region, "requests": int(len(df)), "ok": int(ok.sum()),
            "inputs": int(inputs.sum()), "inputs_per_s": rate(int(inputs.sum())),
            "mean_inputs_per_request": float(inputs.mean()) if len(inputs) else None,
            "input_tokens": int(tokens[reported].sum()) if reported.any() else None,
            "input_tokens_per_s": rate(int(tokens[reported].sum())) if reported.any() else None,
            "mean_tokens_per_input": float(tokens[reported].sum() / inputs[reported].sum())
            if reported.any() and inputs[reported].sum() else None,
            "tokens_reported": int(reported.sum()),
            "good_inputs_per_s": rate(int(df["batch_size"].to_numpy()[good].sum())),
            "latency_slo_ms": None if np.isinf(limit_ns) else limit_ns / 1e6, "by_batch": by_batch}


def pooling_table(df: pd.DataFrame, duration_s: float, endpoints: frozenset[str], slos: list[dict]
                  ) -> list[EmbeddingRow]:
    """Per pooling endpoint (`endpoints`) × region of the measured rows `df` (POOLING_COLUMNS), then per endpoint over
    its regions ("*"): requests, inputs and input tokens (the server's usage) per second, the inputs per second whose
    request met every latency SLO that applies (goodput in inputs), and p50/p99 latency by bucket of inputs per
    request (per region only: pooled, the regions' delays would weigh on whichever buckets one region sends more)."""
    if not endpoints or df.empty:
        return []
    names = strings(df["endpoint"])
    regions = strings(df["region"])
    rows = []
    for endpoint in sorted(endpoints):
        mine = names == endpoint
        if not mine.any():
            continue
        for region in sorted(set(regions[mine].tolist())):
            part = df.loc[mine & (regions == region)]
            rows.append(_row(endpoint, region, part, duration_s, _latency_threshold_ns(slos, endpoint, region)))
        if len(set(regions[mine].tolist())) > 1:
            part = df.loc[mine]
            row = _row(endpoint, "*", part, duration_s, np.inf)
            row["by_batch"] = []  # latency by batch pooled over regions would mix their network delays
            row["good_inputs_per_s"] = sum(r["good_inputs_per_s"] or 0 for r in rows if r["endpoint"] == endpoint) \
                if duration_s else None
            row["latency_slo_ms"] = None
            rows.append(row)
    return [EmbeddingRow(**row) for row in rows]
