"""Per-model statistics in the shape of Triton's statistics extension (counts and cumulative ns).

The hot path updates one record under one lock; Prometheus metrics and the statistics API are both
derived from it when asked.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterable

STAGES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
BATCH_STAGES = ("compute_input", "compute_infer", "compute_output")
_SUCCESS, _FAIL, _QUEUE, _INPUT, _INFER, _OUTPUT = range(6)


class ModelStatistics:
    """Thread-safe accumulator for one model."""

    def __init__(self, name: str, version: str = "1") -> None:
        self.name = name
        self.version = version
        self._lock = threading.Lock()
        self._counts = [0] * len(STAGES)
        self._ns = [0] * len(STAGES)
        self._batches: dict[int, list[int]] = {}  # size → [count, input ns, infer ns, output ns]
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ns = 0
        self.requests = {"http": 0, "grpc": 0}
        self.failures: dict[str, int] = {}
        self._in_flight = 0
        self.cpu_ns = 0  # CPU time its executions used (the slot thread's, around the compute), under the lock

    @property
    def in_flight(self) -> int:
        """Requests admitted (queued or executing) and not yet answered or dropped."""
        return self._in_flight

    def enter(self, n: int = 1) -> None:
        """`n` requests admitted: queued or executing (the slot threads, the gRPC threads and the event loop
        all call this and `leave`, so both take the lock)."""
        with self._lock:
            self._in_flight += n

    def leave(self, n: int = 1) -> None:
        """`n` requests answered, refused after admission, or dropped by a client that went away."""
        if n:
            with self._lock:
                self._in_flight -= n

    def record_success(self, batch_size: int, total_ns: int, queue_ns: int, input_ns: int, infer_ns: int,
                       output_ns: int, cpu_ns: int = 0) -> None:
        """One request executed on its own (one execution of `batch_size` rows) and its stage durations."""
        self.record_execution(batch_size, ((total_ns, queue_ns),), input_ns, infer_ns, output_ns, cpu_ns)

    def record_execution(self, rows: int, requests: Iterable[tuple[int, int]], input_ns: int, infer_ns: int,
                         output_ns: int, cpu_ns: int = 0) -> None:
        """One execution of `rows` rows that answered `requests` ((total ns, queue ns) each), as Triton counts
        it: every request is a success with the execution's compute durations; the execution is one entry of
        its batch size in batch_stats."""
        with self._lock:
            self.cpu_ns += cpu_ns  # (the execution's CPU, once: not per request)
            c, n = self._counts, self._ns
            k = 0
            for total_ns, queue_ns in requests:
                n[_SUCCESS] += total_ns
                n[_QUEUE] += queue_ns
                k += 1
            c[_SUCCESS] += k
            c[_QUEUE] += k
            c[_INPUT] += k
            c[_INFER] += k
            c[_OUTPUT] += k
            n[_INPUT] += k * input_ns
            n[_INFER] += k * infer_ns
            n[_OUTPUT] += k * output_ns
            b = self._batches.get(rows)
            if b is None:
                b = self._batches[rows] = [0, 0, 0, 0]
            b[0] += 1
            b[1] += input_ns
            b[2] += infer_ns
            b[3] += output_ns
            self.inference_count += rows
            self.execution_count += 1
            self.last_inference_ns = time.time_ns()

    def record_failure(self, total_ns: int, reason: str) -> None:
        """One request for this model that failed (rejected, bad input or runtime error)."""
        with self._lock:
            self._counts[_FAIL] += 1
            self._ns[_FAIL] += total_ns
            self.failures[reason] = self.failures.get(reason, 0) + 1

    def count_request(self, protocol: str) -> None:
        """A request arrived for this model (before any validation)."""
        self.requests[protocol] += 1  # a single int add under the GIL: atomic enough for a counter

    def snapshot(self) -> tuple[list[int], list[int]]:
        """(counts, ns) per stage, in STAGES order."""
        with self._lock:
            return list(self._counts), list(self._ns)

    def as_dict(self) -> dict:
        """Triton's JSON shape for one entry of `model_stats`."""
        with self._lock:
            return {
                "name": self.name,
                "version": self.version,
                "last_inference": self.last_inference_ns // 1_000_000,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {s: {"count": self._counts[i], "ns": self._ns[i]} for i, s in enumerate(STAGES)},
                "batch_stats": [
                    {"batch_size": size, **{s: {"count": b[0], "ns": b[1 + i]} for i, s in enumerate(BATCH_STAGES)}}
                    for size, b in sorted(self._batches.items())
                ],
            }
