"""What the hardware did per measured phase, from the monitors' series (analysis/read/hardware.py): CPU busy, GPU
utilization and SM activity, memory, power, energy — total, above the idle power measured before the load, per
request, per 1,000 output tokens, and output tokens per joule. Pure functions of the series and the phases' windows.

A phase's window runs from its first intended send to its last response (the reference clock; the monitors' scrapes
are on the master's). Energy is a counter's increase over the window, read between scrapes by linear interpolation;
where a monitor has no energy counter, none is measured (power gauges are shown, never integrated into joules
here); with the profile's `watts_per_core`, an estimate — the monitored process's CPU-seconds × those watts — is
given in fields of its own, labelled, and never added to measured joules.
Idle: the scrapes before the run's first intended send.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from tailrace.analysis.read.hardware import MonitorSeries
from tailrace.analysis.stats.hardware.attribution import EndpointServing, MonitorScope, endpoint_rows
from tailrace.analysis.stats.hardware.windows import PhaseWindow, between, per_request_windows
from tailrace.contract.summary.tables import Hardware, HardwareEndpointRow, HardwareRow

HARDWARE_COLUMNS = ("phase", "status", "endpoint", "t_intended_ref", "t_done_ref", "server_compute_ns")  # + "output_tokens"
# where the run has streams
def _within(s: MonitorSeries, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
    """(scrapes inside [t0, t1], intervals whose middle is inside)."""
    middle = (s.t_ns[1:] + s.t_ns[:-1]) / 2 if len(s.t_ns) > 1 else np.empty(0)
    return (s.t_ns >= t0) & (s.t_ns <= t1), (middle >= t0) & (middle <= t1)


def _mean(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else None


def _max(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    return float(values.max()) if len(values) else None


def _idle_power(s: MonitorSeries, load_start: int) -> tuple[float | None, int]:
    """(mean power before the load, from the energy counter, else the power gauge; scrapes it rests on)."""
    before = s.t_ns < load_start
    n = int(before.sum())
    if n >= 2 and s.energy_j is not None:
        span = (s.t_ns[before][-1] - s.t_ns[before][0]) / 1e9
        joules = s.energy_j[before][-1] - s.energy_j[before][0]
        return (float(joules / span), n) if span > 0 else (None, n)
    return _mean(s.values["power_w"][before]), n


def usage_row(s: MonitorSeries, w: PhaseWindow, endpoints: Iterable[str] | None, idle_w: float | None,
              watts_per_core: float | None = None) -> HardwareRow:
    """One monitor over one phase's window, its requests and tokens those of `endpoints` (None: every endpoint);
    `watts_per_core`: the profile's, for an estimate where no counter is."""
    t0, t1 = w.t0, w.t1
    requests, tokens = w.requests_of(endpoints), w.tokens_of(endpoints)
    inside, intervals = _within(s, t0, t1)
    duration = (t1 - t0) / 1e9
    energy = between(s.t_ns, s.energy_j, t0, t1)
    power = energy / duration if energy is not None and duration > 0 else _mean(s.values["power_w"][inside])
    busy = _mean(s.cpu_busy[intervals]) if s.cpu_busy is not None else None
    row: dict = {"monitor": s.name, "phase": w.phase, "duration_s": duration, "scrapes": int(inside.sum()),
           "cpu_busy_pct": busy * 100 if busy is not None else None,
           "gpu_util_pct": _mean(s.values["gpu_util_pct"][inside]),
           "sm_active_pct": _mean(s.values["sm_active_pct"][inside]),
           "kv_cache_pct": _mean(s.values["kv_cache_pct"][inside]),
           "kv_cache_max_pct": _max(s.values["kv_cache_pct"][inside]),
           "requests_running": _mean(s.values["requests_running"][inside]),
           "requests_waiting": _mean(s.values["requests_waiting"][inside]),
           "memory_max_bytes": float(np.nanmax(s.values["memory_bytes"][inside]))
           if np.isfinite(s.values["memory_bytes"][inside]).any() else None,
           "gpu_memory_max_bytes": float(np.nanmax(s.values["gpu_memory_bytes"][inside]))
           if np.isfinite(s.values["gpu_memory_bytes"][inside]).any() else None,
           "power_w": power, "power_from": ("energy counter" if energy is not None else "power gauge")
           if power is not None else None,
           "energy_j": energy, "energy_metric": s.energy_metric or None, "idle_power_w": idle_w,
           "requests": requests, "output_tokens": tokens,
           "endpoints": sorted(endpoints) if endpoints is not None else None}
    gpus = _max(s.values["gpus"][inside]) if "gpus" in s.values else None
    if gpus:  # a monitor of GPUs: how many it spoke of (a sweep's throughput per GPU)
        row["gpus"] = int(gpus)
    cpu_s = between(s.t_ns, s.process_cpu_s, t0, t1)
    if cpu_s is not None and duration > 0:
        row["process_cores"] = cpu_s / duration
        if energy is None and watts_per_core is not None and s.process_cpu_s is not None:  # an estimate, labelled,
            # never mixed with joules measured
            estimate = cpu_s * watts_per_core
            row |= {"estimated_energy_j": estimate,
                    "estimated_energy_per_request_mj": estimate / requests * 1e3 if requests else None,
                    "estimated_energy_per_1k_output_tokens_j": estimate / tokens * 1e3 if tokens else None,
                    "estimated_energy_per_request_mj_windows": per_request_windows(
                        s.t_ns, s.process_cpu_s * watts_per_core, w.intended_of(endpoints), t0, t1),
                    "estimate_basis": f"process CPU-seconds × {watts_per_core:g} W per core (an estimate)"}
    if energy is not None:
        above = energy - idle_w * duration if idle_w is not None else None
        row |= {"energy_above_idle_j": above,
                "energy_per_request_mj": energy / requests * 1e3 if requests else None,
                "energy_per_1k_output_tokens_j": energy / tokens * 1e3 if tokens else None,
                "output_tokens_per_j": tokens / energy if tokens and energy > 0 else None,
                "energy_per_request_mj_windows": per_request_windows(s.t_ns, s.energy_j, w.intended_of(endpoints),
                                                                     t0, t1)}
    return HardwareRow(**row)


