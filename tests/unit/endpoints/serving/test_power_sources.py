"""What the embedded server reads of the host itself (endpoints/serving/power_sources.py, metrics.py): RAPL zones
from a powercap tree (the kernel's layout, written into a temporary directory: this VM has no powercap), unwrapped;
NVML's readings through its bindings' API (a stand-in module: no GPU here); each model's own CPU time."""
from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tailrace.endpoints.serving.power_sources import NvmlCollector, RaplCollector, rapl_zones
from tailrace.harness.orchestration.hardware_monitors import hardware_samples


def zone(root, name, label, energy_uj, range_uj=262_143_328_850):
    d = root / name
    d.mkdir()
    (d / "name").write_text(label + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return d


def scrape(collector) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    return hardware_samples(generate_latest(registry).decode())


def test_rapl_packages_and_dram_counted_once_and_a_wrap_counted_across(tmp_path):
    package = zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000, range_uj=10_000_000)
    zone(tmp_path, "intel-rapl:0:0", "core", 500_000)  # inside the package: left out
    dram = zone(tmp_path, "intel-rapl:0:1", "dram", 2_000_000)
    zone(tmp_path, "intel-rapl:1", "package-1", 0)
    zones = rapl_zones(tmp_path)
    assert [z.label for z in zones] == ["package-0", "package-0-dram", "package-1"]
    collector = RaplCollector(zones)
    assert scrape(collector)['tailrace_rapl_energy_joules_total{zone="package-0"}'] == 0.0
    (package / "energy_uj").write_text("9000000\n")
    (dram / "energy_uj").write_text("2500000\n")
    samples = scrape(collector)
    assert samples['tailrace_rapl_energy_joules_total{zone="package-0"}'] == pytest.approx(8.0)
    assert samples['tailrace_rapl_energy_joules_total{zone="package-0-dram"}'] == pytest.approx(0.5)
    (package / "energy_uj").write_text("1000000\n")  # wrapped at 10 J: 1 J to the top, 1 J after
    assert scrape(collector)['tailrace_rapl_energy_joules_total{zone="package-0"}'] == pytest.approx(10.0)


def test_a_host_without_powercap_has_no_rapl_zones(tmp_path):
    assert rapl_zones(tmp_path / "absent") == []


class FakeNvml:
    """NVIDIA's pynvml API as the collector calls it: one Hopper GPU, then one without an energy counter."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.energy_mj = [5_000_000, None]

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if self.energy_mj[h] is None:
            raise self.NVMLError("Not Supported")
        return self.energy_mj[h]

    def nvmlDeviceGetPowerUsage(self, h):
        return 350_000 if h == 0 else 60_000

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=87 if h == 0 else 0, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(70 if h == 0 else 1) * 2**30, total=141 * 2**30, free=0)


def test_nvml_energy_power_utilization_and_memory_per_gpu():
    samples = scrape(NvmlCollector(FakeNvml()))
    assert samples['tailrace_gpu_energy_joules_total{gpu="0"}'] == 5000.0
    assert 'tailrace_gpu_energy_joules_total{gpu="1"}' not in samples  # not supported: not said, never a zero
    assert samples['tailrace_gpu_power_watts{gpu="0"}'] == 350.0 and samples['tailrace_gpu_power_watts{gpu="1"}'] == 60.0
    assert samples['tailrace_gpu_utilization_percent{gpu="0"}'] == 87.0
    assert samples['tailrace_gpu_memory_used_bytes{gpu="0"}'] == 70 * 2**30


class _Burning:
    compute_only = True

    def run(self, inputs, started_ns=None):
        end = time.thread_time_ns() + 20_000_000
        x = np.ones(64)
        while time.thread_time_ns() < end:
            x = np.sqrt(x + 1.0)
        return {"y": inputs["x"]}


class _Sleeping:
    compute_only = True

    def run(self, inputs, started_ns=None):
        time.sleep(0.02)
        return {"y": inputs["x"]}


def test_each_models_cpu_time_is_its_own_on_metrics():
    """A model that computes 20 ms of CPU per request and one that sleeps 20 ms: 10 requests each."""
    from tailrace.endpoints.serving.metrics import ServerMetrics
    from tailrace.endpoints.serving.scheduler import ModelScheduler, Timings

    schedulers = {n: ModelScheduler(n, r, slots=1, queue_depth=16, max_batch=1)
                  for n, r in (("burning", _Burning()), ("sleeping", _Sleeping()))}
    for s in schedulers.values():
        for _ in range(10):
            s.infer_blocking({"x": np.ones((1, 4))}, Timings())
    metrics = ServerMetrics(lambda: (s.statistics for s in schedulers.values()),
                            lambda: [(n, s.statistics.cpu_ns) for n, s in schedulers.items()])
    samples = hardware_samples(metrics.exposition().decode())
    burning = samples['tailrace_server_model_cpu_seconds_total{model="burning"}']
    sleeping = samples['tailrace_server_model_cpu_seconds_total{model="sleeping"}']
    assert 0.2 <= burning < 0.3 and sleeping < 0.02


def test_the_gpu_checks_reader_and_its_agreement_of_counter_and_sampled_power():
    """bench/gpu_energy.py (run on a GPU machine): what it reads of the collector, and the counter against the
    integral of the sampled power — equal for a steady 300 W, the counter's 1,200 J over 4 s."""
    from bench.gpu_energy import agreement, read_collector

    assert read_collector(NvmlCollector(FakeNvml())) == (5000.0, 350.0)
    t = np.arange(0, 10.01, 0.05)
    power = np.where((t >= 3) & (t <= 7), 300.0, 60.0)
    energy = np.concatenate([[0.0], np.cumsum((power[1:] + power[:-1]) / 2 * np.diff(t))])
    check = agreement(t, energy, power, 3.0, 7.0)
    assert check["counter_j"] == pytest.approx(1200, rel=0.01) and check["relative_gap"] < 0.01
