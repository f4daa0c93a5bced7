"""A worker process's inbox for the master's plan and start messages: the first of each is kept (the master
sends them a few times), later ones are ignored; the worker's user waits on the plan, its run on the start."""
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


@dataclass
class StartInbox:
    """The master's START: every worker is ready, start at this (earlier) instant."""

    start_ref_ns: int | None = None
    arrived: Event = field(default_factory=Event)

    def offer(self, data: dict) -> None:
        if self.start_ref_ns is None:
            self.start_ref_ns = messages.START.decode(data).start_ref_ns
            self.arrived.set()

    def wait(self, timeout_s: float) -> int | None:
        """The START's instant, or None when none came within `timeout_s`."""
        self.arrived.wait(timeout=max(0.0, timeout_s))
        return self.start_ref_ns