def _finite(values: np.ndarray) -> list[float | None]:
    return [float(v) if np.isfinite(v) else None for v in values]


def timeline_of(s: MonitorSeries, t0: int) -> dict[str, list]:
    """One monitor through the run for the report's chart: seconds since `t0` (the first intended send) and, where
    said, CPU busy, a monitored process's CPU (% of one core) and GPU utilization (%), power (W: the energy
    counter's rate between scrapes, else the gauge), memory (MiB) — each quantity at its scrapes (an interval's at
    its middle)."""
    t = (s.t_ns - t0) / 1e9
    middle = (t[1:] + t[:-1]) / 2 if len(t) > 1 else np.empty(0)
    out: dict[str, list] = {"t_s": _finite(t)}
    if s.cpu_busy is not None:
        out |= {"interval_t_s": _finite(middle), "cpu_busy_pct": _finite(s.cpu_busy * 100)}
    if np.isfinite(s.values["gpu_util_pct"]).any():
        out["gpu_util_pct"] = _finite(s.values["gpu_util_pct"])
    if s.process_cpu_s is not None and len(t) > 1:  # a monitored process: its cores busy, in % of one core
        cores = np.diff(s.process_cpu_s) / np.diff(t)
        out |= {"interval_t_s": _finite(middle), "process_cpu_pct": _finite(cores * 100)}
    if s.energy_j is not None and len(t) > 1:
        out |= {"interval_t_s": _finite(middle), "power_w": _finite(np.diff(s.energy_j) / np.diff(t))}
    elif np.isfinite(s.values["power_w"]).any():
        out["power_gauge_w"] = _finite(s.values["power_w"])
    if np.isfinite(s.values["memory_bytes"]).any():
        out["memory_mib"] = _finite(s.values["memory_bytes"] / 2**20)
    if np.isfinite(s.values["kv_cache_pct"]).any():
        out["kv_cache_pct"] = _finite(s.values["kv_cache_pct"])
    return out


def hardware_section(series: list[MonitorSeries], windows: list[PhaseWindow], monitors: list[MonitorScope],
                     serving: dict[str, EndpointServing] | None = None) -> Hardware | None:
    """The hardware section: its rows one per monitor × measured phase, its endpoints one per monitor × endpoint ×
    phase where the monitor says what that endpoint's model used (analysis/stats/hardware/attribution.py), what a
    monitor could not say (`missing`, each a line) and each monitor's chart (`timeline`); None: no monitors.
    `monitors`: each monitor's endpoints and declared watts per core; `serving`: each endpoint's model and slots."""
    if not series:
        return None
    scopes = {m.name: m for m in monitors}
    rows: list[HardwareRow] = []
    by_endpoint: list[HardwareEndpointRow] = []
    missing: list[str] = []
    load_start = min((w.t0 for w in windows), default=None)
    for s in series:
        scope = scopes.get(s.name, MonitorScope(s.name))
        if s.errors:
            missing.append(f"{s.name}: {len(s.errors)} of {len(s.errors) + len(s.t_ns)} scrapes failed "
                           f"(first: {s.errors[0]})")
        if not len(s.t_ns):
            missing.append(f"{s.name}: no scrape answered: nothing is known of it")
            continue
        said = s.said()
        if s.energy_j is None:
            estimated = scope.watts_per_core is not None and "process_cpu_s" in said
            missing.append(f"{s.name}: no energy counter (DCGM, Triton, RAPL, NVML or Kepler): no joules measured" + (
                " — an estimate from its process's CPU-seconds is shown, labelled" if estimated else
                ", per request or per token") + (" — its power gauge is shown" if "power_w" in said else ""))
        idle_w, idle_n = _idle_power(s, load_start) if load_start is not None else (None, 0)
        if s.energy_j is not None and idle_w is None:
            missing.append(f"{s.name}: {idle_n} scrape(s) before the load: no idle power to subtract")
        for w in windows:
            rows.append(usage_row(s, w, scope.endpoints, idle_w, scope.watts_per_core))
            by_endpoint.extend(endpoint_rows(s, w, scope, serving or {}))
    timeline = {s.name: timeline_of(s, load_start) for s in series if len(s.t_ns) and load_start is not None}
    return Hardware(rows=rows, endpoints=by_endpoint, missing=missing, timeline=timeline)
