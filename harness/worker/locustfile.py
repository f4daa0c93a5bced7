"""The Locust side of tailrace: one user per worker, and the messages of contract/messages.py.

Master: reads the run plan (plan.json, named by $TAILRACE_PLAN); admits a worker that proves the run's token
($TAILRACE_RUN_TOKEN) for a region and index of the profile (JOIN), and refuses any other (REFUSED, then
Locust's quit); announces the plan with the start instant in reference time to the admitted workers only;
writes the files remote workers send (CHUNK) into the run directory once and acknowledges them (ACK); records
which workers joined, were admitted or refused, said hello, finished and left (master-events.jsonl).
Worker: proves the token as it connects, runs harness/worker/run.py's WorkerRun inside its single user, and
(remote workers) sends its closed files through harness/spool/uplink.py.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from grpc.experimental import gevent as grpc_gevent

grpc_gevent.init_gevent()  # before any gRPC call, or every greenlet blocks

import sys  # noqa: E402

# The chunk writer's native thread holds the GIL in short Python stretches; with the default 5 ms switch
# interval the sending hub could wait that long for it. 0.2 ms bounds that wait far below the send-lag budget.
sys.setswitchinterval(0.0002)

import gevent  # noqa: E402
from locust import User, events, task  # noqa: E402
from locust import runners as locust_runners  # noqa: E402
from locust.exception import StopUser  # noqa: E402
from locust.rpc import zmqrpc  # noqa: E402
from locust.runners import MasterRunner, WorkerRunner  # noqa: E402

from tailrace.contract import master_events, messages  # noqa: E402
from tailrace.contract.exit_codes import USAGE, WORKER_MASTER_LOST  # noqa: E402
from tailrace.contract.layout import RunLayout, shippable, write_atomic  # noqa: E402
from tailrace.contract.plan import RunPlan  # noqa: E402
from tailrace.harness.worker.admission import Admission, token_proof  # noqa: E402
from tailrace.harness.worker.clock import WorkerClock, measure_offset  # noqa: E402
from tailrace.harness.worker.identity import PLAN_ENV, TOKEN_ENV, WorkerIdentity  # noqa: E402
from tailrace.harness.worker.plan_inbox import PlanInbox  # noqa: E402
from tailrace.harness.worker.run import WorkerRun  # noqa: E402  (imported before the plan arrives)

# The control channel over a WAN. A link that drops every packet for a while leaves a TCP connection waiting on its
# retransmission backoff (0.2, 0.6, 1.4 … 12.6, 25.4 s): a 15 s cut measured as 27 s of silence. ZMTP heartbeats
# declare a connection dead after ZMQ_DEAD_MS without traffic; the worker's socket then reconnects every
# ZMQ_RECONNECT_MS with a fresh connection (sent within that of the link's return), and the master hands the
# worker's identity over to it (ROUTER_HANDOVER). What the dead connection held is re-sent: heartbeats by Locust,
# chunks by the uplink (harness/spool/uplink.py) once unacknowledged.
ZMQ_HEARTBEAT_MS, ZMQ_DEAD_MS, ZMQ_RECONNECT_MS = 1000, 4000, 1000
_socket_init = zmqrpc.BaseSocket.__init__


def _wan_socket_init(self, sock_type, ipv4_only) -> None:
    _socket_init(self, sock_type, ipv4_only)
    self.socket.setsockopt(zmqrpc.zmq.HEARTBEAT_IVL, ZMQ_HEARTBEAT_MS)
    self.socket.setsockopt(zmqrpc.zmq.HEARTBEAT_TIMEOUT, ZMQ_DEAD_MS)
    self.socket.setsockopt(zmqrpc.zmq.RECONNECT_IVL_MAX, ZMQ_RECONNECT_MS)
    if sock_type == zmqrpc.zmq.ROUTER:
        self.socket.setsockopt(zmqrpc.zmq.ROUTER_HANDOVER, 1)


zmqrpc.BaseSocket.__init__ = _wan_socket_init


@dataclass
class _WorkerState:
    """This worker process's one run: the plan message once it arrives, and the run once it starts."""

    inbox: PlanInbox = field(default_factory=PlanInbox)
    run: WorkerRun | None = None
    claimed: bool = False
    gaps: list[tuple[float, float]] = field(default_factory=list)  # (last heartbeat before, first after): epoch s
    quitting: bool = False  # Locust is quitting (the master ended the run): only the final drain is left


_state = _WorkerState()


def _master_plan() -> RunPlan:
    path = os.environ.get(PLAN_ENV)
    if not path:
        raise RuntimeError(f"{PLAN_ENV} is not set (start the master with `tailrace master` or `tailrace run`)")
    return RunPlan.read(path)


