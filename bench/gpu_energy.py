"""Energy per request on a GPU, read by tailrace's own NVML reader (endpoints/serving/power_sources.py) — the check
issue 63 asks of a GPU machine (an H200 with PyTorch; run there, not on a CPU host).

A PyTorch load in this process: "requests", each REQUEST_MATMULS bf16 matmuls of SIZE × SIZE, synchronised, sent
back to back for LOAD_S seconds, between IDLE_S of idle before and after. A thread scrapes tailrace's NVML collector
every SAMPLE_S (as the embedded server's /metrics would be scraped): the board's energy counter and its power gauge.
Over the load window: the counter's increase against the trapezoid integral of the sampled power (they must agree
within 5%), joules per request from the counter, and above the idle power measured before.

    python bench/gpu_energy.py [--seconds 20] [--write]     # on the GPU machine; prints one JSON object
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import write_section  # noqa: E402
from tailrace.endpoints.serving.power_sources import NvmlCollector  # noqa: E402

SIZE, REQUEST_MATMULS, IDLE_S, SAMPLE_S, AGREE = 8192, 20, 3.0, 0.05, 0.05


def read_collector(collector: NvmlCollector, gpu: str = "0") -> tuple[float | None, float | None]:
    """(energy J, power W) of one GPU, as the collector exposes them."""
    found: dict[str, float] = {}
    for family in collector.collect():
        for sample in family.samples:
            if sample.labels.get("gpu") == gpu:
                found[family.name] = sample.value
    return found.get("tailrace_gpu_energy_joules"), found.get("tailrace_gpu_power_watts")


def agreement(t_s: np.ndarray, energy_j: np.ndarray, power_w: np.ndarray, t0: float, t1: float) -> dict:
    """Over [t0, t1]: the counter's increase (interpolated) and the trapezoid integral of the sampled power — pure."""
    counter = float(np.interp(t1, t_s, energy_j) - np.interp(t0, t_s, energy_j))
    inside = (t_s >= t0) & (t_s <= t1)
    grid = np.concatenate([[t0], t_s[inside], [t1]])
    trapezoid = getattr(np, "trapezoid", None) or np.trapz  # (numpy < 2 names it trapz)
    integral = float(trapezoid(np.interp(grid, t_s, power_w), grid))
    return {"counter_j": counter, "power_integral_j": integral,
            "relative_gap": abs(counter - integral) / counter if counter else None}


def main() -> None:
    import pynvml
    import torch

    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--seconds", type=float, default=20.0)
    args.add_argument("--write", action="store_true", help="write the figure into docs/BENCHMARKS.md")
    a = args.parse_args()
    pynvml.nvmlInit()
    collector = NvmlCollector(pynvml)
    samples: list[tuple[float, float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            energy, power = read_collector(collector)
            if energy is not None and power is not None:
                samples.append((time.monotonic(), energy, power))
            stop.wait(SAMPLE_S)

    x = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    time.sleep(IDLE_S)
    t0, requests = time.monotonic(), 0
    while time.monotonic() - t0 < a.seconds:
        for _ in range(REQUEST_MATMULS):
            y = x @ x
        torch.cuda.synchronize()
        requests += 1
    t1 = time.monotonic()
    time.sleep(IDLE_S)
    stop.set()
    sampler.join()
    t, energy, power = (np.array(c) for c in zip(*samples))
    check = agreement(t, energy, power, t0, t1)
    idle = t < t0
    idle_w = float((energy[idle][-1] - energy[idle][0]) / (t[idle][-1] - t[idle][0])) if idle.sum() > 1 else None
    result = {"gpu": pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)), "requests": requests,
              "load_s": t1 - t0, "samples": len(samples), **check, "within_5pct": check["relative_gap"] <= AGREE,
              "joules_per_request": check["counter_j"] / requests, "idle_power_w": idle_w,
              "joules_per_request_above_idle": (check["counter_j"] - idle_w * (t1 - t0)) / requests
              if idle_w is not None else None, "checksum": float(y.float().mean())}
    print(json.dumps(result, indent=2))
    if a.write:
        write_section("GPU energy per request (NVML)", "`python bench/gpu_energy.py --write` on the GPU machine:\n\n"
                      f"```json\n{json.dumps(result, indent=2)}\n```")


if __name__ == "__main__":
    main()
