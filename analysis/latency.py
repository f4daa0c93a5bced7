"""Latency statistics per group (endpoint × region, per phase, overall)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from analysis.correlation import correlated_percentiles_ci, time_order
from analysis.frames import endpoint_region_positions, group_positions
from contract.profile import Profile
from contract.rates import rate_segments

PERCENTILES = (50, 90, 95, 99, 99.9)
ACCURACY_COLUMNS = ("correct", "correct_count", "batch_size")
TIME_COLUMN = "t_intended_ref"  # the order the correlation of neighbouring requests is measured in


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


class _Rows:
    """The columns one latency row reads, as arrays in row order."""

    def __init__(self, df: pd.DataFrame) -> None:
        self.ok = (df["status"] == "ok").to_numpy()
        self.latency_ms = df["latency_ns"].to_numpy(dtype=float) / 1e6
        self.send_lag_ns = df["send_lag_ns"].to_numpy()
        self.time = df[TIME_COLUMN if TIME_COLUMN in df else "t_intended"].to_numpy()
        self.accuracy = {c: df[c].to_numpy() for c in ACCURACY_COLUMNS if c in df}

    def accuracy_of(self, rows: np.ndarray) -> float | None:
        """accuracy_of the successful requests at positions `rows`, on arrays."""
        if len(rows) == 0:
            return None
        count, batch = self.accuracy.get("correct_count"), self.accuracy.get("batch_size")
        if count is not None and batch is not None and (count.dtype.kind in "iu" or not pd.isna(count[rows]).any()):
            checked = rows[count[rows] >= 0]
            return float(count[checked].sum() / batch[checked].sum()) if len(checked) else None
        return float(self.accuracy["correct"][rows].mean())


def summarize_latency(rows: _Rows, idx: np.ndarray, sorted_ok_ms: np.ndarray, duration_s: float) -> dict:
    """Count, rate, errors, accuracy, mean/max and percentiles with CIs (ms) of the rows at positions `idx`
    (ascending); `sorted_ok_ms`: their successful latencies, sorted. The CIs count the independent samples the
    time-ordered latencies are worth (analysis/correlation.py). Each temporary is freed before the next is made:
    the overall row of a day's run is a hundred million requests."""
    ok = rows.ok[idx]
    n, n_ok = len(idx), int(ok.sum())
    error_rate = float((~ok).mean()) if n else 0.0
    lat_ms = rows.latency_ms[idx][ok]  # in row order: the mean sums as it always did
    mean_ms = float(lat_ms.mean()) if len(lat_ms) else None
    del lat_ms
    ok_idx = idx[ok]
    del ok
    send_lag_p99_ms = float(np.percentile(rows.send_lag_ns[idx], 99) / 1e6) if n else None
    accuracy = rows.accuracy_of(ok_idx)
    in_time_rows = ok_idx[time_order(rows.time[ok_idx])]
    del ok_idx
    in_time = rows.latency_ms[in_time_rows]
    del in_time_rows
    return {"count": int(n), "ok": n_ok, "errors": int(n - n_ok), "error_rate": error_rate,
            "achieved_rate": float(n / duration_s) if duration_s else None,
            "accuracy": accuracy, "mean_ms": mean_ms,
            "max_ms": float(sorted_ok_ms[-1]) if n_ok else None,
            "send_lag_p99_ms": send_lag_p99_ms,
            "percentiles": {f"p{p:g}": est.as_dict() for p, est in
                            correlated_percentiles_ci(in_time, PERCENTILES, sorted_ok_ms).items()}}


def _merged(parts: list[np.ndarray]) -> np.ndarray:
    """Sorted arrays merged into one sorted array (timsort finds the runs: no full re-sort)."""
    return np.sort(np.concatenate(parts), kind="stable") if parts else np.empty(0)


CDF_POINTS = 2000  # per curve: every one of the slowest CDF_POINTS requests, log-spaced ranks below them


def cdf_ranks(n: int, points: int = CDF_POINTS) -> np.ndarray:
    """0-based ranks of a sorted sample of n to draw its 1 − CDF on log axes: all of the slowest `points`, and
    `points` ranks evenly spaced in log(fraction slower) below them (all n when n is small)."""
    if n <= 2 * points:
        return np.arange(n)
    slower = np.unique(np.geomspace(points, n, points).astype(np.int64))  # how many requests are slower
    return np.unique(np.concatenate([n - slower, np.arange(n - points, n)]).clip(0, n - 1))


