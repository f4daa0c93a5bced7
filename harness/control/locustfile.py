"""The Locust side of tailrace: one user per worker, and the messages of contract/messages.py.

Master: reads the run plan (plan.json, named by $TAILRACE_PLAN) and hands the control channel to
harness/control/master_control.py's MasterControl. Worker: proves the run's token as it connects, runs
harness/worker/run.py's WorkerRun inside its single user, watches the master's heartbeats, and (remote workers)
sends its closed files through harness/spool/uplink.py. What this reaches into Locust for is in
harness/control/locust_adaptations.py.
"""
from __future__ import annotations

import importlib.abc
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

# The chunk writer's native thread holds the GIL in short Python stretches; with the default 5 ms switch
# interval the sending hub could wait that long for it. 0.2 ms bounds that wait far below the send-lag budget.
sys.setswitchinterval(0.0002)

import gevent  # noqa: E402
from locust import User, events, task  # noqa: E402
from locust.exception import StopUser  # noqa: E402
from locust.runners import MasterRunner, WorkerRunner  # noqa: E402

from tailrace.contract import messages  # noqa: E402
from tailrace.contract.exit_codes import USAGE, WORKER_MASTER_LOST  # noqa: E402
from tailrace.contract.plan import RunPlan  # noqa: E402
from tailrace.harness.control.admission import token_proof  # noqa: E402
from tailrace.harness.control.locust_adaptations import (  # noqa: E402
    DEFAULT_MASTER_TIMEOUT_S,
    adapt_locust,
    last_master_heartbeat,
    master_lost,
    master_timeout,
    set_master_timeout,
)
from tailrace.harness.control.master_control import SILENT_S, MasterControl  # noqa: E402
from tailrace.harness.control.plan_inbox import PlanInbox, StartInbox  # noqa: E402
from tailrace.harness.worker.identity import PLAN_ENV, TOKEN_ENV, WorkerIdentity  # noqa: E402

if TYPE_CHECKING:
    from tailrace.harness.worker.run import WorkerRun

adapt_locust()


@dataclass
class _WorkerState:
    """This worker process's one run: the plan message once it arrives, and the run once it starts."""

    inbox: PlanInbox = field(default_factory=PlanInbox)
    start: StartInbox = field(default_factory=StartInbox)
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
        MasterControl(environment, _master_plan(), os.environ.get(TOKEN_ENV, ""))
    elif isinstance(runner, WorkerRunner):
        # A worker's only (the master's start-up is ~0.4 s of CPU shorter without them): gRPC on gevent, before any
        # gRPC call or every greenlet blocks; the run's modules, before the plan arrives.
        from grpc.experimental import gevent as grpc_gevent

        grpc_gevent.init_gevent()
        import tailrace.harness.worker.run  # noqa: F401
        runner.register_message(messages.PLAN.name, _on_plan)
        runner.register_message(messages.START.name, _on_start)
        runner.register_message(messages.REFUSED.name, _on_refused)
        runner.register_message(messages.ACK.name, _on_ack)
        try:
            identity = WorkerIdentity.from_env()
        except RuntimeError as exc:
            print(f"tailrace worker: {exc}", file=sys.stderr, flush=True)
            os._exit(USAGE)
        set_master_timeout(master_timeout_s(identity))
        sys.meta_path.insert(0, _WithoutPandas())
        _send(runner, messages.JOIN, messages.Join(runner.client_id, identity.name, identity.region, identity.index,
                                                   token_proof(os.environ.get(TOKEN_ENV, ""), runner.client_id)))
        gevent.spawn(_watch_master, runner)
        gevent.spawn(_warm_up)


class _WithoutPandas(importlib.abc.MetaPathFinder):
    """A worker never uses pandas, but pyarrow imports it the first time it converts a Python list, only to ask
    whether the list is a pandas object: ~0.8 s of CPU per worker, while a run's processes start together on few
    cores. In a worker process that import fails, and pyarrow goes on without pandas."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            raise ModuleNotFoundError("a tailrace worker does not use pandas", name=name)
        return None


def _warm_up() -> None:
    """What every run's first chunk would pay once per process (pyarrow's first string conversion, ~0.3 s), paid
    while the worker waits for the master's plan rather than between the plan and the start."""
    import pyarrow as pa

    pa.array(["warm-up"] * 2, type=pa.string())


