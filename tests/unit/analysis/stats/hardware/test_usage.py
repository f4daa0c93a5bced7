"""What the hardware did per phase (analysis/read/hardware.py, analysis/stats/hardware/usage.py): counters read as
counters (a reset, a wrap), energy over a phase's window by interpolation, per request and per token, idle power
before the load, CPU busy from the node exporter's seconds; what a monitor cannot say, said."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tailrace.analysis.read.hardware import counter_increase, gpu_count, read_monitor
from tailrace.analysis.stats.hardware.attribution import EndpointServing, MonitorScope
from tailrace.analysis.stats.hardware.usage import hardware_section
from tailrace.analysis.stats.hardware.windows import PhaseWindow, per_request_windows, phase_windows

S = 1_000_000_000


def window(phase, t0, t1, requests, tokens, endpoint="e", compute_ms=None):
    """A phase whose ok requests of `endpoint` were sent evenly through [t0, t1)."""
    sent = np.linspace(t0, t1, requests, endpoint=False).astype(np.int64)
    return PhaseWindow(phase, t0, t1, {endpoint: sent}, {endpoint: tokens}, {endpoint: compute_ms})


def timeline(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_scrape_speaks_of_as_many_gpus_as_its_first_per_gpu_family_has_series():
    dcgm = {f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{i}"}}': 50.0 for i in range(8)} | {
        'DCGM_FI_DEV_POWER_USAGE{gpu="0"}': 300.0}
    triton = {'nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"}': 1e9, 'nv_gpu_memory_used_bytes{gpu_uuid="GPU-b"}': 2e9}
    assert gpu_count(dcgm) == 8 and gpu_count(triton) == 2
    assert np.isnan(gpu_count({"node_cpu_seconds_total{cpu=\"0\",mode=\"idle\"}": 1.0}))


def test_a_counter_that_resets_or_wraps_counts_what_it_reads_after():
    assert counter_increase(np.array([10.0, 15.0, 3.0, 8.0])).tolist() == [0.0, 5.0, 8.0, 13.0]


def test_energy_per_phase_per_request_and_per_token_from_a_dcgm_counter(tmp_path):
    """A GPU at 100 W idle for 4 s, then 300 W through a 10 s phase: 3,000 J in the phase, 2,000 above idle; 500
    requests, 40,000 output tokens."""
    lines, energy_mj = [], 0.0
    for t in range(0, 17):
        watts = 100.0 if t <= 4 else 300.0
        if t:
            energy_mj += watts * 1000  # over the second before
        lines.append({"t_ns": t * S, "samples": {
            'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total{gpu="0"}': energy_mj,
            'DCGM_FI_DEV_POWER_USAGE{gpu="0"}': watts, 'DCGM_FI_DEV_GPU_UTIL{gpu="0"}': 90.0 if t > 4 else 0.0,
            'DCGM_FI_DEV_FB_USED{gpu="0"}': 1024.0}})
    lines.insert(3, {"t_ns": 3 * S + 1, "error": "ReadTimeout: timed out"})
    series = read_monitor(timeline(tmp_path / "t.jsonl", lines), "gpu-node")
    assert series.energy_metric == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" and series.errors
    df = pd.DataFrame({"phase": [0, 1, 1], "status": ["ok", "ok", "ok"], "t_intended_ref": [S, 5 * S, 6 * S],
                       "endpoint": ["e", "e", "f"], "t_done_ref": [2 * S, 10 * S, 15 * S],
                       "output_tokens": [5, 20_000, 20_000], "server_compute_ns": [-1, 4_000_000, -1]})
    [w] = phase_windows(df)
    assert (w.phase, w.t0, w.t1, w.requests_of(), w.tokens_of(), w.compute_ms) == (
        1, 5 * S, 15 * S, 2, 40_000, {"e": 4.0, "f": None})
    section = hardware_section([series], [window(1, 5 * S, 15 * S, 500, 40_000)], [])
    [row] = section.rows
    assert row.energy_j == pytest.approx(3000) and row.power_w == pytest.approx(300)
    assert row.idle_power_w == pytest.approx(100) and row.energy_above_idle_j == pytest.approx(2000)
    assert row.energy_per_request_mj == pytest.approx(6000) and row.output_tokens_per_j == pytest.approx(40_000 / 3000)
    assert row.energy_per_1k_output_tokens_j == pytest.approx(75) and row.gpu_util_pct == 90.0
    # ten equal parts of the phase, 50 requests and 300 J each: 6,000 mJ a request in every one
    assert row.energy_per_request_mj_windows == pytest.approx([6000.0] * 10)
    assert row.gpu_memory_max_bytes == 1024 * 2**20 and row.power_from == "energy counter" and row.gpus == 1
    assert section.missing == ["gpu-node: 1 of 18 scrapes failed (first: ReadTimeout: timed out)"]
    line = section.timeline["gpu-node"]  # the chart's series: seconds since the load's start, power from energy
    assert line["t_s"][0] == -5.0 and line["power_w"][0] == pytest.approx(100) and line["power_w"][-1] == pytest.approx(300)
    assert line["gpu_util_pct"][-1] == 90.0 and "power_gauge_w" not in line and "cpu_busy_pct" not in line
    from tailrace.analysis.report.plots import hardware_over_time

    assert hardware_over_time(section.timeline, [10.0]).startswith("<svg") and hardware_over_time({}) is None


def test_cpu_busy_from_the_node_exporter_and_no_joules_without_a_counter(tmp_path):
    lines = [{"t_ns": t * S, "samples": {'node_cpu_seconds_total{mode="idle"}': 2.0 * t - 1.5 * max(0, t - 2),
                                         'node_cpu_seconds_total{mode="user"}': 1.5 * max(0, t - 2),
                                         "node_memory_MemTotal_bytes": 8e9,
                                         "node_memory_MemAvailable_bytes": 6e9 - 1e8 * t, "node_cpus": 2.0}}
             for t in range(0, 8)]
    series = read_monitor(timeline(tmp_path / "n.jsonl", lines), "host")
    section = hardware_section([series], [window(1, 3 * S, 7 * S, 10, 0)], [])
    [row] = section.rows
    assert row.cpu_busy_pct == pytest.approx(75.0) and row.memory_max_bytes == pytest.approx(2.7e9)
    assert row.energy_j is None and "energy_per_request_mj" not in row.model_fields_set
    assert section.missing == ["host: no energy counter (DCGM, Triton, RAPL, NVML or Kepler): no joules measured, per "
                                  "request or per token"]


def test_an_estimate_from_a_servers_cpu_seconds_is_labelled_and_apart(tmp_path):
    """The embedded server's process at 1.5 cores through a 4 s phase, 10 W a core declared: 60 J estimated, in
    fields of their own; no measured joules."""
    lines = [{"t_ns": t * S, "samples": {"process_cpu_seconds_total": 1.5 * t, "process_resident_memory_bytes": 3e8}}
             for t in range(0, 8)]
    series = read_monitor(timeline(tmp_path / "e.jsonl", lines), "embedded-server")
    section = hardware_section([series], [window(1, 2 * S, 6 * S, 30, 600)],
                               [MonitorScope("embedded-server", None, 10.0)])
    [row] = section.rows
    assert row.process_cores == pytest.approx(1.5) and row.estimated_energy_j == pytest.approx(60)
    assert section.timeline["embedded-server"]["process_cpu_pct"] == pytest.approx([150.0] * 7)  # the chart
    assert row.estimated_energy_per_request_mj == pytest.approx(2000) and row.energy_j is None
    assert row.estimated_energy_per_1k_output_tokens_j == pytest.approx(100)
    assert "an estimate" in row.estimate_basis and row.memory_max_bytes == 3e8
    assert "an estimate from its process's CPU-seconds is shown, labelled" in section.missing[0]


def test_a_monitor_that_never_answered_says_nothing_but_that(tmp_path):
    lines = [{"t_ns": t * S, "error": "ConnectError: refused"} for t in range(3)]
    series = read_monitor(timeline(tmp_path / "d.jsonl", lines), "dcgm")
    section = hardware_section([series], [window(1, 0, 2 * S, 3, 0)], [])
    assert section.rows == [] and section.missing == [
        "dcgm: 3 of 3 scrapes failed (first: ConnectError: refused)", "dcgm: no scrape answered: nothing is known of it"]


def test_a_monitor_of_some_endpoints_counts_their_requests_only(tmp_path):
    lines = [{"t_ns": t * S, "samples": {'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total{gpu="0"}': 200_000.0 * t}}
             for t in range(0, 12)]
    series = read_monitor(timeline(tmp_path / "g.jsonl", lines), "gpu")
    w = PhaseWindow(1, 1 * S, 11 * S, {"a": np.arange(1, 11, dtype=np.int64) * S,
                                       "b": np.arange(1, 11, dtype=np.int64) * S}, {"a": 100, "b": 0}, {})
    section = hardware_section([series], [w], [MonitorScope("gpu", ("a",))])
    [row] = section.rows
    assert row.requests == 10 and row.endpoints == ["a"] and row.energy_per_request_mj == pytest.approx(200_000)


def test_per_request_windows_leave_out_a_part_without_requests():
    t = np.arange(0, 5, dtype=np.int64) * S
    joules = np.array([0.0, 10.0, 20.0, 30.0, 40.0])
    sent = np.array([0, 1, 1, 3], dtype=np.int64) * S + S // 2  # nothing sent in [2 s, 3 s)
    assert per_request_windows(t, joules, sent, 0, 4 * S, 4) == pytest.approx([10_000.0, 5_000.0, 10_000.0])


def test_the_utilization_law_from_a_models_cpu_time(tmp_path):
    """Two models in one embedded server: `busy` computes for real (its CPU time ≈ its compute time: U = ρ),
    `sleepy` holds its slot asleep (a third of the compute time on CPU: U below ρ). 20 requests/s, 50 ms of
    compute each, one slot: ρ = 1.0 for both."""
    model_cpu = "tailrace_server_model_cpu_seconds_total"
    lines = [{"t_ns": t * S, "samples": {f'{model_cpu}{{model="busy"}}': 0.98 * t,
                                         f'{model_cpu}{{model="sleepy"}}': t / 3, "process_cpu_seconds_total": 1.4 * t}}
             for t in range(0, 12)]
    series = read_monitor(timeline(tmp_path / "m.jsonl", lines), "embedded")
    assert sorted(series.model_cpu_s) == ["busy", "sleepy"]
    sent = np.linspace(1 * S, 11 * S, 200, endpoint=False).astype(np.int64)
    w = PhaseWindow(1, 1 * S, 11 * S, {"busy-http": sent, "sleepy-http": sent}, {"busy-http": 0, "sleepy-http": 0},
                    {"busy-http": 50.0, "sleepy-http": 50.0})
    serving = {"busy-http": EndpointServing("busy", 1), "sleepy-http": EndpointServing("sleepy", 1)}
    section = hardware_section([series], [w], [MonitorScope("embedded", None, 10.0)], serving)
    busy, sleepy = section.endpoints
    assert busy.rho == pytest.approx(1.0) and busy.measured_utilization == pytest.approx(0.98)
    assert busy.utilization_law == "holds (U/ρ 0.98)" and busy.cpu_ms_per_request == pytest.approx(49)
    assert sleepy.measured_utilization == pytest.approx(1 / 3)
    assert sleepy.utilization_law.startswith("U/ρ 0.33: the slot also waited")
    # the estimate per endpoint: its model's CPU-seconds × 10 W a core, per request (labelled)
    assert busy.estimated_energy_per_request_mj == pytest.approx(490) and "estimate" in busy.estimate_basis
    assert sleepy.estimated_energy_per_request_mj_windows == pytest.approx([1000 / 6] * 10)


def test_an_endpoint_watched_alone_has_its_energy_measured(tmp_path):
    lines = [{"t_ns": t * S, "samples": {'nv_energy_consumption_total{gpu_uuid="G"}': 250.0 * t,
                                         'nv_gpu_utilization{gpu_uuid="G"}': 0.5}} for t in range(0, 12)]
    series = read_monitor(timeline(tmp_path / "t.jsonl", lines), "triton-gpu")
    w = window(1, 1 * S, 11 * S, 100, 0, endpoint="resnet", compute_ms=50.0)
    section = hardware_section([series], [w], [MonitorScope("triton-gpu", ("resnet",))],
                               {"resnet": EndpointServing("resnet", 1)})
    [row] = section.endpoints
    assert row.energy_per_request_mj == pytest.approx(25_000) and row.measured_from.startswith("GPU")
    assert row.rho == pytest.approx(0.5) and row.measured_utilization == 0.5 and row.utilization_law == "holds (U/ρ 1.00)"
