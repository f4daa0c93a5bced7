"""A hardware monitor's scrapes (monitors/<name>/timeline.jsonl, harness/orchestration/hardware_monitors.py) as
series the statistics read: per scrape, CPU and GPU utilization, memory, power; and energy counters as counters.

What each exporter says, in one vocabulary:
- CPU busy: the node exporter's `node_cpu_seconds_total` (every mode but idle and iowait, over all of them, between
  two scrapes), else Triton's `nv_cpu_utilization` (a fraction);
- GPU utilization (%): DCGM's `DCGM_FI_DEV_GPU_UTIL`, Triton's `nv_gpu_utilization` (× 100); SM activity (%): DCGM's
  `DCGM_FI_PROF_SM_ACTIVE` (× 100) — means over the GPUs;
- memory used (bytes): the node exporter's MemTotal − MemAvailable, Triton's `nv_cpu_memory_used_bytes`; GPU memory:
  DCGM's `DCGM_FI_DEV_FB_USED` (MiB), Triton's `nv_gpu_memory_used_bytes` — sums over the GPUs;
- power (W): DCGM's `DCGM_FI_DEV_POWER_USAGE`, Triton's `nv_gpu_power_usage` — sums;
- energy (J), counters: DCGM's `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ), Triton's `nv_energy_consumption`, the node
  exporter's RAPL `node_rapl_*_joules_total`, Kepler's `kepler_*_joules_total`; a counter that went down was reset (or
  wrapped: RAPL's range), and its interval counts what it reads after (Prometheus' rule);
- vLLM's KV-cache use (`vllm:kv_cache_usage_perc`), its requests running and waiting;
- a server process's CPU-seconds and resident memory (`process_cpu_seconds_total`, `process_resident_memory_bytes`:
  the embedded server's, any Python or Go exporter's own); the embedded server's CPU-seconds per model
  (`tailrace_server_model_cpu_seconds_total`) and its own NVML and RAPL readings (`tailrace_gpu_*`,
  `tailrace_*_energy_joules_total`: endpoints/serving/power_sources.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tailrace.contract.layout import RunLayout

GAUGES = {  # quantity → (metric, scale, how GPUs combine)
    "gpu_util_pct": (("DCGM_FI_DEV_GPU_UTIL", 1.0), ("nv_gpu_utilization", 100.0),
                     ("tailrace_gpu_utilization_percent", 1.0)),
    "sm_active_pct": (("DCGM_FI_PROF_SM_ACTIVE", 100.0),),
    "gpu_memory_bytes": (("DCGM_FI_DEV_FB_USED", 2.0**20), ("nv_gpu_memory_used_bytes", 1.0),
                         ("tailrace_gpu_memory_used_bytes", 1.0)),
    "power_w": (("DCGM_FI_DEV_POWER_USAGE", 1.0), ("nv_gpu_power_usage", 1.0), ("tailrace_gpu_power_watts", 1.0)),
    "kv_cache_pct": (("vllm:kv_cache_usage_perc", 100.0),),
    "requests_running": (("vllm:num_requests_running", 1.0),),
    "requests_waiting": (("vllm:num_requests_waiting", 1.0),),
}
MEANS = {"gpu_util_pct", "sm_active_pct", "kv_cache_pct"}  # over the GPUs (the others add up)
# the per-GPU families (one series a GPU, or a MIG instance): a scrape's GPUs are the series of the first one present
GPU_FAMILIES = tuple(metric for quantity in ("gpu_util_pct", "gpu_memory_bytes", "power_w")
                     for metric, _ in GAUGES[quantity])
# (name prefix, scale to joules): the first family present is the monitor's energy; the embedded server's own
# (NVML's GPU counters and RAPL's package and DRAM zones: disjoint parts of the host) are summed
ENERGY_COUNTERS = (("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e-3), ("nv_energy_consumption", 1.0),
                   ("node_rapl_", 1.0), ("kepler_", 1.0), ("tailrace_", 1.0))
MODEL_CPU = "tailrace_server_model_cpu_seconds_total"
IDLE_MODES = ('mode="idle"', 'mode="iowait"')


@dataclass
class MonitorSeries:
    """One monitor's scrapes: their instants (master clock, ns) and quantities; the failed ones counted."""

    name: str
    t_ns: np.ndarray
    values: dict[str, np.ndarray]  # quantity → one value a scrape (NaN: not said)
    energy_j: np.ndarray | None  # cumulative joules since the first scrape, resets absorbed (None: no counter)
    energy_metric: str = ""
    cpu_busy: np.ndarray | None = None  # per interval (len − 1): the CPU's busy fraction between two scrapes
    errors: list[str] = field(default_factory=list)
    process_cpu_s: np.ndarray | None = None  # a server process's CPU-seconds (process_cpu_seconds_total), cumulative
    model_cpu_s: dict[str, np.ndarray] = field(default_factory=dict)  # the embedded server's, per model, cumulative

    def said(self) -> list[str]:
        """The quantities this monitor reported at least once."""
        out = [q for q, v in self.values.items() if np.isfinite(v).any()] + \
            (["process_cpu_s"] if self.process_cpu_s is not None else [])
        return out + (["cpu_busy"] if self.cpu_busy is not None and np.isfinite(self.cpu_busy).any() else []) + \
            (["energy_j"] if self.energy_j is not None else [])


def _base(key: str) -> str:
    return key.split("{", 1)[0]


