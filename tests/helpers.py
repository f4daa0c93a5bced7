"""Helpers for integration tests: profiles written on the fly, runs driven through LocalRun."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from harness.orchestrate import LocalRun
from harness.profile import Profile, parse_profile
from harness.manifest import write_manifest


def split_cpus() -> tuple[list[int] | None, list[int] | None]:
    """(endpoint CPUs, generator CPUs): the last CPU for the endpoint, the first for the generators, so that
    they do not delay each other on a small machine; (None, None) on a single CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[-1:], cpus[:1]) if len(cpus) >= 2 else (None, None)


def make_profile(models_dir: Path, **overrides) -> Profile:
    data = {
        "name": "test",
        "endpoints": [
            {"name": "mlp-http", "url": "embedded", "protocol": "kserve-http", "model": "digits_mlp_fp32"},
            {"name": "mlp-grpc", "url": "embedded", "protocol": "kserve-grpc", "model": "digits_mlp_fp32"},
        ],
        "regions": [{"name": "near", "share": 0.5, "delay_ms": 2},
                    {"name": "far", "share": 0.5, "delay_ms": 10, "jitter_ms": 1}],
        "load": {"rate": 150, "duration_s": 10, "warmup_s": 1, "seed": 42},
        "clock": {"servers": ["embedded"], "interval_s": 2},
        "embedded": {"models_dir": str(models_dir)},
    }
    for key, value in overrides.items():
        node = data
        parts = key.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return parse_profile(data, "test profile")


def run_with(profile: Profile, out: Path, during=None) -> tuple[LocalRun, dict]:
    """Run a profile; `during(run)` is called in a thread once the processes are up."""
    run = LocalRun(profile, out, quiet=True)
    thread = None
    try:
        run.start()
        if during is not None:
            thread = threading.Thread(target=during, args=(run,), daemon=True)
            thread.start()
        run.wait(lambda _r: None)
    finally:
        run.stop()
        if thread is not None:
            thread.join(timeout=30)
    manifest = run.manifest(interrupted=False)
    write_manifest(run.run_dir, manifest)
    return run, manifest


def sleep_until_measuring(run: LocalRun, seconds_into_measured: float, timeout: float = 90.0) -> None:
    """Sleep until `seconds_into_measured` s after warm-up ends, using the start instant the master announced."""
    from harness.manifest import read_master_events

    deadline = time.time() + timeout
    start_ref_ns = None
    while start_ref_ns is None and time.time() < deadline:
        plan = next((e for e in read_master_events(run.run_dir) if e["event"] == "plan_sent"), None)
        start_ref_ns = plan["start_ref_ns"] if plan else None
        time.sleep(0.1)
    if start_ref_ns is None:
        raise RuntimeError("the master never announced a start instant")
    target = start_ref_ns / 1e9 + run.profile.load.warmup_s + seconds_into_measured
    time.sleep(max(0.0, target - time.time()))
