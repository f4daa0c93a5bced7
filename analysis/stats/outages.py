"""Outage windows: runs of consecutive failed requests to one endpoint, on the reference timeline (pure)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import group_positions

MIN_FAILURES = 5
MERGE_GAP_S = 1.0
MAX_WINDOWS = 20


def outage_windows(df: pd.DataFrame, t0_ns: int | None = None, min_failures: int = MIN_FAILURES,
                   merge_gap_s: float = MERGE_GAP_S, trace_ids: Callable[[pd.Index], list[str]] | None = None
                   ) -> list[dict]:
    """Per endpoint, every run of >= `min_failures` consecutive failures (ordered by intended reference time,
    all regions merged). A window starts at its first failed request's intended time and ends at the intended
    time of the next successful one (None: not recovered before the run ended); windows less than
    `merge_gap_s` apart (a stray success while a server restarts) are one outage. Times are also given in
    seconds since `t0_ns` (default: the first intended send). At most MAX_WINDOWS, the longest first.
    `trace_ids`: rows of `df` → their trace ids, when `df` has no trace_id column (analysis/read/rundir.py)."""
    if df.empty:
        return []
    all_times = df["t_intended_ref"].to_numpy()
    all_failed = (df["status"] != "ok").to_numpy()
    t0 = int(all_times.min()) if t0_ns is None else t0_ns
    windows = []
    by_endpoint = group_positions(df, ["endpoint"])
    for endpoint in sorted(by_endpoint):
        rows = by_endpoint[endpoint]
        if all_failed[rows].sum() < min_failures:
            continue
        order = rows[np.argsort(all_times[rows], kind="stable")]
        failed, times = all_failed[order], all_times[order]
        boundaries = np.flatnonzero(np.diff(failed.astype(np.int8))) + 1
        starts = np.concatenate([[0], boundaries])
        lasts = np.concatenate([boundaries, [len(order)]]) - 1
        runs = failed[starts] & (lasts - starts + 1 >= min_failures)
        for first, last in zip(starts[runs].tolist(), lasts[runs].tolist()):
            start, end = int(times[first]), int(times[last + 1]) if last + 1 < len(order) else None
            if windows and windows[-1]["endpoint"] == endpoint and windows[-1]["end_ref_ns"] is not None \
                    and start - windows[-1]["end_ref_ns"] < merge_gap_s * 1e9:
                first = windows.pop()["_first"]
            start = int(times[first])
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
    for w in windows:
        del w["_first"]
    windows.sort(key=lambda w: -(w["duration_s"] if w["duration_s"] is not None else float("inf")))
    return sorted(windows[:MAX_WINDOWS], key=lambda w: (w["start_ref_ns"], w["endpoint"]))
