"""The Locust side of tailrace: one user per worker, and the messages of contract/messages.py.

Master: reads the run plan (plan.json, named by $TAILRACE_PLAN), announces it with the start instant in
reference time at test start, and records which workers joined, said hello, finished and left
(master-events.jsonl). Worker: runs harness/worker/run.py's WorkerRun inside its single user.
"""
from __future__ import annotations

import json
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
from locust.exception import StopUser  # noqa: E402
from locust.runners import MasterRunner, WorkerRunner  # noqa: E402

from contract import messages  # noqa: E402
from contract.layout import RunLayout, append_line  # noqa: E402
from contract.plan import RunPlan  # noqa: E402
from harness.worker.clock import WorkerClock, measure_offset  # noqa: E402
from harness.worker.identity import WorkerIdentity  # noqa: E402
from harness.worker.plan_inbox import PlanInbox  # noqa: E402
from harness.worker.run import WorkerRun  # noqa: E402  (imported before the plan arrives)

PLAN_ENV = "TAILRACE_PLAN"


@dataclass
class _WorkerState:
    """This worker process's one run: the plan message once it arrives, and the run once it starts."""

    inbox: PlanInbox = field(default_factory=PlanInbox)
    run: WorkerRun | None = None
    claimed: bool = False


_state = _WorkerState()


def _master_plan() -> RunPlan:
    path = os.environ.get(PLAN_ENV)
    if not path:
        raise RuntimeError(f"{PLAN_ENV} is not set (start the master with `tailrace master` or `tailrace run`)")
    return RunPlan.read(path)


class _MasterLog:
    """master-events.jsonl: one JSON object per event, appended (a killed master leaves at most a torn line)."""

    def __init__(self, layout: RunLayout) -> None:
        self.path = layout.master_events
        layout.root.mkdir(parents=True, exist_ok=True)

    def write(self, event: str, **data) -> None:
        append_line(self.path, json.dumps({"event": event, "t_ns": time.time_ns(), **data}))


@events.init.add_listener
def _on_init(environment, **_kwargs) -> None:
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        _init_master(environment)
    elif isinstance(runner, WorkerRunner):
        runner.register_message(messages.PLAN.name, _on_plan)


def _init_master(environment) -> None:
    plan = _master_plan()
    log = _MasterLog(RunLayout(Path(plan.run_dir)))
    runner = environment.runner
    names: dict[str, str] = {}
    seen_states: dict[str, str] = {}

    def on_hello(msg, **_kw) -> None:
        hello = messages.HELLO.decode(msg.data)
        names[hello.client_id] = hello.worker
        log.write("worker_hello", client_id=hello.client_id, worker=hello.worker, region=hello.region)

    def on_done(msg, **_kw) -> None:
        done = messages.DONE.decode(msg.data)
        log.write("worker_done", client_id=done.client_id, summary=done.summary)

    def on_error(msg, **_kw) -> None:
        error = messages.ERROR.decode(msg.data)
        log.write("worker_error", client_id=error.client_id, error=error.error)

    runner.register_message(messages.HELLO.name, on_hello)
    runner.register_message(messages.DONE.name, on_done)
    runner.register_message(messages.ERROR.name, on_error)

    @environment.events.worker_connect.add_listener
    def _joined(client_id, **_kw) -> None:
        log.write("worker_joined", client_id=client_id)

    def watch_workers() -> None:
        while True:
            current = {c.id: c.state for c in runner.clients.values()}
            for cid, state in current.items():
                if seen_states.get(cid) != state and state == "missing":
                    log.write("worker_left", client_id=cid, worker=names.get(cid), reason="heartbeat missing")
            for cid in set(seen_states) - set(current):
                if seen_states[cid] != "missing":
                    log.write("worker_left", client_id=cid, worker=names.get(cid), reason="disconnected")
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
        log.write("plan_sent", start_ref_ns=start_ref_ns, master_offset_ns=offset)
        payload = messages.wire(messages.Plan(plan.model_dump(mode="json"), start_ref_ns))
        # workers may still be registering: send again shortly after (a worker keeps the first plan)
        for _ in range(3):
            runner.send_message(messages.PLAN.name, payload)
            gevent.sleep(0.5)


def _on_plan(environment, msg, **_kw) -> None:
    _state.inbox.offer(msg.data)


@events.quitting.add_listener
def _on_quitting(environment, **_kw) -> None:
    if _state.run is not None:
        _state.run.finish()  # close files even if the user greenlet was killed


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
            run = WorkerRun(identity, plan, message.start_ref_ns, client_id)
        except Exception as exc:
            _send(runner, messages.ERROR, messages.Error(client_id, str(exc)))
            print(f"tailrace worker {identity.name}: {exc}", flush=True)
            raise StopUser() from exc
        _state.run = run
        _send(runner, messages.HELLO, messages.Hello(client_id, identity.name, identity.region))
        run.run()
        _send(runner, messages.DONE, messages.Done(client_id, run.summary()))
        raise StopUser()
