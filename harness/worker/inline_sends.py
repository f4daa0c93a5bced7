"""The issue loop's own request path for open-loop plain-HTTP endpoints (KServe, streams, a trace's rows, sessions'
turns): no greenlet per request, and a session's later turns sent by the loop at their instants.

A request is sent by the issue loop the moment it is due (harness/client/inline_http1.py). Its response is read
by the issue loop between sends. Its record is written later, in the loop's slack: the row, the metrics and the
saturation monitor's sample cost more than the exchange itself, and a send that is due never waits for them.
The slack rule has one bound: when DEFER_MAX records are waiting, they are written even with a send due. A
generator that cannot keep up then shows it as send lag, which the saturation rule judges; it never hides a backlog.

What is recorded is what the greenlet path records (harness/worker/requester.py: the same `finish`): the same
intended instant, the send instant taken just before the request's first byte goes to the kernel, and the instant
the response's last bytes reached the host (the kernel's receive stamp on a stream over plain TCP, else the read that
completed it); a stream's token events are stamped with the kernel's receive instant, and
its outcome is made by its sender from the same reading (harness/client/generative.py `StreamSender.ended`).
"""
from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable

from tailrace.contract.profile import Profile
from tailrace.harness.client.inline_http1 import InlineExchange, InlinePoller
from tailrace.harness.client.outcome import Outcome
from tailrace.harness.client.senders import InlineSender
from tailrace.harness.spool.chunk_shipping import CATCH_UP_S, WRITER_BEHIND, WriterChild
from tailrace.harness.worker.chains.sessions import PreparedSession, SessionRunner
from tailrace.harness.worker.requester import RequestPath
from tailrace.harness.worker.scenarios import Arrival, IssueLoop
from tailrace.harness.workload.turns import RUN_END, PreparedRequest, Turn

DEFER_SLACK_NS = 200_000  # a waiting record is written only while the next send is further off than this ...
DEFER_MAX = 1_000  # ... unless this many wait (a generator short of CPU shows it as send lag, never hides it)
EXPIRE_EVERY_NS = 5_000_000  # how often timed-out exchanges are looked for
WAKE_MARGIN_NS = 150_000  # a loop sleeping so that its chunk writer can run wakes this long before its next send


