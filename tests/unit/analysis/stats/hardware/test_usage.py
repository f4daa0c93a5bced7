"""What the hardware did per phase (analysis/read/hardware.py, analysis/stats/hardware/usage.py): counters read as
counters (a reset, a wrap), energy over a phase's window by interpolation, per request and per token, idle power
before the load, CPU busy from the node exporter's seconds; what a monitor cannot say, said."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tailrace.analysis.read.hardware import counter_increase, read_monitor
from tailrace.analysis.stats.hardware.usage import hardware_section, phase_windows

S = 1_000_000_000


def timeline(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


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
                       "t_done_ref": [2 * S, 10 * S, 15 * S], "output_tokens": [5, 20_000, 20_000]})
    windows = phase_windows(df)
    assert windows == [(1, 5 * S, 15 * S, 2, 40_000)]
    windows = [(1, 5 * S, 15 * S, 500, 40_000)]
    section = hardware_section([series], windows)
    [row] = section["rows"]
    assert row["energy_j"] == pytest.approx(3000) and row["power_w"] == pytest.approx(300)
    assert row["idle_power_w"] == pytest.approx(100) and row["energy_above_idle_j"] == pytest.approx(2000)
    assert row["energy_per_request_mj"] == pytest.approx(6000) and row["output_tokens_per_j"] == pytest.approx(40_000 / 3000)
    assert row["energy_per_1k_output_tokens_j"] == pytest.approx(75) and row["gpu_util_pct"] == 90.0
    assert row["gpu_memory_max_bytes"] == 1024 * 2**20 and row["power_from"] == "energy counter"
    assert section["missing"] == ["gpu-node: 1 of 18 scrapes failed (first: ReadTimeout: timed out)"]
    line = section["timeline"]["gpu-node"]  # the chart's series: seconds since the load's start, power from energy
    assert line["t_s"][0] == -5.0 and line["power_w"][0] == pytest.approx(100) and line["power_w"][-1] == pytest.approx(300)
    assert line["gpu_util_pct"][-1] == 90.0 and "power_gauge_w" not in line and "cpu_busy_pct" not in line
    from tailrace.analysis.report.plots import hardware_over_time

    assert hardware_over_time(section["timeline"], [10.0]).startswith("<svg") and hardware_over_time({}) is None


def test_cpu_busy_from_the_node_exporter_and_no_joules_without_a_counter(tmp_path):
    lines = [{"t_ns": t * S, "samples": {'node_cpu_seconds_total{mode="idle"}': 2.0 * t - 1.5 * max(0, t - 2),
                                         'node_cpu_seconds_total{mode="user"}': 1.5 * max(0, t - 2),
                                         "node_memory_MemTotal_bytes": 8e9,
                                         "node_memory_MemAvailable_bytes": 6e9 - 1e8 * t, "node_cpus": 2.0}}
             for t in range(0, 8)]
    series = read_monitor(timeline(tmp_path / "n.jsonl", lines), "host")
    section = hardware_section([series], [(1, 3 * S, 7 * S, 10, 0)])
    [row] = section["rows"]
    assert row["cpu_busy_pct"] == pytest.approx(75.0) and row["memory_max_bytes"] == pytest.approx(2.7e9)
    assert row["energy_j"] is None and "energy_per_request_mj" not in row
    assert section["missing"] == ["host: no energy counter (DCGM, Triton, RAPL or Kepler): no joules measured, per "
                                  "request or per token"]


def test_an_estimate_from_a_servers_cpu_seconds_is_labelled_and_apart(tmp_path):
    """The embedded server's process at 1.5 cores through a 4 s phase, 10 W a core declared: 60 J estimated, in
    fields of their own; no measured joules."""
    lines = [{"t_ns": t * S, "samples": {"process_cpu_seconds_total": 1.5 * t, "process_resident_memory_bytes": 3e8}}
             for t in range(0, 8)]
    series = read_monitor(timeline(tmp_path / "e.jsonl", lines), "embedded-server")
    section = hardware_section([series], [(1, 2 * S, 6 * S, 30, 600)], {"embedded-server": 10.0})
    [row] = section["rows"]
    assert row["process_cores"] == pytest.approx(1.5) and row["estimated_energy_j"] == pytest.approx(60)
    assert row["estimated_energy_per_request_mj"] == pytest.approx(2000) and row["energy_j"] is None
    assert row["estimated_energy_per_1k_output_tokens_j"] == pytest.approx(100)
    assert "an estimate" in row["estimate_basis"] and row["memory_max_bytes"] == 3e8
    assert "an estimate from its process's CPU-seconds is shown, labelled" in section["missing"][0]


def test_a_monitor_that_never_answered_says_nothing_but_that(tmp_path):
    lines = [{"t_ns": t * S, "error": "ConnectError: refused"} for t in range(3)]
    series = read_monitor(timeline(tmp_path / "d.jsonl", lines), "dcgm")
    section = hardware_section([series], [(1, 0, 2 * S, 3, 0)])
    assert section["rows"] == [] and section["missing"] == [
        "dcgm: 3 of 3 scrapes failed (first: ConnectError: refused)", "dcgm: no scrape answered: nothing is known of it"]
