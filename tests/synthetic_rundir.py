"""Build run directories with known truth (for analysis tests): workers, clocks, latencies."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.recorder import clock_writer, request_writer

BASE_NS = 1_790_000_000_000_000_000


def profile_dict(rate: float, duration_s: float, regions=("r1", "r2"), endpoints=("e1",), slos=None) -> dict:
    return {"name": "synthetic", "load": {"rate": rate, "duration_s": duration_s, "warmup_s": 0, "seed": 0,
                                          "phases": []},
            "regions": [{"name": r, "share": 1 / len(regions)} for r in regions],
            "endpoints": [{"name": e, "url": "http://127.0.0.1:1", "protocol": "kserve-http", "model": "m",
                           "weight": 1.0} for e in endpoints],
            "slos": slos or [], "embedded": {"slots": {}}}


def write_run(run_dir: Path, *, workers: dict[str, dict], profile: dict, valid: bool = True, seed: int = 0,
              chunk_rows: int = 500, warnings: list[str] | None = None) -> dict:
    """workers: name → {region, offset_ms (reference − local), latency_ms (array-like or callable(n, rng)),
    rate, duration_s, errors (fraction)}. Returns the truth (true reference send times per trace)."""
    rng = np.random.default_rng(seed)
    truth = {}
    for name, w in workers.items():
        d = run_dir / "regions" / w["region"] / name
        n = int(w["rate"] * w["duration_s"])
        t_ref = BASE_NS + np.sort(rng.uniform(0, w["duration_s"], n) * 1e9).astype(np.int64)
        offset_ns = int(w.get("offset_ms", 0) * 1e6)
        local = t_ref - offset_ns
        lat = w["latency_ms"](n, rng) if callable(w["latency_ms"]) else np.full(n, float(w["latency_ms"]))
        lat_ns = (np.asarray(lat) * 1e6).astype(np.int64)
        errors = rng.random(n) < w.get("errors", 0.0)
        writer = request_writer(d, chunk_rows, 1e9)
        for i in range(n):
            trace = f"{rng.integers(0, 2**63):016x}{i:016x}"
            truth[trace] = int(t_ref[i])
            writer.add({"run_id": "syn", "trace_id": trace, "span_id": f"{i:016x}", "region": w["region"],
                        "worker": name, "endpoint": w.get("endpoint", "e1"), "model": "m", "protocol": "kserve-http",
                        "phase": 1, "sample_index": i, "t_intended": int(local[i]), "t_sent": int(local[i]) + 100_000,
                        "t_done": int(local[i] + lat_ns[i]), "latency_ns": int(lat_ns[i]),
                        "service_ns": int(lat_ns[i]) - 100_000, "send_lag_ns": 100_000,
                        "status": "connection" if errors[i] else "ok", "code": "refused" if errors[i] else "200",
                        "error": "ConnectionRefusedError" if errors[i] else "", "server_queue_ns": -1,
                        "server_compute_ns": -1, "server_receive_ns": -1, "server_send_ns": -1,
                        "echoed_trace_id": trace, "label": 1, "prediction": 1, "correct": not errors[i],
                        "batch_size": 1, "correct_count": int(not errors[i]),
                        "bytes_out": 100, "bytes_in": 100, "in_flight": 1, "clock_offset_ns": offset_ns,
                        "clock_uncertainty_ns": 50_000})
        writer.flush()
        clock = clock_writer(d)
        for k, t in enumerate(np.linspace(0, w["duration_s"], 8)):
            delay = int(rng.uniform(60_000, 120_000))
            # one sample in three took a slow path: larger delay, offset biased by the asymmetry
            bias = int(rng.uniform(2e6, 8e6)) if k % 3 == 1 else 0
            clock.add({"worker": name, "region": w["region"], "server": "ref:123",
                       "local_ns": int(BASE_NS + t * 1e9 - offset_ns), "offset_ns": offset_ns + bias
                       + int(rng.normal(0, 20_000)), "delay_ns": delay + 2 * bias, "packets": 4, "stage": "during"})
        clock.flush()
    manifest = {"run_id": run_dir.name, "profile": profile, "valid": valid,
                "invalid_reasons": [] if valid else ["w1: send lag p99 9.0 ms > 5 ms (generator saturated)"],
                "warnings": warnings or [],
                "versions": {"python": "3"}, "host": {}, "seed": 0, "workers": {}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return truth