class InlineSends:
    """Sends arrivals of the endpoints whose senders can be driven inline, reads their answers, writes their
    records in the issue loop's slack."""

    def __init__(self, path: RequestPath, log=print) -> None:
        self.path, self.log = path, log
        self.poller = InlinePoller()
        self.pools = {}
        for index, sender in enumerate(path.senders):
            pool = sender.attach_inline(self.poller, self._answered) if isinstance(sender, InlineSender) else None
            if pool is not None:
                self.pools[index] = pool
        # every answer is stamped with the kernel's receive instant (streams over plain TCP): reading it later moves
        # none of its instants, so a send that is due may go before it (IssueLoop._pump_until)
        self.stamped = bool(self.pools) and all(p.streamed and p.kernel_stamps for p in self.pools.values())
        self._records: deque[tuple] = deque()
        self._turn_records: deque[tuple] = deque()  # sessions' turns: written first (each decides the next turn)
        self._next_expiry = 0
        # sessions run inline (their endpoints' streams are): each later turn waits here for its instant and the
        # issue loop sends it then (IssueLoop._pump_until); heap of (instant, order, arrival, turn, session)
        self.sessions: SessionRunner | None = None
        self._turns: list[tuple] = []
        self._turn_order = itertools.count()
        self.sessions_running = 0  # begun here and not ended
        # the worker's chunk writer, at SCHED_IDLE and held stopped except while this loop sleeps (gate_writer,
        # yield_core; harness/spool/chunk_shipping.py WriterChild): the loop sleeps while it has chunks to write
        self.writer: WriterChild | None = None

    def __bool__(self) -> bool:
        """Some endpoint is sent inline."""
        return bool(self.pools)

    def takes(self, item: object) -> bool:
        """`item` (what the issue loop issues) is an arrival of an inline endpoint, or a request or session built
        ahead for one (harness/workload/turns.py PreparedRequest, harness/worker/chains/sessions.py PreparedSession)."""
        kind = type(item)
        if kind is Arrival:
            return item.endpoint in self.pools
        return (kind is PreparedRequest or kind is PreparedSession and self.sessions is not None) \
            and item.arrival.endpoint in self.pools

    @property
    def busy(self) -> int:
        """Requests sent inline and not yet answered."""
        return self.poller.busy

    @property
    def pending(self) -> bool:
        """Sent or answered requests whose records are not written yet."""
        return bool(self._records) or bool(self._turn_records) or self.poller.busy > 0

    @property
    def next_turn_ns(self) -> int:
        """The instant of the earliest session turn waiting to be sent, or of a stream its client abandons then (far
        off: none): the issue loop is awake at it (send_turns)."""
        turn = self._turns[0][0] if self._turns else 1 << 62
        return min(turn, self.poller.next_leave_ns)

    def start(self, item: Arrival | PreparedRequest | PreparedSession) -> None:
        """Send `item`'s request now (a session's: its first turn); never raises (a failure is recorded as its
        outcome)."""
        kind = type(item)
        if kind is Arrival:
            self._start(item, None, None)
        elif kind is PreparedRequest:
            self._start(item.arrival, item.turn, None)
        else:
            self.sessions_running += 1
            step = self.sessions.begin(item)
            if step is None:
                self._end_session(item)
            else:
                self._start(step[0], step[1], item)

    def send_turns(self, now_ns: int) -> None:
        """Close the streams whose clients leave by now; send every waiting session turn whose instant has come."""
        self.poller.leave_due(now_ns)
        turns = self._turns
        while turns and turns[0][0] <= now_ns:
            _, _, arrival, turn, session = heapq.heappop(turns)
            self._start(arrival, turn, session)

    def keep_turns(self, until_mono: int, pump_until: Callable[[int], None], stopped: Callable[[], bool]) -> None:
        """After the open loop's last arrival: the later turns of the sessions run here, each sent at its instant
        (`pump_until`: the loop's precise wait), until every such session has ended, the run is stopped, or
        `until_mono`."""
        while self.sessions_running and not stopped():
            turn_ns = self.next_turn_ns
            if turn_ns < until_mono:
                pump_until(turn_ns)
                self.send_turns(time.perf_counter_ns())
                continue
            left_s = (until_mono - time.perf_counter_ns()) / 1e9
            if left_s <= 0:
                return
            self.pump(until_mono)  # answers read, records written: the next turns are queued
            if self.next_turn_ns >= until_mono:
                self.wait(min(0.01, left_s))  # until an answer comes

    def end_turns(self) -> None:
        """The run stops keeping turns (stopped, or out of time): the sessions still waiting for a turn end."""
        for _, _, _, _, session in self._turns:
            self.sessions.ended[RUN_END] += 1
            self._end_session(session)
        self._turns.clear()

    def _start(self, arrival: Arrival, turn: Turn | None, session: PreparedSession | None) -> None:
        path = self.path
        call = path.begin(arrival, turn)
        sender = path.senders[arrival.endpoint]
        try:  # `out`: the outcome so far (KServe), or what a stream's reading needs (a StreamPending)
            kw = call.options
            out, raw = sender.encode(arrival.sample, call.headers, **kw) if turn is None else \
                sender.encode_body(turn.body, call.headers, turn.prompt_index, **kw)
        except Exception as exc:  # noqa: BLE001 - never stop the generator
            out, raw = Outcome(status="bad_response", code="exception", error=f"{type(exc).__name__}: {exc}"[:200]), None
        if raw is None:  # not sent (its credential could not be read): recorded at once, as the greenlet path does
            now = time.perf_counter_ns()
            path.answered(turn)
            (self._records if session is None else self._turn_records).append(
                (arrival, call, out, now, now, None, None, turn, session))
            return
        pool = self.pools[arrival.endpoint]
        pool.start(raw, (arrival, call, out, turn, session), out.read if pool.streamed else None)

    def _answered(self, ex: InlineExchange) -> None:
        arrival, call, out, turn, session = ex.context
        self.path.answered(turn)
        (self._records if session is None else self._turn_records).append(
            (arrival, call, out, ex.sent_ns, ex.done_ns, ex.error, ex.response, turn, session))

    def _end_session(self, session: PreparedSession) -> None:
        self.sessions_running -= 1
        self.sessions.end(session)

    def pump(self, due_ns: int) -> None:
        """Read what has arrived, fail what timed out, and write records while the send due at `due_ns` is further
        off than DEFER_SLACK_NS (or DEFER_MAX records wait) and the chunk writer has nothing to write."""
        self.poller.poll()
        records = self._records
        now = time.perf_counter_ns()
        self.poller.leave_due(now)
        if now >= self._next_expiry:
            self.poller.expire(now)
            self._next_expiry = now + EXPIRE_EVERY_NS
        turns = self._turn_records  # a session's next turn waits for its record: before the chunk writer's turn
        while turns and (due_ns - time.perf_counter_ns() > DEFER_SLACK_NS or len(turns) > DEFER_MAX):
            self._record(turns.popleft())
        if len(records) <= DEFER_MAX and self.writer is not None and self.writer.busy:
            return  # the chunk writer first (yield_core): it runs only while this loop sleeps, records can wait
        while records and (due_ns - time.perf_counter_ns() > DEFER_SLACK_NS or len(records) > DEFER_MAX):
            self._record(records.popleft())

    def yield_core(self, due_ns: int) -> bool:
        """While the chunk writer has chunks to write, sleep in the kernel until WAKE_MARGIN_NS before `due_ns`, the
        writer let run meanwhile: it gives the core back the moment a response, its own acknowledgement or the timeout
        wakes this process. False: nothing to yield for, or too little time (the caller spins on). A writer
        WRITER_BEHIND chunks behind is waited for, whatever is due (send lag, never a lost chunk)."""
        writer = self.writer
        if writer is None or not writer.busy:
            return False
        if writer.outstanding >= WRITER_BEHIND:  # (a writer that does not catch up is let go: the run goes on, its
            if not writer.keep_up(WRITER_BEHIND, CATCH_UP_S, self.log):  # send lag unharmed by the writer)
                self.writer = None
            return True
        left_ns = due_ns - time.perf_counter_ns() - WAKE_MARGIN_NS
        if left_ns <= 0:
            return False
        writer.release()
        self.poller.sleep(left_ns / 1e9, writer.ack_fd)
        writer.hold(due_ns)
        return True

    def wait(self, timeout_s: float) -> None:
        """Yield to the rest of the worker until a response arrives or `timeout_s` has passed (the chunk writer let
        run meanwhile)."""
        writer = self.writer
        if writer is not None:
            writer.release()
        self.poller.wait(timeout_s)
        if writer is not None:
            writer.hold()

    def _record(self, item: tuple) -> None:
        arrival, call, out, sent_ns, done_ns, error, response, turn, session = item
        path = self.path
        if error is not None or response is not None:
            sender = path.senders[arrival.endpoint]
            try:
                out = sender.failed(out, error) if error is not None else sender.answered(out, response)
            except Exception as exc:  # noqa: BLE001 - never stop the generator
                out = Outcome(status="bad_response", code="exception", error=f"{type(exc).__name__}: {exc}"[:200])
        if turn is not None:  # as on the greenlet path: decided at the reply's instant, before the record
            path.decide(turn, out, done_ns)
        path.finish(arrival, call, sent_ns, done_ns, out, turn)
        if session is not None:
            step = self.sessions.after(session, turn)
            if step is None:
                self._end_session(session)
            else:
                heapq.heappush(self._turns, (step[0].intended_mono, next(self._turn_order), *step, session))

    def drain(self, until_ns: int) -> None:
        """Wait for every answer until `until_ns`; fail what is still out then (a timeout, recorded); write every
        record."""
        while self.poller.busy and time.perf_counter_ns() < until_ns:
            self.pump(until_ns)
            if self.poller.busy:
                self.wait(min(0.05, max(0.0, (min(until_ns, self.poller.next_leave_ns) - time.perf_counter_ns()) / 1e9)))
        self.poller.poll()
        self.poller.expire(1 << 62)  # still out after the drain: a timeout, recorded like any other
        while self._turn_records or self._records:
            self._record((self._turn_records or self._records).popleft())
        if self.sessions is not None:
            self.end_turns()  # turns due after the run's window (or a stopped run's): never sent

    def gate_writer(self, on: bool) -> None:
        """From now on (`on`), the chunk writer runs only while this loop sleeps; or (off) whenever it has work."""
        if self.writer is not None:
            self.writer.gate(on)

    def close(self) -> None:
        self.gate_writer(False)
        self.poller.close()


