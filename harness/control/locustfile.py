"""The Locust side of tailrace: one user per worker, and the messages of contract/messages.py.

Master: reads the run plan (plan.json, named by $TAILRACE_PLAN) and hands the control channel to
harness/control/master_control.py's MasterControl. Worker: hands it to harness/control/worker_control.py's
WorkerControl, which proves the run's token as it connects, runs harness/worker/run.py's WorkerRun inside the
worker's single user, watches the master's heartbeats, and (remote workers) sends its closed files through
harness/spool/uplink.py. What this reaches into Locust for is in harness/control/locust_adaptations.py.
"""
from __future__ import annotations

import importlib.abc
import os
import sys

# The chunk writer's native thread holds the GIL in short Python stretches; with the default 5 ms switch
# interval the sending hub could wait that long for it. 0.2 ms bounds that wait far below the send-lag budget.
sys.setswitchinterval(0.0002)

import gevent  # noqa: E402
from locust import User, events, task  # noqa: E402
from locust.runners import MasterRunner, WorkerRunner  # noqa: E402

from tailrace.contract.exit_codes import USAGE  # noqa: E402
from tailrace.contract.plan import RunPlan  # noqa: E402
from tailrace.harness.control.locust_adaptations import adapt_locust  # noqa: E402
from tailrace.harness.control.master_control import MasterControl  # noqa: E402
from tailrace.harness.control.worker_control import WorkerControl  # noqa: E402
from tailrace.harness.worker.identity import PLAN_ENV, TOKEN_ENV, WorkerIdentity  # noqa: E402

adapt_locust()


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
        try:
            identity = WorkerIdentity.from_env()
        except RuntimeError as exc:
            print(f"tailrace worker: {exc}", file=sys.stderr, flush=True)
            os._exit(USAGE)
        sys.meta_path.insert(0, _WithoutPandas())
        WorkerControl.attach(environment, identity, os.environ.get(TOKEN_ENV, ""))
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


class OpenLoopUser(User):
    """Runs this worker's whole open-loop schedule once, then stops."""

    fixed_count = 0

    @task
    def run_schedule(self) -> None:
        WorkerControl.of(self.environment).serve()
