"""Unit tests of the harness's pure parts: schedule, profile validation, recorder, classification, trace context."""


from __future__ import annotations

import socket
import time

import grpc
import numpy as np
import pyarrow.parquet as pq
import pytest
from scipy import stats

from tailrace.contract.layout import WorkerLayout
from tailrace.contract.profile import Load, Phase, ProfileError, parse_profile
from tailrace.contract.records import REQUEST_COLUMNS, RequestRow
from tailrace.contract.trace_context import format_traceparent, new_ids, parse_traceparent
from tailrace.harness.client.outcome import classify_exception
from tailrace.harness.spool.recorder import request_writer
from tailrace.harness.worker.arrivals import Split, WorkerSlot, global_arrivals, rate_segments, worker_schedule


def _plans(rate=300.0, shares=(0.6, 0.4), workers=(1, 2), phases=(), seed=11, duration=40.0):
    out = []
    for ri, n in enumerate(workers):
        for wi in range(n):
            out.append(worker_schedule(Load(rate=rate, phases=list(phases), duration_s=duration, seed=seed),
                                       Split(tuple(shares), tuple(workers), (1, 1, 2)), WorkerSlot(ri, wi), 100))
    return out


def test_split_processes_are_poisson_and_superpose_to_the_total():
    plans = _plans()
    expected_rates = [300 * 0.6, 300 * 0.4 / 2, 300 * 0.4 / 2]
    for plan, rate in zip(plans, expected_rates):
        gaps = np.diff(plan.offsets_ns) / 1e9
        assert abs(1 / gaps.mean() - rate) / rate < 0.06
        assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 0.01
        assert abs(gaps.var() / gaps.mean() ** 2 - 1) < 0.15  # CV² of exponential gaps is 1
    merged = np.sort(np.concatenate([p.offsets_ns for p in plans])) / 1e9
    assert stats.kstest(np.diff(merged), "expon", args=(0, 1 / 300)).pvalue > 0.01
    # the split is a partition of the one global process: no arrival lost or duplicated
    assert len(merged) == len(global_arrivals(rate_segments(300, [], 0, 40), 11))


def test_same_seed_same_schedule_other_seed_differs():
    a, b, c = _plans(seed=5)[0], _plans(seed=5)[0], _plans(seed=6)[0]
    assert np.array_equal(a.offsets_ns, b.offsets_ns) and not np.array_equal(a.offsets_ns, c.offsets_ns)


def test_endpoint_weights_respected():
    plan = _plans(duration=60)[0]
    share = np.bincount(plan.endpoint_index, minlength=3) / len(plan.endpoint_index)
    np.testing.assert_allclose(share, [0.25, 0.25, 0.5], atol=0.03)


def test_phases_change_the_rate_at_the_right_time():
    times = global_arrivals(rate_segments(100, [Phase(at_s=0, rate=100), Phase(at_s=10, rate=400)], 2, 20), 3)
    first = ((times >= 2) & (times < 12)).sum() / 10
    second = (times >= 12).sum() / 10
    assert abs(first - 100) < 15 and abs(second - 400) < 40


def test_ramp_and_spike_rates_follow_the_profile_and_stay_poisson():
    phases = [Phase(at_s=0, rate=100), Phase(at_s=10, kind="ramp", rate=300, duration_s=10),
              Phase(at_s=30, kind="spike", factor=3, duration_s=5)]
    segments = rate_segments(100, phases, 2, 50)
    assert [s.name for s in segments] == ["warm-up", "100/s", "ramp 100→300/s", "300/s", "spike ×3 (900/s)",
                                          "after spike 300/s"]
    assert [(s.start_s, s.end_s) for s in segments] == [(0, 2), (2, 12), (12, 22), (22, 32), (32, 37), (37, 52)]
    times = global_arrivals(segments, 9)
    counts = [((times >= s.start_s) & (times < s.end_s)).sum() for s in segments]
    for seg, n in zip(segments, counts):  # counts within 4 sd of the expected Poisson count
        assert abs(n - seg.expected) < 4 * np.sqrt(seg.expected), (seg, n)
    # inside the ramp, the rate rises linearly: the second half holds (250/150) of the first half's arrivals
    ramp = times[(times >= 12) & (times < 22)]
    first, second = (ramp < 17).sum(), (ramp >= 17).sum()
    assert abs(second / first - 250 / 150) < 0.25
    # time rescaling: the transformed gaps are unit exponential through every change of rate
    cum = np.concatenate([[0.0], np.cumsum([s.expected for s in segments])])
    k = np.searchsorted([s.start_s for s in segments], times, side="right") - 1
    lam = np.array([cum[i] + _integral(segments[i], t - segments[i].start_s) for i, t in zip(k, times)])
    assert stats.kstest(np.diff(lam), "expon").pvalue > 0.01


