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


def test_the_live_table_reads_each_local_worker_where_its_hello_says_it_serves():
    """Each local worker binds a free port of its own and says it in its HELLO: the table follows those events,
    only for workers this run started, and only ports that were served."""
    from tailrace.harness.orchestration.local_run import LocalWorkers

    workers = LocalWorkers(plan=None, layout=None, processes={"eu-w0": None, "us-w0": None})
    workers.follow([{"event": "worker_hello", "client_id": "a", "worker": "eu-w0", "region": "eu", "metrics_port": 4101},
                    {"event": "worker_hello", "client_id": "b", "worker": "us-w0", "region": "us", "metrics_port": None},
                    {"event": "worker_hello", "client_id": "c", "worker": "ap-w0", "region": "ap", "metrics_port": 4103},
                    {"event": "worker_done", "client_id": "a", "summary": {}}])
    assert workers.metrics_ports == {"eu-w0": 4101}


def test_the_last_frame_ends_its_line_in_a_log(monkeypatch):
    """`make demo > log`: rich ends a live table's last frame with a newline on a terminal only, and the run's
    verdict line had run on after the table's caption ("…exact percentiles      PASS run demo-…")."""
    import io

    from rich.console import Console
    from rich.table import Table

    from tailrace.contract import terminal
    from tailrace.harness.orchestration.progress import LiveScreen

    out = io.StringIO()
    log = Console(file=out, force_terminal=False, width=60)
    monkeypatch.setattr(terminal, "console", lambda: log)
    screen = LiveScreen()
    table = Table(title="tailrace run r", caption="a live estimate")
    table.add_column("region")
    table.add_row("eu")
    screen.show(table)
    screen.close()
    log.print("PASS run r")
    assert "\nPASS run r" in out.getvalue() and out.getvalue().count("PASS run r") == 1