def _watch_master(runner) -> None:
    """The control channel, watched: a master silent for SILENT_S is a gap — the schedule goes on, the spool keeps
    every chunk and the uplink re-sends what is unacknowledged once it is back — recorded with when it began and
    ended. A master silent for the whole timeout is gone: close this worker's files (its spool keeps them for
    `tailrace collect`) and end the process, so nothing is sent to a run nobody records."""
    silent_since: float | None = None
    while True:
        gevent.sleep(0.5)
        last = last_master_heartbeat(runner)
        if last is None:
            continue
        now = time.time()
        if silent_since is None and now - last > SILENT_S:
            silent_since = last
            print(f"tailrace worker: no heartbeat from the master for {now - last:.0f} s; the schedule goes on (it "
                  f"stops after {master_timeout():g} s)", file=sys.stderr, flush=True)
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
        if master_lost(runner):
            print("tailrace worker: master lost (no heartbeat for "
                  f"{master_timeout():g} s); stopping", file=sys.stderr, flush=True)
            if _state.run is not None:
                _state.run.control_gaps = [*_state.gaps, (silent_since or last, None)]
                _state.run.finish(master_lost=True)
            os._exit(WORKER_MASTER_LOST)


def master_timeout_s(identity: WorkerIdentity | None, plan: RunPlan | None = None) -> float:
    """How long a silent master is waited for: `tailrace worker --master-timeout-s`, else the profile's."""
    if identity is not None and identity.master_timeout_s:
        return identity.master_timeout_s
    return plan.profile.generator.master_timeout_s if plan is not None else DEFAULT_MASTER_TIMEOUT_S



def _on_plan(environment, msg, **_kw) -> None:
    _state.inbox.offer(msg.data)


def _on_start(environment, msg, **_kw) -> None:
    _state.start.offer(msg.data)


def _on_refused(environment, msg, **_kw) -> None:
    refused = messages.REFUSED.decode(msg.data)
    print(f"tailrace worker: the master refused this worker: {refused.reason}", file=sys.stderr, flush=True)
    gevent.spawn_later(0.2, os._exit, USAGE)  # the master has dropped it; nothing here will run


def _on_ack(environment, msg, **_kw) -> None:
    ack = messages.ACK.decode(msg.data)
    if _state.run is not None and _state.run.uplink is not None:
        _state.run.uplink.ack(ack.name)


@events.test_stopping.add_listener
def _on_test_stopping(environment, **_kw) -> None:
    if isinstance(environment.runner, WorkerRunner):  # the master stopped the test: the end, early or on time
        _state.quitting = True
        if _state.run is not None:  # stopped early (Ctrl-C, the live page): send nothing more, keep every row
            _state.run.stop_issuing()


@events.quitting.add_listener
def _on_quitting(environment, **_kw) -> None:
    _state.quitting = True
    if _state.run is not None:  # close files even if the user greenlet was killed
        _state.run.finish(master_lost=master_lost(environment.runner))


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
            set_master_timeout(master_timeout_s(identity, plan))
            def ready(timeout_s: float) -> int | None:
                """READY to the master; the START's instant if it comes within `timeout_s`."""
                _send(runner, messages.READY, messages.Ready(client_id))
                return _state.start.wait(timeout_s)

            def live(digest: dict) -> None:
                _send(runner, messages.LIVE, messages.Live(client_id, identity.name, identity.region, digest))

            from tailrace.harness.worker.run import WorkerRun

            run = WorkerRun(identity, plan, message.start_ref_ns, client_id, ship=ship, ready=ready, live=live)
        except Exception as exc:
            _send(runner, messages.ERROR, messages.Error(client_id, str(exc)))
            print(f"tailrace worker {identity.name}: {exc}", flush=True)
            raise StopUser() from exc
        _state.run = run
        _send(runner, messages.HELLO, messages.Hello(client_id, identity.name, identity.region))
        run.run()
        _send(runner, messages.DONE, messages.Done(client_id, run.summary()))
        raise StopUser()
