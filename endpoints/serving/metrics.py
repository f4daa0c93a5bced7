"""Prometheus metrics of the embedded server, derived at scrape time from the per-model statistics.

Like Triton's metrics: cumulative counters of requests, failures and queue / compute durations per
model, the CPU time each model's executions used, in-flight requests and the process's own metrics (RSS, CPU,
fds); where the host has them, RAPL's and NVML's energy and GPU metrics (endpoints/serving/power_sources.py).
"""
from __future__ import annotations

import resource
from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tailrace.endpoints.serving.power_sources import RaplCollector, nvml_collector, rapl_zones
from tailrace.endpoints.serving.statistics import STAGES, ModelStatistics


class _StatisticsCollector:
    def __init__(self, models: Callable[[], Iterable[ModelStatistics]],
                 cpu: Callable[[], Iterable[tuple[str, int]]]) -> None:
        self._models, self._cpu = models, cpu

    def collect(self):
        requests = CounterMetricFamily("tailrace_server_requests", "Inference requests received",
                                       labels=["model", "protocol"])
        failures = CounterMetricFamily("tailrace_server_failures", "Inference requests that failed",
                                       labels=["model", "reason"])
        success = CounterMetricFamily("tailrace_server_success", "Inference requests executed", labels=["model"])
        stages = CounterMetricFamily("tailrace_server_stage_duration_seconds",
                                     "Cumulative time per stage of a request (queue, compute_input, compute_infer, "
                                     "compute_output): they add up to at most the whole request's time",
                                     labels=["model", "stage"])
        whole = CounterMetricFamily("tailrace_server_request_duration_seconds",
                                    "Cumulative time of whole successful requests (never summed with the stages)",
                                    labels=["model"])
        in_flight = GaugeMetricFamily("tailrace_server_in_flight_requests", "Requests queued or executing",
                                      labels=["model"])
        cpu = CounterMetricFamily("tailrace_server_model_cpu_seconds", "CPU time a model's executions (a generative "
                                  "model's engine steps) used on their threads", labels=["model"])
        for name, ns in self._cpu():
            cpu.add_metric([name], ns / 1e9)
        for stats in self._models():
            for protocol, n in stats.requests.items():
                requests.add_metric([stats.name, protocol], n)
            for reason, n in stats.failures.items():
                failures.add_metric([stats.name, reason], n)
            counts, ns = stats.snapshot()
            success.add_metric([stats.name], counts[0])
            for i, stage in enumerate(STAGES[:6]):
                if stage == "success":
                    whole.add_metric([stats.name], ns[i] / 1e9)
                elif stage != "fail":
                    stages.add_metric([stats.name, stage], ns[i] / 1e9)
            in_flight.add_metric([stats.name], stats.in_flight)
        peak = GaugeMetricFamily("tailrace_server_peak_rss_bytes", "Peak resident set size of the server process "
                                 "(getrusage ru_maxrss)")
        peak.add_metric([], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        yield from (requests, failures, success, stages, whole, in_flight, cpu, peak)


class ServerMetrics:
    """The server's Prometheus registry."""

    def __init__(self, models: Callable[[], Iterable[ModelStatistics]],
                 cpu: Callable[[], Iterable[tuple[str, int]]] = lambda: ()) -> None:
        """`cpu`: (model, CPU ns its executions used) of every model, the generative ones too."""
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, cpu seconds, fds
        self.registry.register(_StatisticsCollector(models, cpu))
        zones = rapl_zones()
        if zones:
            self.registry.register(RaplCollector(zones))
        gpus = nvml_collector()
        if gpus is not None:
            self.registry.register(gpus)

    def exposition(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
