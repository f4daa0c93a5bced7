"""The embeddings table (analysis/stats/pooling.py) on rows whose numbers are known."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tailrace.analysis.stats.pooling import batch_bucket, pooling_table


def rows(region: str, n: int, batch: int, latency_ms: float, tokens: int, status: str = "ok") -> pd.DataFrame:
    return pd.DataFrame({"endpoint": ["emb"] * n, "region": [region] * n, "status": [status] * n,
                         "latency_ns": np.full(n, int(latency_ms * 1e6)), "batch_size": np.full(n, batch),
                         "input_tokens": np.full(n, tokens)})


def test_buckets():
    assert [batch_bucket(s) for s in (1, 4, 5, 8, 9, 16, 17, 100)] == ["1", "4", "5–8", "5–8", "9–16", "9–16",
                                                                       "17–32", "65–128"]


def test_inputs_tokens_and_goodput_per_region_and_over_them():
    df = pd.concat([rows("eu", 100, 4, 10.0, 40), rows("eu", 50, 16, 30.0, 160), rows("us", 100, 1, 5.0, -1),
                    rows("us", 10, 1, 5.0, 10, status="server_error")], ignore_index=True)
    slos = [{"metric": "latency", "endpoint": "emb", "region": "*", "threshold_ms": 20.0, "percentile": 99}]
    table = {r.region: r for r in pooling_table(df, 10.0, frozenset({"emb"}), slos)}
    eu, us, both = table["eu"], table["us"], table["*"]
    assert (eu.requests, eu.ok, eu.inputs, eu.inputs_per_s) == (150, 150, 1200, 120.0)
    assert eu.input_tokens_per_s == 1200.0 and eu.mean_tokens_per_input == 10.0
    assert eu.good_inputs_per_s == 40.0  # the batches of 4 (10 ms); the 16s took 30 ms, over the 20 ms SLO
    assert eu.mean_inputs_per_request == 8.0 and eu.latency_slo_ms == 20.0
    assert [(b.batch, b.requests, b.p50_ms) for b in eu.by_batch] == [("4", 100, 10.0), ("9–16", 50, 30.0)]
    assert (us.requests, us.ok, us.inputs_per_s) == (110, 100, 10.0)
    assert us.input_tokens is None and us.tokens_reported == 0  # no usage: unknown, never 0
    assert both.inputs == 1300 and both.good_inputs_per_s == 50.0
    assert both.by_batch == []  # per region only: pooled, the regions' delays would mix


def test_no_embeddings_endpoint_no_table():
    assert pooling_table(rows("eu", 5, 1, 1.0, 3), 1.0, frozenset(), []) == []
