"""A worker's Prometheus metrics: latency, send lag, in-flight, results by status class — every series labelled
with the run, so one Prometheus (and deploy/grafana/tailrace.json) tells runs apart."""
from __future__ import annotations

DEFAULT_BIND = "127.0.0.1"


class WorkerMetrics:
    """Prometheus metrics of a worker, served on `bind`:`port` when a port is given."""

    def __init__(self, port: int | None, bind: str | None = None, run_id: str = "") -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        self.registry = CollectorRegistry()
        self.run_id = run_id
        buckets = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10)
        self.latency = Histogram("tailrace_request_latency_seconds", "Latency from intended send time",
                                 ["run_id", "region", "endpoint"], buckets=buckets, registry=self.registry)
        self.send_lag = Histogram("tailrace_send_lag_seconds", "Actual minus intended send time", ["run_id", "region"],
                                  buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 1),
                                  registry=self.registry)
        self.in_flight = Gauge("tailrace_in_flight_requests", "Requests sent and not yet answered",
                               ["run_id", "region"], registry=self.registry)
        self.results = Counter("tailrace_requests", "Requests by status class", ["run_id", "region", "endpoint", "status"],
                               registry=self.registry)
        self._children: dict = {}
        if port:
            start_http_server(port, addr=bind or DEFAULT_BIND, registry=self.registry)

    def record(self, region: str, endpoint: str, status: str, latency_ns: int, lag_ns: int, in_flight: int) -> None:
        """One finished request (label children cached: labels() is slow on the hot path)."""
        key = (region, endpoint, status)
        kids = self._children.get(key)
        if kids is None:
            run = self.run_id
            kids = self._children[key] = (self.latency.labels(run, region, endpoint), self.send_lag.labels(run, region),
                                          self.in_flight.labels(run, region),
                                          self.results.labels(run, region, endpoint, status))
        kids[0].observe(latency_ns / 1e9)
        kids[1].observe(max(lag_ns, 0) / 1e9)
        kids[2].set(in_flight)
        kids[3].inc()
