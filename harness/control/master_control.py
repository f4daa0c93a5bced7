"""The master's side of the control channel (contract/messages.py), inside the Locust master: admits a worker that
proves the run's token for a region and index of the profile (JOIN) and refuses any other (REFUSED); announces the
plan with the start instant in reference time to the admitted workers only; writes the files remote workers send
(CHUNK) into the run directory once and acknowledges them (ACK); ends the run once every worker has finished
(DONE / ERROR); and records who joined, was admitted or refused, said hello, finished, fell silent, came back and
left — and its own stalls — in master-events.jsonl."""
from __future__ import annotations

import time
from pathlib import Path

import gevent

from tailrace.contract import master_events, messages
from tailrace.contract.layout import RunLayout, shippable, write_atomic
from tailrace.contract.plan import RunPlan
from tailrace.harness.control.admission import Admission
from tailrace.harness.control.live_board import LiveBoard
from tailrace.harness.control.locust_adaptations import set_worker_liveness, worker_quiet_s
from tailrace.harness.control.worker_gate import WorkerGate
from tailrace.harness.worker.clock import WorkerClock, measure_offset

SILENT_S = 3.0  # the master answers every heartbeat within ~1 s: SILENT_S without one is a gap
# Once every worker is ready, the run starts this long after: time for the START to reach a worker across a WAN and
# for the worker to turn it into its own clock's instant. The plan's lead (plan.lead_s) is the most it waits.
START_MARGIN_S = 0.5
WATCH_S = 0.5  # how often the master looks at its workers (and a longer pause of this loop is its own stall)
REFUSALS_EVERY_S = 10.0  # the refusals that followed the first of their address and reason: counted this often


