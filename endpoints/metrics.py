"""Prometheus metrics of the embedded server (one registry per server)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

_SECONDS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ServerMetrics:
    """Request counts, failures, queue and compute durations per model, in-flight, process RSS."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, cpu seconds, fds
        self.requests = Counter("tailrace_server_requests", "Inference requests received", ["model", "protocol"],
                                registry=self.registry)
        self.failures = Counter("tailrace_server_failures", "Inference requests that failed", ["model", "reason"],
                                registry=self.registry)
        self.queue_seconds = Histogram("tailrace_server_queue_seconds", "Time in the model queue", ["model"],
                                       buckets=_SECONDS_BUCKETS, registry=self.registry)
        self.compute_seconds = Histogram("tailrace_server_compute_seconds", "Compute time (input+infer+output)",
                                         ["model"], buckets=_SECONDS_BUCKETS, registry=self.registry)
        self.in_flight = Gauge("tailrace_server_in_flight", "Requests queued or executing", ["model"],
                               registry=self.registry)
        self.queue_depth = Gauge("tailrace_server_queue_depth", "Requests waiting in the model queue", ["model"],
                                 registry=self.registry)

    def exposition(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
