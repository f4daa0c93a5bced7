"""Per-model statistics in the shape of Triton's statistics extension (counts and cumulative ns)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

STAGES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
BATCH_STAGES = ("compute_input", "compute_infer", "compute_output")


@dataclass
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += int(ns)


@dataclass
class ModelStatistics:
    """Thread-safe accumulator for one model."""

    name: str
    version: str = "1"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stages: dict[str, _Duration] = field(default_factory=lambda: {s: _Duration() for s in STAGES})
    _batches: dict[int, dict[str, _Duration]] = field(default_factory=dict)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0

    def record_success(self, batch_size: int, total_ns: int, queue_ns: int, input_ns: int, infer_ns: int,
                       output_ns: int) -> None:
        """One executed request and its stage durations."""
        with self._lock:
            self._stages["success"].add(total_ns)
            self._stages["queue"].add(queue_ns)
            self._stages["compute_input"].add(input_ns)
            self._stages["compute_infer"].add(infer_ns)
            self._stages["compute_output"].add(output_ns)
            batch = self._batches.setdefault(batch_size, {s: _Duration() for s in BATCH_STAGES})
            batch["compute_input"].add(input_ns)
            batch["compute_infer"].add(infer_ns)
            batch["compute_output"].add(output_ns)
            self.inference_count += batch_size
            self.execution_count += 1
            self.last_inference_ms = time.time_ns() // 1_000_000

    def record_failure(self, total_ns: int) -> None:
        """One request for this model that failed (rejected, bad input or runtime error)."""
        with self._lock:
            self._stages["fail"].add(total_ns)

    def as_dict(self) -> dict:
        """Triton's JSON shape for one entry of `model_stats`."""
        with self._lock:
            return {
                "name": self.name,
                "version": self.version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {s: {"count": d.count, "ns": d.ns} for s, d in self._stages.items()},
                "batch_stats": [
                    {"batch_size": size, **{s: {"count": d.count, "ns": d.ns} for s, d in stages.items()}}
                    for size, stages in sorted(self._batches.items())
                ],
            }
