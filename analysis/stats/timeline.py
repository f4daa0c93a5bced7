"""The report's timeline in numbers (pure): per region, each second's p99 latency of its successful requests and
its request count, and each second's failed requests — what analysis/report/plots.py's over_time draws."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import group_positions


@dataclass(frozen=True)
class Timeline:
    t0_ns: int  # the first intended send (reference time)
    whole_s: int  # complete seconds since t0: a last partial second is not a drop
    end_s: float  # the last intended send, seconds since t0
    p99_ms: dict[str, np.ndarray]  # region → each second's p99 of its successful requests of one kind (NaN: none)
    requests: dict[str, np.ndarray]  # region → each second's requests
    errors: np.ndarray | None  # each second's failed requests (None: no request failed)
    any_ok: bool  # some request succeeded


def timeline(df: pd.DataFrame, streamed: frozenset[str] | set[str] = frozenset()) -> Timeline:
    """The Timeline of request rows `df` (region, t_intended_ref, status, latency_ns; endpoint where some endpoint is
    `streamed`; at least one row), regions in groupby's order. The p99 line holds one kind of endpoint: the one-shot
    ones where the run has any (a stream's E2E is not pooled with them), else the streams; the request counts hold
    every request. Each region's rows are found by one counting sort of the region codes, not by a pandas
    groupby (which copies every column per group: ~0.6 s on ten million rows)."""
    # imported here, not above: the figure process (analysis/report/figures.py) imports this module to unpickle a Timeline,
    # and analysis.stats.estimators would bring scipy.stats with it (~1 CPU-second on the core the statistics share)
    from tailrace.analysis.stats.estimators import grouped_quantile

    times = df["t_intended_ref"].to_numpy()
    ok_all = (df["status"] == "ok").to_numpy()
    latency = df["latency_ns"].to_numpy()
    in_line = ok_all
    if streamed and "endpoint" in df:
        is_stream = df["endpoint"].astype(str).isin(streamed).to_numpy()
        in_line = ok_all & (is_stream if is_stream.all() else ~is_stream)
    t0 = times.min()
    whole_s = int((times.max() - t0) // 1e9)
    p99_ms, requests = {}, {}
    for region, rows in group_positions(df, ["region"]).items():
        second = (times[rows] - t0) // 1_000_000_000  # whole seconds since the first send
        inside = second < whole_s
        ok = inside & in_line[rows]
        seconds, p99_ns = grouped_quantile(second[ok], latency[rows][ok], 0.99)
        p99 = np.full(whole_s, np.nan)  # a second without a successful request is a gap in the line
        p99[seconds] = p99_ns / 1e6
        p99_ms[region] = p99
        requests[region] = np.bincount(second[inside], minlength=whole_s)[:whole_s]
    errors = None
    if not ok_all.all():
        second = (times[~ok_all] - t0) // 1_000_000_000
        errors = np.bincount(second[second < whole_s], minlength=whole_s)[:whole_s]
    return Timeline(int(t0), whole_s, float((times.max() - t0) / 1e9), p99_ms, requests, errors, bool(ok_all.any()))