def inline_sends(profile: Profile, path: RequestPath, log=print, writer: WriterChild | None = None,
                 sessions: SessionRunner | None = None) -> InlineSends | None:
    """The inline path of a run that can take it, said in the worker's log: `generator.send_path` is inline, the
    scenario an open loop (server, multi-stream), and some endpoint is plain HTTP (KServe, or streams: independent
    prompts, a trace's rows, and with `sessions` a session endpoint's turns). None: every request goes the greenlet
    way. The worker's chunk `writer`, if any, is moved to SCHED_IDLE and held stopped except while the loop sleeps
    (InlineSends.yield_core)."""
    if profile.generator.send_path != "inline" or profile.load.scenario not in ("server", "multi-stream"):
        return None
    inline = InlineSends(path, log)
    inline.sessions = sessions
    if not inline:
        inline.close()
        return None
    log("send path: inline for " + ", ".join(profile.endpoints[i].name for i in inline.pools))
    if writer is not None and writer.idle():
        inline.writer = writer
        log("chunk writer: SCHED_IDLE, held except while the send loop sleeps")
    return inline


def choose_send_path(loop: IssueLoop, profile: Profile, path: RequestPath, writer: WriterChild | None,
                     log=print, sessions: SessionRunner | None = None) -> None:
    """Give the worker's open `loop` its inline path (`inline_sends`) where the run can take it; else, on greenlets,
    the chunk `writer` moved to SCHED_IDLE and held stopped except while the loop sleeps (IssueLoop._sleep_until)."""
    loop.inline = inline_sends(profile, path, log=log, writer=writer, sessions=sessions)
    loop.log = log
    if loop.inline is None and writer is not None and writer.idle():
        loop.writer = writer
        log("chunk writer: SCHED_IDLE, held except while the send loop sleeps")