def _gauge(samples: dict[str, float], quantity: str) -> float:
    for metric, scale in GAUGES[quantity]:
        values = [v for k, v in samples.items() if _base(k) == metric]
        if values:
            return (float(np.mean(values)) if quantity in MEANS else float(np.sum(values))) * scale
    return float("nan")


def gpu_count(samples: dict[str, float]) -> float:
    """How many GPUs one scrape speaks of: the series of its first per-GPU family (NaN: none) — pure."""
    for metric in GPU_FAMILIES:
        series = sum(1 for k in samples if _base(k) == metric)
        if series:
            return float(series)
    return float("nan")


def _energy(samples: dict[str, float]) -> tuple[float, str] | None:
    """The first energy counter family present: its joules now (summed over its series), its name."""
    for prefix, scale in ENERGY_COUNTERS:
        keys = [k for k in samples if _base(k).startswith(prefix) and _base(k).endswith(("_total", "CONSUMPTION"))
                and (not prefix.endswith("_") or "joules" in _base(k))]  # a family: its joules counters only
        if keys:
            return sum(samples[k] for k in keys) * scale, _base(keys[0]) if len({_base(k) for k in keys}) == 1 \
                else prefix + "*"
    return None


def counter_increase(values: np.ndarray) -> np.ndarray:
    """Cumulative increase of a counter's readings from the first, a reset (a reading below the one before) counting
    what it reads after — pure."""
    deltas = np.diff(values)
    deltas = np.where(deltas < 0, values[1:], deltas)
    return np.concatenate([[0.0], np.cumsum(deltas)])


def _cpu(samples: dict[str, float]) -> tuple[float, float]:
    """(busy seconds, all seconds) of the node exporter's CPU counters (summed over the CPUs)."""
    total = busy = 0.0
    for k, v in samples.items():
        if _base(k) == "node_cpu_seconds_total":
            total += v
            busy += 0.0 if any(m in k for m in IDLE_MODES) else v
    return busy, total


def read_monitor(path: Path, name: str) -> MonitorSeries:
    """A monitor's timeline (a line that is not JSON is skipped and counted as an error)."""
    times, samples, errors = [], [], []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        try:
            doc = json.loads(line)
        except ValueError:
            errors.append(f"{path.name}:{n}: not JSON")
            continue
        if "samples" in doc and isinstance(doc.get("t_ns"), int):
            times.append(doc["t_ns"])
            samples.append(doc["samples"])
        else:
            errors.append(str(doc.get("error", "a line without samples")))
    order = np.argsort(np.array(times, dtype=np.int64), kind="stable")
    instants = np.array(times, dtype=np.int64)[order]
    samples = [samples[i] for i in order]
    values = {q: np.array([_gauge(s, q) for s in samples]) for q in GAUGES}
    memory = [s.get("node_memory_MemTotal_bytes", np.nan) - s.get("node_memory_MemAvailable_bytes", np.nan)
              if "node_memory_MemTotal_bytes" in s else
              s.get("nv_cpu_memory_used_bytes", s.get("process_resident_memory_bytes", np.nan)) for s in samples]
    values["memory_bytes"] = np.array(memory, dtype=float)
    values["gpus"] = np.array([gpu_count(s) for s in samples], dtype=float)
    cpu = np.array([_cpu(s) for s in samples]) if samples else np.empty((0, 2))
    cpu_busy = None
    if len(cpu) > 1 and cpu[:, 1].any():
        d = np.diff(cpu, axis=0)
        cpu_busy = np.where(d[:, 1] > 0, d[:, 0] / np.where(d[:, 1] > 0, d[:, 1], 1), np.nan)
    elif any("nv_cpu_utilization" in s for s in samples):
        util = np.array([s.get("nv_cpu_utilization", np.nan) for s in samples])
        cpu_busy = (util[1:] + util[:-1]) / 2 if len(util) > 1 else None
    energy = [_energy(s) for s in samples]
    found = [e for e in energy if e is not None]
    energy_j, metric = None, ""
    if found and len(found) == len(energy):
        energy_j, metric = counter_increase(np.array([e[0] for e in found])), found[0][1]
    process = [s.get("process_cpu_seconds_total") for s in samples]
    process_cpu_s = counter_increase(np.array(process, dtype=float)) if process and None not in process else None
    models = {k.split('model="', 1)[1].split('"', 1)[0] for s in samples for k in s if _base(k) == MODEL_CPU}
    model_cpu_s = {m: counter_increase(np.array([s.get(f'{MODEL_CPU}{{model="{m}"}}', np.nan) for s in samples]))
                   for m in sorted(models)}
    return MonitorSeries(name, instants, values, energy_j, metric, cpu_busy, errors, process_cpu_s,
                         {m: v for m, v in model_cpu_s.items() if np.isfinite(v).all()})


def read_monitor_missing(name: str) -> MonitorSeries:
    """A monitor whose timeline was never written (no scrape of it reached the run directory)."""
    return MonitorSeries(name, np.empty(0, dtype=np.int64), {q: np.empty(0) for q in (*GAUGES, "memory_bytes", "gpus")},
                         None, errors=["its timeline was never written"])


def monitor_series(data) -> list[MonitorSeries]:
    """A run's monitors' scrapes as series (`data`: its RunData; a monitor with no timeline: none of its scrapes was
    written)."""
    layout = RunLayout(data.run_dir)
    return [read_monitor(layout.monitor_timeline(m.name), m.name) if layout.monitor_timeline(m.name).exists()
            else read_monitor_missing(m.name) for m in data.plan.profile.monitors]
