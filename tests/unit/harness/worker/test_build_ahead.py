"""Requests built ahead in pieces (harness/worker/build_ahead.py): pieces run only where they fit before the next
send, the first rows before the start instant, bounded memory; a trace's bursts of long prompts sent on time."""
from __future__ import annotations

import time

import gevent
import numpy as np
import pytest

from tailrace.contract.profile import Endpoint
from tailrace.harness.worker import build_ahead
from tailrace.harness.worker.arrivals import Arrival, Schedule, ScheduledArrivals
from tailrace.harness.worker.build_ahead import BuildAhead, PieceCosts
from tailrace.harness.worker.chains.pipelines import PipelineRunner
from tailrace.harness.worker.chains.sessions import SessionRunner
from tailrace.harness.worker.endpoint_senders import RequestBuilds
from tailrace.harness.worker.scenarios import IssueLoop
from tailrace.harness.workload.trace_prompts import TracePrompts
from tailrace.harness.workload.turns import Piece, PreparedRequest, Turn, build_now


class Clock:
    """perf_counter_ns under the test's control: each piece of work advances it by its cost."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(build_ahead.time, "perf_counter_ns", c)
    return c


def _builds(clock: Clock, cost_per_unit_ns: int, units: int, pieces: int, log: list):
    """prepare(arrival): `pieces` pieces of `units` each, each advancing the clock by its cost."""
    def prepare(arrival: Arrival):
        for _ in range(pieces):
            yield Piece("block", units)
            clock.now += cost_per_unit_ns * units
            log.append((arrival.sample, clock.now))
        return PreparedRequest(arrival, Turn.sessionless(b"x" * 1000, units * pieces, 0, arrival.sample))
    return prepare


def test_a_piece_runs_only_where_its_expected_time_fits_before_the_next_send(clock):
    log: list = []
    arrivals = iter([Arrival(10_000_000 * (k + 1), 0, 1, k) for k in range(3)])
    ahead = BuildAhead(arrivals, _builds(clock, 100, 500, 5, log))  # rows of 5 pieces of 50 µs
    ahead.costs.observe(Piece("block", 500), 50_000)
    head = ahead.take()  # the first, built on demand (nothing was ahead)
    assert head[0].sample == 0 and len(log) == 5
    send_at = clock.now + 400_001  # room for 4 pieces of 50 µs besides the margin, not for 5
    ahead.fill(head[0].intended_mono, lambda: send_at)
    assert [s for s, _ in log[5:]] == [1, 1, 1, 1] and not ahead.ready  # row 1 not built yet
    assert all(t + build_ahead.PIECE_MARGIN_NS <= send_at for _, t in log[5:])
    ahead.fill(head[0].intended_mono, lambda: 1 << 62)  # the send went: the rest is built
    assert [a.sample for a, _ in ahead.ready] == [1, 2]


def test_a_pieces_time_is_learnt_by_kind_and_size_and_an_unseen_size_is_never_underestimated(clock):
    costs = PieceCosts()
    assert costs.expected_ns(Piece("body", 100_000)) == build_ahead.FIRST_PIECE_NS
    costs.observe(Piece("body", 1_000), 100_000)  # small bodies: 100 ns a token (mostly fixed costs)
    assert costs.expected_ns(Piece("body", 1_000)) == 100_000
    assert costs.expected_ns(Piece("body", 100_000)) == 10_000_000  # borrowed from a smaller class: dearer
    costs.observe(Piece("body", 100_000), 400_000)  # a long body: 4 ns a token
    assert costs.expected_ns(Piece("body", 120_000)) == 480_000
    costs.observe(Piece("body", 120_000), 1_200_000)  # slowed by a stall: its class expects it at once ...
    assert costs.expected_ns(Piece("body", 100_000)) == 1_000_000
    costs.observe(Piece("body", 100_000), 400_000)
    assert costs.expected_ns(Piece("body", 100_000)) == 1_000_000
    clock.now += int(build_ahead.COST_HALF_LIFE_S * 1e9)  # ... and lets go of it over time
    assert costs.expected_ns(Piece("body", 100_000)) == 500_000
    clock.now += 10 * int(build_ahead.COST_HALF_LIFE_S * 1e9)  # never below the last one seen
    assert costs.expected_ns(Piece("body", 100_000)) == 400_000
    assert costs.expected_ns(Piece("body", 1_000)) == 100_000  # other classes unmoved
    only_large = PieceCosts()
    only_large.observe(Piece("block", 1_000), 50_000)
    assert only_large.expected_ns(Piece("block", 10)) == 50 * 512  # a larger class's time at its smallest size
    assert costs.expected_ns(Piece("block", 1)) == build_ahead.FIRST_PIECE_NS  # kinds learn apart


def test_built_requests_are_bounded_by_count_time_and_bytes(clock, monkeypatch):
    log: list = []
    arrivals = [Arrival(1_000_000 * k, 0, 1, k) for k in range(500)]
    ahead = BuildAhead(iter(arrivals), _builds(clock, 1, 10, 1, log))
    ahead.fill(0, lambda: 1 << 62)
    assert len(ahead.ready) == build_ahead.AHEAD_N
    monkeypatch.setattr(build_ahead, "AHEAD_BYTES", 10 * 1000)  # bodies of 1,000 bytes: ten
    ahead = BuildAhead(iter(arrivals), _builds(clock, 1, 10, 1, log))
    ahead.fill(0, lambda: 1 << 62)
    assert len(ahead.ready) == 10 and ahead.ready_bytes == ahead.peak_bytes == 10_000
    sparse = [Arrival(int(0.5e9) * k, 0, 1, k) for k in range(20)]  # one every 0.5 s: AHEAD_S holds 4 after the head
    ahead = BuildAhead(iter(sparse), _builds(clock, 0, 10, 1, log))  # (builds that take no time)
    clock.now = 0
    ahead.fill(0, lambda: 1 << 62)
    assert [a.sample for a, _ in ahead.ready] == [0, 1, 2, 3]
    ahead.take()
    assert ahead.ready_bytes == 3_000


def test_the_first_rows_built_before_the_start_move_with_an_earlier_start(clock):
    log: list = []
    schedule = Schedule(np.array([0, 0, 0, 5_000_000]), np.zeros(4, int), np.ones(4, int), np.arange(4),
                        np.arange(4))
    arrivals = ScheduledArrivals(schedule, 2_000_000_000)
    ahead = BuildAhead(arrivals, _builds(clock, 100, 512, 3, log))
    ahead.prime(2_000_000_000)
    assert [a.sample for a, _ in ahead.ready] == [0, 1, 2, 3] and len(log) == 12
    ahead.rebase(-500_000_000)  # every worker ready: the run starts 0.5 s earlier
    got = [ahead.take() for _ in range(4)]
    assert [a.intended_mono for a, _ in got] == [1_500_000_000] * 3 + [1_505_000_000]
    assert all(item.arrival is a for a, item in got) and ahead.take() is None


def test_an_item_that_needs_no_building_is_passed_through_and_build_now_runs_every_piece():
    arrivals = [Arrival(k, 0, 1, k) for k in range(3)]
    ahead = BuildAhead(iter(arrivals), lambda a: a)
    ahead.fill(0, lambda: 1 << 62)
    assert [ahead.take() for _ in range(3)] == [(a, a) for a in arrivals]

    def pieces():
        yield Piece("a")
        yield Piece("b")
        return "done"
    assert build_now(pieces()) == "done" and build_now("item") == "item"


def _trace(rows_at_ms: list[float], tokens: list[int]) -> tuple[TracePrompts, list[int]]:
    """A Mooncake-shaped trace: each row's prompt its own new 512-token blocks (none cached: the costliest)."""
    ids, next_id = [], 0
    for n in tokens:
        blocks = -(-n // 512)
        ids.append(tuple(range(next_id, next_id + blocks)))
        next_id += blocks
    ep = Endpoint(name="llm", url="http://127.0.0.1:1", protocol="openai-completions", model="m")
    return TracePrompts(ep, np.array(tokens), np.full(len(tokens), 16), ids, np.arange(len(tokens)), 7), rows_at_ms


def test_a_traces_bursts_of_long_prompts_are_built_before_their_instants_the_first_before_the_start():
    """The run's first instant holds six rows of 100k-120k tokens (each ~10 ms to build from new blocks), short rows
    follow every 5 ms, and another burst of six long prompts comes amid them: every row is built before its instant,
    none when due (the tree before built a burst whole when due: its rows were sent up to ~60 ms late). Whether
    they then go out on time is the benchmark's to say (bench/trace_bursts.py), not a timed unit test's."""
    burst = [100_000, 110_000, 120_000, 105_000, 115_000, 101_000]
    small = [1_000] * 240
    tokens = burst + small[:200] + burst + small[200:]
    at_ms = [0.0] * 6 + [5.0 * (k + 1) for k in range(200)] + [1002.0] * 6 + [1005.0 + 5.0 * k for k in range(40)]
    prompts, _ = _trace(at_ms, tokens)
    sent: list[int] = []
    prepare = RequestBuilds(SessionRunner(None, None, {}, 7, lambda: 0, lambda mono: 1), {0: prompts},
                            PipelineRunner(None, None, {}, lambda: 0))
    loop = IssueLoop(lambda item: sent.append(item.arrival.sample), spin_ns=1_500_000, drain_s=1.0, prepare=prepare)
    schedule = Schedule(np.array([int(ms * 1e6) for ms in at_ms]), np.zeros(len(at_ms), int),
                        np.ones(len(at_ms), int), np.arange(len(at_ms)), np.arange(len(at_ms)))
    start = time.perf_counter_ns() + 1_000_000_000  # the plan's instant; every worker is ready sooner
    ahead = loop.build_ahead(ScheduledArrivals(schedule, start))
    ahead.prime(start)
    assert ahead.peak_ready >= 6 and ahead.built_when_due == 0  # the first burst, before the start
    gevent.sleep(0)  # (the hub runs, as in a Locust worker: start_now hands each send's greenlet to it)
    ahead.rebase(time.perf_counter_ns() + 2_000_000 - start)
    loop.open_loop(ahead)
    assert sent == list(range(len(tokens)))
    assert ahead.built_when_due == 0 and ahead.summary()["built_when_due"] == 0


def test_a_rows_body_joined_from_its_blocks_is_the_body_its_prompt_makes():
    """The body piece joins the row's blocks as they stand in JSON: byte for byte the body of its prompt, for every
    protocol's body, a last block cut to the row's length, and a row shorter than its blocks."""
    tokens = [1_000, 1_024, 512, 511, 1, 2_000, 110_000]
    ids = [(0, 1), (0, 1), (5,), (6,), (7, 8), (0, 1, 2), tuple(range(10, 225))]
    for protocol in ("openai-completions", "openai-chat", "triton-generate"):
        ep = Endpoint(name="llm", url="http://127.0.0.1:1", protocol=protocol, model="m")
        prompts = TracePrompts(ep, np.array(tokens), np.full(len(tokens), 16), ids, np.arange(len(tokens)), 7)
        for row in range(len(tokens)):
            assert build_now(prompts.build(row)) == prompts[row], (protocol, row)


def test_a_request_built_on_demand_counts_as_late_only_near_its_instant(clock):
    """Taken with nothing built ahead, a request is built whole: late when that ends at its instant (or within a
    piece's margin of it), not when the arrival is seconds off (taken right after the previous send)."""
    log: list = []
    arrivals = iter([Arrival(5_000_000_000, 0, 1, 0), Arrival(5_000_100_000, 0, 1, 1)])
    ahead = BuildAhead(arrivals, _builds(clock, 100, 500, 2, log))  # 100 µs a row
    ahead.take()  # seconds ahead of its instant: on time
    assert ahead.built_when_due == 0
    clock.now = 5_000_000_000  # the next is due 100 µs from now: its 100 µs build ends at its instant
    ahead.take()
    assert ahead.built_when_due == 1 and ahead.summary()["built_when_due"] == 1
