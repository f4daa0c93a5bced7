"""The embedded server's in-flight gauge: changed from gRPC threads, slot threads and the event loop at once."""
from __future__ import annotations

import sys
import threading


class _EchoRunner:
    """Answers each row with its sum, at once (no model)."""

    compute_only = True

    def run(self, inputs, started_ns=None):
        x = inputs["x"]
        return {"sum": x.reshape(len(x), -1).sum(axis=1)}


def test_the_gauge_returns_to_zero_after_slot_threads_and_callers_race_on_it():
    """Callers admit requests on their own threads (gRPC's) while two slot threads answer batches of them: the
    count goes up on one thread and down by a batch's length on another. Without the statistics lock the
    gauge drifted (`in_flight -= len(batch)` reads, calls len, then writes: a thread switch in between loses
    the other thread's update)."""
    import numpy as np

    from tailrace.endpoints.serving.scheduler import ModelScheduler, Timings

    scheduler = ModelScheduler("m", _EchoRunner(), slots=2, queue_depth=4096, max_batch=4)
    x = np.ones((1, 4))
    start = threading.Barrier(8)

    def caller() -> None:
        start.wait()
        for _ in range(1500):
            scheduler.infer_blocking({"x": x}, Timings())

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=caller) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(previous)
        scheduler.stop()
    assert scheduler.statistics.execution_count > 0
    assert scheduler.statistics.in_flight == 0


def test_a_scrape_survives_a_connection_the_server_closed_after_an_error(tmp_path):
    """A server that closes its kept-alive connection after answering an error: the next scrape on it is retried
    once on a fresh connection, not lost."""
    import httpx

    from tailrace.contract.layout import RunLayout
    from tailrace.harness.orchestration.server_stats import ServerStatsRecorder, StatsTarget

    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return httpx.Response(200, text="tailrace:num_requests_running 0\n")

    target = StatsTarget("llm", "m", "embedded", None, "http://127.0.0.1:1/metrics", None, None)
    recorder = ServerStatsRecorder(RunLayout(tmp_path), [target], 1.0)
    recorder._clients[None] = httpx.Client(transport=httpx.MockTransport(handler))
    recorder.snapshot("before")
    assert calls["n"] == 2 and "num_requests_running" in RunLayout(tmp_path).metrics_scrape("llm", "before").read_text()