def _integral(seg, tau):
    return seg.rate_start * tau + (seg.rate_end - seg.rate_start) * tau ** 2 / (2 * seg.width_s)


def test_trace_context_roundtrip():
    ids = {new_ids() for _ in range(2000)}
    assert len(ids) == 2000
    t, s = next(iter(ids))
    assert len(t) == 32 and len(s) == 16 and parse_traceparent(format_traceparent(t, s)) == (t, s)
    for bad in ("", "01-" + t + "-" + s + "-01", "00-" + "0" * 32 + "-" + s + "-01", "00-xyz-abc-01"):
        assert parse_traceparent(bad) is None


def test_recorder_chunks_are_complete_files(tmp_path):
    w = request_writer(WorkerLayout(tmp_path), max_rows=10, max_seconds=100)
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "a" * 32, "latency_ns": 5, "correct": True}))
    for _ in range(25):
        w.add(row)
    w.flush()
    files = sorted(tmp_path.glob("requests-*.parquet"))
    assert [pq.read_table(f).num_rows for f in files] == [10, 10, 5]
    assert not list(tmp_path.glob(".*.tmp"))
    assert pq.read_table(files[0]).column_names == list(REQUEST_COLUMNS)


def test_a_recorder_with_a_flusher_tells_it_at_half_full_and_writes_a_chunk_itself_only_at_its_cap(tmp_path):
    """A worker's chunks are shipped by its flusher (off the send path): add() wakes it once the open chunk is half
    full, and writes a chunk itself only at FULL_CAP × max_rows (a flusher that never got a turn)."""
    from tailrace.harness.spool.recorder import FULL_CAP

    w = request_writer(WorkerLayout(tmp_path), max_rows=10, max_seconds=100)
    woken = []
    w.wake = lambda: woken.append(len(w.rows))
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "a" * 32, "latency_ns": 5, "correct": True}))
    for _ in range(10 * FULL_CAP - 1):
        w.add(row)
    assert woken == [5] and not list(tmp_path.glob("requests-*.parquet"))  # past max_rows: still the flusher's
    w.add(row)
    assert [pq.read_table(f).num_rows for f in tmp_path.glob("requests-*.parquet")] == [10 * FULL_CAP]
    assert w.rows == []
    one = request_writer(WorkerLayout(tmp_path / "one"), max_rows=1, max_seconds=100)
    one.wake = lambda: woken.append("one")
    one.add(row)
    assert woken[-1] == "one"  # chunk_rows = 1: its flusher is told at the first row


def test_a_chunk_is_converted_in_pieces_of_its_budget_not_a_yield_a_column(monkeypatch):
    from tailrace.harness.spool import chunk_shipping

    clock, yields = [10**9], []
    monkeypatch.setattr(chunk_shipping.time, "perf_counter_ns", lambda: clock[0])
    monkeypatch.setattr(chunk_shipping.gevent, "sleep", lambda s: yields.append(clock[0]))
    step = chunk_shipping.YieldEvery(200_000, chunk_shipping.SendLoopTurns())
    for _ in range(10):  # ten columns of 50 µs each: a yield at the first (a new turn), then every 200 µs
        step()
        clock[0] += 50_000
    assert [t - 10**9 for t in yields] == [0, 200_000, 400_000]


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_background_pieces_give_a_sending_loop_that_waits_on_its_timer_its_turn():
    """gevent runs `sleep(0)` callbacks one after another until none is left before it looks at its timers: a chain
    of pieces that each yielded with `sleep(0)` kept a sending loop waiting on its timer off the core for the whole
    chain (the live digest: ~20 pieces, sends 5.5 ms late). Paused on a timer once the loop has not run, the loop's
    turn comes a piece or two after its timer."""
    import gevent

    from tailrace.harness.spool.chunk_shipping import SendLoopTurns, YieldEvery

    pieces, woke_after, turns = [], [], SendLoopTurns()

    def background() -> None:
        step = YieldEvery(0, turns)
        for i in range(40):
            _busy(0.0005)
            pieces.append(i)
            step()

    def sending_loop() -> None:
        gevent.sleep(0.002)  # waiting on its timer for its next send
        turns.count += 1
        woke_after.append(len(pieces))

    gevent.joinall([gevent.spawn(sending_loop), gevent.spawn(background)], raise_error=True)
    assert len(pieces) == 40 and woke_after[0] < 20  # (a chain of sleep(0): all 40 first)