@events.init.add_listener
def _on_init(environment, **_kwargs) -> None:
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        _init_master(environment)
    elif isinstance(runner, WorkerRunner):
        runner.register_message(messages.PLAN.name, _on_plan)
        runner.register_message(messages.REFUSED.name, _on_refused)
        runner.register_message(messages.ACK.name, _on_ack)
        try:
            identity = WorkerIdentity.from_env()
        except RuntimeError as exc:
            print(f"tailrace worker: {exc}", file=sys.stderr, flush=True)
            os._exit(USAGE)
        locust_runners.MASTER_HEARTBEAT_TIMEOUT = master_timeout_s(identity)
        _send(runner, messages.JOIN, messages.Join(runner.client_id, identity.name, identity.region, identity.index,
                                                   token_proof(os.environ.get(TOKEN_ENV, ""), runner.client_id)))
        gevent.spawn(_watch_master, runner)


def _watch_master(runner) -> None:
    """The control channel, watched: a master silent for SILENT_S is a gap — the schedule goes on, the spool keeps
    every chunk and the uplink re-sends what is unacknowledged once it is back — recorded with when it began and
    ended. A master silent for the whole timeout is gone: close this worker's files (its spool keeps them for
    `tailrace collect`) and end the process, so nothing is sent to a run nobody records."""
    silent_since: float | None = None
    while True:
        gevent.sleep(0.5)
        last = getattr(runner, "last_heartbeat_timestamp", None)
        if not last:
            continue
        now = time.time()
        if silent_since is None and now - last > SILENT_S:
            silent_since = last
            print(f"tailrace worker: no heartbeat from the master for {now - last:.0f} s; the schedule goes on (it "
                  f"stops after {locust_runners.MASTER_HEARTBEAT_TIMEOUT:g} s)", file=sys.stderr, flush=True)
        elif silent_since is not None and now - last <= SILENT_S:
            _state.gaps.append((silent_since, last))
            print(f"tailrace worker: the master is back after {last - silent_since:.1f} s", file=sys.stderr,
                  flush=True)
            if _state.run is not None:
                _state.run.control_gaps = list(_state.gaps)
            silent_since = None
        if _state.quitting and silent_since is not None:  # the master ended the run and is gone: waiting is moot
            print("tailrace worker: the master ended the run and went silent; what it did not acknowledge stays in "
                  "the spool (tailrace collect)", file=sys.stderr, flush=True)
            if _state.run is not None and _state.run.finishing is False:
                _state.run.finish(master_lost=True)
            os._exit(WORKER_MASTER_LOST)
        if _master_lost(runner):
            print("tailrace worker: master lost (no heartbeat for "
                  f"{locust_runners.MASTER_HEARTBEAT_TIMEOUT:g} s); stopping", file=sys.stderr, flush=True)
            if _state.run is not None:
                _state.run.control_gaps = [*_state.gaps, (silent_since or last, None)]
                _state.run.finish(master_lost=True)
            os._exit(WORKER_MASTER_LOST)


def master_timeout_s(identity: WorkerIdentity | None, plan: RunPlan | None = None) -> float:
    """How long a silent master is waited for: `tailrace worker --master-timeout-s`, else the profile's."""
    if identity is not None and identity.master_timeout_s:
        return identity.master_timeout_s
    return plan.profile.generator.master_timeout_s if plan is not None else DEFAULT_MASTER_TIMEOUT_S



