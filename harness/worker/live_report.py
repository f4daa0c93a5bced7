"""A worker's part of the live page: once a second, a digest of what it did since the last one — built from the rows
its request log already holds (never on the request path) — sent to the master as LIVE (contract/messages.py).

Distributions travel as log-bucketed histograms (bucket i holds values in (γ^(i-1), γ^i] ns, γ = 1.02): the
master adds them across workers and seconds exactly, and a quantile read from them is within 1% of the value —
a live estimate; the report computes exact percentiles from the rows afterwards.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable

import numpy as np

from tailrace.contract.records import RequestRow

GAMMA = 1.02
_LOG_GAMMA = math.log(GAMMA)
Histogram = dict[int, int]  # bucket index → count
SLICE_ROWS = 256  # rows digested between two yields to the sending loop (~0.2 ms)

_F = {name: i for i, name in enumerate(RequestRow._fields)}


def histogram(values_ns: np.ndarray) -> Histogram:
    """Values (ns) → their log buckets; values below 1 µs count as 1 µs."""
    if len(values_ns) == 0:
        return {}
    index = np.ceil(np.log(np.maximum(np.asarray(values_ns, dtype=np.float64), 1e3)) / _LOG_GAMMA).astype(np.int64)
    keys, counts = np.unique(index, return_counts=True)
    return dict(zip(keys.tolist(), counts.tolist()))


def merge(into: Histogram, other: Histogram | Iterable[tuple[int, int]]) -> Histogram:
    """Add `other`'s counts into `into` (returned)."""
    for key, count in (other.items() if isinstance(other, dict) else other):
        into[int(key)] = into.get(int(key), 0) + int(count)
    return into


def quantile_ns(hist: Histogram, q: float) -> float | None:
    """The q-quantile (0 < q < 1) of a histogram: the midpoint of the bucket holding it (relative error ≤ 1%);
    None when it is empty."""
    total = sum(hist.values())
    if total == 0:
        return None
    rank, seen = q * total, 0
    for key in sorted(hist):
        seen += hist[key]
        if seen >= rank:
            return 2 * GAMMA ** key / (GAMMA + 1)
    return 2 * GAMMA ** max(hist) / (GAMMA + 1)


def wire_histogram(hist: Histogram) -> list[list[int]]:
    """As LIVE carries it: [[bucket, count], …] (integer keys survive any serialisation)."""
    return [[k, v] for k, v in sorted(hist.items())]


def endpoint_digest(rows: list[tuple], asked: int | None) -> dict:
    """One endpoint's interval: `asked` arrivals were due, `rows` finished in it."""
    col = lambda name: np.fromiter((r[_F[name]] for r in rows), dtype=np.int64, count=len(rows))  # noqa: E731
    status = [r[_F["status"]] for r in rows]
    ok = np.fromiter((s == "ok" for s in status), dtype=bool, count=len(rows))
    out: dict = {"asked": asked, "done": len(rows), "ok": int(ok.sum()),
                 "errors": dict(Counter(s for s in status if s != "ok")),
                 "latency": wire_histogram(histogram(col("latency_ns")[ok])),
                 "send_lag": wire_histogram(histogram(np.maximum(col("send_lag_ns"), 0)))}
    outcomes = Counter(r[_F["stream_outcome"]] for r in rows if r[_F["stream_outcome"]])
    if not outcomes:
        return out
    tokens = col("output_tokens")
    ttft = col("ttft_ns")
    first, last = col("t_first_token"), col("t_last_token")
    many = ok & (tokens > 1) & (first > 0)
    itl = [_gaps_ns(r) for r, good in zip(rows, ok) if good and r[_F["token_event_us"]]]
    out.update(outcomes=dict(outcomes), output_tokens=int(tokens[tokens > 0].sum()),
               ttft=wire_histogram(histogram(ttft[ok & (ttft >= 0)])),
               tpot=wire_histogram(histogram((last[many] - first[many]) / (tokens[many] - 1))),
               itl=wire_histogram(histogram(np.concatenate(itl) if itl else np.empty(0))))
    return out


def merge_digests(a: dict, b: dict) -> dict:
    """Two digests of one endpoint's interval (slices of its rows) as one; `asked` is the interval's, in both."""
    out = {"asked": a["asked"], "done": a["done"] + b["done"], "ok": a["ok"] + b["ok"],
           "errors": dict(Counter(a["errors"]) + Counter(b["errors"]))}
    for name in ("latency", "send_lag", "ttft", "tpot", "itl"):
        if name in a or name in b:
            out[name] = wire_histogram(merge(merge({}, a.get(name, ())), b.get(name, ())))
    if "outcomes" in a or "outcomes" in b:
        out["outcomes"] = dict(Counter(a.get("outcomes", {})) + Counter(b.get("outcomes", {})))
        out["output_tokens"] = a.get("output_tokens", 0) + b.get("output_tokens", 0)
    return out


