"""Latency statistics per group (endpoint × region, per phase, overall)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import endpoint_region_positions, group_positions, ms_at, sorted_ms_at
from tailrace.analysis.stats.correlation import TimeOrder, correlated_percentiles_ci, time_order
from tailrace.analysis.stats.estimators import SortedUnion, pairwise_mean, tail_needed, tail_quantile
from tailrace.contract.profile import Profile
from tailrace.contract.rates import load_segments
from tailrace.contract.records import CANCELLED
from tailrace.contract.summary.tables import LatencyRow, TokenRow

PERCENTILES = (50, 90, 95, 99, 99.9)
ACCURACY_COLUMNS = ("correct", "correct_count", "batch_size")
WHOLE_COLUMN_MS_ROWS = 32_000_000  # up to this many rows _Rows converts the latencies to ms once, not per row
TIME_COLUMN = "t_intended_ref"  # the order the correlation of neighbouring requests is measured in
SEND_LAG_Q = 99 / 100  # the send lag quantile of each row (np.percentile(…, 99))


def intended_rate(profile: Profile, region: str | None, endpoint: str | None) -> float | None:
    """Mean intended arrival rate over the measured window for a region / endpoint (None = all); None for
    the closed-loop scenarios, whose rate is whatever the endpoint sustains, for sessions (the process starts
    sessions: their later turns' rate depends on the replies), and for pipelines' stages (likewise)."""
    load = profile.load
    if load.scenario != "server":
        return None
    if any(e.sessions is not None and endpoint in (None, e.name) for e in getattr(profile, "endpoints", ())):
        return None
    pipelines = getattr(profile, "pipelines", ())
    if pipelines and (endpoint is None or endpoint in {s.endpoint for p in pipelines for s in p.stages}):
        return None  # a pipeline's later stages are due at the stage before's end: no intended rate
    if load.arrivals.process == "trace":
        return None  # the trace's own rate: the arrival checks compare the sends with it
    segments = load_segments(load, warmup_s=0.0)
    rate = sum(s.expected for s in segments) / load.duration_s
    if region is not None:
        rate *= next(r.share for r in profile.regions if r.name == region)
    if endpoint is not None:
        rate *= next(e.weight for e in profile.endpoints if e.name == endpoint) / (
            sum(e.weight for e in profile.endpoints) + sum(p.weight for p in pipelines))
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


def _column(values: np.ndarray | None, name: str) -> np.ndarray:
    """A column the latency rows read, which the request frame must have had."""
    if values is None:
        raise ValueError(f"the requests read for the latency table have no {name} column")
    return values


class _Rows:
    """The columns the latency rows read, as arrays in row order (those `df` has)."""

    def __init__(self, df: pd.DataFrame, order: TimeOrder | None = None) -> None:
        self.order = order  # the rows' time order, when found once for the log (else each row's is sorted)
        self.ok = (df["status"] == "ok").to_numpy()
        cancelled = (df["status"] == CANCELLED).to_numpy()
        self.cancelled = cancelled if cancelled.any() else None  # abandoned by their client: neither ok nor errors
        self.latency_ns = df["latency_ns"].to_numpy() if "latency_ns" in df else None
        # every latency in ms at once when the column is small enough to hold twice (the rows then take it), else
        # converted where taken (a day's run: no second column of a hundred million)
        self._latency_ms = (self.latency_ns.astype(float) / 1e6
                            if self.latency_ns is not None and len(self.latency_ns) <= WHOLE_COLUMN_MS_ROWS else None)
        self.send_lag_ns = df["send_lag_ns"].to_numpy() if "send_lag_ns" in df else None
        self.time = next((df[c].to_numpy() for c in (TIME_COLUMN, "t_intended") if c in df), None)
        self.time_is_ordered = TIME_COLUMN in df  # the column `order` is the order of
        self.accuracy = {c: df[c].to_numpy() for c in ACCURACY_COLUMNS if c in df}

    def in_time(self, rows: np.ndarray) -> np.ndarray:
        """Ascending positions `rows` in time order (stable: equal times in row order)."""
        if self.order is not None:  # (its own time column's order: the rows' times sort as it does)
            return self.order.of(rows, self.time if self.time_is_ordered else None)
        return rows[time_order(_column(self.time, TIME_COLUMN)[rows])]

    def latency_ms(self, rows: np.ndarray) -> np.ndarray:
        """Latencies (ms, float) at positions `rows`: the whole column's values in ms, taken at them, with no
        copy of the whole column."""
        if self._latency_ms is not None:
            return self._latency_ms[rows]
        return ms_at(_column(self.latency_ns, "latency_ns"), rows)

    def sorted_latency_ms(self, rows: np.ndarray) -> np.ndarray:
        """np.sort(latency_ms(rows)), the same values, sorted as integers (frames.sorted_ms_at)."""
        return sorted_ms_at(_column(self.latency_ns, "latency_ns"), rows)

    def mean_ms(self, rows: np.ndarray) -> float | None:
        """The mean of latency_ms(rows) as numpy computes it (the same bits), summed a block at a time: no
        temporary the size of the rows (None: no rows)."""
        if len(rows) == 0:
            return None
        return pairwise_mean(len(rows), lambda a, b: self.latency_ms(rows[a:b]))

    def accuracy_of(self, rows: np.ndarray) -> float | None:
        """accuracy_of the successful requests at positions `rows`, on arrays."""
        if len(rows) == 0:
            return None
        count, batch = self.accuracy.get("correct_count"), self.accuracy.get("batch_size")
        if count is not None and batch is not None and (count.dtype.kind in "iu" or not pd.isna(count[rows]).any()):
            checked = rows[count[rows] >= 0]
            return float(count[checked].sum() / batch[checked].sum()) if len(checked) else None
        return float(self.accuracy["correct"][rows].mean())


def request_counts(rows: _Rows, idx: np.ndarray, duration_s: float) -> dict:
    """Count, rate, errors, accuracy and the send lag's p99 of the rows at positions `idx` (ascending): the
    latency row's numbers that read neither the latencies nor the time order."""
    return GroupCounts.of_rows(rows, idx, 0).counts(duration_s)


@dataclass
class GroupCounts:
    """What request_counts reads of one endpoint × region group's rows, kept so that an endpoint's and the
    overall row add their groups' up to the same numbers: sizes and sums are exact integers, and a union's send
    lag percentile is read from the largest send lags of each group (tail_quantile). A sum that would not add up
    exactly (accuracy from float columns) or a send lag that is not an integer column is None: such a row is
    counted from its own rows."""

    n: int
    ok: int
    cancelled: int
    accuracy: float | None
    right: int | None  # accuracy's numerator and denominator sums, and how many rows it counted
    of: int | None
    checked: int | None
    by_count: bool  # accuracy from correct_count / batch_size (else the mean of correct)
    lag_top: np.ndarray | None  # the group's largest send lags: enough for its and any union's percentile
    send_lag_p99_ms: float | None

    @classmethod
    def of_rows(cls, rows: _Rows, idx: np.ndarray, top: int) -> GroupCounts:
        """The counts of the rows at positions `idx`, keeping their `top` largest send lags."""
        ok = rows.ok[idx]
        n, n_ok = len(idx), int(ok.sum())
        n_cancelled = int(np.count_nonzero(rows.cancelled[idx])) if rows.cancelled is not None else 0
        ok_idx = idx[ok]
        correct, count, batch = (rows.accuracy.get(c) for c in ACCURACY_COLUMNS)
        by_count = count is not None and batch is not None
        right = of = checked = None
        accuracy = None
        if count is not None and batch is not None and count.dtype.kind in "iu" and batch.dtype.kind in "iu":
            counted = ok_idx[count[ok_idx] >= 0]
            right, of, checked = int(count[counted].sum()), int(batch[counted].sum()), len(counted)
            # accuracy_of's own numbers (numpy's division of the two sums), not counted again
            accuracy = float(np.int64(right) / np.int64(of)) if checked else None
        elif not by_count and correct is not None and correct.dtype == bool:
            right, of, checked = int(np.count_nonzero(correct[ok_idx])), n_ok, n_ok
        lag_top, lag_p99 = None, None
        if rows.send_lag_ns is not None and n:
            lag = rows.send_lag_ns[idx]
            if lag.dtype.kind in "iu":  # its largest values: its own percentile's and any union's
                keep = min(n, max(top, tail_needed(n, SEND_LAG_Q)))
                if keep < n:
                    lag.partition(n - keep)
                lag_top = lag[n - keep:].copy()
                lag_p99 = tail_quantile(lag_top, n, SEND_LAG_Q) / 1e6
            else:
                lag_p99 = float(np.percentile(lag, 99) / 1e6)
        if right is None or not by_count:
            accuracy = rows.accuracy_of(ok_idx)
        return cls(n, n_ok, n_cancelled, accuracy, right, of, checked, by_count, lag_top, lag_p99)

    def counts(self, duration_s: float) -> dict:
        """request_counts of the group's rows."""
        return _counts(self.n, self.ok, self.cancelled, self.accuracy, self.send_lag_p99_ms, duration_s)

    @staticmethod
    def combined(groups: list[GroupCounts], duration_s: float) -> dict | None:
        """request_counts of the union of `groups`' rows, from their counts (None: not exactly from them)."""
        if any(g.right is None or (g.n and g.lag_top is None) for g in groups):
            return None
        n, n_ok, n_cancelled = (sum(getattr(g, k) for g in groups) for k in ("n", "ok", "cancelled"))
        right, of, checked = (sum(getattr(g, k) for g in groups) for k in ("right", "of", "checked"))
        # numpy's own division, as accuracy_of's: integer sums over the count of rows or over the batch sizes
        accuracy = None if not checked else float(np.int64(right) / np.int64(of)) if groups[0].by_count else \
            float(np.float64(right) / of)
        lag = tail_quantile(np.concatenate([g.lag_top for g in groups if g.n]), n, SEND_LAG_Q) / 1e6 if n else None
        return _counts(n, n_ok, n_cancelled, accuracy, lag, duration_s)


def _counts(n: int, n_ok: int, n_cancelled: int, accuracy: float | None, send_lag_p99_ms: float | None,
            duration_s: float) -> dict:
    """request_counts' row from its numbers. A request its client abandoned (cancelled) is counted, and is no error:
    the error rate is over the requests read to their end."""
    errors, finished = n - n_ok - n_cancelled, n - n_cancelled
    return {"count": int(n), "ok": n_ok, "errors": int(errors), "cancelled": int(n_cancelled),
            "error_rate": float(errors / finished) if finished else 0.0,
            "achieved_rate": float(n / duration_s) if duration_s else None, "accuracy": accuracy,
            "send_lag_p99_ms": send_lag_p99_ms}


def summarize_latency(rows: _Rows, idx: np.ndarray, sorted_ok_ms: Callable[[], np.ndarray | SortedUnion | None],
                      counts: dict, labels: dict[str, str], intended: float | None = None) -> LatencyRow:
    """The latency row of the group `labels` names (its endpoint, region and kind; `intended`: its intended rate):
    `counts` (request_counts of the same rows) with the mean, max and percentiles with CIs (ms) of the
    successful latencies of the rows at positions `idx` (ascending); `sorted_ok_ms()`: those latencies, sorted
    (an array or a SortedUnion, asked for once the rows are in time order; None: sorted here). The CIs count the
    independent samples the time-ordered latencies are worth (analysis/stats/correlation.py). Each temporary is freed
    before the next is made: the overall row of a day's run is a hundred million requests."""
    ok_idx = idx[rows.ok[idx]]
    mean_ms = rows.mean_ms(ok_idx)  # in row order: the mean sums as it always did
    in_time_rows = rows.in_time(ok_idx)
    del ok_idx
    in_time = rows.latency_ms(in_time_rows)
    del in_time_rows
    ok_sorted = sorted_ok_ms()
    if ok_sorted is None:
        ok_sorted = np.sort(in_time)
    return LatencyRow(**labels, **counts, mean_ms=mean_ms, max_ms=float(ok_sorted[-1]) if len(ok_sorted) else None,
                      intended_rate=intended, percentiles={f"p{p:g}": est.estimate() for p, est in
                                                           correlated_percentiles_ci(in_time, PERCENTILES,
                                                                                     ok_sorted).items()})


def _merged(parts: list[np.ndarray]) -> np.ndarray:
    """Sorted arrays merged into one sorted array (timsort finds the runs: no full re-sort), sorted in place:
    one array the size of the merge, not two."""
    if not parts:
        return np.empty(0)
    merged = np.concatenate(parts)
    merged.sort(kind="stable")
    return merged


CDF_POINTS = 2000  # per curve: every one of the slowest CDF_POINTS requests, log-spaced ranks below them


def cdf_ranks(n: int, points: int = CDF_POINTS) -> np.ndarray:
    """0-based ranks of a sorted sample of n to draw its 1 − CDF on log axes: all of the slowest `points`, and
    `points` ranks evenly spaced in log(fraction slower) below them (all n when n is small)."""
    if n <= 2 * points:
        return np.arange(n)
    slower = np.unique(np.geomspace(points, n, points).astype(np.int64))  # how many requests are slower
    return np.unique(np.concatenate([n - slower, np.arange(n - points, n)]).clip(0, n - 1))


ONE_SHOT, STREAM = "one-shot", "stream"  # the two kinds of endpoint whose latencies are never pooled


def pooled_kind(endpoints, streamed: frozenset[str] | set[str]) -> str:
    """The kind of endpoint a pooled row or curve over `endpoints` holds: one-shot where any endpoint is one-shot
    (a stream's E2E is hundreds of ms of generation, not a latency to pool with a classifier's), else stream."""
    return ONE_SHOT if any(str(e) not in streamed for e in endpoints) else STREAM


def region_cdfs(ok_sorted: dict[tuple[str, str], np.ndarray], streamed: frozenset[str] | set[str] = frozenset()
                ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """region → (latency ms, fraction slower) at cdf_ranks of its successful requests' sorted latencies, merged
    from its endpoint × region groups (`ok_sorted`, as latency_table sorts them): the report's CDF plot, drawn
    without sorting the requests again. One kind only: the one-shot endpoints' groups where the run has any, else
    the `streamed` ones' (their E2E)."""
    kind = pooled_kind((e for e, _ in ok_sorted), streamed)
    ok_sorted = {(e, r): v for (e, r), v in ok_sorted.items() if (str(e) in streamed) == (kind == STREAM)}
    curves = {}
    for region in sorted({r for _, r in ok_sorted}, key=str):
        x = _merged([v for (_, r), v in ok_sorted.items() if r == region])
        if len(x):
            ranks = cdf_ranks(len(x))
            curves[str(region)] = (x[ranks], 1 - (ranks + 0.5) / len(x))
    return curves


def row_positions(df: pd.DataFrame, positions: dict | None = None, among: np.ndarray | None = None,
                  streamed: frozenset[str] = frozenset()) -> list[tuple[dict, Callable[[], np.ndarray]]]:
    """The latency table's rows as (labels, their ascending positions when called), in the order
    latency_table computes them: the overall row (one kind of endpoint: pooled_kind), each endpoint × region
    (`positions`: endpoint_region_positions(df, among)), each endpoint. An endpoint's positions are made when asked
    for, from its groups' (one endpoint's at a time: a day's run holds a hundred million positions)."""
    return [(labels, idx) for labels, idx, _ in _table_rows(df, positions, among, streamed)]


def _kind_positions(df: pd.DataFrame, among: np.ndarray | None, streamed: frozenset[str], kind: str) -> np.ndarray:
    """The ascending positions (of all rows, or of `among`) of the rows to endpoints of `kind`."""
    is_stream = df["endpoint"].isin(streamed).to_numpy()
    mine = is_stream if kind == STREAM else ~is_stream
    return np.flatnonzero(mine) if among is None else among[mine[among]]


def _table_rows(df: pd.DataFrame, positions: dict | None, among: np.ndarray | None,
                streamed: frozenset[str] = frozenset()) -> list[tuple[dict, Callable[[], np.ndarray], list | None]]:
    """row_positions, each row with the keys of the endpoint × region groups whose rows are exactly its rows
    (None where some of its rows are in no group: rows with no endpoint or no region). Each row's labels say
    its kind of endpoint (one-shot or stream); the overall row holds one kind (pooled_kind): in a run that mixes
    one-shot endpoints with `streamed` ones, the one-shot endpoints only."""
    positions = endpoint_region_positions(df, among) if positions is None else positions
    size = len(df) if among is None else len(among)
    endpoints = set(df["endpoint"].astype(str).unique()) if not positions else {str(e) for e, _ in positions}
    kind = pooled_kind(endpoints, streamed)
    pooled = [key for key in positions if (str(key[0]) in streamed) == (kind == STREAM)]
    mixed = any((e in streamed) != (kind == STREAM) for e in endpoints)
    if not mixed:
        whole = list(positions) if sum(len(idx) for idx in positions.values()) == size else None
        overall: Callable[[], np.ndarray] = partial(_given, np.arange(len(df)) if among is None else among)
    else:
        whole = pooled if sum(len(idx) for idx in positions.values()) == size else None
        overall = partial(_kind_positions, df, among, streamed, kind)
    rows: list[tuple[dict, Callable[[], np.ndarray], list | None]] = [
        ({"endpoint": "*", "region": "*", "kind": kind}, overall, whole)]
    rows += [({"endpoint": e, "region": r, "kind": STREAM if str(e) in streamed else ONE_SHOT}, partial(_given, idx),
              [(e, r)]) for (e, r), idx in positions.items()]
    codes = df["region"].cat.codes.to_numpy() if isinstance(df["region"].dtype, pd.CategoricalDtype) else None
    missing_region = codes is None or bool((codes < 0).any() if among is None else (codes[among] < 0).any())
    if missing_region:  # rows with no region belong to their endpoint's row but to no endpoint × region group
        by_endpoint = group_positions(df, ["endpoint"], among)
        rows += [({"endpoint": e, "region": "*", "kind": STREAM if str(e) in streamed else ONE_SHOT},
                  partial(_given, idx), None) for e, idx in sorted(by_endpoint.items(), key=lambda kv: str(kv[0]))]
    else:
        rows += [({"endpoint": e, "region": "*", "kind": STREAM if str(e) in streamed else ONE_SHOT},
                  partial(_endpoint_positions, df, e, positions, among),
                  [key for key in positions if key[0] == e]) for e in sorted({e for e, _ in positions}, key=str)]
    return rows


def _given(positions: np.ndarray) -> np.ndarray:
    return positions


def _endpoint_positions(df: pd.DataFrame, endpoint, positions: dict, among: np.ndarray | None) -> np.ndarray:
    """The ascending positions of an endpoint's rows (each has a region: the union of its groups'), found by
    comparing the endpoint's code once per row rather than sorting its groups' positions together."""
    column = df["endpoint"]
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return np.sort(np.concatenate([idx for (g, _), idx in positions.items() if g == endpoint]))
    codes = column.cat.codes.to_numpy()
    code = column.cat.categories.get_loc(endpoint)
    if among is None:
        return np.flatnonzero(codes == code)
    return among[codes[among] == code]


def request_count_table(df: pd.DataFrame, duration_s: float, positions: dict | None = None,
                        among: np.ndarray | None = None, streamed: frozenset[str] = frozenset()) -> list[dict]:
    """request_counts of each of row_positions(df, positions, among), in that order: what the latency table
    reads of the send lag and accuracy columns, so that the caller can free them before the latencies are
    sorted. The endpoint × region groups are counted from their rows; an endpoint's and the overall row, where
    they are the union of groups, from the groups' counts and their slowest send lags (GroupCounts), without
    reading their rows again — the same numbers."""
    rows = _Rows(df)
    table = _table_rows(df, positions, among, streamed)
    sizes = {members[0]: len(idx()) for labels, idx, members in table if labels["region"] != "*" and members}
    top = max((tail_needed(sum(sizes[k] for k in members), SEND_LAG_Q) for labels, _, members in table
               if labels["region"] == "*" and members), default=0)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        groups = dict(pool.map(lambda t: (t[2][0], GroupCounts.of_rows(rows, t[1](), top)),
                               [t for t in table if t[0]["region"] != "*" and t[2]]))
        combined = {i: GroupCounts.combined([groups[k] for k in members], duration_s)
                    for i, (labels, _, members) in enumerate(table) if labels["region"] == "*" and members}
        direct = [i for i, (labels, _, _) in enumerate(table) if labels["region"] == "*" and combined.get(i) is None]
        counted = dict(zip(direct, pool.map(lambda i: request_counts(rows, table[i][1](), duration_s), direct)))
    out: list[dict] = []
    for i, (labels, _, members) in enumerate(table):
        if i in counted:  # counted from its own rows
            out.append(counted[i])
        elif (whole := combined.get(i)) is not None:  # an endpoint's or the overall row: its groups' counts
            out.append(whole)
        elif members:  # an endpoint × region group
            out.append(groups[members[0]].counts(duration_s))
    return out


def _sorted_ok(rows: _Rows, positions: dict, pool: ThreadPoolExecutor) -> dict[tuple[str, str], np.ndarray]:
    """(endpoint, region) → the sorted latencies (ms) of its successful requests (numpy's sort releases the GIL)."""
    groups = list(positions.items())

    def sort(idx: np.ndarray) -> np.ndarray:
        return rows.sorted_latency_ms(idx[rows.ok[idx]])
    return dict(zip((key for key, _ in groups), pool.map(sort, (i for _, i in groups))))


def latency_table(df: pd.DataFrame, profile: Profile, duration_s: float, positions: dict | None = None,
                  among: np.ndarray | None = None, counts: list[dict] | None = None, order: TimeOrder | None = None,
                  streamed: frozenset[str] = frozenset()) -> tuple[list[LatencyRow], dict[tuple[str, str], np.ndarray]]:
    """(rows per endpoint × region, per endpoint (all regions), and overall, of the rows at ascending positions
    `among` of `df` (None: all); each group's sorted successful latencies (ms), in (endpoint, region) order).
    Each group is sorted once (`positions`: endpoint_region_positions(df, among), when the caller has it); an
    endpoint's and the overall row read their percentiles' order statistics from their groups' sorted latencies
    (SortedUnion), or sort their own where some of their rows are in no group. The overall row runs first, alongside
    the small groups' rows, so that at most one large row's temporaries are in memory at a time. `counts`:
    request_count_table of the same rows, when the caller computed it (and freed the columns it reads);
    else computed here. `order`: the time order of `df`'s rows (TimeOrder of its time column), when the caller
    found it. `streamed`: the generative endpoints (their rows' latency is the stream's E2E; the overall row holds
    one kind: row_positions)."""
    positions = endpoint_region_positions(df, among) if positions is None else positions
    counts = request_count_table(df, duration_s, positions, among, streamed) if counts is None else counts
    rows = _Rows(df, order)
    table_rows = _table_rows(df, positions, among, streamed)
    kind = table_rows[0][0]["kind"]
    overall_endpoints = [e.name for e in getattr(profile, "endpoints", ()) if (e.name in streamed) == (kind == STREAM)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        ok_sorted = _sorted_ok(rows, positions, pool)

        def merged(members: list | None) -> np.ndarray | SortedUnion | None:
            """A row's sorted latencies: its group's; an endpoint's or the overall row's read by rank from its
            groups' (SortedUnion: the few order statistics its percentiles read, no merge of millions); None
            (sorted from its own rows) when some of its rows are in no group."""
            if members is None:
                return None
            parts = [ok_sorted[key] for key in members]
            if len(parts) == 1:
                return parts[0]
            if any(len(p) and np.isnan(p[-1]) for p in parts):  # NaN sorts last: merged as np.sort would
                return _merged(parts)
            return SortedUnion(parts)

        def row(task: tuple[tuple[dict, Callable[[], np.ndarray], list | None], dict]) -> LatencyRow:
            (labels, idx, members), count = task
            e, r = labels["endpoint"], labels["region"]
            rate = intended_rate(profile, None if r == "*" else r, None if e == "*" else e)
            if e == "*" and rate is not None and len(overall_endpoints) < len(profile.endpoints):
                rates = [r for name in overall_endpoints if (r := intended_rate(profile, None, name)) is not None]
                rate = sum(rates) if len(rates) == len(overall_endpoints) else None
            return summarize_latency(rows, idx(), lambda: merged(members), count, labels, rate)
        table = list(pool.map(row, zip(table_rows, counts)))
    return table[1:] + table[:1], ok_sorted


def _met_threshold_ns(slos: list[dict], endpoint: str, region: str) -> float:
    """The tightest latency threshold among the latency SLOs that apply to a one-shot endpoint × region (inf:
    none)."""
    thresholds = [s["threshold_ms"] * 1e6 for s in slos if s["metric"] == "latency"
                  and s["endpoint"] in ("*", endpoint) and s["region"] in ("*", region)]
    return min(thresholds, default=np.inf)


def add_goodput(rows: list[LatencyRow], df: pd.DataFrame, slos: list[dict], duration_s: float,
                positions: dict | None = None, streamed: frozenset[str] = frozenset()) -> None:
    """Add `goodput_rps` to each one-shot latency row: the rate of requests that succeeded within every latency
    SLO that applies to their endpoint × region (meeting "p99 < T" means a latency ≤ T), over the measured phases.
    A stream's row (kind "stream") is left None here: its goodput is judged by its token SLOs
    (analysis/stats/tokens.py token_goodput) and copied from the token table (with_stream_goodput).
    `positions`: endpoint_region_positions(df), when the caller has it."""
    ok = (df["status"] == "ok").to_numpy()
    latency = df["latency_ns"].to_numpy()
    good: dict[tuple[str, str], int] = {}
    for (endpoint, region), idx in (endpoint_region_positions(df) if positions is None else positions).items():
        if str(endpoint) in streamed:
            continue
        limit = _met_threshold_ns(slos, str(endpoint), str(region))
        good[(str(endpoint), str(region))] = int((ok[idx] & (latency[idx] <= limit)).sum())
    for row in rows:
        if row.kind == STREAM:
            row.goodput_rps = None
            continue
        count = sum(v for (e, r), v in good.items() if row.endpoint in ("*", e) and row.region in ("*", r))
        row.goodput_rps = count / duration_s if duration_s else None


def with_stream_goodput(rows: list[LatencyRow], token_rows: list[TokenRow]) -> list[LatencyRow]:
    """The latency rows, each stream row's goodput the token table's for the same endpoint × region (one number
    per group, judged by the SLOs that apply to a stream: TTFT, TPOT, ITL, E2E)."""
    by_group = {(t.endpoint, t.region): t.goodput_rps for t in token_rows}
    return [r.model_copy(update={"goodput_rps": by_group.get((r.endpoint, r.region))}) if r.kind == STREAM else r
            for r in rows]