def _init_master(environment) -> None:
    plan = _master_plan()
    layout = RunLayout(Path(plan.run_dir))
    log = master_events.MasterEventLog(layout)
    runner = environment.runner
    names: dict[str, str] = {}
    seen_states: dict[str, str] = {}
    admission = Admission(plan, os.environ.get(TOKEN_ENV, ""))
    announced: list[dict] = []  # the PLAN payload once sent: a worker admitted later gets it at once

    def on_join(msg, **_kw) -> None:
        join = messages.JOIN.decode(msg.data)
        reason = admission.refusal(join)
        if reason is not None:
            log.write(master_events.WORKER_REFUSED, client_id=join.client_id, worker=join.worker, region=join.region,
                      reason=reason)
            runner.send_message(messages.REFUSED.name, messages.wire(messages.Refused(reason)), client_id=join.client_id)
            # forget it at once: it takes no user and is not counted among the expected workers (a Locust "quit"
            # would make a master whose only connected worker it was stop the whole run)
            client = runner.clients.get(join.client_id)
            if client is not None:
                del runner.clients[join.client_id]
                if runner._users_dispatcher is not None:
                    runner._users_dispatcher.remove_worker(client)
            return
        admission.admit(join)
        names[join.client_id] = join.worker
        log.write(master_events.WORKER_ADMITTED, client_id=join.client_id, worker=join.worker, region=join.region)
        if announced:
            runner.send_message(messages.PLAN.name, announced[0], client_id=join.client_id)

    def on_chunk(msg, **_kw) -> None:
        chunk = messages.CHUNK.decode(msg.data)
        join = admission.admitted.get(chunk.client_id)
        if join is None or not shippable(chunk.name):
            log.write(master_events.CHUNK_REFUSED, client_id=chunk.client_id, name=chunk.name[:80],
                      reason="not an admitted worker" if join is None else "not a file a worker sends")
            return
        target = layout.worker(join.region, join.worker).dir / chunk.name
        try:
            if target == layout.worker(join.region, join.worker).summary or not target.exists():  # chunks: once
                write_atomic(target, chunk.data)
        except OSError as exc:
            try:
                log.write(master_events.CHUNK_NOT_WRITTEN, worker=join.worker, name=chunk.name, error=exc.strerror)
            except OSError:
                pass  # the log is on the same full disk; the orchestrator stops the run on low space
            return  # no ACK: the worker keeps it and sends it again
        runner.send_message(messages.ACK.name, messages.wire(messages.Ack(chunk.name)), client_id=chunk.client_id)

    runner.register_message(messages.JOIN.name, on_join)
    runner.register_message(messages.CHUNK.name, on_chunk)

    def on_hello(msg, **_kw) -> None:
        hello = messages.HELLO.decode(msg.data)
        names[hello.client_id] = hello.worker
        log.write(master_events.WORKER_HELLO, client_id=hello.client_id, worker=hello.worker, region=hello.region)

    expected = sum(r.workers for r in plan.profile.regions)
    finished: set[str] = set()  # workers that sent DONE (their files acknowledged) or ERROR

    def end_when_every_worker_finished(client_id: str) -> None:
        """Once every expected worker has finished, the run is over: quit now rather than at the run-time limit
        (which leaves room for the slowest drain and start-up)."""
        finished.add(client_id)
        if announced and len(admission.admitted) == expected and set(admission.admitted) <= finished:
            gevent.spawn_later(0.2, runner.quit)

    def on_done(msg, **_kw) -> None:
        done = messages.DONE.decode(msg.data)
        log.write(master_events.WORKER_DONE, client_id=done.client_id, summary=done.summary)
        end_when_every_worker_finished(done.client_id)

    def on_error(msg, **_kw) -> None:
        error = messages.ERROR.decode(msg.data)
        log.write(master_events.WORKER_ERROR, client_id=error.client_id, error=error.error)
        end_when_every_worker_finished(error.client_id)

    runner.register_message(messages.HELLO.name, on_hello)
    runner.register_message(messages.DONE.name, on_done)
    runner.register_message(messages.ERROR.name, on_error)

    @environment.events.worker_connect.add_listener
    def _joined(client_id, **_kw) -> None:
        log.write(master_events.WORKER_JOINED, client_id=client_id)

    # a worker is "missing" (and, if it was the last, Locust stops the test) after HEARTBEAT_LIVENESS silent
    # seconds: the profile's timeout, so that a blip of the control channel loses nobody
    locust_runners.HEARTBEAT_LIVENESS = max(3, math.ceil(plan.profile.generator.master_timeout_s))
    silent: dict[str, float] = {}  # client id → its last heartbeat (epoch s) while it is silent

    def watch_gaps() -> None:
        """Silent workers (no heartbeat for SILENT_S) and their return, into master-events.jsonl."""
        liveness = locust_runners.HEARTBEAT_LIVENESS
        for c in list(runner.clients.values()):
            quiet_s = liveness - c.heartbeat  # Locust counts a worker's heartbeat down once a second
            if c.id not in silent and quiet_s >= SILENT_S and c.state != "missing":
                silent[c.id] = time.time() - quiet_s
                log.write(master_events.WORKER_SILENT, client_id=c.id, worker=names.get(c.id),
                          since_ns=int(silent[c.id] * 1e9))
            elif c.id in silent and quiet_s <= 1:
                log.write(master_events.WORKER_RETURNED, client_id=c.id, worker=names.get(c.id),
                          gap_s=round(time.time() - silent.pop(c.id), 1))

    def watch_workers() -> None:
        tick = time.time()
        while True:
            now = time.time()
            if now - tick > SILENT_S:  # this loop sleeps 0.5 s: the master itself was paused
                log.write(master_events.MASTER_STALLED, since_ns=int(tick * 1e9), gap_s=round(now - tick, 1))
            tick = now
            watch_gaps()
            current = {c.id: c.state for c in runner.clients.values()}
            for cid, state in current.items():
                if seen_states.get(cid) != state and state == "missing":
                    log.write(master_events.WORKER_LEFT, client_id=cid, worker=names.get(cid), reason="heartbeat missing")
            for cid in set(seen_states) - set(current):
                if seen_states[cid] != "missing":
                    log.write(master_events.WORKER_LEFT, client_id=cid, worker=names.get(cid), reason="disconnected")
            seen_states.clear()
            seen_states.update(current)
            gevent.sleep(0.5)

    gevent.spawn(watch_workers)

    @environment.events.test_start.add_listener
    def _announce(**_kw) -> None:
        offset = 0
        for server in plan.ntp_servers:
            try:
                offset = measure_offset(server, WorkerClock(0), 4).offset_ns
                break
            except OSError:
                continue
        start_ref_ns = time.time_ns() + offset + int(plan.lead_s * 1e9)
        log.write(master_events.PLAN_SENT, start_ref_ns=start_ref_ns, master_offset_ns=offset,
                  workers=sorted(j.worker for j in admission.admitted.values()))
        payload = messages.wire(messages.Plan(plan.model_dump(mode="json"), start_ref_ns))
        announced.append(payload)
        # to the admitted workers only; again shortly after, for one whose JOIN is still on its way
        for _ in range(3):
            for client_id in list(admission.admitted):
                runner.send_message(messages.PLAN.name, payload, client_id=client_id)
            gevent.sleep(0.5)


