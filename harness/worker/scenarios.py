"""The four scenarios (after MLPerf Inference) as schedules of arrivals, fed to one issue loop.

- server: the worker's part of the seeded global Poisson process (harness/worker/arrivals.py), open loop;
- single-stream: one request at a time, the next the moment the previous completes (closed loop);
- multi-stream: a query every interval; a tick that finds the previous query in flight is missed;
- offline: `offline_concurrency` closed-loop streams of large batches.

Latency is always measured from an arrival's intended instant (perf_counter_ns, this process).
"""
from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import gevent
import greenlet
import numpy as np
from gevent.event import Event
from gevent.pool import Group

from tailrace.contract.plan import RunPlan
from tailrace.harness.spool.chunk_shipping import CATCH_UP_S, WRITER_BEHIND, SendLoopTurns
from tailrace.harness.worker.arrivals import Arrival
from tailrace.harness.worker.build_ahead import Build, BuildAhead, Prepared

BEHIND_YIELD_NS = 2_000_000  # an inline open loop behind schedule still yields this often
YIELD_SLACK_NS = 500_000  # an inline open loop yields to the rest of the worker only this far or more from a send
PUMP_BEHIND_NS = 1_000_000  # a due send goes before reading kernel-stamped answers, unless none was read this long


@dataclass
class IssueCounts:
    """What an issue loop did: arrivals issued and missed, in all and in the measured phases."""

    issued: int = 0
    missed: int = 0
    issued_measured: int = 0
    missed_measured: int = 0

    def count(self, arrival: Arrival, missed: bool) -> None:
        measured = arrival.phase > 0
        if missed:
            self.missed += 1
            self.missed_measured += measured
        else:
            self.issued += 1
            self.issued_measured += measured


def start_now(run: Callable[[object], None], item: object) -> None:
    """Run `run(item)` on a greenlet of its own at once, until it first waits (its request written), then go on
    here on the hub's next turn — not after the rest of the reads the hub is handling, as gevent.spawn_raw would."""
    hub = gevent.get_hub()
    hub.loop.run_callback(greenlet.getcurrent().switch)
    greenlet.greenlet(run, hub).switch(item)