class MasterControl:
    """One run's control channel at the master."""

    def __init__(self, environment, plan: RunPlan, token: str) -> None:
        self.runner = environment.runner
        self.plan = plan
        self.layout = RunLayout(Path(plan.run_dir))
        self.log = master_events.MasterEventLog(self.layout)
        self.admission = Admission(plan, token)
        self.expected = sum(r.workers for r in plan.profile.regions)
        self.gate = WorkerGate(self.runner, self.admission, self.log, self.expected)
        self.names: dict[str, str] = {}  # client id → worker name
        self.plan_payload: dict | None = None  # the PLAN message once sent: a worker admitted later gets it at once
        self.planned_start_ns: int | None = None  # the plan's start instant (reference clock)
        self.offset_ns = 0  # this host's clock → the reference clock
        self.ready: set[str] = set()  # workers that sent READY
        self.ending = False  # every worker finished: the master quits
        self.live_failed = False  # the live view raised once (said once; the run goes on)
        self.start_sent = False
        self.finished: set[str] = set()  # workers that sent DONE (their files acknowledged) or ERROR
        self.silent: dict[str, float] = {}  # client id → its last heartbeat (epoch s) while it is silent
        self.seen_states: dict[str, str] = {}
        self.board = LiveBoard(plan, self.layout, self.heartbeat_ages)
        # a silent worker is "missing" after the profile's timeout, so that a blip of the control channel loses nobody
        set_worker_liveness(plan.profile.generator.master_timeout_s)
        for message, handler in ((messages.JOIN, self.on_join), (messages.CHUNK, self.on_chunk),
                                 (messages.HELLO, self.on_hello), (messages.READY, self.on_ready),
                                 (messages.LIVE, self.on_live), (messages.DONE, self.on_done),
                                 (messages.ERROR, self.on_error)):
            self.runner.register_message(message.name, handler)
        environment.events.worker_connect.add_listener(self.gate.on_connect)
        environment.events.test_start.add_listener(self.announce)
        environment.events.quitting.add_listener(lambda **_kw: self.gate.write_refusals())
        gevent.spawn(self.watch_workers)
        gevent.spawn(self.write_live)

    # -- messages -------------------------------------------------------------------------------------------------
    def on_join(self, msg, **_kw) -> None:
        join = self.gate.join(msg)
        if join is None:
            return
        self.names[join.client_id] = join.worker
        if self.plan_payload is not None:
            self.runner.send_message(messages.PLAN.name, self.plan_payload, client_id=join.client_id)

    def on_chunk(self, msg, **_kw) -> None:
        chunk = messages.CHUNK.decode(msg.data)
        join = self.admission.admitted.get(chunk.client_id)
        if join is None or not shippable(chunk.name):
            self.log.write(master_events.CHUNK_REFUSED, client_id=chunk.client_id, name=chunk.name[:80],
                           reason="not an admitted worker" if join is None else "not a file a worker sends")
            return
        worker = self.layout.worker(join.region, join.worker)
        target = worker.dir / chunk.name
        try:
            if target == worker.summary or not target.exists():  # chunks: once; the summary: its latest
                write_atomic(target, chunk.data)
        except OSError as exc:
            try:
                self.log.write(master_events.CHUNK_NOT_WRITTEN, worker=join.worker, name=chunk.name,
                               error=exc.strerror)
            except OSError:
                pass  # the log is on the same full disk; the orchestrator stops the run on low space
            return  # no ACK: the worker keeps it and sends it again
        self.runner.send_message(messages.ACK.name, messages.wire(messages.Ack(chunk.name)), client_id=chunk.client_id)

    def on_hello(self, msg, **_kw) -> None:
        if not self.admission.is_admitted(msg.node_id):
            return
        hello = messages.HELLO.decode(msg.data)
        self.names[hello.client_id] = hello.worker
        self.log.write(master_events.WORKER_HELLO, client_id=hello.client_id, worker=hello.worker,
                       region=hello.region, metrics_port=hello.metrics_port)

    def on_ready(self, msg, **_kw) -> None:
        if not self.admission.is_admitted(msg.node_id):
            return
        self.ready.add(messages.READY.decode(msg.data).client_id)
        admitted = set(self.admission.admitted)
        if (not self.start_sent and self.planned_start_ns is not None and len(admitted) == self.expected
                and admitted <= self.ready):
            self.start_sent = True
            gevent.spawn(self.start_early)

    def start_early(self) -> None:
        """Every expected worker is ready: start them all START_MARGIN_S from now instead of at the plan's instant
        (never later than it). Sent three times; a worker that hears none starts at the plan's instant."""
        start_ref_ns = min(self.planned_start_ns, time.time_ns() + self.offset_ns + int(START_MARGIN_S * 1e9))
        self.board.started(start_ref_ns, self.offset_ns)
        self.log.write(master_events.START_SENT, start_ref_ns=start_ref_ns,
                       earlier_s=round((self.planned_start_ns - start_ref_ns) / 1e9, 3),
                       workers=sorted(j.worker for j in self.admission.admitted.values()))
        payload = messages.wire(messages.Start(start_ref_ns))
        for _ in range(3):
            for client_id in list(self.admission.admitted):
                self.runner.send_message(messages.START.name, payload, client_id=client_id)
            gevent.sleep(0.1)

    def on_live(self, msg, **_kw) -> None:
        live = messages.LIVE.decode(msg.data)
        if live.client_id in self.admission.admitted:
            self.board.add(live.worker, live.region, live.digest)

    def on_done(self, msg, **_kw) -> None:
        if not self.admission.is_admitted(msg.node_id):
            return
        done = messages.DONE.decode(msg.data)
        self.log.write(master_events.WORKER_DONE, client_id=done.client_id, summary=done.summary)
        self._finished(done.client_id)

    def on_error(self, msg, **_kw) -> None:
        if not self.admission.is_admitted(msg.node_id):
            return
        error = messages.ERROR.decode(msg.data)
        self.log.write(master_events.WORKER_ERROR, client_id=error.client_id, error=error.error)
        self._finished(error.client_id)

    def _finished(self, client_id: str) -> None:
        """Once every expected worker has finished, the run is over: quit now rather than at the run-time limit
        (which leaves room for the slowest drain and start-up)."""
        self.finished.add(client_id)
        admitted = self.admission.admitted
        if self.plan_payload is not None and len(admitted) == self.expected and set(admitted) <= self.finished \
                and not self.ending:
            self.ending = True
            self._write_live_line()
            gevent.spawn_later(0.2, self.runner.quit)

    # -- the start --------------------------------------------------------------------------------------------------
    def announce(self, **_kw) -> None:
        """The plan and its start instant (reference time: the master's offset to its clock reference applied), to
        the admitted workers only; again shortly after, for one whose JOIN is still on its way."""
        offset = 0
        for server in self.plan.ntp_servers:
            try:
                offset = measure_offset(server, WorkerClock(0), 4).offset_ns
                break
            except OSError:
                continue
        self.offset_ns = offset
        start_ref_ns = self.planned_start_ns = time.time_ns() + offset + int(self.plan.lead_s * 1e9)
        self.log.write(master_events.PLAN_SENT, start_ref_ns=start_ref_ns, master_offset_ns=offset,
                       workers=sorted(j.worker for j in self.admission.admitted.values()))
        self.plan_payload = messages.wire(messages.Plan(self.plan.model_dump(mode="json"), start_ref_ns))
        gevent.spawn(self._send_plan)  # not in this event handler: Locust spawns the users after it returns
        gevent.spawn_later(max(0.0, self.plan.lead_s - 0.5), self._start_by_plan)

    def _start_by_plan(self) -> None:
        """No START went out (a worker never got ready): the run starts at the plan's instant."""
        if not self.start_sent:
            self.board.started(self.planned_start_ns, self.offset_ns)

    def _send_plan(self) -> None:
        for _ in range(3):
            for client_id in list(self.admission.admitted):
                self.runner.send_message(messages.PLAN.name, self.plan_payload, client_id=client_id)
            gevent.sleep(0.5)

    # -- the live page -------------------------------------------------------------------------------------------------
    def write_live(self) -> None:
        """live.jsonl's LIVE line, once a second (the page reads it; a failure to write never stops the run)."""
        while True:
            gevent.sleep(1.0)
            self._write_live_line()  # (a full disk: the orchestrator stops the run; the page just stops moving)

    def _write_live_line(self) -> None:
        """One LIVE line now (also once the run is over: the workers' last seconds, before the master quits)."""
        try:
            self.board.tick()
        except OSError:
            pass
        except Exception as exc:  # noqa: BLE001 - the live view is a view: a bug in it never holds up the run's end
            if not self.live_failed:
                self.live_failed = True
                print(f"tailrace master: the live view failed ({type(exc).__name__}: {exc}); the run goes on",
                      flush=True)

    def heartbeat_ages(self) -> dict[str, float]:
        """Admitted worker → seconds since its last heartbeat (Locust counts whole seconds)."""
        out = {}
        for c in list(self.runner.clients.values()):
            name = self.names.get(c.id)
            if name is not None and c.id in self.admission.admitted:
                out[name] = float(worker_quiet_s(c))
        return out

    # -- the workers' liveness ----------------------------------------------------------------------------------------
    def watch_workers(self) -> None:
        tick = time.time()
        while True:
            now = time.time()
            if now - tick > SILENT_S:  # this loop sleeps WATCH_S: the master itself was paused
                self.log.write(master_events.MASTER_STALLED, since_ns=int(tick * 1e9), gap_s=round(now - tick, 1))
            tick = now
            self.gate.write_refusals(every_s=REFUSALS_EVERY_S)
            self._note_gaps()
            self._note_departures()
            gevent.sleep(WATCH_S)

    def _note_gaps(self) -> None:
        """Silent workers (no heartbeat for SILENT_S) and their return."""
        for c in list(self.runner.clients.values()):
            quiet_s = worker_quiet_s(c)
            if c.id not in self.silent and quiet_s >= SILENT_S and c.state != "missing":
                self.silent[c.id] = time.time() - quiet_s
                self.log.write(master_events.WORKER_SILENT, client_id=c.id, worker=self.names.get(c.id),
                               since_ns=int(self.silent[c.id] * 1e9))
                self.board.gap_began(self.names.get(c.id), self.silent[c.id] - self._start_s())
            elif c.id in self.silent and quiet_s <= 1:
                gap_s = round(time.time() - self.silent.pop(c.id), 1)
                self.log.write(master_events.WORKER_RETURNED, client_id=c.id, worker=self.names.get(c.id), gap_s=gap_s)
                self.board.gap_ended(self.names.get(c.id), gap_s)

    def _start_s(self) -> float:
        """The run's start instant on this host's clock (epoch s; now before it is known)."""
        start = self.board.start_ref_ns
        return (start - self.offset_ns) / 1e9 if start is not None else time.time()

    def _note_departures(self) -> None:
        """Workers Locust marked missing (heartbeats stopped) or that disconnected. A worker gone is finished for
        the run's end: it stops itself once its master has been silent as long (its spool keeps what it closed,
        for `tailrace collect`), so the run ends when the others are done, not at its time limit."""
        current = {c.id: c.state for c in self.runner.clients.values()}
        for cid, state in current.items():
            if self.seen_states.get(cid) != state and state == "missing":
                self.log.write(master_events.WORKER_LEFT, client_id=cid, worker=self.names.get(cid),
                               reason="heartbeat missing")
                self._finished(cid)
        for cid in set(self.seen_states) - set(current):
            if self.seen_states[cid] != "missing":
                self.log.write(master_events.WORKER_LEFT, client_id=cid, worker=self.names.get(cid),
                               reason="disconnected")
                self._finished(cid)
        self.seen_states = current
