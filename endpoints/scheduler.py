"""A bounded queue per model in front of a fixed number of execution slots.

A request waits in the model's FIFO queue for a slot; when the queue is full it is refused at once
(UNAVAILABLE / 503). Two execution modes, the same semantics:
- inline (single-slot, compute-only models such as ONNX): the slot is a token; the request that holds
  it runs on its own thread of control (the HTTP event loop, or its gRPC thread) — no thread hop;
- slot threads (every other model): `slots` threads take jobs from the bounded queue; a finished slot
  starts the next job at once, so hand-offs never wait on the event loop.
"""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from endpoints.errors import InferenceError, unavailable
from endpoints.runners import Runner
from endpoints.statistics import ModelStatistics

DEFAULT_QUEUE_DEPTH = 1024


def queue_full(model: str, depth: int) -> InferenceError:
    """The refusal of a request whose model's queue is full (HTTP 503 / gRPC UNAVAILABLE)."""
    return unavailable(f"model '{model}' queue is full ({depth} waiting); retry later")


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


class _AsyncWaiter:
    __slots__ = ("loop", "future", "thread_id")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future = self.loop.create_future()
        self.thread_id = threading.get_ident()

    def grant(self, pool: "SlotPool") -> None:
        def deliver() -> None:
            if self.future.cancelled():  # the client went away while waiting: pass the slot on
                pool.release()
            else:
                self.future.set_result(None)

        if threading.get_ident() == self.thread_id:
            deliver()
        else:
            self.loop.call_soon_threadsafe(deliver)


class _ThreadWaiter:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = threading.Event()

    def grant(self, pool: "SlotPool") -> None:
        self.event.set()


class SlotPool:
    """N slot tokens and a bounded FIFO of waiters; safe across the event loop and threads."""

    def __init__(self, name: str, slots: int, depth: int) -> None:
        self.name, self.slots, self.depth = name, slots, depth
        self._lock = threading.Lock()
        self._free = slots
        self._waiters: deque = deque()

    def _enqueue_or_take(self, make_waiter):
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return None
            if len(self._waiters) >= self.depth:
                raise queue_full(self.name, self.depth)
            waiter = make_waiter()
            self._waiters.append(waiter)
            return waiter

    async def acquire_async(self) -> None:
        """Take a slot, waiting in line on the event loop; UNAVAILABLE at once when the line is full."""
        waiter = self._enqueue_or_take(_AsyncWaiter)
        if waiter is not None:
            await waiter.future

    def acquire_blocking(self) -> None:
        """Take a slot, waiting in line on this thread; UNAVAILABLE at once when the line is full."""
        waiter = self._enqueue_or_take(_ThreadWaiter)
        if waiter is not None:
            waiter.event.wait()

    def release(self) -> None:
        """Give the slot to the oldest waiter, or back to the pool."""
        with self._lock:
            waiter = self._waiters.popleft() if self._waiters else None
            if waiter is None:
                self._free += 1
        if waiter is not None:
            waiter.grant(self)

    def waiting(self) -> int:
        return len(self._waiters)


@dataclass
class _Job:
    inputs: dict[str, np.ndarray]
    timings: Timings
    future: Future
    enqueued_ns: int


@dataclass
class _Pending:
    inputs: dict[str, np.ndarray]
    timings: Timings
    future: asyncio.Future
    enqueued_ns: int
    rows: int


