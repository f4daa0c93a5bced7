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
from operator import itemgetter

import numpy as np

from tailrace.contract.records import CANCELLED, RequestRow

GAMMA = 1.02
_LOG_GAMMA = math.log(GAMMA)
Histogram = dict[int, int]  # bucket index → count
LOW_BUCKET = math.ceil(math.log(1e3) / _LOG_GAMMA)  # 1 µs: the lowest bucket
BUCKETS = math.ceil(math.log(2.0 ** 63) / _LOG_GAMMA) - LOW_BUCKET + 1  # up to the largest int64 (ns)
SLICE_ROWS = 256  # rows digested between two yields to the sending loop (~0.1-0.2 ms) ...
STREAM_SLICE_ROWS = 64  # ... streamed rows (their ITL gaps, four more histograms: 250 of them took ~1-2 ms)

_F = {name: i for i, name in enumerate(RequestRow._fields)}
_OK = "ok"


def bucket_counts(values_ns: np.ndarray) -> np.ndarray:
    """Values (ns) → counts per log bucket, as an array indexed by bucket - LOW_BUCKET (BUCKETS long): arrays of
    parts add up with numpy, where dicts cost ~0.3 ms a merge. Values below 1 µs count as 1 µs."""
    if len(values_ns) == 0:
        return np.zeros(BUCKETS, dtype=np.int64)
    index = np.ceil(np.log(np.maximum(np.asarray(values_ns, dtype=np.float64), 1e3)) / _LOG_GAMMA).astype(np.int64)
    return np.bincount(index - LOW_BUCKET, minlength=BUCKETS)


def histogram_of_counts(counts: np.ndarray) -> Histogram:
    """bucket_counts' array → a Histogram (its nonzero buckets)."""
    keys = np.flatnonzero(counts)
    return dict(zip((keys + LOW_BUCKET).tolist(), counts[keys].tolist()))


def histogram(values_ns: np.ndarray) -> Histogram:
    """Values (ns) → their log buckets; values below 1 µs count as 1 µs."""
    return histogram_of_counts(bucket_counts(values_ns)) if len(values_ns) else {}


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


_DIGESTED = ("status", "latency_ns", "send_lag_ns", "stream_outcome")
_DIGESTED_STREAMS = ("output_tokens", "ttft_ns", "t_first_token", "t_last_token")  # read only when a row streamed
_GET = {name: itemgetter(_F[name]) for name in _DIGESTED + _DIGESTED_STREAMS}
_GET_EVENTS = itemgetter(_F["status"], _F["token_event_us"], _F["token_event_counts"])


def digest_columns(rows: list[tuple]) -> dict[str, list]:
    """The fields a digest reads, as lists, and each ok stream's inter-token gaps ("itl"). Read with C-level
    itemgetters: a generator over the rows cost ~4× as much (~2 µs a row)."""
    cols: dict[str, list] = {name: list(map(_GET[name], rows)) for name in _DIGESTED}
    if any(cols["stream_outcome"]):
        cols.update({name: list(map(_GET[name], rows)) for name in _DIGESTED_STREAMS})
        # one count per instant, as the sender writes them (a row that breaks it would shift every other's gaps)
        events = [(us, counts) for status, us, counts in map(_GET_EVENTS, rows)
                  if status == _OK and us and len(us) == 2 * len(counts)]
        cols["itl"] = [gaps_ns(events)] if events else []
    return cols


_STREAM_HISTOGRAMS = ("ttft", "tpot", "itl")
_TALLIES = ("errors", "outcomes")  # name → count (the histograms' keys are bucket numbers)


def digest_part(cols: dict[str, list]) -> dict:
    """The counts, tallies and histograms (bucket_counts arrays) of some of an endpoint's rows (digest_columns): parts
    of one interval add up (add_part) to what its whole rows give, so a busy second is digested slice by slice."""
    n = len(cols.get("status", ()))
    if n == 0:
        return {"done": 0, "ok": 0, "cancelled": 0, "errors": {}}
    col = lambda name: np.fromiter(cols[name], dtype=np.int64, count=n)  # noqa: E731
    status = cols["status"]
    n_ok = status.count(_OK)  # the common case, all ok, costs no per-row Python
    ok = np.ones(n, dtype=bool) if n_ok == n else np.fromiter(map(_OK.__eq__, status), dtype=bool, count=n)
    not_ok = Counter(s for s in status if s != _OK) if n_ok < n else Counter()
    cancelled = not_ok.pop(CANCELLED, 0)  # abandoned by the client as declared: not an error (as in the report)
    part: dict = {"done": n, "ok": n_ok, "cancelled": cancelled, "errors": dict(not_ok),
                  "latency": bucket_counts(col("latency_ns")[ok]),
                  "send_lag": bucket_counts(np.maximum(col("send_lag_ns"), 0))}
    if cols["stream_outcome"].count("") == n:
        return part
    outcomes = Counter(cols["stream_outcome"])
    outcomes.pop("", None)
    tokens = col("output_tokens")
    ttft = col("ttft_ns")
    first, last = col("t_first_token"), col("t_last_token")
    many = ok & (tokens > 1) & (first > 0)
    itl = cols["itl"]
    part.update(outcomes=dict(outcomes), output_tokens=int(tokens[tokens > 0].sum()),
                ttft=bucket_counts(ttft[ok & (ttft >= 0)]),
                tpot=bucket_counts((last[many] - first[many]) / (tokens[many] - 1)),
                itl=bucket_counts(np.concatenate(itl) if itl else np.empty(0)))
    return part


