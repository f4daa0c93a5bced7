"""Continuous batching for the embedded generative models, after vLLM's iteration-level scheduler.

One engine thread per model runs steps. Between steps it admits waiting requests into the running batch (at most
`max_num_seqs` running); each step gives every running request its share of a token budget
(`max_num_batched_tokens`): one token for each request decoding, then prompt chunks for those still in prefill
(chunked prefill: a long prompt takes several steps), and runs one decoder call for the whole batch. A request
whose prompt is done gets a token from every step until `max_tokens` (finish "length") or, unless `ignore_eos`,
the end-of-sequence token (finish "stop"). A full waiting queue (`max_waiting`) refuses new requests at once.
With automatic prefix caching (`enable_prefix_caching`, on by default as in vLLM's V1 engine; a decoder that cannot
reuse state says so and does not cache) a request admitted skips the prefill of its prompt's leading blocks already
computed (endpoints/serving/prefix_cache.py): its prefill starts after them, so only uncached tokens cost time.

The engine never touches the event loop: after each step it hands the requests that moved to `publish` (the front
end wakes their streams with one call_soon_threadsafe). Times are perf_counter ns, from the request's arrival.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import grpc
import numpy as np

from tailrace.endpoints.models.decoders import Decoder, StepBatch
from tailrace.endpoints.models.vocabulary import EOS
from tailrace.endpoints.serving.errors import InferenceError, unavailable
from tailrace.endpoints.serving.generation_metrics import GenerationMetrics
from tailrace.endpoints.serving.prefix_cache import PrefixCache, block_names


@dataclass(frozen=True)
class BatchingLimits:
    """The scheduler's settings (a model's config parameters, overridden by tailrace serve's flags)."""

    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_waiting: int = 256
    max_model_len: int = 4096
    kv_cache_tokens: int = 262_144  # the prefix cache's block budget, in tokens
    block_size: int = 16  # tokens a cache block holds (vLLM's default)
    enable_prefix_caching: int = 1  # 1 on, 0 off

    @classmethod
    def of(cls, parameters: dict[str, str], overrides: dict[str, int] | None = None) -> "BatchingLimits":
        values = {}
        for name in cls.__dataclass_fields__:
            raw = (overrides or {}).get(name, parameters.get(name, getattr(cls, name)))
            try:
                values[name] = int(raw)
            except (TypeError, ValueError):
                raise ValueError(f"parameter {name} must be a whole number, got {raw!r}") from None
            if values[name] < (0 if name == "enable_prefix_caching" else 1):
                raise ValueError(f"parameter {name} must be ≥ 1, got {values[name]}")
        if values["enable_prefix_caching"] not in (0, 1):
            raise ValueError(f"parameter enable_prefix_caching must be 1 (on) or 0 (off), got "
                             f"{values['enable_prefix_caching']}")
        if values["enable_prefix_caching"] and values["kv_cache_tokens"] < values["block_size"]:
            raise ValueError(f"parameter kv_cache_tokens must hold a block ({values['block_size']} tokens), got "
                             f"{values['kv_cache_tokens']}")
        return cls(**values)


_ids = itertools.count(1)


@dataclass(eq=False)
class Generation:
    """One request's progress. The engine appends to `tokens` and sets `finish_reason`; the front end reads them
    when published (list appends are atomic under the GIL)."""

    prompt: np.ndarray
    max_tokens: int
    ignore_eos: bool = False
    min_tokens: int = 0
    arrival_ns: int = field(default_factory=time.perf_counter_ns)
    request_id: int = field(default_factory=lambda: next(_ids))
    tokens: list[int] = field(default_factory=list)
    finish_reason: str = ""
    admitted_ns: int = -1
    first_token_ns: int = -1
    last_token_ns: int = -1
    cancelled: bool = False
    fed: int = 0  # prompt tokens prefilled so far (from the cached ones on)
    cached_tokens: int = 0  # leading prompt tokens found in the prefix cache (not prefilled)
    block_names: list[int] = field(default_factory=list)  # the prompt's full blocks' names (prefix caching)
    state: np.ndarray | None = None
    script: Any = None  # a graded item's scripted reply (endpoints/serving/answers.py Script), or None

    @property
    def done(self) -> bool:
        return bool(self.finish_reason)

    def timings_ms(self) -> dict[str, float]:
        """Queue, prefill and decode time (ms) as far as they are known."""
        out = {}
        if self.admitted_ns >= 0:
            out["queue_ms"] = (self.admitted_ns - self.arrival_ns) / 1e6
        if self.first_token_ns >= 0:
            out["prefill_ms"] = (self.first_token_ns - self.admitted_ns) / 1e6
        if self.done and self.last_token_ns >= 0:
            out["decode_ms"] = (self.last_token_ns - self.first_token_ns) / 1e6
        return out


