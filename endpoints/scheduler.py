"""A bounded queue per model in front of a fixed number of execution slots (threads).

A request is accepted into the queue or refused at once (queue full → UNAVAILABLE); a slot takes the
oldest request, runs it and resolves its future with the outputs and the stage timings.
"""
from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from endpoints.errors import InferenceError, unavailable
from endpoints.metrics import ServerMetrics
from endpoints.runners import Runner
from endpoints.statistics import ModelStatistics

DEFAULT_QUEUE_DEPTH = 1024


@dataclass
class Timings:
    """Stage timings of one request (durations in ns from the monotonic clock)."""

    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0

    @property
    def compute_ns(self) -> int:
        return self.compute_input_ns + self.compute_infer_ns + self.compute_output_ns


@dataclass
class Job:
    """One request waiting for a slot."""

    inputs: dict[str, np.ndarray]
    enqueued_ns: int
    future: Future = field(default_factory=Future)
    timings: Timings = field(default_factory=Timings)


class ModelScheduler:
    """Queue + slots for one model."""

    def __init__(self, name: str, runner: Runner, slots: int, queue_depth: int, metrics: ServerMetrics) -> None:
        if slots < 1:
            raise ValueError(f"model {name}: slots must be >= 1, got {slots}")
        self.name = name
        self.slots = slots
        self.queue_depth = queue_depth if queue_depth > 0 else DEFAULT_QUEUE_DEPTH
        self.statistics = ModelStatistics(name)
        self._runner = runner
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=self.queue_depth)
        self._metrics = metrics
        self._in_flight = metrics.in_flight.labels(name)
        self._depth_gauge = metrics.queue_depth.labels(name)
        self._queue_hist = metrics.queue_seconds.labels(name)
        self._compute_hist = metrics.compute_seconds.labels(name)
        self._stall_until = 0.0
        self._threads = [threading.Thread(target=self._slot_loop, name=f"slot-{name}-{i}", daemon=True)
                         for i in range(slots)]
        for t in self._threads:
            t.start()

    def submit(self, inputs: dict[str, np.ndarray]) -> Job:
        """Queue a request or refuse it at once when the queue is full."""
        job = Job(inputs, time.perf_counter_ns())
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise unavailable(f"model '{self.name}' queue is full ({self.queue_depth} waiting); retry later") from None
        self._in_flight.inc()
        self._depth_gauge.set(self._queue.qsize())
        return job

    def stall(self, seconds: float) -> None:
        """Fault injection: slots take no new work for `seconds` (requests queue up meanwhile)."""
        self._stall_until = time.monotonic() + seconds

    def stop(self) -> None:
        """Ask every slot to finish; queued requests are refused."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.future.set_exception(unavailable("server is shutting down"))
        for _ in self._threads:
            self._queue.put(None)

    def _slot_loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            pause = self._stall_until - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            self._execute(job)

    def _execute(self, job: Job) -> None:
        t_start = time.perf_counter_ns()
        t = job.timings
        t.queue_ns = t_start - job.enqueued_ns
        self._depth_gauge.set(self._queue.qsize())
        try:
            feed = {k: np.ascontiguousarray(v) for k, v in job.inputs.items()}
            t_input = time.perf_counter_ns()
            outputs = self._runner.run(feed)
            t_infer = time.perf_counter_ns()
            outputs = {k: np.ascontiguousarray(v) for k, v in outputs.items()}
            t_output = time.perf_counter_ns()
        except Exception as exc:  # a model failing must not take the slot down
            self._in_flight.dec()
            job.future.set_exception(InferenceError(f"model '{self.name}' failed: {exc}", 400))
            return
        t.compute_input_ns = t_input - t_start
        t.compute_infer_ns = t_infer - t_input
        t.compute_output_ns = t_output - t_infer
        self._in_flight.dec()
        self._queue_hist.observe(t.queue_ns / 1e9)
        self._compute_hist.observe(t.compute_ns / 1e9)
        job.future.set_result(outputs)