def region_cdfs(ok_sorted: dict[tuple[str, str], np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """region → (latency ms, fraction slower) at cdf_ranks of its successful requests' sorted latencies, merged
    from its endpoint × region groups (`ok_sorted`, as latency_table sorts them): the report's CDF plot, drawn
    without sorting the requests again."""
    curves = {}
    for region in sorted({r for _, r in ok_sorted}, key=str):
        x = _merged([v for (_, r), v in ok_sorted.items() if r == region])
        if len(x):
            ranks = cdf_ranks(len(x))
            curves[str(region)] = (x[ranks], 1 - (ranks + 0.5) / len(x))
    return curves


def _sorted_ok(rows: _Rows, positions: dict, pool: ThreadPoolExecutor) -> dict[tuple[str, str], np.ndarray]:
    """(endpoint, region) → the sorted latencies (ms) of its successful requests (numpy's sort releases the GIL)."""
    groups = list(positions.items())
    return dict(zip((key for key, _ in groups),
                    pool.map(lambda idx: np.sort(rows.latency_ms[idx][rows.ok[idx]]), (i for _, i in groups))))


def latency_table(df: pd.DataFrame, profile: Profile, duration_s: float, positions: dict | None = None,
                  among: np.ndarray | None = None) -> tuple[list[dict], dict[tuple[str, str], np.ndarray]]:
    """(rows per endpoint × region, per endpoint (all regions), and overall, of the rows at ascending positions
    `among` of `df` (None: all); each group's sorted successful latencies (ms), in (endpoint, region) order).
    Each group is sorted once (`positions`: endpoint_region_positions(df, among), when the caller has it); an
    endpoint's and the overall row merge their groups' sorted latencies. The overall row runs first, alongside
    the small groups' rows, so that at most one large row's temporaries are in memory at a time."""
    rows = _Rows(df)
    positions = endpoint_region_positions(df, among) if positions is None else positions
    groups = list(positions.items())
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        ok_sorted = _sorted_ok(rows, positions, pool)
        by_endpoint = group_positions(df, ["endpoint"], among)
        # each task's sorted latencies are merged when it runs: never every endpoint's merge at once
        tasks = [({"endpoint": e, "region": r}, idx, lambda key=(e, r): ok_sorted[key], intended_rate(profile, r, e))
                 for (e, r), idx in groups]
        tasks += [({"endpoint": e, "region": "*"}, by_endpoint[e],
                   lambda e=e: _merged([v for (g, _), v in ok_sorted.items() if g == e]),
                   intended_rate(profile, None, e)) for e in sorted(by_endpoint, key=str)]
        del by_endpoint
        tasks.insert(0, ({"endpoint": "*", "region": "*"}, np.arange(len(df)) if among is None else among,
                         lambda: _merged(list(ok_sorted.values())), intended_rate(profile, None, None)))
        table = list(pool.map(lambda t: {**t[0], **summarize_latency(rows, t[1], t[2](), duration_s),
                                         "intended_rate": t[3]}, tasks))
    return table[1:] + table[:1], ok_sorted


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


def _met_threshold_ns(slos: list[dict], endpoint: str, region: str) -> float:
    """The tightest latency threshold among the latency SLOs that apply to an endpoint × region (inf: none)."""
    thresholds = [s["threshold_ms"] * 1e6 for s in slos if s["metric"] == "latency"
                  and s["endpoint"] in ("*", endpoint) and s["region"] in ("*", region)]
    return min(thresholds, default=np.inf)


def add_goodput(rows: list[dict], df: pd.DataFrame, slos: list[dict], duration_s: float,
                positions: dict | None = None) -> None:
    """Add `goodput_rps` to each latency row: the rate of requests that succeeded within every latency SLO that
    applies to their endpoint × region (meeting "p99 < T" means a latency ≤ T), over the measured phases.
    `positions`: endpoint_region_positions(df), when the caller has it."""
    ok = (df["status"] == "ok").to_numpy()
    latency = df["latency_ns"].to_numpy()
    good: dict[tuple[str, str], int] = {}
    for (endpoint, region), idx in (endpoint_region_positions(df) if positions is None else positions).items():
        limit = _met_threshold_ns(slos, str(endpoint), str(region))
        good[(str(endpoint), str(region))] = int((ok[idx] & (latency[idx] <= limit)).sum())
    for row in rows:
        count = sum(v for (e, r), v in good.items() if row["endpoint"] in ("*", e) and row["region"] in ("*", r))
        row["goodput_rps"] = count / duration_s if duration_s else None
