"""A worker process's inbox for the master's plan message: the first plan is kept (the master sends it a few
times while workers register), later ones are ignored, and the worker's user waits on it."""
from __future__ import annotations

from dataclasses import dataclass, field

from gevent.event import Event

from tailrace.contract import messages


@dataclass
class PlanInbox:
    plan: messages.Plan | None = None
    arrived: Event = field(default_factory=Event)

    def offer(self, data: dict) -> None:
        """A plan message's payload; only the first one counts."""
        if self.plan is None:
            self.plan = messages.PLAN.decode(data)
            self.arrived.set()

    def wait(self, timeout_s: float) -> messages.Plan | None:
        self.arrived.wait(timeout=timeout_s)
        return self.plan
