"""One run's control channel at a worker (the mirror of harness/control/master_control.py's MasterControl): the token
proof it joins with, the master's messages (PLAN, START, REFUSED, ACK), the run once its plan is in, the master's
heartbeats watched, and the run's end — on time, stopped early, or with the master gone."""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

import gevent
from locust.exception import StopUser

from tailrace.contract import messages
from tailrace.contract.exit_codes import USAGE, WORKER_MASTER_LOST
from tailrace.contract.plan import RunPlan
from tailrace.harness.control.admission import token_proof
from tailrace.harness.control.locust_adaptations import (
    DEFAULT_MASTER_TIMEOUT_S,
    last_master_heartbeat,
    master_lost,
    master_timeout,
    set_master_timeout,
)
from tailrace.harness.control.master_control import SILENT_S
from tailrace.harness.control.plan_inbox import PlanInbox, StartInbox
from tailrace.harness.worker.identity import WorkerIdentity

if TYPE_CHECKING:
    from tailrace.harness.worker.run import WorkerRun

PLAN_WAIT_S = 60.0  # how long a worker's user waits for the master's plan
WATCH_S = 0.5  # how often the master's heartbeats are looked at


def tailrace_release() -> str:
    """This tailrace's release (for a refusal's words), '' where it is not installed as a package."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tailrace")
    except PackageNotFoundError:
        return ""


def master_timeout_s(identity: WorkerIdentity | None, plan: RunPlan | None = None) -> float:
    """How long a silent master is waited for: `tailrace worker --master-timeout-s`, else the profile's."""
    if identity is not None and identity.master_timeout_s:
        return identity.master_timeout_s
    return plan.profile.generator.master_timeout_s if plan is not None else DEFAULT_MASTER_TIMEOUT_S


