"""Pipelines on the worker: the arrival process starts pipelines; each runs its stages one after another in a greenlet
of its own, each stage a request to its own endpoint, made from the replies before it
(harness/workload/pipeline_requests.py).

Stage 1's intended send is the arrival; stage k+1's is stage k's end + its declared pause, and every latency of it
counts from that instant (a generator late to send a stage shows as send lag like any other request). A stage's
record is a session's turn (session_id: the pipeline's arrival, turn: the stage, pipeline: its name); whether a stage
is the pipeline's last is decided the moment its reply is in, so its record says why the pipeline ended: done (its
last stage answered), error (a stage failed: the pipeline ends there), run_end (the next stage would be due after the
run's window).
"""
from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from tailrace.harness.client.outcome import Outcome
from tailrace.harness.worker.scenarios import Arrival
from tailrace.harness.workload.pipeline_requests import PipelineRequests, StageRequest
from tailrace.harness.workload.turns import DONE, ERROR, RUN_END, Build, Piece, Turn


@dataclass
class PreparedPipeline:
    """A pipeline ready to start: its arrival and its first stage's request, built before the arrival's instant."""

    arrival: Arrival
    first: StageRequest
    passages: list[str] = field(default_factory=list)  # what the next stage carries
    next_request: StageRequest | None = None  # the next stage's, once the last reply is in
    next_at: int = 0  # and its intended instant

    @property
    def body_bytes(self) -> int:
        return len(self.first.body)


class PipelineRunner:
    """Runs pipelines through the request path (`send(arrival, turn)`), waiting for each later stage's instant."""

    def __init__(self, send: Callable[[Arrival, Turn], Outcome], wait_until: Callable[[int], None],
                 pipelines: dict[int, PipelineRequests], end_mono: Callable[[], int]) -> None:
        """`pipelines`: by arrival index (each pipeline's place after the endpoints in the arrival split)."""
        self.send, self.wait_until, self.pipelines, self.end_mono = send, wait_until, pipelines, end_mono
        self.started = 0
        self.stages_sent = 0
        self.ended: Counter = Counter()
        self.in_flight = 0

    def handles(self, arrival: Arrival) -> bool:
        return arrival.endpoint in self.pipelines

    def build(self, arrival: Arrival) -> Build:
        """The first stage's request, built before the arrival's instant (harness/worker/build_ahead.py)."""
        requests = self.pipelines[arrival.endpoint]
        yield Piece("pipeline first stage")
        return PreparedPipeline(arrival, requests.request(0, arrival.sample, requests.item(arrival.sample)[1]),
                                list(requests.item(arrival.sample)[1]))

    def run(self, pipeline: PreparedPipeline) -> None:
        """One pipeline on a greenlet of its own, from its arrival to its last stage."""
        requests = self.pipelines[pipeline.arrival.endpoint]
        self.started += 1
        self.in_flight += 1
        try:
            k, request, intended = 0, pipeline.first, pipeline.arrival.intended_mono
            while True:
                if k:
                    self.wait_until(intended)
                arrival, turn = self._stage(pipeline, requests, k, request, intended)
                self.send(arrival, turn)
                self.stages_sent += 1
                if turn.end:
                    self.ended[turn.end] += 1
                    return
                k, request, intended = k + 1, pipeline.next_request, pipeline.next_at
        finally:
            self.in_flight -= 1

    def _stage(self, pipeline: PreparedPipeline, requests: PipelineRequests, k: int, request: StageRequest,
               intended: int) -> tuple[Arrival, Turn]:
        """Stage `k` (0..) of `pipeline`, due at `intended`: its request and its decision, which builds stage k+1."""
        start = pipeline.arrival
        last = k == len(requests.stages) - 1

        def decide(outcome: Outcome) -> str:
            """Is this stage the last? Prepares the next stage's request from this reply. Its Turn through a weak
            reference: a turn and its decision make no cycle (harness/worker/chains/sessions.py)."""
            if outcome.status != "ok":
                return ERROR
            if last:
                return DONE
            pipeline.passages = requests.carried(k, pipeline.passages, outcome.ranked)
            pipeline.next_at = this().done_mono + requests.stages[k + 1].pause_ns
            if pipeline.next_at >= self.end_mono():
                return RUN_END
            pipeline.next_request = requests.request(k + 1, start.sample, pipeline.passages)
            return ""

        turn = Turn(start.session, k + 1, request.body, request.prompt_tokens, -1, decide, inputs=request.inputs,
                    pipeline=requests.name, graded_by=requests.graded_by(start.sample) if last else None)
        this = weakref.ref(turn)
        return Arrival(intended, requests.stages[k].endpoint_index, start.phase, start.sample, start.session), turn

    def summary(self) -> dict:
        return {"started": self.started, "stages_sent": self.stages_sent, "ended": dict(self.ended)}
