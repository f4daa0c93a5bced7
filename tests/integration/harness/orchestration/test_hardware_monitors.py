"""What the hardware did, read from a real Prometheus node exporter (Debian's prometheus-node-exporter, started on
loopback with its CPU and memory collectors) scraped by `tailrace run` through a run of two rates: the CPU busier at
the higher rate, and each phase's CPU busy agreeing with /proc/stat read by this test over the same windows; beside it
the embedded server's own process (its CPU-seconds, its memory) and a labelled energy estimate from them; and a second
exporter stopped mid-run: the run goes on, the report says what it lacks."""
from __future__ import annotations

import re
import shutil
import threading
import time

import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.analyze_command import write_outputs
from tailrace.harness.services.processes import free_port, start_process, wait_http_ok
from tests.support import IN_CI, assert_valid, make_profile, run_with, sleep_until_measuring

EXPORTER = "prometheus-node-exporter"
AGREE_PCT = 10  # CPU busy % points: the exporter's and /proc/stat's reads are up to one scrape interval apart


def start_exporter(log):
    if shutil.which(EXPORTER) is None:
        if IN_CI:
            pytest.fail(f"{EXPORTER} must be installed in CI (.ci/run installs it)")
        pytest.skip(f"{EXPORTER} is not installed (apt-get install {EXPORTER})")
    port = free_port()
    process = start_process("node exporter", [shutil.which(EXPORTER), f"--web.listen-address=127.0.0.1:{port}",
                                              "--collector.disable-defaults", "--collector.cpu",
                                              "--collector.meminfo"], log)
    wait_http_ok(f"http://127.0.0.1:{port}/metrics", process, 20.0)
    return process, f"http://127.0.0.1:{port}/metrics"


@pytest.fixture
def node_exporter(tmp_path):
    process, url = start_exporter(tmp_path / "node-exporter.log")
    try:
        yield url
    finally:
        process.stop()


@pytest.fixture
def doomed_exporter(tmp_path):
    """A second node exporter, which the test stops in the middle of the run."""
    process, url = start_exporter(tmp_path / "doomed-exporter.log")
    try:
        yield process, url
    finally:
        process.stop()


def proc_stat_busy() -> tuple[float, float]:
    """(busy, all) jiffies of every CPU, as /proc/stat counts them (busy: all but idle and iowait)."""
    fields = [float(v) for v in open("/proc/stat").readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def test_a_node_exporters_cpu_and_memory_through_a_run(model_repo, tmp_path, node_exporter, doomed_exporter):
    readings: list[tuple[int, float, float]] = []
    stop = threading.Event()

    def read_proc_stat() -> None:
        while not stop.is_set():
            readings.append((time.time_ns(), *proc_stat_busy()))
            stop.wait(0.25)

    reader = threading.Thread(target=read_proc_stat, daemon=True)
    reader.start()
    endpoints = [{"name": "mlp", "url": "embedded", "protocol": "kserve-http", "model": "digits_mlp_fp32"}]
    profile = make_profile(model_repo, endpoints=endpoints, regions=[{"name": "here", "share": 1.0}],
                           load={"rate": 20, "duration_s": 8, "warmup_s": 1, "seed": 3,
                                 "phases": [{"at_s": 4, "kind": "step", "rate": 600}]},
                           monitors=[{"name": "host", "url": node_exporter, "interval_s": 0.5},
                                     {"name": "server", "url": "embedded", "interval_s": 0.5, "watts_per_core": 10},
                                     {"name": "doomed", "url": doomed_exporter[1], "interval_s": 0.5}])

    def stop_the_doomed_exporter(run) -> None:  # mid-run, 1 s into the second phase
        sleep_until_measuring(run, 5.0)
        doomed_exporter[0].stop()

    try:
        run, manifest = run_with(profile, tmp_path, stop_the_doomed_exporter)
    finally:
        stop.set()
        reader.join(5)
    assert_valid(manifest)
    analysis = analyze_run(run.run_dir)
    hardware = analysis.summary.hardware
    assert hardware is not None and hardware.missing[0] == (
        "host: no energy counter (DCGM, Triton, RAPL, NVML or Kepler): no joules measured, per request or per token")
    server = {r.phase: r for r in hardware.rows if r.monitor == "server"}  # the embedded server's own process
    assert server[2].process_cores > server[1].process_cores > 0 and server[2].memory_max_bytes > 0
    assert server[2].estimated_energy_j == pytest.approx(server[2].process_cores * server[2].duration_s * 10)
    assert server[2].energy_j is None and "an estimate" in server[2].estimate_basis
    # the utilization law from the server's own per-model CPU time: the model's CPU per request is within its
    # compute time (a thread's CPU never exceeds its wall time) and most of it (the MLP computes, it does not wait)
    law = {r.phase: r for r in hardware.endpoints if r.monitor == "server" and r.endpoint == "mlp"}
    assert set(law) == {1, 2} and law[2].throughput_rps > law[1].throughput_rps
    assert 0.2 < law[2].measured_utilization / law[2].rho <= 1.05, (law[2].measured_utilization, law[2].rho)
    assert 0 < law[2].cpu_ms_per_request <= law[2].mean_service_ms * 1.05
    assert law[2].estimated_energy_per_request_mj == pytest.approx(law[2].cpu_ms_per_request * 10)
    # the exporter stopped mid-run: the run went on (VALID above), its scrapes before the stop are read, and the
    # report says how many failed and why — its second phase has fewer scrapes, never a zero
    doomed = {r.phase: r for r in hardware.rows if r.monitor == "doomed"}
    failed = next(m for m in hardware.missing if m.startswith("doomed:"))
    # (its first failed scrape: refused once it is gone, or cut mid-answer when the stop lands during one — CI saw it)
    assert re.search(r"scrapes failed \(first: (ConnectError|RemoteProtocolError)", failed), hardware.missing
    assert doomed[1].cpu_busy_pct is not None and doomed[2].scrapes < doomed[1].scrapes, doomed
    rows = {r.phase: r for r in hardware.rows if r.monitor == "host"}
    assert set(rows) == {1, 2} and all(r.scrapes >= 4 for r in rows.values())
    assert rows[2].cpu_busy_pct > rows[1].cpu_busy_pct + 5, (rows[1].cpu_busy_pct, rows[2].cpu_busy_pct)
    assert all(r.memory_max_bytes and r.memory_max_bytes > 0 for r in rows.values())
    df = analysis.requests
    for phase, row in rows.items():
        t0, t1 = df.loc[df["phase"] == phase, "t_intended_ref"].min(), df.loc[df["phase"] == phase, "t_done_ref"].max()
        inside = [(b, a) for t, b, a in readings if t0 <= t <= t1]
        busy = (inside[-1][0] - inside[0][0]) / (inside[-1][1] - inside[0][1]) * 100
        assert abs(row.cpu_busy_pct - busy) <= AGREE_PCT, (phase, row.cpu_busy_pct, busy)
    write_outputs(analysis, run.run_dir / "report")
    page = (run.run_dir / "report" / "index.html").read_text()
    assert "id='hardware'" in page and (run.run_dir / "report" / "tables" / "hardware.csv").exists()