def test_background_pieces_take_turns_with_a_sending_loop_that_spins(monkeypatch):
    """While the sending loop takes turns (`sleep(0)`, counted in SendLoopTurns), a background piece's pause is a turn
    too, not a timer: gevent looks at timers only every few ms then, and chunks fell behind at 8,000/s."""
    import gevent
    import greenlet

    from tailrace.harness.spool import chunk_shipping
    from tailrace.harness.spool.chunk_shipping import SendLoopTurns, YieldEvery

    sleep, pauses, background = gevent.sleep, [], []

    def recorded(seconds=0, *args, **kwargs):
        if greenlet.getcurrent() in background:
            pauses.append(seconds)
        return sleep(seconds, *args, **kwargs)

    monkeypatch.setattr(chunk_shipping.gevent, "sleep", recorded)
    turns = SendLoopTurns()

    def work() -> None:
        step = YieldEvery(0, turns)
        for _ in range(20):
            _busy(0.0001)
            step()

    def spinning_loop() -> None:
        while not worker.dead:
            turns.count += 1
            sleep(0)

    worker = gevent.spawn(work)
    background.append(worker)
    gevent.joinall([gevent.spawn(spinning_loop), worker], raise_error=True)
    assert pauses == [0] * 20


class _FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


@pytest.mark.parametrize("exc,status,code", [
    (ConnectionRefusedError(111, "refused"), "connection", "refused"),
    (ConnectionResetError(104, "reset"), "connection", "reset"),
    (socket.timeout("timed out"), "timeout", "timeout"),
    (_FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"), "timeout", "DEADLINE_EXCEEDED"),
    (_FakeRpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; Connection refused"),
     "connection", "UNAVAILABLE"),
    (_FakeRpcError(grpc.StatusCode.UNAVAILABLE, "model 'm' queue is full"), "grpc_error", "UNAVAILABLE"),
    (_FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "bad shape"), "grpc_error", "INVALID_ARGUMENT"),
    (ValueError("garbage"), "bad_response", "exception"),
])
def test_classify_exception(exc, status, code):
    got = classify_exception(exc)
    assert got[:2] == (status, code) and got[2]


GOOD = {
    "name": "t", "endpoints": [{"name": "e", "url": "http://127.0.0.1:1", "protocol": "kserve-http", "model": "m"}],
    "regions": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.5}],
    "load": {"rate": 10, "duration_s": 1},
}


def _with(path: str, value, base: dict | None = None):
    import copy

    data = copy.deepcopy(GOOD if base is None else base)
    keys = path.split(".")
    node = data
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    last = keys[-1]
    if value is _DELETE:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return data


_DELETE = object()


def _with_many(*changes: tuple[str, object]) -> dict:
    data = GOOD
    for path, value in changes:
        data = _with(path, value, data)
    return data


