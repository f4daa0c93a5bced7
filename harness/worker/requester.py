"""The request path of a worker: one arrival → its endpoint's sender → one typed record, metrics, saturation.

This runs once per request on the worker's event loop: keep it short and free of anything heavy.
"""
from __future__ import annotations

import itertools
import time
from array import array
from dataclasses import dataclass
from typing import NamedTuple

from tailrace.contract.plan import RunPlan
from tailrace.contract.records import RequestRow
from tailrace.contract.trace_context import format_traceparent, new_ids, session_trace_id
from tailrace.harness.client.outcome import Outcome, Send, StreamOutcome
from tailrace.harness.client.payloads import AnswerCheck, SchemaCheck
from tailrace.harness.client.senders import Sender
from tailrace.harness.spool.recorder import ChunkWriter
from tailrace.harness.worker.clock import ClockSampler, WorkerClock
from tailrace.harness.worker.identity import WorkerIdentity
from tailrace.harness.worker.metrics import WorkerMetrics
from tailrace.harness.worker.saturation import SaturationMonitor
from tailrace.harness.worker.scenarios import Arrival
from tailrace.harness.workload.graders import CORRECT, grade_request
from tailrace.harness.workload.request_draws import CancelPlan, ModelMix
from tailrace.harness.workload.turns import Turn

NO_OPTIONS: dict = {}  # (shared, never written: most requests have none)


class Call(NamedTuple):
    """A request being sent: its trace ids, the clock offset and headers it carries, what was in flight with it."""

    trace_id: str
    span_id: str
    offset_ns: int
    headers: dict[str, str]
    in_flight: int
    options: dict = NO_OPTIONS  # what its stream sender is told besides: `cancel` (a CancelAt), `model` (a mix's)


