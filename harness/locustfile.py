"""The Locust side of tailrace: one open-loop user per worker, plan and status messages.

Master: announces the plan (run id, resolved profile, start instant in reference time) at test start,
records which workers joined and left, and collects their summaries (run_dir/master-events.jsonl).
Worker: runs harness.worker_runtime.WorkerRun inside its single user.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from grpc.experimental import gevent as grpc_gevent

grpc_gevent.init_gevent()  # before any gRPC call, or every greenlet blocks

import sys  # noqa: E402

# The chunk writer's native thread holds the GIL in short Python stretches; with the default 5 ms switch
# interval the sending hub could wait that long for it. 0.2 ms bounds that wait far below the send-lag budget.
sys.setswitchinterval(0.0002)

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402
from locust import User, events, task  # noqa: E402
from locust.exception import StopUser  # noqa: E402
from locust.runners import MasterRunner, WorkerRunner  # noqa: E402

from harness.worker_runtime import WorkerIdentity, WorkerRun  # noqa: E402  (imported before the plan arrives)

_state: dict = {"plan": None, "run": None, "plan_event": Event()}


def _master_config() -> dict:
    path = os.environ.get("TAILRACE_MASTER_CONFIG")
    if not path:
        raise RuntimeError("TAILRACE_MASTER_CONFIG is not set (start the master with `tailrace master` or `run`)")
    return json.loads(Path(path).read_text())


class _MasterLog:
    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "master-events.jsonl"
        run_dir.mkdir(parents=True, exist_ok=True)

    def write(self, event: str, **data) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps({"event": event, "t_ns": time.time_ns(), **data}) + "\n")


@events.init.add_listener
def _on_init(environment, **_kwargs) -> None:
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        _init_master(environment)
    elif isinstance(runner, WorkerRunner):
        runner.register_message("tailrace_plan", _on_plan)


def _init_master(environment) -> None:
    cfg = _master_config()
    log = _MasterLog(Path(cfg["run_dir"]))
    runner = environment.runner
    names: dict[str, str] = {}
    seen_states: dict[str, str] = {}

    def on_hello(msg, **_kw) -> None:
        names[msg.data["client_id"]] = msg.data["worker"]
        log.write("worker_hello", client_id=msg.data["client_id"], worker=msg.data["worker"],
                  region=msg.data["region"])

    def on_done(msg, **_kw) -> None:
        log.write("worker_done", client_id=msg.data.get("client_id"), summary=msg.data)

    def on_error(msg, **_kw) -> None:
        log.write("worker_error", client_id=msg.data.get("client_id"), error=msg.data.get("error"))

    runner.register_message("tailrace_hello", on_hello)
    runner.register_message("tailrace_done", on_done)
    runner.register_message("tailrace_error", on_error)

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
        from harness.clock import WorkerClock, measure_offset

        offset = 0
        for server in cfg["ntp_servers"]:
            try:
                offset = measure_offset(server, WorkerClock(0), 4).offset_ns
                break
            except OSError:
                continue
        start_ref_ns = time.time_ns() + offset + int(cfg["lead_s"] * 1e9)
        plan = {k: cfg[k] for k in ("run_id", "profile", "run_dir", "ntp_servers", "models_dir")}
        plan["start_ref_ns"] = start_ref_ns
        log.write("plan_sent", start_ref_ns=start_ref_ns, master_offset_ns=offset)
        # workers may still be registering: send again shortly after (a worker keeps the first plan)
        for _ in range(3):
            runner.send_message("tailrace_plan", plan)
            gevent.sleep(0.5)


def _on_plan(environment, msg, **_kw) -> None:
    if _state["plan"] is None:
        _state["plan"] = msg.data
        _state["plan_event"].set()


@events.quitting.add_listener
def _on_quitting(environment, **_kw) -> None:
    run = _state.get("run")
    if run is not None:
        run.finish()  # close files even if the user greenlet was killed


class OpenLoopUser(User):
    """Runs this worker's whole open-loop schedule once, then stops."""

    fixed_count = 0

    @task
    def run_schedule(self) -> None:
        runner = self.environment.runner
        if _state["run"] is not None or _state.get("claimed"):
            # Locust rebalances a lost worker's user onto the survivors: one schedule per worker, never two
            raise StopUser()
        _state["claimed"] = True
        client_id = getattr(runner, "client_id", "")
        if not _state["plan_event"].wait(timeout=60):
            raise RuntimeError("no tailrace_plan message from the master within 60 s")
        identity = WorkerIdentity.from_env()
        try:
            run = WorkerRun(identity, _state["plan"], client_id)
        except Exception as exc:
            if isinstance(runner, WorkerRunner):
                runner.send_message("tailrace_error", {"client_id": client_id, "error": str(exc)})
            print(f"tailrace worker {identity.name}: {exc}", flush=True)
            raise StopUser() from exc
        _state["run"] = run
        if isinstance(runner, WorkerRunner):
            runner.send_message("tailrace_hello", {"client_id": client_id, "worker": identity.name,
                                                   "region": identity.region})
        run.run()
        if isinstance(runner, WorkerRunner):
            runner.send_message("tailrace_done", {"client_id": client_id, **run.summary()})
        raise StopUser()
