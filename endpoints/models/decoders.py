"""Decoders: what runs one continuous-batching step of a generative model (endpoints/serving/continuous.py).

A step gets, for each running sequence, the tokens it feeds this step (a prompt chunk in prefill, the last
generated token in decode) and the sequence's state; it returns each sequence's next token and new state, in one
call for the whole batch. `OnnxDecoder` runs `tiny_lm`'s graph; `SyntheticDecoder` sleeps for known times.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tailrace.endpoints.models.generative_build import DECODER_FILE, VOCAB_FILE
from tailrace.endpoints.models.model_config import ModelSpec
from tailrace.endpoints.models.runners import sleep_overshoot_ns
from tailrace.endpoints.models.vocabulary import WordVocabulary


@dataclass(frozen=True)
class StepBatch:
    """One step's inputs: tokens and mask [batch, steps] (row i's first `lengths[i]` entries are real), state
    [batch, hidden]."""

    tokens: np.ndarray
    mask: np.ndarray
    state: np.ndarray

    @classmethod
    def pack(cls, runs: list[np.ndarray], states: np.ndarray) -> "StepBatch":
        width = max(len(r) for r in runs)
        tokens = np.zeros((len(runs), width), np.int64)
        mask = np.zeros((len(runs), width), np.float32)
        for i, run in enumerate(runs):
            tokens[i, :len(run)] = run
            mask[i, :len(run)] = 1.0
        return cls(tokens, mask, states)

    @property
    def prompt_tokens(self) -> int:
        """Tokens fed in this step beyond one per sequence (prefill work)."""
        return int(self.mask.sum()) - len(self.mask)


class Decoder(Protocol):
    """One step for the whole batch."""

    hidden: int
    vocabulary: WordVocabulary
    caches_prefix: bool  # a prompt's cached leading blocks may skip prefill (False: the engine does not cache)

    def step(self, batch: StepBatch) -> tuple[np.ndarray, np.ndarray]:
        """(next token per row, new state [batch, hidden])."""


class OnnxDecoder:
    """`1/decoder.onnx` on onnxruntime, one intra-op thread (the step loop is the server's one engine thread). Its
    state is one recurrent vector that depends on how the prompt was chunked, not per-block KV: it does not cache
    prefixes (the server says so at start, and its prefix-cache counters stay 0)."""

    caches_prefix = False

    def __init__(self, spec: ModelSpec) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(spec.directory / "1" / DECODER_FILE), sess_options=opts,
                                             providers=["CPUExecutionProvider"])
        self.hidden = int(spec.parameters.get("hidden", 128))
        self.vocabulary = WordVocabulary.read(spec.directory / "1" / VOCAB_FILE)

    def step(self, batch: StepBatch) -> tuple[np.ndarray, np.ndarray]:
        next_token, state = self._session.run(None, {"tokens": batch.tokens, "mask": batch.mask,
                                                     "state": batch.state})
        return next_token, state


class SyntheticDecoder:
    """Known step times: step_ms + step_ms_per_seq × batch + prefill_ms_per_token × prompt tokens in the step
    (sleep's overshoot compensated). Tokens: a deterministic walk over the vocabulary (never EOS). Prefix caching
    skips the cached prompt tokens' prefill, so a cached token costs no prefill_ms_per_token: the truth is known."""

    caches_prefix = True

    def __init__(self, spec: ModelSpec, step_ms: float | None = None) -> None:
        p = spec.parameters
        self.step_s = (step_ms if step_ms is not None else float(p.get("step_ms", 8.0))) / 1e3
        self.per_seq_s = float(p.get("step_ms_per_seq", 0.0)) / 1e3
        self.per_prompt_token_s = float(p.get("prefill_ms_per_token", 0.0)) / 1e3
        self.hidden = 1
        self.vocabulary = WordVocabulary.read(spec.directory / "1" / VOCAB_FILE)
        self._overshoot_ns = sleep_overshoot_ns()

    def duration_s(self, batch: StepBatch) -> float:
        """What the step takes: the model's known time."""
        return self.step_s + self.per_seq_s * len(batch.tokens) + self.per_prompt_token_s * batch.prompt_tokens

    def step(self, batch: StepBatch) -> tuple[np.ndarray, np.ndarray]:
        end = time.perf_counter_ns() + int(self.duration_s(batch) * 1e9)
        span = len(self.vocabulary) - 1
        lengths = batch.mask.sum(axis=1).astype(np.int64)
        last = batch.tokens[np.arange(len(lengths)), np.maximum(lengths - 1, 0)]
        state = batch.state + lengths[:, None]
        next_token = 1 + (last * 7 + state[:, 0].astype(np.int64)) % span
        remaining = end - time.perf_counter_ns() - self._overshoot_ns
        if remaining > 0:
            time.sleep(remaining / 1e9)
        return next_token, state


def load_decoder(spec: ModelSpec) -> Decoder:
    """The decoder a generative model's config names (parameter `decoder`: onnx or synthetic)."""
    kind = spec.parameters.get("decoder", "onnx")
    if kind == "synthetic":
        return SyntheticDecoder(spec)
    if kind == "onnx":
        return OnnxDecoder(spec)
    raise ValueError(f"{spec.directory}: parameter decoder must be 'onnx' or 'synthetic', not {kind!r}")
