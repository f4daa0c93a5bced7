"""The catalogue of master ↔ worker messages (after Locust's `Events` catalogue and `register_message`):
each message declared once, with its name, direction and payload type. Senders build the payload type and
send `payload.wire()`; receivers call `MESSAGE.decode(data)`, so a misspelt or missing key fails loudly.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar

P = TypeVar("P")

# The control channel's version: raised whenever a message changes so that the other side would misread it. A worker
# speaking another version is refused at its JOIN, before it is given a place.
PROTOCOL_VERSION = 3


@dataclass(frozen=True)
class Plan:
    """master → workers, at test start: the resolved run plan and the start instant (reference clock)."""

    plan: dict[str, Any]  # contract.plan.RunPlan as JSON
    start_ref_ns: int


@dataclass(frozen=True)
class Hello:
    """worker → master, when the worker has its plan and is ready: which worker and region it is, and the port its
    Prometheus metrics are served on (None: none; a local run's workers each take a free one as they start)."""

    client_id: str
    worker: str
    region: str
    metrics_port: int | None = None


@dataclass(frozen=True)
class Ready:
    """worker → master, when it has done everything before the start (schedule built, connections open, clock
    sampled) and only waits for the start instant."""

    client_id: str


@dataclass(frozen=True)
class Start:
    """master → workers, once every expected worker is READY: start at this instant (reference clock) — earlier
    than the plan's, which stays the start of a worker this never reaches."""

    start_ref_ns: int


@dataclass(frozen=True)
class Done:
    """worker → master, after its schedule: the worker's summary (worker.json)."""

    client_id: str
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Error:
    """worker → master, when the worker cannot run the plan (bad settings, missing data)."""

    client_id: str
    error: str


@dataclass(frozen=True)
class Live:
    """worker → master, once a second while it runs: what it did since its last LIVE (harness/worker/live_report.py:
    per endpoint the arrivals asked, the requests done by status and stream outcome, log-bucketed histograms of
    latency, send lag, TTFT, TPOT and ITL, output tokens; its clock offset, send-lag window state, sessions in
    flight). The master adds them up for the live page (harness/control/live_board.py)."""

    client_id: str
    worker: str
    region: str
    digest: dict[str, Any]


@dataclass(frozen=True)
class Join:
    """worker → master, as soon as it connects: who it is, and proof of the run's token (an HMAC of its client
    id under the token: the token itself never travels). The master admits it or refuses it (REFUSED)."""

    client_id: str
    worker: str
    region: str
    index: int
    proof: str
    protocol: int = 1  # PROTOCOL_VERSION of the worker's tailrace (1: before JOIN carried it)
    version: str = ""  # the worker's tailrace release, for the refusal's words


@dataclass(frozen=True)
class Refused:
    """master → one worker: why it may not take part (wrong token, unknown region, a duplicate); it exits."""

    reason: str


@dataclass(frozen=True)
class Chunk:
    """worker → master: one closed file of its run directory (a request or clock chunk, worker.json), by name
    within its own directory; the master writes it once (idempotent) and answers ACK."""

    client_id: str
    name: str
    data: bytes


@dataclass(frozen=True)
class Ack:
    """master → one worker: this file is in the run directory; the worker may stop re-sending it."""

    name: str


@dataclass(frozen=True)
class Message(Generic[P]):
    """One message type: its Locust name, who sends it, and its payload."""

    name: str
    direction: str
    payload: type[P]

    def decode(self, data: dict) -> P:
        return self.payload(**data)


def wire(payload: Any) -> dict:
    """A payload as the mapping Locust's channel carries: its fields as they are (plain data; no deep copy — a
    LIVE digest's histograms cost ~2 ms to copy, on the worker's sending loop)."""
    return {f.name: getattr(payload, f.name) for f in fields(payload)}


PLAN = Message("tailrace_plan", "master → workers", Plan)
HELLO = Message("tailrace_hello", "worker → master", Hello)
READY = Message("tailrace_ready", "worker → master", Ready)
START = Message("tailrace_start", "master → workers", Start)
DONE = Message("tailrace_done", "worker → master", Done)
ERROR = Message("tailrace_error", "worker → master", Error)
LIVE = Message("tailrace_live", "worker → master", Live)

JOIN = Message("tailrace_join", "worker → master", Join)
REFUSED = Message("tailrace_refused", "master → one worker", Refused)
CHUNK = Message("tailrace_chunk", "worker → master", Chunk)
ACK = Message("tailrace_ack", "master → one worker", Ack)

CATALOGUE = (PLAN, HELLO, READY, START, DONE, ERROR, LIVE, JOIN, REFUSED, CHUNK, ACK)