class IssueLoop:
    """Issues arrivals through `send` (the request path): open loop at their instants, or closed loop."""

    def __init__(self, send: Callable[[Arrival], None], spin_ns: int, drain_s: float,
                 prepare: Callable[[Arrival], Build | Prepared | Arrival] | None = None,
                 loop_turns: SendLoopTurns | None = None) -> None:
        """`prepare(arrival)`: what `send` is handed instead of the arrival (or a build of it), made before the
        arrival's instant (while the loop waits for it); None: the arrival itself. `loop_turns`: where it counts its
        turns, for the worker's background work (harness/spool/chunk_shipping.py YieldEvery)."""
        self.send, self.spin_ns, self.drain_s, self.prepare = send, spin_ns, drain_s, prepare
        self.loop_turns = loop_turns if loop_turns is not None else SendLoopTurns()
        self.counts = IssueCounts()
        self.stopped = False  # the run was stopped (Ctrl-C, the live page): issue nothing more, drain what is out
        # the open loop's own sends for the endpoints it can drive inline (harness/worker/inline_sends.py)
        self.inline = None
        # the worker's chunk writer, for an open loop that sends on greenlets: at SCHED_IDLE, held stopped except while
        # this loop sleeps (harness/spool/chunk_shipping.py WriterChild); the inline path holds it itself
        self.writer = None
        self.log = print  # the worker's log (a stuck writer let go is said there)
        self._yielded_ns = 0  # when the inline open loop last let the rest of the worker run
        self._pumped_ns = 0  # when it last read what had come
        # sessions' later turns whose instants this open loop keeps (wait_turn): [instant, order, greenlet, waiting]
        self._turns: list[list] = []
        self._turn_order = itertools.count()
        self._serving = False  # an open loop on greenlets is issuing: it keeps turns' instants
        self._looks_at = 0  # the instant until which that loop looks at no turn (the end of its current wait)

    def stop(self) -> None:
        self.stopped = True

    def wait_until(self, mono_ns: int) -> None:
        """Sleep, then yield-spin the last stretch: gevent timers wake ~1 ms late, and each sleep(0) lets the
        hub handle ready responses, so precision does not starve I/O."""
        wait_ns = mono_ns - time.perf_counter_ns() - self.spin_ns
        if wait_ns > 0:
            gevent.sleep(wait_ns / 1e9)
        while time.perf_counter_ns() < mono_ns:
            gevent.sleep(0)

    def wait_turn(self, mono_ns: int) -> None:
        """Wait for a session's later turn's instant (called by the session's greenlet). While the open loop on
        greenlets issues, it keeps the instant: it switches to this greenlet then, as it sends its own requests
        (start_now) — one loop spinning for every send, where a greenlet a turn spinning by itself was late behind
        the reads the hub ran for the others. A turn due before the loop next looks, or with no such loop, waits on
        its own (wait_until); so does one the loop lets go (killed, stopped, done issuing)."""
        if not self._serving or mono_ns <= self._looks_at:
            return self.wait_until(mono_ns)
        entry = [mono_ns, next(self._turn_order), greenlet.getcurrent(), True]
        heapq.heappush(self._turns, entry)
        try:
            kept = gevent.get_hub().switch()
        finally:
            entry[3] = False
        if kept is not True:
            self.wait_until(mono_ns)

    def _send_turns_before(self, mono_ns: int) -> None:
        """Switch to each waiting turn whose instant comes before `mono_ns`, at its instant."""
        turns = self._turns
        while turns and turns[0][0] < mono_ns:
            self._sleep_until(turns[0][0])
            entry = heapq.heappop(turns)
            if entry[3]:  # (not killed meanwhile)
                entry[3] = False
                gevent.get_hub().loop.run_callback(greenlet.getcurrent().switch)
                entry[2].switch(True)

    def _let_turns_go(self) -> None:
        """No longer keep turns' instants: each waiting turn waits on its own from now on."""
        self._serving = False
        loop = gevent.get_hub().loop
        for entry in self._turns:
            if entry[3]:
                entry[3] = False
                loop.run_callback(entry[2].switch, False)
        self._turns.clear()

    def _sleep_until(self, mono_ns: int) -> None:
        """wait_until for the open loop on greenlets. Its sends are its own (start_now), so in the last
        YIELD_SLACK_NS it spins without yielding: a batch of reads the hub runs for other greenlets can no longer
        straddle the send. The chunk writer (if any) runs only while this loop sleeps: once picked, it keeps the core
        until the scheduler's next tick (docs/DECISIONS.md). A writer WRITER_BEHIND chunks behind is waited for,
        whatever is due (send lag, never a lost chunk)."""
        self._looks_at = mono_ns
        writer = self.writer
        if writer is not None and writer.outstanding >= WRITER_BEHIND \
                and not writer.keep_up(WRITER_BEHIND, CATCH_UP_S, self.log):
            self.writer = writer = None  # stuck: let go (keep_up said so in the worker's log)
        wait_ns = mono_ns - time.perf_counter_ns() - self.spin_ns
        if wait_ns > 0:
            if writer is not None:
                writer.release()
            gevent.sleep(wait_ns / 1e9)
        while True:  # held while it has work (a frame shipped during the spin included); an idle one costs no signal
            self.loop_turns.count += 1
            if writer is not None and writer.outstanding and not writer.held:
                writer.hold(mono_ns)
            left_ns = mono_ns - time.perf_counter_ns()
            if left_ns <= 0:
                return
            if left_ns >= YIELD_SLACK_NS:
                gevent.sleep(0)

    def _pump_until(self, mono_ns: int) -> None:
        """wait_until for the open loop with inline sends: their answers are read and their records written while
        it waits (the records only in its slack). The rest of the worker (chunks, the live digest, send-lag windows,
        heartbeats: greenlets, each yielding every fraction of a ms) gets a turn only while the send is YIELD_SLACK_NS
        or more away, so that none of it starts just before a send; the chunk writer runs while the loop sleeps. A
        send already due goes before answers are read where their instants are the kernel's (a burst of a trace's rows
        back to back), but never more than PUMP_BEHIND_NS after the last read."""
        inline = self.inline
        while True:
            self.loop_turns.count += 1  # (the background work's pauses tell a loop that takes turns from one that waits)
            now = time.perf_counter_ns()
            if min(mono_ns, inline.next_turn_ns) > now or not inline.stamped or now - self._pumped_ns >= PUMP_BEHIND_NS:
                inline.pump(min(mono_ns, inline.next_turn_ns))
                self._pumped_ns = now = time.perf_counter_ns()
            # a session's turn the inline path keeps, if one comes first (its record, just written, may have queued it)
            due_ns = min(mono_ns, inline.next_turn_ns)
            left_ns = due_ns - now
            if left_ns <= 0:
                if due_ns < mono_ns:  # that turn is due: sent now, then on to `mono_ns`
                    inline.send_turns(now)
                    continue
                if now - self._yielded_ns > BEHIND_YIELD_NS:  # behind schedule: the rest of the worker still gets a
                    gevent.sleep(0)  # turn now and then
                    self._yielded_ns = time.perf_counter_ns()
                return
            if left_ns > self.spin_ns:
                inline.wait((left_ns - self.spin_ns) / 1e9)
            elif inline.yield_core(due_ns):  # the chunk writer has work: it ran while this loop slept in the kernel,
                continue  # where no greenlet runs, so this is no turn of theirs
            elif left_ns >= YIELD_SLACK_NS or now - self._yielded_ns > BEHIND_YIELD_NS:
                gevent.sleep(0)
            else:
                continue  # the send is close: spin without yielding
            self._yielded_ns = time.perf_counter_ns()

    def open_loop(self, arrivals: Iterable[Arrival], limit: int | None = None, until_mono: int | None = None) -> None:
        """Send each arrival at its instant without waiting for responses. With `limit`, an arrival that finds
        `limit` requests of this loop still in flight is missed (counted, nothing sent). `until_mono`: what was
        sent may go on until then (sessions' later turns), then the drain time."""
        # a raw greenlet a request (gevent.spawn_raw): a Greenlet in a Group cost ~5% of the sending loop's time at
        # 3,000/s (its links and bookkeeping); what the drain needs is a count and an event
        active = [0]
        issuing = [True]
        drained = Event()

        def tracked(item) -> None:
            try:
                self.send(item)
            finally:
                active[0] -= 1
                if not active[0] and not issuing[0]:
                    drained.set()

        inline = self.inline
        if inline is not None:
            inline.gate_writer(True)
        elif self.writer is not None:
            self.writer.gate(True)
        self._serving = inline is None
        try:
            self._issue(arrivals, limit, active, tracked)
            self._let_turns_go()
            more_s = max(0.0, (until_mono - time.perf_counter_ns()) / 1e9) \
                if until_mono is not None and not self.stopped else 0.0
            issuing[0] = False
            if inline is not None:
                if more_s:
                    inline.keep_turns(until_mono, self._pump_until, lambda: self.stopped)
                inline.drain(time.perf_counter_ns() + int(self.drain_s * 1e9))
                more_s = 0.0
        finally:  # also when the loop is killed (Locust's stop throws GreenletExit into it): never left held
            self._let_turns_go()
            if inline is not None:
                inline.gate_writer(False)
            elif self.writer is not None:
                self.writer.gate(False)
        if active[0]:
            drained.wait(timeout=more_s + self.drain_s)

    def _issue(self, arrivals: Iterable[Arrival], limit: int | None, active: list[int], tracked) -> None:
        """open_loop's sends: each arrival at its instant, inline or on a greenlet of its own (`tracked`)."""
        inline = self.inline
        for arrival, item in self._prepared(arrivals):
            if inline is None:
                self._send_turns_before(arrival.intended_mono)
                self._sleep_until(arrival.intended_mono)
            else:
                self._pump_until(arrival.intended_mono)
            if self.stopped:
                break
            missed = limit is not None and active[0] + (inline.busy if inline is not None else 0) >= limit
            self.counts.count(arrival, missed)
            if missed:
                continue
            if inline is not None and inline.takes(item):
                inline.start(item)
                continue
            active[0] += 1
            start_now(tracked, item)

    def build_ahead(self, arrivals: Iterable[Arrival]) -> BuildAhead | None:
        """The builder of `arrivals`' requests (None: they need none), to prime before the start instant and hand
        to open_loop."""
        return BuildAhead(iter(arrivals), self.prepare) if self.prepare is not None else None

    def _prepared(self, arrivals: Iterable[Arrival] | BuildAhead) -> Iterator[tuple[Arrival, object]]:
        """(arrival, what `send` is handed) in order. With `prepare`, requests are built ahead (harness/worker/
        build_ahead.py) — a piece at a time, each only while the next send (an arrival, or a session's turn the loop
        keeps) is further off than the piece takes — so a burst of a trace's rows at one instant is built before it,
        and building never delays a send that is due."""
        if self.prepare is None:
            yield from ((a, a) for a in arrivals)
            return
        ahead = arrivals if isinstance(arrivals, BuildAhead) else BuildAhead(iter(arrivals), self.prepare)
        while (head := ahead.take()) is not None:
            head_due = head[0].intended_mono
            ahead.fill(head_due, lambda: self._next_send(head_due), lambda: self._between_builds(head_due))
            yield head

    def _between_builds(self, head_due: int) -> None:
        """After a piece built ahead: answers come in, and the turns they lead to are queued (_next_send sees them)."""
        if self._serving:
            gevent.sleep(0)
        elif self.inline is not None:
            self.inline.pump(self._next_send(head_due))

    def _next_send(self, arrival_mono: int) -> int:
        """The instant of this loop's next send: the arrival's, or a session turn's waiting before it."""
        due = min(arrival_mono, self._turns[0][0]) if self._turns else arrival_mono
        return min(due, self.inline.next_turn_ns) if self.inline is not None else due

    def closed_loop(self, arrivals: Iterable[Arrival]) -> None:
        """Send each arrival when the previous one has completed (the iterable reads the clock lazily)."""
        for arrival in arrivals:
            if self.stopped:
                break
            self.counts.count(arrival, False)
            self.send(arrival)

    def closed_streams(self, streams: list[Iterable[Arrival]], end_mono: int) -> None:
        """Several closed loops side by side, joined at `end_mono` + the drain time."""
        group = Group()
        for stream in streams:
            group.spawn(self.closed_loop, stream)
        group.join(timeout=max(0.0, (end_mono - time.perf_counter_ns()) / 1e9) + self.drain_s)