def add_part(into: dict, part: dict) -> dict:
    """Add digest_part `part` into `into` (returned): counts and histograms summed, tallies merged."""
    for key, value in part.items():
        if key in _TALLIES:
            tally = into.setdefault(key, {})
            for name, count in value.items():
                tally[name] = tally.get(name, 0) + count
        elif key in into:
            into[key] = into[key] + value
        else:
            into[key] = value
    return into


def finish_digest(part: dict, asked: int | None) -> dict:
    """One endpoint's interval as LIVE carries it, from the sum of its parts: `asked` arrivals were due."""
    wire = lambda name: wire_histogram(histogram_of_counts(part[name])) if name in part else []  # noqa: E731
    out = {"asked": asked, "done": part.get("done", 0), "ok": part.get("ok", 0),
           "cancelled": part.get("cancelled", 0), "errors": part.get("errors", {}),
           "latency": wire("latency"), "send_lag": wire("send_lag")}
    if "outcomes" in part:
        out.update(outcomes=part["outcomes"], output_tokens=part["output_tokens"],
                   **{name: wire(name) for name in _STREAM_HISTOGRAMS})
    return out


def digest_of(cols: dict[str, list], asked: int | None) -> dict:
    """One endpoint's interval from its rows' columns (digest_columns): `asked` arrivals were due, the rows
    finished in it."""
    return finish_digest(digest_part(cols), asked)


def endpoint_digest(rows: list[tuple], asked: int | None) -> dict:
    """One endpoint's interval: `asked` arrivals were due, `rows` finished in it."""
    return digest_of(digest_columns(rows), asked)


def gaps_ns(streams: list[tuple[bytes, bytes]]) -> np.ndarray:
    """The inter-token gaps (ns) of streams given as (token_event_us, token_event_counts), each event's gap spread
    over the tokens it carried (as the report's ITL). All streams at once: numpy per stream cost ~20 µs each, a
    piece of 5-9 ms on the worker's loop once a second at 250 streams/s."""
    offsets = np.frombuffer(b"".join(us for us, _ in streams), dtype="<i4").astype(np.float64)
    carried = np.maximum(np.frombuffer(b"".join(counts for _, counts in streams), dtype="<u2").astype(np.int64), 1)
    if len(offsets) < 2 or len(carried) != len(offsets):  # counts are written with the instants, one per event
        return np.empty(0)
    starts = np.cumsum([0] + [len(us) // 4 for us, _ in streams[:-1]])
    within = np.ones(len(offsets) - 1, dtype=bool)  # gap i: event i → i + 1 of the same stream
    within[starts[1:] - 1] = False
    carried = carried[1:][within]
    return np.repeat(np.diff(offsets)[within] * 1e3 / carried, carried)


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
        """`yield_fn`: called between slices of SLICE_ROWS rows (STREAM_SLICE_ROWS streamed), so that a busy
        second's digest never holds the sending loop for more than one slice (the worker yields to its event loop
        there)."""
        self.endpoints, self.asked_offsets, self.state, self.send = endpoints, asked_offsets, state, send
        self.log, self.yield_fn = log, yield_fn
        self._rows: list[tuple] = []
        self._last_s = 0.0
        if log is not None:
            log.tap = self.observe

    @classmethod
    def of_worker(cls, profile, schedule, path, clocks, saturation, sessions, send: Callable[[dict], None],
                  loop_turns) -> "LiveReporter":
        """A worker's reporter: its request log tapped (`path.recorder`), giving way to the sending loop between
        slices (harness/spool/chunk_shipping.py `YieldEvery`)."""
        from tailrace.harness.spool.chunk_shipping import SHIP_SLICE_NS, YieldEvery

        names = [e.name for e in profile.endpoints]
        return cls(names, asked_offsets(schedule, len(names)),
                   lambda: worker_state(path, clocks, saturation, sessions), send, path.recorder,
                   yield_fn=YieldEvery(SHIP_SLICE_NS, loop_turns))

    def observe(self, rows: list[tuple]) -> None:
        """The request log's tap: rows about to leave its buffer."""
        self._rows.extend(rows)

    def report(self, t_s: float) -> dict:
        """The digest of (last report, t_s] (seconds since the start instant), sent and returned."""
        if self.log is not None:
            self.log.tap_new()
        rows, self._rows = self._rows, []
        # slice by slice, yielding between slices: each slice's columns and histograms, added up per endpoint. Each
        # slice is let go of as it is done: a second's rows freed at once (~100,000 objects at 3,000 req/s, when the
        # chunk has already let go of them) held the sending loop ~3 ms
        parts: dict[str, dict] = {name: {} for name in self.endpoints}
        endpoint_of = itemgetter(_F["endpoint"])
        first = True
        size = STREAM_SLICE_ROWS if any(map(_GET["stream_outcome"], rows)) else SLICE_ROWS
        while rows:
            if not first:
                self.yield_fn()
            first = False
            part = rows[-size:]
            del rows[-size:]
            names = set(map(endpoint_of, part))
            for name in names:
                mine = part if len(names) == 1 else [r for r in part if endpoint_of(r) == name]
                add_part(parts.setdefault(name, {}), digest_part(digest_columns(mine)))
            del part, mine
        self.yield_fn()
        lo, hi = int(self._last_s * 1e9), int(t_s * 1e9)
        digests = {}
        for i, (name, part) in enumerate(parts.items()):
            asked = None
            if self.asked_offsets is not None and i < len(self.asked_offsets):
                offsets = self.asked_offsets[i]
                asked = int(np.searchsorted(offsets, hi, side="right") - np.searchsorted(offsets, lo, side="right"))
            digests[name] = finish_digest(part, asked)
        digest = {"t_s": round(t_s, 3), "interval_s": round(t_s - self._last_s, 3), "endpoints": digests,
                  **self.state()}
        self._last_s = t_s
        self.yield_fn()
        self.send(digest)
        return digest
