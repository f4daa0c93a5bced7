"""What the host's power counters say, read directly by the embedded server (`tailrace serve`, the embedded endpoint)
and exposed on its /metrics beside the requests it served:

- Linux powercap RAPL (/sys/class/powercap/intel-rapl:*): each package zone and each DRAM sub-zone (disjoint: the
  core and uncore sub-zones are inside their package and are left out), as `tailrace_rapl_energy_joules_total{zone}`.
  The kernel's `energy_uj` wraps at `max_energy_range_uj`; the collector keeps the count across the wrap, so the
  exported counter only goes up (a scrape interval shorter than one wrap — minutes at hundreds of watts — is
  assumed). Unreadable zones (root only since Linux 5.10) are said once in the server's log, then left out.
- NVIDIA's NVML, through NVIDIA's own Python bindings (`pynvml`, package nvidia-ml-py): per GPU, the board's energy
  counter since the driver loaded (`nvmlDeviceGetTotalEnergyConsumption`, mJ; Volta and later) as
  `tailrace_gpu_energy_joules_total{gpu}`, its power (`tailrace_gpu_power_watts`), utilization
  (`tailrace_gpu_utilization_percent`) and memory used (`tailrace_gpu_memory_used_bytes`).

Neither is there on a host without them (a VM, no NVIDIA driver): no metric, never a zero.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import ModuleType

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

log = logging.getLogger(__name__)
POWERCAP = Path("/sys/class/powercap")


class RaplZone:
    """One RAPL zone's energy counter, unwrapped."""

    def __init__(self, directory: Path, label: str) -> None:
        self.directory, self.label = directory, label
        self.range_uj = int((directory / "max_energy_range_uj").read_text())
        self._last = int((directory / "energy_uj").read_text())
        self._total_uj = 0

    def joules(self) -> float:
        """Joules since the collector first read the zone (a reading below the one before: the counter wrapped)."""
        now = int((self.directory / "energy_uj").read_text())
        self._total_uj += now - self._last if now >= self._last else now + self.range_uj - self._last
        self._last = now
        return self._total_uj / 1e6


def rapl_zones(root: Path = POWERCAP) -> list[RaplZone]:
    """The package zones and their DRAM sub-zones that can be read ([] where there are none)."""
    zones = []
    for directory in sorted(root.glob("intel-rapl:*")):
        try:
            name = (directory / "name").read_text().strip()
            depth = directory.name.count(":")
            if (depth == 1 and name.startswith("package")) or (depth == 2 and name == "dram"):
                package = root / directory.name.rsplit(":", 1)[0]  # intel-rapl:0:1 is inside intel-rapl:0
                label = name if depth == 1 else f"{(package / 'name').read_text().strip()}-dram"
                zones.append(RaplZone(directory, label))
        except (OSError, ValueError) as exc:
            log.warning("RAPL zone %s cannot be read (%s): its energy is left out", directory, exc)
    return zones


class RaplCollector:
    """`tailrace_rapl_energy_joules_total{zone}` of every readable zone."""

    def __init__(self, zones: list[RaplZone]) -> None:
        self._zones, self._lock = zones, threading.Lock()

    def collect(self):
        family = CounterMetricFamily("tailrace_rapl_energy_joules", "Energy of a RAPL zone (package, DRAM) since "
                                     "the server started, unwrapped", labels=["zone"])
        with self._lock:
            for zone in list(self._zones):
                try:
                    family.add_metric([zone.label], zone.joules())
                except (OSError, ValueError) as exc:
                    log.warning("RAPL zone %s stopped answering (%s): left out from now on", zone.directory, exc)
                    self._zones.remove(zone)
        yield family


class NvmlCollector:
    """Per GPU, NVML's energy counter, power, utilization and memory used. `nvml`: the pynvml module (initialised)."""

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]

    def collect(self):
        nvml = self._nvml
        energy = CounterMetricFamily("tailrace_gpu_energy_joules", "A GPU's energy since its driver loaded (NVML)",
                                     labels=["gpu"])
        power = GaugeMetricFamily("tailrace_gpu_power_watts", "A GPU's power draw (NVML)", labels=["gpu"])
        util = GaugeMetricFamily("tailrace_gpu_utilization_percent", "Time a kernel ran on a GPU over NVML's last "
                                 "sample period", labels=["gpu"])
        memory = GaugeMetricFamily("tailrace_gpu_memory_used_bytes", "A GPU's memory in use (NVML)", labels=["gpu"])
        for i, handle in enumerate(self._handles):
            reads = ((energy, lambda h: nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3),
                     (power, lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1e3),
                     (util, lambda h: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)),
                     (memory, lambda h: float(nvml.nvmlDeviceGetMemoryInfo(h).used)))
            for family, read in reads:
                try:
                    family.add_metric([str(i)], read(handle))
                except nvml.NVMLError:  # e.g. no energy counter before Volta: that metric is not said
                    continue
        yield from (energy, power, util, memory)


def nvml_collector() -> NvmlCollector | None:
    """NVML's collector where the bindings and a driver are there (None otherwise, said in the log)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        return NvmlCollector(pynvml)
    except pynvml.NVMLError as exc:
        log.info("NVML not available (%s): no GPU metrics", exc)
        return None
