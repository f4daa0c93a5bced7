"""What the hardware did: the profile's monitors (Prometheus exporters — DCGM, the node exporter, Kepler, Triton's or
vLLM's /metrics) scraped by the master before, through and after the run, into the run directory:

    monitors/<name>/timeline.jsonl   {t_ns, samples: {"name{labels}": value}}   one line a scrape
                                     {t_ns, error: "why"}                        a scrape that failed

Only the families the analysis reads are kept (HARDWARE_FAMILIES); the node exporter's per-CPU seconds are summed
over the CPUs by mode, with the CPUs counted (`node_cpus`). `t_ns` is the master's clock when the scrape answered.
A source that is down, slow or not Prometheus' format costs its line an `error` and never stops the run.
"""
from __future__ import annotations

import json
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tailrace.contract.layout import RunLayout, append_line
from tailrace.contract.profile import Monitor
from tailrace.harness.client.tls import default_verify_context

HARDWARE_FAMILIES = (
    "node_cpu_seconds", "node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes", "node_rapl_",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "nv_gpu_utilization", "nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes", "nv_gpu_power_usage",
    "nv_energy_consumption", "nv_cpu_utilization", "nv_cpu_memory_used_bytes",
    "vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
    "kepler_container_joules", "kepler_node_", "process_cpu_seconds", "process_resident_memory_bytes",
    "tailrace_server_model_cpu_seconds", "tailrace_rapl_", "tailrace_gpu_",
)
_DROPPED_LABELS = {"cpu", "instance", "job", "Hostname", "pci_bus_id", "DCGM_FI_DRIVER_VERSION", "modelName", "UUID"}


def hardware_samples(text: str) -> dict[str, float]:
    """The kept samples of one scrape by name{labels} (ValueError: not Prometheus' text format)."""
    out: dict[str, float] = {}
    cpus: set[str] = set()
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(HARDWARE_FAMILIES):
            continue
        for s in family.samples:
            if s.name.endswith(("_created", "_bucket")):
                continue
            if "cpu" in s.labels and s.name.startswith("node_cpu_seconds"):
                cpus.add(s.labels["cpu"])
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()) if k not in _DROPPED_LABELS)
            key = f"{s.name}{{{labels}}}" if labels else s.name
            out[key] = out.get(key, 0.0) + float(s.value)  # (the node exporter's CPUs: summed by mode)
    if cpus:
        out["node_cpus"] = float(len(cpus))
    return out


class MonitorRecorder:
    """Scrapes every monitor when it is due (`periodic`, called by the run's watch loop every half second)."""

    def __init__(self, layout: RunLayout, monitors: list[Monitor]) -> None:
        self.layout, self.monitors = layout, monitors
        self._next = {m.name: 0.0 for m in monitors}
        self._client = httpx.Client(verify=default_verify_context()) if monitors else None

    def scrape(self, monitor: Monitor) -> dict:
        """One scrape of `monitor`: its timeline line."""
        try:
            response = self._client.get(monitor.url, timeout=monitor.timeout_s)
            t_ns = time.time_ns()
            if response.status_code != 200:
                return {"t_ns": t_ns, "error": f"HTTP {response.status_code}"}
            return {"t_ns": t_ns, "samples": hardware_samples(response.text)}
        except httpx.HTTPError as exc:
            return {"t_ns": time.time_ns(), "error": f"{type(exc).__name__}: {exc}"[:200]}
        except ValueError as exc:
            return {"t_ns": time.time_ns(), "error": f"not Prometheus' text format ({exc})"[:200]}

    def periodic(self, now: float | None = None) -> None:
        """Scrape each monitor whose interval has passed (an OSError: the run directory cannot be written)."""
        now = time.monotonic() if now is None else now
        for m in self.monitors:
            if now >= self._next[m.name]:
                self._next[m.name] = now + m.interval_s
                append_line(self.layout.monitor_timeline(m.name), json.dumps(self.scrape(m)))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
