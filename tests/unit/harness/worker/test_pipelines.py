"""The pipeline runner's timing (harness/worker/chains/pipelines.py): stage k+1 intended at stage k's end + its
pause, each stage to its own endpoint, the rerank's best passages in the answer's request; a failed stage ends the
pipeline; a stage due after the run's window is never sent."""
from __future__ import annotations

import gc

import orjson

from tailrace.harness.client.outcome import Outcome
from tailrace.harness.worker.chains.pipelines import PipelineRunner
from tailrace.harness.worker.scenarios import Arrival
from tailrace.harness.workload.pipeline_requests import PipelineRequests
from tailrace.harness.workload.turns import DONE, ERROR, RUN_END, build_now
from tests.unit.harness.workload.test_pipeline_requests import ROOT, rag_profile

SERVICE_NS = {0: 20_000_000, 1: 30_000_000, 2: 400_000_000}  # by endpoint index: embed, rerank, chat


class StageSender:
    """Answers each stage after its endpoint's service time (a fake clock); a rerank reply ranks the documents in
    reverse; fails the stages listed."""

    def __init__(self, clock: list[int], failing: set[int] = frozenset()):
        self.clock, self.failing = clock, failing
        self.sent: list[tuple[Arrival, object]] = []

    def __call__(self, arrival: Arrival, turn) -> Outcome:
        self.clock[0] = max(self.clock[0], arrival.intended_mono) + SERVICE_NS[arrival.endpoint]
        self.sent.append((arrival, turn))
        turn.done_mono = self.clock[0]
        outcome = Outcome(status="timeout" if turn.index in self.failing else "ok",
                          ranked=list(range(turn.inputs))[::-1] if arrival.endpoint == 1 else None)
        turn.end = turn.decide(outcome)
        return outcome


def runner(sender, clock, end_ns: int = 10**12) -> PipelineRunner:
    p = rag_profile()
    requests = PipelineRequests(p.pipelines[0], p, 7, ROOT)
    return PipelineRunner(sender, lambda t: clock.__setitem__(0, max(clock[0], t)), {3: requests}, lambda: end_ns)


def start(r: PipelineRunner, at_ns: int = 1_000_000_000, sample: int = 5):
    return build_now(r.build(Arrival(at_ns, 3, 1, sample, session=42)))


def test_each_stage_is_due_at_the_stage_befores_end_plus_its_pause_and_carries_the_best_passages():
    clock = [0]
    sender = StageSender(clock)
    r = runner(sender, clock)
    r.run(start(r))
    arrivals = [a for a, _ in sender.sent]
    turns = [t for _, t in sender.sent]
    assert [a.endpoint for a in arrivals] == [0, 1, 2] and [t.index for t in turns] == [1, 2, 3]
    assert arrivals[0].intended_mono == 1_000_000_000
    assert arrivals[1].intended_mono == turns[0].done_mono + 15_000_000  # the declared pause
    assert arrivals[2].intended_mono == turns[1].done_mono  # no pause
    assert all(a.session == 42 and a.phase == 1 and a.sample == 5 for a in arrivals)  # the arrival's, every stage
    assert [t.end for t in turns] == ["", "", DONE] and {t.pipeline for t in turns} == {"rag"}
    assert [t.inputs for t in turns][0] == 1 and turns[2].inputs == 0
    query, candidates = r.pipelines[3].item(5)
    prompt = orjson.loads(turns[2].body)["messages"][0]["content"]
    assert f"[1] {candidates[-1]}\n\n[2] {candidates[-2]}\n\nQuestion: {query}" in prompt  # ranked in reverse
    assert r.summary() == {"started": 1, "stages_sent": 3, "ended": {DONE: 1}} and r.in_flight == 0


def test_a_failed_stage_ends_its_pipeline_there():
    clock = [0]
    sender = StageSender(clock, failing={2})
    r = runner(sender, clock)
    r.run(start(r))
    assert [t.index for _, t in sender.sent] == [1, 2] and sender.sent[-1][1].end == ERROR
    assert r.ended == {ERROR: 1}


def test_a_stage_due_after_the_runs_window_is_never_sent():
    clock = [0]
    sender = StageSender(clock)
    r = runner(sender, clock, end_ns=1_000_000_000 + 40_000_000)  # after the embed (20 ms) + 15 ms pause: 35 ms
    r.run(start(r))
    assert [t.index for _, t in sender.sent] == [1, 2] and sender.sent[-1][1].end == RUN_END


def test_a_stage_and_its_decision_are_freed_without_the_cyclic_collector():
    clock = [0]
    sender = StageSender(clock)
    r = runner(sender, clock)
    gc.collect()
    gc.disable()
    try:
        r.run(start(r))
        sender.sent.clear()
        assert gc.collect() == 0, "a stage's turn and its decision made a reference cycle"
    finally:
        gc.enable()
