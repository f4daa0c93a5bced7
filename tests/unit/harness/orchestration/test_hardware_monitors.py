"""The hardware monitors' scrapes (harness/orchestration/hardware_monitors.py): what is kept of each exporter's
exposition — DCGM's, Kepler's, Triton's GPU and CPU series, the node exporter's — in text as those projects expose it;
a source that is down or not Prometheus' format is a line that says so."""
from __future__ import annotations

import json
from pathlib import Path

from tailrace.contract.layout import RunLayout
from tailrace.contract.profile import Monitor
from tailrace.harness.orchestration.hardware_monitors import MonitorRecorder, hardware_samples

# as NVIDIA's dcgm-exporter exposes them (its default counters file; labels as in its README's example), Kepler's
# per-container joules (its metrics reference), Triton's GPU series (its metrics.md), the node exporter's
DATA = Path(__file__).parent / "data"
DCGM = (DATA / "dcgm-exporter.prom").read_text()
KEPLER = (DATA / "kepler.prom").read_text()
TRITON = (DATA / "triton-gpu.prom").read_text()
NODE = (DATA / "node-exporter.prom").read_text()


def test_what_each_exporter_says_is_kept_and_nothing_else():
    dcgm = hardware_samples(DCGM)
    assert dcgm['DCGM_FI_DEV_GPU_UTIL{device="nvidia0",gpu="0"}'] == 83
    # (a counter's sample named as Prometheus' parser names it: with _total)
    assert dcgm['DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total{device="nvidia0",gpu="0"}'] == 98765432101
    assert not any("SM_CLOCK" in k for k in dcgm) and len(dcgm) == 6
    kepler = hardware_samples(KEPLER)
    assert sum(kepler.values()) == 1234.5 + 456.25 and all(k.startswith("kepler_container_joules_total") for k in kepler)
    triton = hardware_samples(TRITON)
    assert set(k.split("{")[0] for k in triton) == {"nv_gpu_utilization", "nv_gpu_power_usage",
                                                    "nv_energy_consumption_total"}
    node = hardware_samples(NODE)
    # the CPUs summed by mode, counted apart; the network left out
    assert node == {'node_cpu_seconds_total{mode="idle"}': 190.5, 'node_cpu_seconds_total{mode="user"}': 50.25,
                    "node_memory_MemTotal_bytes": 2.5e10, "node_memory_MemAvailable_bytes": 2.0e10, "node_cpus": 2.0}


def test_a_source_that_is_down_or_not_prometheus_is_a_line_that_says_so(tmp_path):
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Garbage(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the handler's name
            body = b"{not: prometheus}\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Garbage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed_port = free.getsockname()[1]
    layout = RunLayout(tmp_path)
    monitors = [Monitor(name="garbage", url=f"http://127.0.0.1:{server.server_port}/metrics"),
                Monitor(name="down", url=f"http://127.0.0.1:{closed_port}/metrics", timeout_s=0.5)]
    recorder = MonitorRecorder(layout, monitors)
    try:
        recorder.periodic()
    finally:
        recorder.close()
        server.shutdown()
        thread.join(5)
    garbage = json.loads(layout.monitor_timeline("garbage").read_text())
    down = json.loads(layout.monitor_timeline("down").read_text())
    assert "not Prometheus' text format" in garbage["error"] and "ConnectError" in down["error"]
    assert layout.monitor_names() == ["down", "garbage"]