def draws(plan: RunPlan, region_index: int, worker_index: int, n_samples: int, stream: int = 0
          ) -> Iterator[tuple[int, int]]:
    """A seeded stream of (endpoint index, sample index) for the closed-loop scenarios."""
    p = plan.profile
    rng = np.random.default_rng([p.load.seed, 2, region_index, worker_index, stream])
    weights = np.asarray([e.weight for e in p.endpoints]) / sum(e.weight for e in p.endpoints)
    sequential = p.inputs.selection == "sequential"
    stride = plan.samples_per_request if p.load.scenario == "offline" else 1
    k = 0
    while True:
        endpoints = rng.choice(len(weights), size=1024, p=weights)
        samples = (np.arange(k, k + 1024) * stride if sequential
                   else rng.integers(0, max(1, n_samples // stride), size=1024) * stride) % n_samples
        k += 1024
        yield from zip(endpoints.tolist(), samples.tolist())


@dataclass(frozen=True)
class Window:
    """The scenario's time window (perf_counter_ns) and its warm-up."""

    start_mono: int
    end_mono: int
    warmup_ns: int

    def phase(self, mono_ns: int) -> int:
        return 0 if mono_ns - self.start_mono < self.warmup_ns else 1


def back_to_back(choices: Iterator[tuple[int, int]], window: Window) -> Iterator[Arrival]:
    """Closed loop: each arrival is due the moment it is asked for, until the window ends."""
    while (now := time.perf_counter_ns()) < window.end_mono:
        endpoint, sample = next(choices)
        yield Arrival(now, endpoint, window.phase(now), sample)


def interval_ticks(choices: Iterator[tuple[int, int]], window: Window, interval_ns: int) -> Iterator[Arrival]:
    """multi-stream: one arrival per interval from the start instant."""
    tick = window.start_mono
    while tick < window.end_mono:
        endpoint, sample = next(choices)
        yield Arrival(tick, endpoint, window.phase(tick), sample)
        tick += interval_ns


def run_scenario(loop: IssueLoop, plan: RunPlan, window: Window, arrivals: Iterable[Arrival] | BuildAhead | None,
                 choices: Callable[[int], Iterator[tuple[int, int]]]) -> dict:
    """Run the plan's scenario on `loop`; returns its scenario statistics for the worker summary. `arrivals`: the
    server scenario's (harness/worker/arrivals.py ScheduledArrivals), or their builder, primed before the start;
    `choices(stream)` gives the seeded draws of one closed-loop stream."""
    load = plan.profile.load
    stats: dict = {"scenario": load.scenario}
    if load.scenario == "server":
        sessions = any(e.sessions is not None for e in plan.profile.endpoints)  # later turns go on to the end
        loop.open_loop(arrivals, until_mono=window.end_mono if sessions else None)
    elif load.scenario == "single-stream":
        loop.wait_until(window.start_mono)
        loop.closed_loop(back_to_back(choices(0), window))
    elif load.scenario == "multi-stream":
        loop.open_loop(interval_ticks(choices(0), window, int(load.interval_ms * 1e6)), limit=1)
        c = loop.counts
        stats.update({"intervals": c.issued + c.missed, "missed_intervals": c.missed,
                      "intervals_measured": c.issued_measured + c.missed_measured,
                      "missed_measured": c.missed_measured, "interval_ms": load.interval_ms,
                      "samples_per_query": load.samples_per_query})
    else:
        loop.wait_until(window.start_mono)
        loop.closed_streams([back_to_back(choices(i + 1), window) for i in range(load.offline_concurrency)],
                            window.end_mono)
        stats.update({"batch": load.offline_batch, "concurrency": load.offline_concurrency})
    return stats