class WorkerControl:
    """One Locust worker process's one run. `WorkerControl.attach` makes it when Locust starts the worker;
    the worker's single user runs the schedule through `serve`."""

    def __init__(self, environment, identity: WorkerIdentity, token: str) -> None:
        self.environment, self.runner, self.identity = environment, environment.runner, identity
        self.client_id: str = getattr(self.runner, "client_id", "")
        self.inbox, self.start = PlanInbox(), StartInbox()
        self.run: WorkerRun | None = None
        self.claimed = False  # a user has taken the schedule (Locust may hand a lost worker's user to this one)
        self.gaps: list[tuple[float, float]] = []  # the master's silences: (last heartbeat before, first after), s
        self.quitting = False  # Locust is quitting (the master ended the run): only the final drain is left
        set_master_timeout(master_timeout_s(identity))
        runner = self.runner
        # (Locust calls a message's listener with keywords: environment=, msg=)
        runner.register_message(messages.PLAN.name, lambda msg, **_kw: self.inbox.offer(msg.data))
        runner.register_message(messages.START.name, lambda msg, **_kw: self.start.offer(msg.data))
        runner.register_message(messages.REFUSED.name, self._on_refused)
        runner.register_message(messages.ACK.name, self._on_ack)
        environment.events.test_stopping.add_listener(self._on_test_stopping)
        environment.events.quitting.add_listener(self._on_quitting)
        self.send(messages.JOIN, messages.Join(self.client_id, identity.name, identity.region, identity.index,
                                               token_proof(token, self.client_id), messages.PROTOCOL_VERSION,
                                               tailrace_release()))
        gevent.spawn(self._watch_master)

    @classmethod
    def attach(cls, environment, identity: WorkerIdentity, token: str) -> WorkerControl:
        """The worker's control, made once and kept on its Locust environment (where its user finds it)."""
        control = environment.tailrace_worker = cls(environment, identity, token)
        return control

    @staticmethod
    def of(environment) -> WorkerControl:
        return environment.tailrace_worker

    def send(self, message: messages.Message, payload) -> None:
        self.runner.send_message(message.name, messages.wire(payload))

    # -- the schedule ---------------------------------------------------------------------------------
    def serve(self) -> None:
        """This worker's whole schedule, once: wait for the plan, build the run, run it, report DONE. Raises
        StopUser when done, and for a second user (Locust rebalances a lost worker's user onto the survivors)."""
        if self.run is not None or self.claimed:
            raise StopUser()
        self.claimed = True
        message = self.inbox.wait(timeout_s=PLAN_WAIT_S)
        if message is None:
            raise RuntimeError(f"no {messages.PLAN.name} message from the master within {PLAN_WAIT_S:g} s")
        identity = self.identity
        try:
            plan = RunPlan.from_dict(message.plan, f"{messages.PLAN.name} message")
            set_master_timeout(master_timeout_s(identity, plan))
            from tailrace.harness.worker.run import WorkerRun

            run = WorkerRun(identity, plan, message.start_ref_ns, self.client_id,
                            ship=self._ship if identity.spool else None, ready=self._ready, live=self._live)
        except Exception as exc:
            self.send(messages.ERROR, messages.Error(self.client_id, str(exc)))
            print(f"tailrace worker {identity.name}: {exc}", flush=True)
            raise StopUser() from exc
        self.run = run
        self.send(messages.HELLO, messages.Hello(self.client_id, identity.name, identity.region,
                                                 run.path.metrics.port))
        run.run()
        self.send(messages.DONE, messages.Done(self.client_id, run.summary()))
        raise StopUser()

    def _ship(self, name: str, data: bytes) -> None:
        """A closed file to the master (a worker on its own host: harness/spool/uplink.py)."""
        self.send(messages.CHUNK, messages.Chunk(self.client_id, name, data))

    def _ready(self, timeout_s: float) -> int | None:
        """READY to the master; the START's instant if it comes within `timeout_s`."""
        self.send(messages.READY, messages.Ready(self.client_id))
        return self.start.wait(timeout_s)

    def _live(self, digest: dict) -> None:
        self.send(messages.LIVE, messages.Live(self.client_id, self.identity.name, self.identity.region, digest))

    # -- the master's messages and Locust's events ----------------------------------------------------
    def _on_refused(self, msg, **_kw) -> None:
        refused = messages.REFUSED.decode(msg.data)
        print(f"tailrace worker: the master refused this worker: {refused.reason}", file=sys.stderr, flush=True)
        gevent.spawn_later(0.2, os._exit, USAGE)  # the master has dropped it; nothing here will run

    def _on_ack(self, msg, **_kw) -> None:
        ack = messages.ACK.decode(msg.data)
        if self.run is not None and self.run.uplink is not None:
            self.run.uplink.ack(ack.name)

    def _on_test_stopping(self, **_kw) -> None:
        """The master stopped the test: the end, early or on time."""
        self.quitting = True
        if self.run is not None:  # stopped early (Ctrl-C, the live page): send nothing more, keep every row
            self.run.stop_issuing()

    def _on_quitting(self, **_kw) -> None:
        self.quitting = True
        if self.run is not None:  # close files even if the user greenlet was killed
            self.run.finish(master_lost=master_lost(self.runner))

    # -- the master's heartbeats ----------------------------------------------------------------------
    def _watch_master(self) -> None:
        """The control channel, watched: a master silent for SILENT_S is a gap — the schedule goes on, the spool
        keeps every chunk and the uplink re-sends what is unacknowledged once it is back — recorded with when it
        began and ended. A master silent for the whole timeout is gone: close this worker's files (its spool keeps
        them for `tailrace collect`) and end the process, so nothing is sent to a run nobody records."""
        silent_since: float | None = None
        while True:
            gevent.sleep(WATCH_S)
            last = last_master_heartbeat(self.runner)
            if last is None:
                continue
            now = time.time()
            if silent_since is None and now - last > SILENT_S:
                silent_since = last
                _say(f"no heartbeat from the master for {now - last:.0f} s; the schedule goes on (it stops after "
                     f"{master_timeout():g} s)")
            elif silent_since is not None and now - last <= SILENT_S:
                self.gaps.append((silent_since, last))
                _say(f"the master is back after {last - silent_since:.1f} s")
                if self.run is not None:
                    self.run.control_gaps = list(self.gaps)
                silent_since = None
            if self.quitting and silent_since is not None:  # the master ended the run and is gone: waiting is moot
                _say("the master ended the run and went silent; what it did not acknowledge stays in the spool "
                     "(tailrace collect)")
                if self.run is not None and self.run.finishing is False:
                    self.run.finish(master_lost=True)
                os._exit(WORKER_MASTER_LOST)
            if master_lost(self.runner):
                _say(f"master lost (no heartbeat for {master_timeout():g} s); stopping")
                if self.run is not None:
                    self.run.control_gaps = [*self.gaps, (silent_since or last, None)]
                    self.run.finish(master_lost=True)
                os._exit(WORKER_MASTER_LOST)


def _say(message: str) -> None:
    print(f"tailrace worker: {message}", file=sys.stderr, flush=True)
