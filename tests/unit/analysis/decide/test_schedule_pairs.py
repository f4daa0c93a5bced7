"""compare's pairing by schedule place on integer codes gives the pairs, in the order, that the joined DataFrames of
strings it replaced gave (kept here as the reference): categories in other orders in each run, names in one run
only, sessions, ties in intended send across workers, failures, the warm-up, runs of different lengths, streams."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tailrace.analysis.decide.compare import PAIRED_MATCH, STREAM_METRIC_COLUMNS, _with_metrics, pair_requests


def reference_pairs(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame | None:
    """pair_requests as it was (tailrace before 2026-12-06): a merge of both runs' measured rows on their place."""
    def positions(df: pd.DataFrame) -> pd.DataFrame:
        rows = df.loc[(df["phase"] > 0).to_numpy(), ["endpoint", "region", "worker", "t_intended", "sample_index",
                                                      "status", "latency_ns",
                                                      *(c for c in ("session_id", "turn") if c in df),
                                                      *(c for c in STREAM_METRIC_COLUMNS if c in df)]]
        for column, default in (("session_id", -1), ("turn", 0)):
            if column not in rows:
                rows[column] = default
        rows = rows.sort_values(["endpoint", "region", "worker", "t_intended"], kind="stable")
        rows["position"] = rows.groupby(["endpoint", "region", "worker", "session_id", "turn"],
                                        observed=True).cumcount()
        return rows

    key = ["endpoint", "region", "worker", "session_id", "turn", "position"]
    pa, pb = positions(a), positions(b)
    for frame in (pa, pb):
        for column in ("endpoint", "region", "worker"):
            frame[column] = frame[column].astype(str)
    pairs = pa.merge(pb, on=key, suffixes=("_a", "_b"))
    if len(pairs) == 0 or (pairs["sample_index_a"] == pairs["sample_index_b"]).mean() < PAIRED_MATCH:
        return None
    pairs = pairs[(pairs["status_a"] == "ok").to_numpy() & (pairs["status_b"] == "ok").to_numpy()]
    pairs = pairs.sort_values(["endpoint", "region", "t_intended_a"], kind="stable")
    ma, mb = _with_metrics(pairs, "_a"), _with_metrics(pairs, "_b")
    return pd.concat([pairs[["endpoint", "region"]], ma.add_suffix("_a_ms"), mb.add_suffix("_b_ms")], axis=1)


def a_run(seed: int, rows: int, endpoints: list[str], workers: list[str], sessions: bool, streams: bool,
          categorical: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    worker = rng.choice(workers, rows)
    df = pd.DataFrame({
        "endpoint": rng.choice(endpoints, rows), "region": [w.split("-w")[0] for w in worker], "worker": worker,
        "phase": rng.choice([0, 1, 2], rows, p=[0.1, 0.45, 0.45]).astype(np.int32),
        # coarse times: many ties, within a worker and across workers
        "t_intended": rng.integers(0, rows // 4, rows).astype(np.int64) * 1000,
        "sample_index": np.zeros(rows, dtype=np.int64),
        "status": rng.choice(["ok", "ok", "ok", "timeout", "http_5xx"], rows),
        "latency_ns": rng.integers(1_000_000, 90_000_000, rows).astype(np.int64),
    })
    if sessions:
        df["session_id"] = np.where(rng.random(rows) < 0.3, rng.integers(0, 40, rows), -1).astype(np.int64)
        df["turn"] = np.where(df["session_id"] >= 0, rng.integers(1, 4, rows), 0).astype(np.int32)
    if streams:
        df["ttft_ns"] = np.where(rng.random(rows) < 0.1, -1, rng.integers(1_000_000, 9_000_000, rows))
        df["t_first_token"] = rng.integers(0, 10**9, rows).astype(np.int64)
        df["t_last_token"] = df["t_first_token"] + rng.integers(0, 10**8, rows)
        df["output_tokens"] = rng.integers(0, 40, rows).astype(np.int32)
    if categorical:  # each run's categories in an order of its own, one name it never uses
        for column in ("endpoint", "region", "worker", "status"):
            names = [*df[column].unique(), f"unused-{column}"]
            rng.shuffle(names)
            df[column] = pd.Categorical(df[column], categories=names)
    return df


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sessions,streams,categorical", [(False, False, True), (True, True, True),
                                                          (True, False, False), (False, True, False)])
def test_the_pairs_and_their_order_are_those_of_the_merge_they_replace(seed, sessions, streams, categorical):
    a = a_run(seed, 3000, ["chat", "embed", "rank"], ["eu-w0", "eu-w1", "us-w0"], sessions, streams, categorical)
    b = a_run(seed + 100, 2600, ["embed", "chat", "vision"], ["us-w0", "eu-w1", "eu-w0", "ap-w0"], sessions, streams,
              categorical)
    got, want = pair_requests(a, b), reference_pairs(a, b)
    assert got is not None and want is not None and len(got) > 100
    assert list(got.columns) == list(want.columns)
    for column in ("endpoint", "region"):
        assert got[column].astype(str).tolist() == want[column].astype(str).tolist(), column
    for column in got.columns[2:]:
        np.testing.assert_array_equal(got[column].to_numpy(), want[column].to_numpy(), err_msg=column)


def test_runs_whose_sent_samples_disagree_are_not_paired():
    a = a_run(1, 800, ["chat"], ["eu-w0"], False, False, True)
    b = a.assign(sample_index=np.arange(len(a)))
    assert pair_requests(a, b) is None and reference_pairs(a, b) is None
    assert pair_requests(a, a.iloc[:0]) is None

