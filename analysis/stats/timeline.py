"""The report's timeline in numbers (pure): per region, each second's p99 latency of its successful requests and
its request count, and each second's failed requests — what analysis/report/plots.py's over_time draws.

Outages: the windows where requests failed, which the timeline shades.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import group_positions
from tailrace.contract.records import CANCELLED
from tailrace.contract.summary.tables import Outage

if TYPE_CHECKING:  # (analysis.stats.correlation brings scipy.stats: the figure process imports this module)
    from tailrace.analysis.stats.correlation import TimeOrder


@dataclass(frozen=True)
class Timeline:
    t0_ns: int  # the first intended send (reference time)
    whole_s: int  # complete seconds since t0: a last partial second is not a drop
    end_s: float  # the last intended send, seconds since t0
    p99_ms: dict[str, np.ndarray]  # region → each second's p99 of its successful requests of one kind (NaN: none)
    requests: dict[str, np.ndarray]  # region → each second's requests
    errors: np.ndarray | None  # each second's failed requests (None: no request failed)
    any_ok: bool  # some request succeeded


@dataclass(frozen=True)
class TokenTimeline:
    """Streams through the run, per second since `t0_ns` (the first intended send, reference time), per region: the
    output tokens received and the TTFT p99 of the streams intended in that second (NaN: none)."""

    t0_ns: int
    whole_s: int
    tokens_per_s: dict[str, np.ndarray]
    ttft_p99_ms: dict[str, np.ndarray]


@dataclass(frozen=True)
class TokenFigures:
    """The streamed requests' figures: `curves` (metric → region → (ms, 1 − CDF)) and the token timeline (None:
    no streams)."""

    curves: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]
    timeline: TokenTimeline | None = None


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
        is_stream = df["endpoint"].isin(streamed).to_numpy()
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
    failed = ~ok_all & (df["status"] != CANCELLED).to_numpy()  # (a stream its client abandoned failed nothing)
    if failed.any():
        second = (times[failed] - t0) // 1_000_000_000
        errors = np.bincount(second[second < whole_s], minlength=whole_s)[:whole_s]
    return Timeline(int(t0), whole_s, float((times.max() - t0) / 1e9), p99_ms, requests, errors, bool(ok_all.any()))


MIN_FAILURES = 5
MERGE_GAP_S = 1.0
MAX_WINDOWS = 20


def outage_windows(df: pd.DataFrame, t0_ns: int | None = None, min_failures: int = MIN_FAILURES,
                   merge_gap_s: float = MERGE_GAP_S, trace_ids: Callable[[pd.Index], list[str]] | None = None,
                   time_order: TimeOrder | None = None) -> list[Outage]:
    """Per endpoint, every run of >= `min_failures` consecutive failures (ordered by intended reference time,
    all regions merged). A window starts at its first failed request's intended time and ends at the intended
    time of the next successful one (None: not recovered before the run ended); windows less than
    `merge_gap_s` apart (a stray success while a server restarts) are one outage. Times are also given in
    seconds since `t0_ns` (default: the first intended send). At most MAX_WINDOWS, the longest first.
    `trace_ids`: rows of `df` → their trace ids, when `df` has no trace_id column (analysis/read/rundir.py).
    `time_order`: the time order of `df`'s rows (TimeOrder of its t_intended_ref), when the caller found it."""
    if df.empty:
        return []
    all_times = df["t_intended_ref"].to_numpy()
    all_failed = ((df["status"] != "ok") & (df["status"] != CANCELLED)).to_numpy()  # (an abandoned stream: no outage)
    t0 = int(all_times.min()) if t0_ns is None else t0_ns
    windows: list[dict] = []
    by_endpoint = group_positions(df, ["endpoint"])
    for endpoint in sorted(by_endpoint):
        rows = by_endpoint[endpoint]
        if all_failed[rows].sum() < min_failures:
            continue
        order = rows[np.argsort(all_times[rows], kind="stable")] if time_order is None else time_order.of(rows, all_times)
        failed = all_failed[order]  # (the times are read only where a window starts or ends)
        boundaries = np.flatnonzero(np.diff(failed.astype(np.int8))) + 1
        starts = np.concatenate([[0], boundaries])
        lasts = np.concatenate([boundaries, [len(order)]]) - 1
        runs = failed[starts] & (lasts - starts + 1 >= min_failures)
        for first, last in zip(starts[runs].tolist(), lasts[runs].tolist()):
            start, end = int(all_times[order[first]]), int(all_times[order[last + 1]]) if last + 1 < len(order) else None
            if windows and windows[-1]["endpoint"] == endpoint and windows[-1]["end_ref_ns"] is not None \
                    and start - windows[-1]["end_ref_ns"] < merge_gap_s * 1e9:
                first = windows.pop()["_first"]
            start = int(all_times[order[first]])
            part = df.iloc[order[first:last + 1]]
            failed_part = part[failed[first:last + 1]]
            classes = failed_part.groupby(["status", "code"], observed=True).size().sort_values(ascending=False)
            windows.append({
                "_first": first, "endpoint": endpoint, "failed": len(failed_part),
                "succeeded": len(part) - len(failed_part), "start_ref_ns": start, "end_ref_ns": end,
                "start_s": (start - t0) / 1e9, "end_s": None if end is None else (end - t0) / 1e9,
                "duration_s": None if end is None else (end - start) / 1e9, "recovered": end is not None,
                "regions": sorted(str(r) for r in part["region"].unique()),
                "errors": {f"{s}/{c}": int(n) for (s, c), n in classes.items()},
                "example_trace_ids": (trace_ids(failed_part.index[:3]) if trace_ids is not None
                                      else failed_part["trace_id"].head(3).tolist())})
    outages = [Outage(**{k: v for k, v in w.items() if k != "_first"}) for w in windows]
    outages.sort(key=lambda o: -(o.duration_s if o.duration_s is not None else float("inf")))
    return sorted(outages[:MAX_WINDOWS], key=lambda o: (o.start_ref_ns, o.endpoint))
