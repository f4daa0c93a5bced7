"""The servers' statistics before and after a run: a server slow to answer (busy, or just started) still gives its
snapshot — those wait longer than a scrape during the load — and one that never answers is a warning naming the
endpoint and why, not a file silently missing."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tailrace.contract.layout import RunLayout
from tailrace.harness.orchestration import server_stats
from tailrace.harness.orchestration.server_stats import ServerStatsRecorder, StatsTarget
from tailrace.harness.services.processes import free_port

SLOW_S = 0.4
METRICS = '# TYPE vllm:request_success counter\nvllm:request_success_total{model_name="m"} 3.0\n'


class _Slow(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        time.sleep(SLOW_S)
        body = METRICS.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def slow_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_slow_server_gives_its_snapshots_and_one_that_never_answers_is_a_warning(slow_server, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setattr(server_stats, "PERIODIC_TIMEOUT_S", SLOW_S / 4)
    monkeypatch.setattr(server_stats, "SNAPSHOT_TIMEOUT_S", SLOW_S * 5)
    layout = RunLayout(tmp_path)
    gone = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    targets = [StatsTarget("embed", "m", "remote", None, f"{slow_server}/metrics"),
               StatsTarget("rerank", "m", "remote", None, gone)]
    recorder = ServerStatsRecorder(layout, targets, interval_s=1.0)
    try:
        recorder.snapshot("before")
        assert layout.metrics_scrape("embed", "before").read_text() == METRICS  # waited for, as a snapshot is
        assert not layout.metrics_scrape("rerank", "before").exists()
        [missed] = recorder.missed
        assert missed.startswith(f"rerank: the server's metrics before the run were not scraped ({gone}: Connect")
        recorder.periodic()  # during the load: the short wait — the slow server's scrape is skipped, not waited for
        assert not layout.metrics_timeline("embed").exists() and len(recorder.missed) == 1
        recorder.snapshot("after")
        assert layout.metrics_scrape("embed", "after").exists() and len(recorder.missed) == 2
    finally:
        recorder.close()


def test_a_model_the_statistics_extension_does_not_keep_is_no_warning(tmp_path):
    """The embedded server's statistics extension answers 404 for its generative models (they have none): nothing is
    missed. A statistics server that does not answer at all is a warning."""
    class _NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base, gone = f"http://127.0.0.1:{server.server_address[1]}", f"http://127.0.0.1:{free_port()}"
    recorder = ServerStatsRecorder(RunLayout(tmp_path), [StatsTarget("llm", "synthetic_lm", "embedded", base, None),
                                                         StatsTarget("mlp", "mlp", "triton", gone, None)], 1.0)
    try:
        recorder.snapshot("before")
        [missed] = recorder.missed
        assert missed.startswith(f"mlp: the server's statistics of mlp before the run were not had ({gone}: Connect")
    finally:
        recorder.close()
        server.shutdown()
        server.server_close()