def _on_plan(environment, msg, **_kw) -> None:
    _state.inbox.offer(msg.data)


def _on_refused(environment, msg, **_kw) -> None:
    refused = messages.REFUSED.decode(msg.data)
    print(f"tailrace worker: the master refused this worker: {refused.reason}", file=sys.stderr, flush=True)
    gevent.spawn_later(0.2, os._exit, USAGE)  # the master has dropped it; nothing here will run


def _on_ack(environment, msg, **_kw) -> None:
    ack = messages.ACK.decode(msg.data)
    if _state.run is not None and _state.run.uplink is not None:
        _state.run.uplink.ack(ack.name)


# A worker stops after this long without a heartbeat (generator.master_timeout_s; Locust's own default, 60 s); the
# master answers every heartbeat within ~1 s, so SILENT_S without one is a gap in the control channel.
DEFAULT_MASTER_TIMEOUT_S = 30.0
SILENT_S = 3.0
locust_runners.MASTER_HEARTBEAT_TIMEOUT = DEFAULT_MASTER_TIMEOUT_S


def _master_lost(runner) -> bool:
    last = getattr(runner, "last_heartbeat_timestamp", None)
    return bool(last) and time.time() - last > locust_runners.MASTER_HEARTBEAT_TIMEOUT - 1


@events.test_stopping.add_listener
def _on_test_stopping(environment, **_kw) -> None:
    if isinstance(environment.runner, WorkerRunner):  # the master stopped the test: the end, early or on time
        _state.quitting = True


@events.quitting.add_listener
def _on_quitting(environment, **_kw) -> None:
    _state.quitting = True
    if _state.run is not None:  # close files even if the user greenlet was killed
        _state.run.finish(master_lost=_master_lost(environment.runner))


def _send(runner, message: messages.Message, payload) -> None:
    if isinstance(runner, WorkerRunner):
        runner.send_message(message.name, messages.wire(payload))


class OpenLoopUser(User):
    """Runs this worker's whole open-loop schedule once, then stops."""

    fixed_count = 0

    @task
    def run_schedule(self) -> None:
        runner = self.environment.runner
        if _state.run is not None or _state.claimed:
            # Locust rebalances a lost worker's user onto the survivors: one schedule per worker, never two
            raise StopUser()
        _state.claimed = True
        client_id = getattr(runner, "client_id", "")
        message = _state.inbox.wait(timeout_s=60)
        if message is None:
            raise RuntimeError(f"no {messages.PLAN.name} message from the master within 60 s")
        identity = WorkerIdentity.from_env()
        try:
            plan = RunPlan.from_dict(message.plan, f"{messages.PLAN.name} message")
            ship = None
            if identity.spool:
                def ship(name: str, data: bytes) -> None:
                    _send(runner, messages.CHUNK, messages.Chunk(client_id, name, data))
            locust_runners.MASTER_HEARTBEAT_TIMEOUT = master_timeout_s(identity, plan)
            run = WorkerRun(identity, plan, message.start_ref_ns, client_id, ship=ship)
        except Exception as exc:
            _send(runner, messages.ERROR, messages.Error(client_id, str(exc)))
            print(f"tailrace worker {identity.name}: {exc}", flush=True)
            raise StopUser() from exc
        _state.run = run
        _send(runner, messages.HELLO, messages.Hello(client_id, identity.name, identity.region))
        run.run()
        _send(runner, messages.DONE, messages.Done(client_id, run.summary()))
        raise StopUser()