@dataclass
class RequestPath:
    """Sends arrivals and records them; counts what was sent and what is in flight."""

    plan: RunPlan
    identity: WorkerIdentity
    senders: list[Sender]
    checks: list[AnswerCheck]  # per endpoint, like senders
    clock: WorkerClock
    clocks: ClockSampler
    recorder: ChunkWriter
    saturation: SaturationMonitor
    metrics: WorkerMetrics
    start_mono: int = 0
    in_flight: int = 0
    sent: int = 0
    later_turns: int = 0  # sessions' turns after their first
    unknown_events: int = 0  # stream events of a type the protocol's reader does not know (skipped)

    def __post_init__(self) -> None:
        self.endpoints = self.plan.profile.endpoints
        self.batches = [self.plan.batch_size(e) for e in self.endpoints]  # read per request: computed once
        self.media = [getattr(s, "media", None) or None for s in self.senders]  # each body's (count, bytes)
        self.static_headers = {"x-tailrace-region": self.identity.region, "x-tailrace-run": self.plan.run_id}
        seed = self.plan.profile.load.seed
        self._unindexed = itertools.count(1 << 40)
        self.cancels = [CancelPlan(e.cancel, seed, i) if e.cancel is not None else None
                        for i, e in enumerate(self.endpoints)]
        self.mixes = [ModelMix(e.models, seed, i, e.model_draw == "session") if e.models else None
                      for i, e in enumerate(self.endpoints)]
        self.drawn = any(self.cancels) or any(self.mixes)
        self.graded = [getattr(s, "graded", None) for s in self.senders]  # GradedPrompts, or None
        self.schemas = [SchemaCheck(e.prompts.structured.schema_) if e.prompts is not None
                        and e.prompts.structured is not None else None for e in self.endpoints]

    def begin(self, arrival: Arrival, turn: Turn | None = None) -> Call:
        """A request about to be sent: its trace ids and headers, whether its client abandons it; counted in flight
        from here."""
        trace_id, span_id = new_ids()
        if turn is not None:  # a session's turns, a pipeline's stages: one trace, the session's
            trace_id = session_trace_id(self.plan.run_id, turn.session_id)
        offset_ns = self.clocks.offset_ns
        headers = {"traceparent": format_traceparent(trace_id, span_id), **self.static_headers,
                   "x-tailrace-clock-offset-ns": str(offset_ns)}
        self.in_flight += 1
        if not self.drawn:
            return Call(trace_id, span_id, offset_ns, headers, self.in_flight)
        return Call(trace_id, span_id, offset_ns, headers, self.in_flight, self._options(arrival, turn))

    def _options(self, arrival: Arrival, turn: Turn | None) -> dict:
        """What is drawn for this request: whether its client abandons it (a pipeline's stage is a program's request:
        never), which model of its endpoint's mix it asks for."""
        index = arrival.session if arrival.session >= 0 else next(self._unindexed)  # (closed loop: in send order)
        step = 0 if turn is None else turn.index
        options = {}
        plan, mix = self.cancels[arrival.endpoint], self.mixes[arrival.endpoint]
        if plan is not None and (turn is None or not turn.pipeline):
            cancel = plan.draw(index, step, arrival.intended_mono)
            if cancel is not None:
                options["cancel"] = cancel
        if mix is not None:
            options["model"] = mix.draw(index, step)
        return options or NO_OPTIONS

    def answered(self, turn: Turn | None = None) -> None:
        """A request's response (or failure) came: no longer in flight; counted as sent."""
        self.in_flight -= 1
        if turn is None or turn.index <= 1:
            self.sent += 1  # what the schedule planned: requests, or sessions started
        else:
            self.later_turns += 1

    def send(self, arrival: Arrival, turn: Turn | None = None) -> Outcome:
        """Send one arrival and record it; never raises (a failure is an outcome). `turn`: a session's turn — its
        body built at its send, its session fields recorded (harness/worker/chains/sessions.py)."""
        call = self.begin(arrival, turn)
        sent = [0]

        def on_sent() -> None:
            sent[0] = time.perf_counter_ns()

        options = call.options  # (only a streamed endpoint's requests have any: its cancel, its model)
        if turn is None:
            request = Send(arrival.sample, call.headers, on_sent, **options)
        else:  # a session's turn, a pipeline's stage: its body built from the replies before
            request = Send(arrival.sample, call.headers, on_sent, turn.body, turn.prompt_index, turn.inputs, **options)
        try:
            outcome = self.senders[arrival.endpoint].send(request)
        except Exception as exc:  # noqa: BLE001 - never stop the generator
            outcome = Outcome(status="bad_response", code="exception", error=f"{type(exc).__name__}: {exc}"[:200])
        done = time.perf_counter_ns()
        self.answered(turn)
        if turn is not None:
            self.decide(turn, outcome, done)
        self.finish(arrival, call, sent[0] or done, done, outcome, turn)
        return outcome

    def decide(self, turn: Turn, outcome: Outcome, done: int) -> None:
        """A turn's reply is in (at `done`): its session decides whether it was the last (Turn.end), before its record
        is written, which says why the session ended."""
        turn.done_mono = done
        try:
            turn.end = turn.decide(outcome)
        except Exception as exc:  # noqa: BLE001 - a next turn that cannot be built ends its session, recorded
            turn.end = "error"
            print(f"tailrace worker {self.identity.name}: session {turn.session_id} ended after turn "
                  f"{turn.index}: its next turn could not be built ({type(exc).__name__}: {exc})", flush=True)

    def finish(self, arrival: Arrival, call: Call, t_sent: int, done: int, outcome: Outcome,
               turn: Turn | None = None) -> None:
        """Record an answered request: the saturation monitor, its row in the log, the metrics."""
        lag = t_sent - arrival.intended_mono
        if arrival.phase > 0:  # the warm-up is not measured, and absorbs start-up hiccups (first chunk, first GC)
            self.saturation.observe_send(arrival.intended_mono - self.start_mono, lag, call.in_flight)
        row = self.record(arrival, call.trace_id, call.span_id, t_sent, done, outcome, call.in_flight, call.offset_ns,
                          graded=turn is None, graded_by=turn.graded_by if turn is not None else None)
        if "model" in call.options:  # the model of the endpoint's mix this request asked for
            row = row._replace(model=call.options["model"])
        if turn is not None:
            row = row._replace(session_id=turn.session_id, turn=turn.index, session_end=turn.end,
                               prompt_tokens_sent=turn.prompt_tokens, ideal_cached_tokens=turn.ideal_cached,
                               pipeline=turn.pipeline)
            if turn.media[0]:
                row = row._replace(media_count=turn.media[0], media_bytes=turn.media[1])
        self.recorder.add(row)
        if outcome.stream is not None and outcome.stream.unknown_events:
            self.unknown_events += outcome.stream.unknown_events
        ep = self.endpoints[arrival.endpoint]
        self.metrics.record(self.identity.region, ep.name, outcome.status, done - arrival.intended_mono, lag,
                            self.in_flight)

    def record(self, a: Arrival, trace_id: str, span_id: str, t_sent: int, done: int, outcome: Outcome,
               in_flight: int, offset_ns: int, graded: bool = True, graded_by: tuple | None = None) -> RequestRow:
        """An answered request's row. `graded`: it was sent with one of its endpoint's own bodies (not a session's
        turn or a pipeline's stage, whose prompts are their own), so a graded item's reply is graded; `graded_by`:
        (item, reference, grader) of a pipeline's answer, graded against its RAG line's reference."""
        ep, clock, batch, check = self.endpoints[a.endpoint], self.clock, self.batches[a.endpoint], self.checks[a.endpoint]
        first = self.senders[a.endpoint].payloads.first_row(a.sample)
        right, prediction = check.score(outcome.outputs if outcome.status == "ok" else None, first, batch)
        graded_fields = self._grade_against(graded_by, outcome) if graded_by is not None else \
            self._grade(a.endpoint, first, outcome) if graded and self.graded[a.endpoint] is not None else {}
        return RequestRow(
            run_id=self.plan.run_id, trace_id=trace_id, span_id=span_id, region=self.identity.region,
            worker=self.identity.name, endpoint=ep.name, model=ep.model, protocol=ep.protocol, phase=a.phase,
            sample_index=first, t_intended=clock.from_mono(a.intended_mono), t_sent=clock.from_mono(t_sent),
            t_done=clock.from_mono(done), latency_ns=done - a.intended_mono, service_ns=done - t_sent,
            send_lag_ns=t_sent - a.intended_mono, status=outcome.status, code=outcome.code, error=outcome.error,
            server_queue_ns=outcome.server_queue_ns, server_compute_ns=outcome.server_compute_ns,
            server_receive_ns=outcome.server_receive_ns, server_send_ns=outcome.server_send_ns,
            echoed_trace_id=outcome.echoed_trace_id, label=check.label(first), prediction=prediction,
            correct=graded_fields.pop("correct", right == batch), batch_size=outcome.batch or batch, correct_count=right,
            bytes_out=outcome.bytes_out, bytes_in=outcome.bytes_in, in_flight=in_flight, clock_offset_ns=offset_ns,
            clock_uncertainty_ns=self.clocks.uncertainty_ns,
            **(stream_fields(outcome.stream, a.intended_mono, clock) if outcome.stream is not None else
               {"input_tokens": outcome.input_tokens} if outcome.input_tokens >= 0 else {}),
            **(self._media(a.endpoint, first) if self.media[a.endpoint] else {}),
            **(self._schema(a.endpoint, outcome) if self.schemas[a.endpoint] is not None else {}),
            **graded_fields)

    def _schema(self, endpoint: int, outcome: Outcome) -> dict:
        """A structured output's check: a whole reply (ok) against the endpoint's JSON Schema (else not checked)."""
        if outcome.status != "ok" or outcome.stream is None:
            return {}
        return {"schema_valid": self.schemas[endpoint].valid(outcome.stream.text)}

    def _grade(self, endpoint: int, first: int, outcome: Outcome) -> dict:
        """A graded item's reply graded (harness/workload/graders.py); an ordinary prompt's: nothing."""
        graded = self.graded[endpoint]
        ref = graded.refs[first % len(graded.refs)]
        if ref < 0:
            return {}
        item = graded.graded[ref]
        return self._grade_against((ref, item.reference, graded.graders[item.grader]), outcome)

    @staticmethod
    def _grade_against(graded_by: tuple, outcome: Outcome) -> dict:
        """A reply graded against (item, reference, grader): the record's item, grade and correct."""
        item, reference, grader = graded_by
        s = outcome.stream
        grade = grade_request(outcome.status, s.outcome if s is not None else "", s.finish_reason if s is not None
                              else "", s.text if s is not None and outcome.status == "ok" else "", reference, grader)
        return {"item": item, "grade": grade, "correct": grade == CORRECT}

    def _media(self, endpoint: int, first: int) -> dict:
        count, size = self.media[endpoint][first % len(self.media[endpoint])]
        return {"media_count": count, "media_bytes": size}


def stream_fields(s: StreamOutcome, intended_mono: int, clock: WorkerClock) -> dict:
    """A streamed response's record fields: token instants on the worker's epoch clock (from the one monotonic
    clock), TTFT from the intended send, and each token event's offset after the first (µs) and token count."""
    first = s.first_token_ns
    offsets = array("i", [(t - first) // 1000 for t in s.event_ns]) if first >= 0 else array("i")
    return {"t_first_token": clock.from_mono(first) if first >= 0 else -1,
            "t_last_token": clock.from_mono(s.last_token_ns) if s.last_token_ns >= 0 else -1,
            "ttft_ns": first - intended_mono if first >= 0 else -1, "output_tokens": s.output_tokens,
            "input_tokens": s.input_tokens, "token_source": s.token_source, "finish_reason": s.finish_reason,
            "stream_outcome": s.outcome, "token_event_us": offsets.tobytes(),
            "token_event_counts": s.event_tokens.tobytes(), "cached_tokens": s.cached_tokens,
            "reasoning_tokens": s.reasoning_tokens,
            "ttfa_ns": s.first_answer_ns - intended_mono if s.first_answer_ns >= 0 else -1}
