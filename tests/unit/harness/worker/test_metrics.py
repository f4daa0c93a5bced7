"""The worker's metrics, counted on the request path and read at scrape time, expose what prometheus_client's own
metric objects expose for the same requests."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tailrace.harness.worker.metrics import LATENCY_BUCKETS_S, SEND_LAG_BUCKETS_S, WorkerMetrics

REQUESTS = [("r1", "e1", "ok", 1_000_000, 50_000, 3), ("r1", "e1", "ok", 7_500_000, 2_000_000, 2),
            ("r1", "e2", "timeout", 12_000_000_000, -5, 1), ("r2", "e1", "ok", 250_000_000, 100_000, 9),
            ("r1", "e1", "http_error", 10_000_000_000, 1_000_000_000, 4)]


def _samples(registry: CollectorRegistry) -> dict:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples if not s.name.endswith("_created")}


def test_a_scrape_reads_what_prometheus_clients_own_metrics_would():
    ours = WorkerMetrics(None, run_id="run-1")
    for request in REQUESTS:
        ours.record(*request)
    mine = CollectorRegistry()
    mine.register(ours)

    reference = CollectorRegistry()
    latency = Histogram("tailrace_request_latency_seconds", "Latency from intended send time",
                        ["run_id", "region", "endpoint"], buckets=LATENCY_BUCKETS_S, registry=reference)
    lag = Histogram("tailrace_send_lag_seconds", "Actual minus intended send time", ["run_id", "region"],
                    buckets=SEND_LAG_BUCKETS_S, registry=reference)
    in_flight = Gauge("tailrace_in_flight_requests", "Requests sent and not yet answered", ["run_id", "region"],
                      registry=reference)
    results = Counter("tailrace_requests", "Requests by status class", ["run_id", "region", "endpoint", "status"],
                      registry=reference)
    for region, endpoint, status, latency_ns, lag_ns, flying in REQUESTS:
        latency.labels("run-1", region, endpoint).observe(latency_ns / 1e9)
        lag.labels("run-1", region).observe(max(lag_ns, 0) / 1e9)
        in_flight.labels("run-1", region).set(flying)
        results.labels("run-1", region, endpoint, status).inc()

    got, want = _samples(mine), _samples(reference)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert abs(got[key] - value) < 1e-9, key
    assert got[("tailrace_request_latency_seconds_bucket",
                (("endpoint", "e1"), ("le", "0.001"), ("region", "r1"), ("run_id", "run-1")))] == 1  # on the bound


def test_port_0_serves_on_a_free_port_it_reports_and_a_taken_port_is_an_error_naming_it():
    """A local run's worker binds a free port itself (port 0) and reports it; a port another process holds is one
    error naming the address (the worker then cannot run, and says so to its master)."""
    import socket

    import httpx
    import pytest

    metrics = WorkerMetrics(0, run_id="run-1")
    metrics.record(*REQUESTS[0])
    assert metrics.port and metrics.port > 0
    text = httpx.get(f"http://127.0.0.1:{metrics.port}/metrics", timeout=5).text
    assert 'tailrace_requests_total{endpoint="e1",region="r1",run_id="run-1",status="ok"} 1.0' in text
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"metrics port 127.0.0.1:{port}: Address already in use"):
            WorkerMetrics(port)
    assert WorkerMetrics(None).port is None
