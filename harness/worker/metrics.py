"""A worker's Prometheus metrics: latency, send lag, in-flight, results by status class — every series labelled
with the run, so one Prometheus (and deploy/grafana/tailrace.json) tells runs apart.

Counted in plain Python numbers on the request path and turned into metric families only when scraped (a custom
collector): prometheus_client's own metric objects take a lock on every update, ~7% of a worker's loop at
4,000 req/s.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict

DEFAULT_BIND = "127.0.0.1"
LATENCY_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10)
SEND_LAG_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 1)


class _Histogram:
    """Counts per bucket (upper bounds in ns, +Inf last) and the sum, in seconds when read."""

    __slots__ = ("bounds_ns", "counts", "sum_ns")

    def __init__(self, bounds_s: tuple[float, ...]) -> None:
        self.bounds_ns = [round(b * 1e9) for b in bounds_s]
        self.counts = [0] * (len(bounds_s) + 1)
        self.sum_ns = 0

    def observe(self, value_ns: int) -> None:
        self.counts[bisect_left(self.bounds_ns, value_ns)] += 1  # a value on a bound counts in it (le)
        self.sum_ns += value_ns

    def cumulative(self, bounds_s: tuple[float, ...]) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, count in zip((*map(str, map(float, bounds_s)), "+Inf"), self.counts):
            running += count
            out.append((bound, running))
        return out


class WorkerMetrics:
    """Prometheus metrics of a worker, served on `bind`:`port` when a port is given (0: a free one, chosen as it
    binds — no other process can take it between the choice and the bind); `port` is then the one served."""

    def __init__(self, port: int | None, bind: str | None = None, run_id: str = "") -> None:
        self.run_id = run_id
        self.port: int | None = None
        self._latency: dict[tuple[str, str], _Histogram] = {}
        self._send_lag: dict[str, _Histogram] = {}
        self._in_flight: dict[str, int] = {}
        self._results: dict[tuple[str, str, str], int] = defaultdict(int)
        if port is not None:
            from prometheus_client import CollectorRegistry, start_http_server

            self.registry = CollectorRegistry()
            self.registry.register(self)
            addr = bind or DEFAULT_BIND
            try:
                server, _ = start_http_server(port, addr=addr, registry=self.registry)
            except OSError as exc:
                raise OSError(exc.errno, f"metrics port {addr}:{port}: {exc.strerror or exc}") from None
            self.port = server.server_port

    def record(self, region: str, endpoint: str, status: str, latency_ns: int, lag_ns: int, in_flight: int) -> None:
        """One finished request."""
        latency = self._latency.get((region, endpoint))
        if latency is None:
            latency = self._latency[(region, endpoint)] = _Histogram(LATENCY_BUCKETS_S)
        latency.observe(latency_ns)
        lag = self._send_lag.get(region)
        if lag is None:
            lag = self._send_lag[region] = _Histogram(SEND_LAG_BUCKETS_S)
        lag.observe(max(lag_ns, 0))
        self._in_flight[region] = in_flight
        self._results[(region, endpoint, status)] += 1

    def collect(self):
        """The metric families, as a scrape reads them (prometheus_client's custom collector protocol)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        run = self.run_id
        latency = HistogramMetricFamily("tailrace_request_latency_seconds", "Latency from intended send time",
                                        labels=["run_id", "region", "endpoint"])
        for (region, endpoint), h in list(self._latency.items()):
            latency.add_metric([run, region, endpoint], h.cumulative(LATENCY_BUCKETS_S), h.sum_ns / 1e9)
        lag = HistogramMetricFamily("tailrace_send_lag_seconds", "Actual minus intended send time",
                                    labels=["run_id", "region"])
        for region, h in list(self._send_lag.items()):
            lag.add_metric([run, region], h.cumulative(SEND_LAG_BUCKETS_S), h.sum_ns / 1e9)
        in_flight = GaugeMetricFamily("tailrace_in_flight_requests", "Requests sent and not yet answered",
                                      labels=["run_id", "region"])
        for region, value in list(self._in_flight.items()):
            in_flight.add_metric([run, region], value)
        results = CounterMetricFamily("tailrace_requests", "Requests by status class",
                                      labels=["run_id", "region", "endpoint", "status"])
        for (region, endpoint, status), value in list(self._results.items()):
            results.add_metric([run, region, endpoint, status], value)
        return [latency, lag, in_flight, results]