def _gaps_ns(row: tuple) -> np.ndarray:
    """A stream's inter-token gaps (ns), each event's gap spread over the tokens it carried (as the report's ITL)."""
    offsets = np.frombuffer(row[_F["token_event_us"]], dtype="<i4").astype(np.float64)
    if len(offsets) < 2:
        return np.empty(0)
    carried = np.maximum(np.frombuffer(row[_F["token_event_counts"]], dtype="<u2")[1:].astype(np.int64), 1)
    return np.repeat(np.diff(offsets) * 1e3 / carried, carried)


def asked_offsets(schedule, endpoints: int) -> list[np.ndarray] | None:
    """Per endpoint index, the sorted offsets (ns from the start instant) of a worker's scheduled arrivals (None:
    a closed loop, where nothing is asked ahead)."""
    if schedule is None:
        return None
    return [np.sort(schedule.offsets_ns[schedule.endpoint_index == i]) for i in range(endpoints)]


def worker_state(path, clocks, saturation, sessions) -> dict:
    """The worker's own part of a digest: what it sent, its clock, the saturation rule's last window, its sessions
    in flight (`sessions` None: the run has none)."""
    last = saturation.windows[-1] if saturation.windows else None
    return {"sent": path.sent, "in_flight": path.in_flight, "clock_offset_ns": clocks.offset_ns,
            "clock_uncertainty_ns": clocks.uncertainty_ns, "window": last.as_dict() if last is not None else None,
            "lagging_windows": sum(w.lagging for w in saturation.windows),
            "behind": bool(last is not None and last.behind(saturation.threshold_ns)),
            "sessions_in_flight": sessions.in_flight if sessions is not None else None}


class LiveReporter:
    """Taps the request log (`log`: its rows as they leave its buffer) and, once a second, sends the interval's
    digest: per endpoint from its rows and the arrivals asked (`asked_offsets`), with the worker's `state()`."""

    def __init__(self, endpoints: list[str], asked_offsets: list[np.ndarray] | None,
                 state: Callable[[], dict], send: Callable[[dict], None], log=None,
                 yield_fn: Callable[[], None] = lambda: None) -> None:
        """`yield_fn`: called between slices of SLICE_ROWS rows, so that a busy second's digest never holds the
        sending loop for more than one slice (the worker yields to its event loop there)."""
        self.endpoints, self.asked_offsets, self.state, self.send = endpoints, asked_offsets, state, send
        self.log, self.yield_fn = log, yield_fn
        self._rows: list[tuple] = []
        self._last_s = 0.0
        if log is not None:
            log.tap = self.observe

    @classmethod
    def of_worker(cls, profile, schedule, path, clocks, saturation, sessions, send: Callable[[dict], None]
                  ) -> "LiveReporter":
        """A worker's reporter: its request log tapped (`path.recorder`), yielding to gevent between slices."""
        import gevent

        names = [e.name for e in profile.endpoints]
        return cls(names, asked_offsets(schedule, len(names)),
                   lambda: worker_state(path, clocks, saturation, sessions), send, path.recorder,
                   yield_fn=lambda: gevent.sleep(0))

    def observe(self, rows: list[tuple]) -> None:
        """The request log's tap: rows about to leave its buffer."""
        self._rows.extend(rows)

    def report(self, t_s: float) -> dict:
        """The digest of (last report, t_s] (seconds since the start instant), sent and returned."""
        if self.log is not None:
            self.log.tap_new()
        rows, self._rows = self._rows, []
        by_endpoint: dict[str, list[tuple]] = {name: [] for name in self.endpoints}
        for row in rows:
            by_endpoint.setdefault(row[_F["endpoint"]], []).append(row)
        lo, hi = int(self._last_s * 1e9), int(t_s * 1e9)
        digests = {}
        for i, (name, mine) in enumerate(by_endpoint.items()):
            asked = None
            if self.asked_offsets is not None and i < len(self.asked_offsets):
                offsets = self.asked_offsets[i]
                asked = int(np.searchsorted(offsets, hi, side="right") - np.searchsorted(offsets, lo, side="right"))
            digest = endpoint_digest(mine[:SLICE_ROWS], asked)
            for start in range(SLICE_ROWS, len(mine), SLICE_ROWS):
                self.yield_fn()
                digest = merge_digests(digest, endpoint_digest(mine[start:start + SLICE_ROWS], asked))
            digests[name] = digest
        digest = {"t_s": round(t_s, 3), "interval_s": round(t_s - self._last_s, 3), "endpoints": digests,
                  **self.state()}
        self._last_s = t_s
        self.send(digest)
        return digest
