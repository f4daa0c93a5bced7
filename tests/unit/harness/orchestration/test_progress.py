"""The terminal's live table counts cancelled streams apart from errors, as the report does: a worker's real
metrics (its Prometheus collector) read back by the scrape the live table uses."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from tailrace.harness.orchestration.progress import scrape
from tailrace.harness.worker.metrics import WorkerMetrics


class _Client:
    """httpx.Client's get, answering with a worker's /metrics text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def get(self, url: str) -> "_Client":
        return self


def test_cancelled_streams_are_not_errors_in_the_live_table():
    metrics = WorkerMetrics(port=None, run_id="r")
    for status in ("ok", "ok", "cancelled", "cancelled", "cancelled", "timeout"):
        metrics.record("eu", "llm", status, 10_000_000, 0, 1)
    registry = CollectorRegistry()
    registry.register(metrics)
    counts = scrape(_Client(generate_latest(registry).decode()), 0)
    assert (counts["ok"], counts["errors"], counts["cancelled"]) == (2, 1, 3)