class ContinuousBatcher:
    """The engine of one generative model."""

    def __init__(self, name: str, decoder: Decoder, limits: BatchingLimits, metrics: GenerationMetrics) -> None:
        self.name, self.decoder, self.limits = name, decoder, limits
        self._metrics = metrics
        self._waiting: deque[Generation] = deque()
        self._running: list[Generation] = []
        self._cond = threading.Condition()
        self._stopped = False
        self._publish: Callable[[list[Generation]], None] = lambda _: None
        self._thread: threading.Thread | None = None
        self._stall_until = 0.0
        self.steps = 0
        self.cpu_ns = 0  # CPU time the engine thread spent in the model's steps (this thread only writes it)
        caching = bool(limits.enable_prefix_caching) and getattr(decoder, "caches_prefix", False)
        self.prefix_cache = PrefixCache(limits.kv_cache_tokens, limits.block_size) if caching else None
        for gauge in (metrics.running, metrics.waiting):
            gauge.labels(name).set(0)

    def start(self, publish: Callable[[list[Generation]], None]) -> None:
        """Start the engine thread; `publish` gets the requests that moved after each step (from that thread)."""
        self._publish = publish
        self._thread = threading.Thread(target=self._loop, name=f"engine-{self.name}", daemon=True)
        self._thread.start()

    def submit(self, generation: Generation) -> None:
        """Queue a request, or refuse it: too long for the model (400), the waiting queue full (429)."""
        total = len(generation.prompt) + generation.max_tokens
        if total > self.limits.max_model_len:
            raise InferenceError(f"this model's maximum context length is {self.limits.max_model_len} tokens; "
                                 f"the request asks {len(generation.prompt)} in + {generation.max_tokens} out")
        with self._cond:
            if self._stopped:
                raise unavailable("the server is stopping")
            if len(self._waiting) >= self.limits.max_waiting:
                self._metrics.refused.labels(self.name).inc()
                raise InferenceError(f"model '{self.name}': {len(self._waiting)} requests waiting (max_waiting "
                                     f"{self.limits.max_waiting}); try again later", 429,
                                     grpc.StatusCode.RESOURCE_EXHAUSTED)
            self._waiting.append(generation)
            self._metrics.waiting.labels(self.name).set(len(self._waiting))
            self._cond.notify()

    def stall(self, seconds: float) -> None:
        """Fault injection: no step runs for `seconds` (waiting and running requests wait; new ones queue)."""
        self._stall_until = time.monotonic() + seconds
        with self._cond:
            self._cond.notify()

    def cancel(self, generation: Generation) -> None:
        """The client went away: the request leaves at the next step."""
        generation.cancelled = True

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- the engine thread ------------------------------------------------------------------------------
    def _admit(self) -> bool:
        """Move waiting requests into the batch; False when stopping."""
        with self._cond:
            while not self._stopped and not self._running and not self._waiting:
                self._cond.wait()
            if self._stopped:
                return False
            now = time.perf_counter_ns()
            while self._waiting and len(self._running) < self.limits.max_num_seqs:
                generation = self._waiting.popleft()
                if generation.cancelled:
                    self._aborted(generation)
                    continue
                generation.admitted_ns = now
                generation.state = np.zeros(self.decoder.hidden, np.float32)
                if self.prefix_cache is not None:
                    generation.block_names = block_names(generation.prompt, self.limits.block_size)
                    generation.cached_tokens = generation.fed = self.prefix_cache.lookup(generation.prompt,
                                                                                         generation.block_names)
                    self._metrics.prefix_queries.labels(self.name).inc(len(generation.prompt))
                    self._metrics.prefix_hits.labels(self.name).inc(generation.cached_tokens)
                self._running.append(generation)
                self._metrics.queue.labels(self.name).observe((now - generation.arrival_ns) / 1e9)
            self._metrics.waiting.labels(self.name).set(len(self._waiting))
            self._metrics.running.labels(self.name).set(len(self._running))
            return True

    def _plan_step(self) -> tuple[list[Generation], list[np.ndarray]]:
        """Who runs this step with which tokens: decoding requests first (one token each), then prompt chunks."""
        budget = self.limits.max_num_batched_tokens
        rows, runs = [], []
        for g in self._running:
            if g.fed >= len(g.prompt) and budget > 0:
                rows.append(g)
                runs.append(np.asarray(g.tokens[-1:] or [EOS], np.int64))
                budget -= 1
        for g in self._running:
            if g.fed < len(g.prompt) and budget > 0:
                chunk = g.prompt[g.fed:g.fed + budget]
                rows.append(g)
                runs.append(chunk)
                budget -= len(chunk)
        return rows, runs

    def _aborted(self, g: Generation) -> bool:
        """A cancelled request leaves (its batch slot free for the next step): counted as vLLM counts it, a
        request finished for reason 'abort'. False (filters it out)."""
        if not g.finish_reason:
            self._metrics.success.labels(self.name, "abort").inc()
        return False

    def _loop(self) -> None:
        vocabulary_span = len(self.decoder.vocabulary) - 1
        while self._admit():
            stalled = self._stall_until - time.monotonic()
            if stalled > 0:
                time.sleep(stalled)
                continue
            self._running = [g for g in self._running if not g.cancelled or self._aborted(g)]
            if not self._running:
                continue
            rows, runs = self._plan_step()
            cpu_before = time.thread_time_ns()
            next_tokens, states = self.decoder.step(StepBatch.pack(runs, np.stack([g.state for g in rows])))
            self.cpu_ns += time.thread_time_ns() - cpu_before
            self.steps += 1
            now = time.perf_counter_ns()
            moved = []
            prompt_tokens = generated = 0
            for i, g in enumerate(rows):
                g.state = states[i]
                if g.fed < len(g.prompt):
                    g.fed += len(runs[i])
                    prompt_tokens += len(runs[i])
                    if g.fed < len(g.prompt):
                        continue  # more prompt chunks to go: no token yet
                token = int(next_tokens[i])
                if g.script is not None:  # a graded item's reply: the script's words, then the end
                    token = g.script.token(len(g.tokens), len(self._running), token)
                elif token == EOS and (g.ignore_eos or len(g.tokens) < g.min_tokens):
                    token = 1 + int(np.abs(g.state).argmax()) % vocabulary_span  # generation goes on
                self._emit(g, token, now)
                generated += 1
                moved.append(g)
            metrics = self._metrics
            if prompt_tokens:
                metrics.prompt_tokens.labels(self.name).inc(prompt_tokens)
            if generated:
                metrics.generation_tokens.labels(self.name).inc(generated)
            finished = [g for g in moved if g.done]
            if finished:
                self._running = [g for g in self._running if not g.done]
                metrics.running.labels(self.name).set(len(self._running))
            if moved:
                self._publish(moved)

    def _emit(self, g: Generation, token: int, now: int) -> None:
        m, name = self._metrics, self.name
        if g.first_token_ns < 0:
            g.first_token_ns = now
            if self.prefix_cache is not None:  # its prompt's blocks are computed: later requests may reuse them
                self.prefix_cache.insert(g.block_names)
            m.ttft.labels(name).observe((now - g.arrival_ns) / 1e9)
            m.prefill.labels(name).observe((now - g.admitted_ns) / 1e9)
        else:
            m.itl.labels(name).observe((now - g.last_token_ns) / 1e9)
        g.last_token_ns = now
        g.tokens.append(token)
        if len(g.tokens) >= g.max_tokens:
            g.finish_reason = "length"
        elif token == EOS:
            g.finish_reason = "stop"
        if g.finish_reason and self.prefix_cache is not None:  # its computed blocks, for later requests
            # the prompt's blocks were hashed at admission: only those that the reply completes are hashed now
            self.prefix_cache.insert(block_names(np.concatenate([g.prompt, np.asarray(g.tokens, np.int64)]),
                                                 self.limits.block_size, g.block_names))
            m.cache_usage.labels(name).set(self.prefix_cache.usage())
        if g.finish_reason:
            m.e2e.labels(name).observe((now - g.arrival_ns) / 1e9)
            m.decode.labels(name).observe((now - g.first_token_ns) / 1e9)
            m.success.labels(name, g.finish_reason).inc()