class ModelScheduler:
    """Queue + slots for one model, and the execution of a request that holds a slot.

    With `max_batch` > 1 (dynamic batching, HTTP path), the requests that are waiting when a slot
    frees up — at most `max_batch` rows — run as one batch, as Triton's dynamic batcher does with a
    zero queue delay; each request's compute time is then its batch's.
    """

    def __init__(self, name: str, runner: Runner, slots: int, queue_depth: int, max_batch: int = 1) -> None:
        if slots < 1:
            raise ValueError(f"model {name}: slots must be >= 1, got {slots}")
        self.name = name
        self.slots = slots
        self.queue_depth = queue_depth if queue_depth > 0 else DEFAULT_QUEUE_DEPTH
        self.statistics = ModelStatistics(name)
        self._pool = SlotPool(name, slots, self.queue_depth)
        self._runner = runner
        # Compute-only single-slot models run inline (on the event loop, or on the gRPC thread that holds
        # the slot). Every other model has `slots` slot threads taking jobs from a bounded FIFO queue: a
        # finished slot starts the next job at once, with no hop through the event loop in between.
        self._inline = slots == 1 and getattr(runner, "compute_only", False)
        self._jobs: queue.Queue = queue.Queue(maxsize=self.queue_depth)
        self._threads: list[threading.Thread] = []
        if not self._inline:
            self._threads = [threading.Thread(target=self._slot_loop, name=f"slot-{name}-{i}", daemon=True)
                             for i in range(slots)]
            for t in self._threads:
                t.start()
        self._stall_until = 0.0
        self._accepting = True
        self.max_batch = max(1, max_batch)
        self._pending: deque[_Pending] = deque()
        self._draining = False

    async def infer_async(self, inputs: dict[str, np.ndarray], timings: Timings, rows: int = 1
                          ) -> dict[str, np.ndarray]:
        """Queue, execute and return outputs (HTTP, on the event loop)."""
        self._check_accepting()
        if self.max_batch > 1:
            return await self._infer_batched(inputs, timings, rows)
        if not self._inline:
            return await asyncio.wrap_future(self._submit(inputs, timings))
        enqueued = time.perf_counter_ns()
        stats = self.statistics
        stats.in_flight += 1
        try:
            await self._pool.acquire_async()
        except BaseException:
            stats.in_flight -= 1
            raise
        try:
            pause = self._stall_until - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            return self._execute_granted(inputs, timings, enqueued)
        finally:
            self._pool.release()
            stats.in_flight -= 1

    def _submit(self, inputs, timings: Timings) -> Future:
        """Queue a job for the slot threads, or refuse it at once when the queue is full."""
        job = _Job(inputs, timings, Future(), time.perf_counter_ns())
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise queue_full(self.name, self.queue_depth) from None
        self.statistics.in_flight += 1
        return job.future

    def _slot_loop(self) -> None:
        free_since = time.perf_counter_ns()  # when this slot finished its previous job
        while True:
            job = self._jobs.get()
            if job is None:
                return
            pause = self._stall_until - time.monotonic()
            if pause > 0:
                time.sleep(pause)
                free_since = time.perf_counter_ns()
            # A job's queueing ends when the slot is free for it: max(arrival, end of the previous job).
            # The thread's wake-up after that (futex, a free core, the GIL) is execution overhead and is
            # counted in compute, so queue + compute is exactly the time the request waited plus the time
            # it held the slot.
            granted = max(job.enqueued_ns, free_since)
            job.timings.queue_ns = granted - job.enqueued_ns
            try:
                outputs = self._execute(job.inputs, job.timings, granted)
            except InferenceError as exc:
                free_since = time.perf_counter_ns()
                self.statistics.in_flight -= 1
                job.future.set_exception(exc)
                continue
            free_since = time.perf_counter_ns()
            self.statistics.in_flight -= 1
            job.future.set_result(outputs)

    def infer_blocking(self, inputs: dict[str, np.ndarray], timings: Timings) -> dict[str, np.ndarray]:
        """Queue, execute and return outputs on the calling thread (gRPC)."""
        self._check_accepting()
        if not self._inline:
            return self._submit(inputs, timings).result()
        enqueued = time.perf_counter_ns()
        stats = self.statistics
        stats.in_flight += 1
        try:
            self._pool.acquire_blocking()
        except BaseException:
            stats.in_flight -= 1
            raise
        try:
            pause = self._stall_until - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            return self._execute_granted(inputs, timings, enqueued)
        finally:
            self._pool.release()
            stats.in_flight -= 1

    def _execute_granted(self, inputs, timings: Timings, enqueued: int) -> dict[str, np.ndarray]:
        """Run a request that has just been granted its slot (inline mode)."""
        granted = time.perf_counter_ns()
        timings.queue_ns = granted - enqueued
        return self._execute(inputs, timings, granted)

    async def _infer_batched(self, inputs, timings: Timings, rows: int) -> dict[str, np.ndarray]:
        if len(self._pending) >= self.queue_depth:
            raise queue_full(self.name, self.queue_depth)
        loop = asyncio.get_running_loop()
        item = _Pending(inputs, timings, loop.create_future(), time.perf_counter_ns(), rows)
        self._pending.append(item)
        self.statistics.in_flight += 1
        if not self._draining:
            self._draining = True
            loop.create_task(self._drain())
        try:
            return await item.future
        finally:
            self.statistics.in_flight -= 1

    async def _drain(self) -> None:
        """Run what is pending, batch by batch, each batch holding one slot."""
        try:
            while self._pending:
                await self._pool.acquire_async()
                try:
                    batch, rows = [], 0
                    while self._pending and (not batch or rows + self._pending[0].rows <= self.max_batch):
                        item = self._pending.popleft()
                        if not item.future.cancelled():
                            batch.append(item)
                            rows += item.rows
                    if not batch:
                        continue
                    pause = self._stall_until - time.monotonic()
                    if pause > 0:
                        await asyncio.sleep(pause)
                    self._run_batch(batch)
                finally:
                    self._pool.release()
        finally:
            self._draining = False

    def _run_batch(self, batch: list[_Pending]) -> None:
        start = time.perf_counter_ns()
        shared = Timings()
        try:
            if len(batch) == 1:
                merged = batch[0].inputs
            else:
                merged = {k: np.concatenate([b.inputs[k] for b in batch]) for k in batch[0].inputs}
            outputs = self._execute(merged, shared)
        except InferenceError as exc:
            for b in batch:
                b.future.set_exception(exc)
            return
        offset = 0
        for b in batch:
            t = b.timings
            t.queue_ns = start - b.enqueued_ns
            t.compute_input_ns, t.compute_infer_ns, t.compute_output_ns = (
                shared.compute_input_ns, shared.compute_infer_ns, shared.compute_output_ns)
            part = outputs if len(batch) == 1 else {k: v[offset:offset + b.rows] for k, v in outputs.items()}
            offset += b.rows
            b.future.set_result(part)

    def stall(self, seconds: float) -> None:
        """Fault injection: requests that get a slot in the next `seconds` wait until then (others queue)."""
        self._stall_until = time.monotonic() + seconds

    def stop(self) -> None:
        """Refuse new requests; let running ones finish."""
        self._accepting = False
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None and job.future.set_running_or_notify_cancel():
                job.future.set_exception(unavailable("server is shutting down"))
        for _ in self._threads:
            self._jobs.put(None)

    def _check_accepting(self) -> None:
        if not self._accepting:
            raise unavailable("server is shutting down")

    def _execute(self, inputs: dict[str, np.ndarray], t: Timings, granted_ns: int | None = None
                 ) -> dict[str, np.ndarray]:
        # compute starts when the slot is granted: a hop to a slot thread occupies the slot too, and
        # queue + compute must account for the whole slot-holding time (utilization, M/M/1 checks)
        t_start = granted_ns if granted_ns is not None else time.perf_counter_ns()
        try:
            feed = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
            t_input = time.perf_counter_ns()
            outputs = self._runner.run(feed, t_start)
            t_infer = time.perf_counter_ns()
            outputs = {k: np.ascontiguousarray(v) for k, v in outputs.items()}
            t_output = time.perf_counter_ns()
        except Exception as exc:  # a model failing must not take the server down
            raise InferenceError(f"model '{self.name}' could not run this input: {exc}") from None
        t.compute_input_ns = t_input - t_start
        t.compute_infer_ns = t_infer - t_input
        t.compute_output_ns = t_output - t_infer
        return outputs
