"""The catalogue of master-events.jsonl (after Locust's `Events` catalogue): every event the Locust master
records about its workers, declared once with the fields it carries. The master writes them through
`MasterEventLog.write(EVENT, …)` (a missing or unknown field fails at once); the orchestration and the manifest
read them back with `read_master_events` and pick them out with `EVENT.among(events)` / `EVENT.first(events)`.
Each line is `{"event": name, "t_ns": master wall clock, …fields}`."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Iterable

from tailrace.contract.layout import RunLayout, append_line


@dataclass(frozen=True)
class MasterEvent:
    """One kind of line in master-events.jsonl."""

    name: str
    fields: tuple[str, ...]
    doc: str

    def record(self, t_ns: int, **data: Any) -> dict[str, Any]:
        if set(data) != set(self.fields):
            raise TypeError(f"master event {self.name}: fields {sorted(data)}, declared {sorted(self.fields)}")
        return {"event": self.name, "t_ns": t_ns, **data}

    def matches(self, event: dict) -> bool:
        return event.get("event") == self.name

    def among(self, events: Iterable[dict]) -> list[dict]:
        return [e for e in events if self.matches(e)]

    def first(self, events: Iterable[dict]) -> dict | None:
        return next((e for e in events if self.matches(e)), None)


WORKER_JOINED = MasterEvent("worker_joined", ("client_id",), "a Locust worker connected (before admission)")
WORKER_ADMITTED = MasterEvent("worker_admitted", ("client_id", "worker", "region"),
                              "its JOIN proved the run token, names a region and index of the plan, no duplicate")
WORKER_REFUSED = MasterEvent("worker_refused", ("client_id", "worker", "region", "reason", "address"),
                             "its JOIN was refused (REFUSED sent) before it was given a place: it takes no part; "
                             "logged for the first refusal of a reason from an address (the worker's host)")
WORKER_REFUSALS = MasterEvent("worker_refusals", ("address", "reason", "count"),
                              "the refusals of one reason from one address so far, when more followed the first "
                              "(at most every REFUSALS_EVERY_S while they go on, and at the run's end)")
WORKER_HELLO = MasterEvent("worker_hello", ("client_id", "worker", "region", "metrics_port"),
                           "it has its plan and is ready; its metrics are served on metrics_port (None: not served)")
WORKER_DONE = MasterEvent("worker_done", ("client_id", "summary"), "it finished its schedule (worker.json's summary)")
WORKER_ERROR = MasterEvent("worker_error", ("client_id", "error"), "it could not run the plan")
WORKER_LEFT = MasterEvent("worker_left", ("client_id", "worker", "reason"),
                          "it went silent (reason: 'heartbeat missing') or disconnected")
WORKER_SILENT = MasterEvent("worker_silent", ("client_id", "worker", "since_ns"),
                            "no heartbeat from it for a few seconds (since_ns: its last one, master's clock); it is "
                            "not lost until generator.master_timeout_s")
WORKER_RETURNED = MasterEvent("worker_returned", ("client_id", "worker", "gap_s"),
                              "a silent worker's heartbeats came back within the timeout: the same worker, going on")
MASTER_STALLED = MasterEvent("master_stalled", ("since_ns", "gap_s"),
                             "the master itself did not run for gap_s (a pause: SIGSTOP, a VM stall); its workers "
                             "kept their schedules")
CHUNK_REFUSED = MasterEvent("chunk_refused", ("client_id", "name", "reason"),
                            "a CHUNK from no admitted worker, or of a file no worker sends")
CHUNK_NOT_WRITTEN = MasterEvent("chunk_not_written", ("worker", "name", "error"),
                                "a CHUNK that could not be written (no ACK: the worker sends it again)")
PLAN_SENT = MasterEvent("plan_sent", ("start_ref_ns", "master_offset_ns", "workers"),
                        "the PLAN went out: the start instant (reference clock) and the admitted workers")
START_SENT = MasterEvent("start_sent", ("start_ref_ns", "earlier_s", "workers"),
                         "every expected worker was ready: the START went out, earlier_s before the plan's instant")
# the live page's feed (live.jsonl, written by the master once a second; the page's server adds the last two to
# master-events.jsonl): the page reads these and the events above, as the server-sent events of the same names
LIVE_STARTED = MasterEvent("live_started", ("run_id", "regions", "endpoints", "workers", "phases", "slos",
                                            "start_ref_ns", "run_s"),
                           "the run's shape for the live page: regions, endpoints (generative or not), expected "
                           "workers, the phases (seconds from the start instant), the SLOs")
LIVE = MasterEvent("live", ("elapsed_s", "points", "totals", "workers", "slos", "warnings"),
                   "once a second: per region × endpoint the seconds that changed (points) and the run so far "
                   "(totals), per worker its clock and heartbeat, each SLO's provisional verdict — live estimates")
STOP_REQUESTED = MasterEvent("stop_requested", ("by",), "the live page's stop control was used (by: its address)")
RUN_ENDED = MasterEvent("run_ended", ("verdict", "exit_code", "report"),
                        "the run is over and analysed: its verdict, exit code and report (a path)")
# a sweep's live page (`tailrace sweep`): sent by the page's server from memory, never written to a run's file
SWEEP_POINT = MasterEvent("sweep_point", ("sweep_id", "index", "label", "declared", "done", "left", "eta_s"),
                          "the point a sweep runs now: its index, what it sets, the declared points done and left, "
                          "an estimate of the time left (s; None before a point has finished)")

CATALOGUE: dict[str, MasterEvent] = {e.name: e for e in (
    WORKER_JOINED, WORKER_ADMITTED, WORKER_REFUSED, WORKER_REFUSALS, WORKER_HELLO, WORKER_DONE, WORKER_ERROR,
    WORKER_LEFT, WORKER_SILENT, WORKER_RETURNED, MASTER_STALLED, CHUNK_REFUSED, CHUNK_NOT_WRITTEN, PLAN_SENT, START_SENT,
    LIVE_STARTED, LIVE, STOP_REQUESTED, RUN_ENDED, SWEEP_POINT)}


class MasterEventLog:
    """master-events.jsonl, appended one line per event (a killed master leaves at most a torn last line)."""

    def __init__(self, layout: RunLayout, path=None) -> None:
        self.path = path or layout.master_events
        layout.root.mkdir(parents=True, exist_ok=True)

    def write(self, event: MasterEvent, **data: Any) -> None:
        append_line(self.path, json.dumps(event.record(time.time_ns(), **data)))


def read_master_events(layout: RunLayout) -> list[dict]:
    """Every whole line of the run's master-events.jsonl, in order (none when it does not exist)."""
    path = layout.master_events
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line from a killed master
    return events