BAD_PROFILES = [
    ("unknown-top-key", _with("colour", "blue"), "colour: unknown key"),
    ("unknown-nested-key", _with("load.rps", 5), "load.rps: unknown key"),
    ("missing-load", _with("load", _DELETE), "load: required field is missing"),
    ("negative-rate", _with("load.rate", -1), "load.rate: Input should be greater than 0"),
    ("rate-not-number", _with("load.rate", "fast"), "load.rate:"),
    ("bad-protocol", _with("endpoints.0.protocol", "rest"), "endpoints[0].protocol:"),
    ("bad-url", _with("endpoints.0.url", "ftp://x"), "endpoints[0].url: must be 'embedded'"),
    ("shares-not-one", _with("regions.1.share", 0.2), "shares must add up to 1"),
    ("duplicate-region", _with("regions.1.name", "a"), "duplicate name(s) a"),
    ("share-too-big", _with("regions.0.share", 1.5), "regions[0].share:"),
    ("auth-half", _with("endpoints.0.auth_header", "Authorization"), "auth_header goes with auth_env or auth_file"),
    ("auth-two-sources", _with_many(("endpoints.0.auth_header", "A"), ("endpoints.0.auth_env", "V"),
                                    ("endpoints.0.auth_file", "/f")), "auth_env and auth_file: give one"),
    ("tls-on-plain-http", _with("endpoints.0.tls", {"ca": "/ca.pem"}),
     "endpoints[0]: tls: needs an https:// or grpcs:// url"),
    ("tls-cert-without-key", _with_many(("endpoints.0.url", "https://h:1"), ("endpoints.0.tls", {"cert": "/c.pem"})),
     "endpoints[0].tls: cert and key go together"),
    ("tls-unknown-key", _with_many(("endpoints.0.url", "https://h:1"), ("endpoints.0.tls", {"verify": False})),
     "endpoints[0].tls.verify: unknown key"),
    ("grpcs-for-http", _with("endpoints.0.url", "grpcs://127.0.0.1:8001"),
     "protocol 'kserve-http' needs a http:// or https:// URL"),
    ("grpcs-without-port", _with_many(("endpoints.0.protocol", "kserve-grpc"), ("endpoints.0.url", "grpcs://h")),
     "needs a port"),
    ("slo-incomplete", _with("slos", [{"metric": "latency", "percentile": 99}]), "needs percentile and threshold_ms"),
    ("slo-unknown-endpoint", _with("slos", [{"metric": "error_rate", "threshold": 0.01, "endpoint": "zz"}]),
     "slos[0].endpoint: no endpoint named 'zz'"),
    ("phases-unordered", _with("load.phases", [{"at_s": 0, "rate": 1}, {"at_s": 0, "rate": 2}]),
     "strictly increasing"),
    ("no-endpoints", _with("endpoints", []), "endpoints:"),
    ("spike-without-factor", _with("load.phases", [{"at_s": 1, "kind": "spike", "duration_s": 2}]),
     "load.phases[0]: a spike phase needs factor"),
    ("ramp-without-duration", _with("load.phases", [{"at_s": 1, "kind": "ramp", "rate": 5}]),
     "a ramp phase needs duration_s"),
    ("ramp-overlaps", _with("load.phases", [{"at_s": 1, "kind": "ramp", "rate": 5, "duration_s": 5},
                                            {"at_s": 3, "rate": 9}]), "lasts past the next phase"),
    ("bad-scenario", _with("load.scenario", "batch"), "load.scenario:"),
    ("server-without-rate", _with("load.rate", _DELETE), "the server scenario needs a rate"),
    ("phases-in-offline", _with_many(("load.scenario", "offline"), ("load.phases", [{"at_s": 0, "rate": 3}])),
     "only the server scenario has phases"),
    ("single-stream-two-workers", _with_many(("load.scenario", "single-stream"), ("regions.0.workers", 2)),
     "set workers = 1 for a"),
    ("inprocess-url-mismatch", _with("endpoints.0.protocol", "inprocess"), "go together"),
    ("url-with-blanks", _with("endpoints.0.url", "http://127.0.0.1: 80 00/ x"),
     "endpoints[0].url: 'http://127.0.0.1: 80 00/ x' contains blanks"),
    ("port-out-of-range", _with("endpoints.0.url", "http://127.0.0.1:70000"), "the port must be a number from 1 to 65535"),
    ("port-zero", _with("endpoints.0.url", "http://127.0.0.1:0"), "the port must be a number from 1 to 65535"),
    ("no-host", _with("endpoints.0.url", "http://:8000"), "names no host"),
    ("grpc-url-for-http", _with("endpoints.0.url", "grpc://127.0.0.1:8001"),
     "protocol 'kserve-http' needs a http:// or https:// URL"),
    ("http-url-for-grpc", _with("endpoints.0.protocol", "kserve-grpc"), "protocol 'kserve-grpc' needs a grpc:// or grpcs:// URL"),
    ("grpc-without-port", _with_many(("endpoints.0.protocol", "kserve-grpc"), ("endpoints.0.url", "grpc://h")), "needs a port"),
    ("stats-url-port", _with("endpoints.0.stats_url", "http://127.0.0.1:99999"), "endpoints[0].stats_url:"),
    ("huge-seed", _with("load.seed", 10**20), "load.seed: Input should be less than"),
    ("negative-seed", _with("load.seed", -1), "load.seed:"),
    ("rate-as-string", _with("load.rate", "100"), "load.rate: Input should be a valid number"),
    ("workers-as-float", _with("regions.0.workers", 1.0), "regions[0].workers: Input should be a valid integer"),
    ("long-endpoint-name", _with("endpoints.0.name", "e" * 5000), "endpoints[0].name: String should match pattern"),
    ("long-profile-name", _with("name", "n" * 65), "name: String should match pattern"),
    ("profile-name-with-slash", _with("name", "a/b"), "name: String should match pattern"),
]


@pytest.mark.parametrize("case", BAD_PROFILES, ids=[c[0] for c in BAD_PROFILES])
def test_bad_profile_message_names_file_and_field(case):
    _, data, expected = case
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "profiles/x.toml")
    assert "profiles/x.toml: " in str(err.value)
    assert expected in str(err.value), str(err.value)


def test_good_profile_parses():
    assert parse_profile(GOOD, "x").load.rate == 10
