"""The embedded server's continuous-batching engine, with a decoder that records what each step was given."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tailrace.endpoints.generation.requests import parse_completion
from tailrace.endpoints.models.decoders import StepBatch
from tailrace.endpoints.models.vocabulary import EOS, WordVocabulary
from tailrace.endpoints.serving.continuous import BatchingLimits, ContinuousBatcher, Generation
from tailrace.endpoints.serving.errors import InferenceError
from tailrace.endpoints.serving.generation_metrics import GenerationMetrics


class RecordingDecoder:
    """Next token = 1 + the row's first fed token (or EOS when asked); records each step's batch."""

    hidden = 2

    def __init__(self, eos_after: int | None = None, step_s: float = 0.0) -> None:
        self.vocabulary = WordVocabulary.build(64)
        self.steps: list[StepBatch] = []
        self.eos_after, self.step_s = eos_after, step_s
        self.gate = threading.Event()
        self.gate.set()

    def step(self, batch: StepBatch):
        self.gate.wait(5)
        self.steps.append(batch)
        time.sleep(self.step_s)
        state = batch.state + 1
        nxt = 1 + batch.tokens[:, 0] % 50
        if self.eos_after is not None:
            nxt = np.where(state[:, 0] > self.eos_after, EOS, nxt)
        return nxt, state


def engine(decoder, **limits) -> tuple[ContinuousBatcher, list, CollectorRegistry]:
    registry = CollectorRegistry()
    batcher = ContinuousBatcher("m", decoder, BatchingLimits(**limits), GenerationMetrics(registry))
    published: list[Generation] = []
    batcher.start(published.extend)
    return batcher, published, registry


def wait_done(*gens: Generation, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(g.done for g in gens):
        assert time.monotonic() < deadline, [g.tokens for g in gens]
        time.sleep(0.001)


def test_a_request_prefills_in_chunks_within_the_token_budget_then_decodes_one_token_a_step():
    decoder = RecordingDecoder()
    batcher, published, registry = engine(decoder, max_num_batched_tokens=4)
    try:
        g = Generation(prompt=np.arange(1, 11), max_tokens=3)
        batcher.submit(g)
        wait_done(g)
    finally:
        batcher.stop()
    widths = [int(b.mask.sum()) for b in decoder.steps]
    assert widths == [4, 4, 2, 1, 1]  # 10 prompt tokens in chunks of 4, then one token a step
    assert len(g.tokens) == 3 and g.finish_reason == "length"
    assert g.admitted_ns >= g.arrival_ns and g.first_token_ns > g.admitted_ns and g.last_token_ns > g.first_token_ns
    assert set(g.timings_ms()) == {"queue_ms", "prefill_ms", "decode_ms"}
    text = generate_latest(registry).decode()
    assert 'tailrace:generation_tokens_total{model_name="m"} 3.0' in text
    assert 'tailrace:prompt_tokens_total{model_name="m"} 10.0' in text
    assert 'tailrace:request_success_total{finished_reason="length",model_name="m"} 1.0' in text
    assert 'tailrace:time_to_first_token_seconds_count{model_name="m"} 1.0' in text


def test_waiting_requests_join_the_running_batch_between_steps_up_to_max_num_seqs():
    decoder = RecordingDecoder(step_s=0.002)
    batcher, _, _ = engine(decoder, max_num_seqs=2)
    try:
        gens = [Generation(prompt=np.array([5]), max_tokens=4) for _ in range(3)]
        decoder.gate.clear()
        for g in gens:
            batcher.submit(g)
        decoder.gate.set()
        wait_done(*gens)
    finally:
        batcher.stop()
    sizes = [len(b.tokens) for b in decoder.steps]
    assert max(sizes) == 2  # never more than max_num_seqs in a step
    assert gens[2].admitted_ns >= gens[0].last_token_ns  # the third waited for a place
    assert all(len(g.tokens) == 4 for g in gens)


def test_a_full_waiting_queue_is_refused_with_429_and_a_too_long_request_with_400():
    decoder = RecordingDecoder()
    decoder.gate.clear()  # the engine is stuck in its first step
    batcher, _, registry = engine(decoder, max_num_seqs=1, max_waiting=1, max_model_len=20)
    try:
        batcher.submit(Generation(prompt=np.array([1]), max_tokens=5))
        time.sleep(0.05)  # admitted: the engine waits in its step
        batcher.submit(Generation(prompt=np.array([1]), max_tokens=5))  # waits
        with pytest.raises(InferenceError) as refused:
            batcher.submit(Generation(prompt=np.array([1]), max_tokens=5))
        assert refused.value.http_status == 429 and "max_waiting 1" in refused.value.message
        with pytest.raises(InferenceError) as too_long:
            batcher.submit(Generation(prompt=np.arange(1, 17), max_tokens=5))
        assert too_long.value.http_status == 400 and "maximum context length is 20" in too_long.value.message
        assert 'tailrace:request_refused_total{model_name="m"} 1.0' in generate_latest(registry).decode()
    finally:
        decoder.gate.set()
        batcher.stop()


def test_eos_ends_a_request_unless_ignore_eos_and_a_cancelled_request_leaves_the_batch():
    decoder = RecordingDecoder(eos_after=2)
    batcher, _, _ = engine(decoder)
    try:
        stops, goes_on = Generation(prompt=np.array([3]), max_tokens=10), \
            Generation(prompt=np.array([3]), max_tokens=10, ignore_eos=True)
        batcher.submit(stops)
        batcher.submit(goes_on)
        wait_done(stops, goes_on)
        assert stops.finish_reason == "stop" and stops.tokens[-1] == EOS and len(stops.tokens) < 10
        assert goes_on.finish_reason == "length" and EOS not in goes_on.tokens
        slow = RecordingDecoder(step_s=0.005)
    finally:
        batcher.stop()
    batcher, _, _ = engine(slow)
    try:
        g = Generation(prompt=np.array([3]), max_tokens=1000)
        batcher.submit(g)
        time.sleep(0.05)
        batcher.cancel(g)
        time.sleep(0.05)
        seen = len(slow.steps)
        time.sleep(0.05)
        assert len(slow.steps) == seen and not g.done  # no more steps: it left the batch
    finally:
        batcher.stop()


@pytest.mark.parametrize("body,field", [
    (b'{"prompt": "hi"}', "model"),
    (b'{"model": "m", "prompt": 3}', "prompt"),
    (b'{"model": "m", "prompt": "hi", "max_tokens": 0}', "max_tokens"),
    (b'{"model": "m", "prompt": "hi", "stream": "yes"}', "stream"),
    (b'{"model": "m", "prompt": "hi", "stream_options": {"include_usage": true}}', "stream_options"),
    (b'{"model": "m", "prompt": "   "}', "prompt"),
    (b'not json', "not JSON"),
])
def test_a_bad_request_body_is_a_400_naming_the_field(body, field):
    with pytest.raises(InferenceError) as err:
        parse_completion(body, chat=False)
    assert err.value.http_status == 400 and field in err.value.message


def test_chat_messages_are_the_prompt_one_word_one_token():
    request = parse_completion(b'{"model": "m", "messages": [{"role": "system", "content": "be brief"}, '
                               b'{"role": "user", "content": "three more words"}], "max_completion_tokens": 7, '
                               b'"stream": true, "stream_options": {"include_usage": true, '
                               b'"continuous_usage_stats": true}}', chat=True)
    assert request.max_tokens == 7 and request.include_usage and request.continuous_usage
    assert len(WordVocabulary.build(64).encode(request.text)) == 5


def test_a_stalled_engine_runs_no_step_until_the_stall_ends():
    decoder = RecordingDecoder()
    batcher, _, _ = engine(decoder)
    try:
        batcher.stall(0.2)
        g = Generation(prompt=np.array([4]), max_tokens=2)
        started = time.monotonic()
        batcher.submit(g)
        wait_done(g)
        assert time.monotonic() - started >= 0.18 and g.first_token_ns - g.arrival_ns >= 0.18e9
    finally:
        batcher.stop()
