"""Synthetic run directories of N request rows, written vectorised (no Python object per row), for the analysis
benchmarks (bench/analysis_scale.py) and the large-run test.

Realistic in shape: 3 regions × 2 workers each, 3 endpoints (two report server timings), a warm-up then a
rate step, ~0.4% errors of three kinds, per-worker clock offsets with drifting clock samples every 10 s, W3C
trace ids, and chunks of `chunk_rows` rows written as a worker writes them (harness/spool/chunk_writer_process.py).
The latency of each row is known: `latencies_ms(run_dir)` is the truth the analysis must reproduce.

    .venv/bin/python bench/synthetic_run.py OUT_DIR --rows 10000000 [--chunks 200] [--seed 1]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tailrace.contract.layout import CLOCK, REQUESTS, RunLayout  # noqa: E402
from tailrace.contract.records import CLOCK_FIELDS, OPTIONAL_DEFAULTS, REQUEST_FIELDS, arrow_schema  # noqa: E402
from tailrace.harness.spool.chunk_writer_process import write_chunk  # noqa: E402

BASE_NS = 1_790_000_000_000_000_000
REGIONS = (("us-east", 0.4, 2.0, 35.0), ("eu-west", 0.35, 20.0, -12.0), ("ap-south", 0.25, 55.0, 80.0))
# (name, share, network RTT ms, clock offset ms of worker 0: reference − local)
ENDPOINTS = (("resnet", "resnet50", "kserve-grpc", 0.5, 9.0, True),
             ("bert", "bert_base", "kserve-http", 0.3, 14.0, True),
             ("digits", "digits_mlp_fp32", "kserve-http", 0.2, 1.5, False))
# (name, model, protocol, weight, median server time ms, reports server timings)
WORKERS_PER_REGION = 2
WARMUP_S = 30.0
HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


@dataclass(frozen=True)
class Shape:
    """What the synthetic run looks like: N rows over `duration_s` (derived from the rate)."""

    rows: int
    rate: float = 3000.0
    chunks: int = 200
    seed: int = 1

    @property
    def duration_s(self) -> float:
        return self.rows / self.rate - WARMUP_S if self.rows / self.rate > 2 * WARMUP_S else self.rows / self.rate / 2

    @property
    def warmup_s(self) -> float:
        return self.rows / self.rate - self.duration_s


def profile_dict(shape: Shape) -> dict:
    half = shape.duration_s / 2
    return {"name": "synthetic-scale", "output_dir": "runs",
            "load": {"rate": shape.rate * 0.8, "duration_s": shape.duration_s, "warmup_s": shape.warmup_s,
                     "seed": shape.seed, "phases": [{"at_s": 0, "rate": shape.rate * 0.8},
                                                   {"at_s": half, "rate": shape.rate * 1.2}]},
            "regions": [{"name": r, "share": s, "workers": WORKERS_PER_REGION} for r, s, _, _ in REGIONS],
            "endpoints": [{"name": n, "url": f"{'grpc' if p == 'kserve-grpc' else 'http'}://127.0.0.1:{8000 + i}",
                           "protocol": p, "model": m, "weight": w} for i, (n, m, p, w, _, _) in enumerate(ENDPOINTS)],
            "slos": [{"metric": "latency", "percentile": 99, "threshold_ms": 250.0},
                     {"metric": "latency", "percentile": 50, "threshold_ms": 40.0, "endpoint": "digits"},
                     {"metric": "error_rate", "threshold": 0.01}],
            "embedded": {"slots": {}}}


def hex_strings(raw: np.ndarray) -> pa.StringArray:
    """Rows of random bytes as lowercase hex strings, built from buffers (no Python string per row)."""
    n, width = raw.shape
    digits = np.empty((n, 2 * width), dtype=np.uint8)
    digits[:, 0::2] = HEX[raw >> 4]
    digits[:, 1::2] = HEX[raw & 15]
    offsets = np.arange(0, 2 * width * (n + 1), 2 * width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(digits.tobytes()))


def pick(values: list[str], codes: np.ndarray) -> pa.Array:
    """Strings by code, materialised as plain strings (as the recorder writes them)."""
    return pa.DictionaryArray.from_arrays(codes.astype(np.int32), values).cast(pa.string())


def _worker_rows(rng: np.random.Generator, shape: Shape, region_i: int, worker_i: int, n: int,
                 span_s: tuple[float, float]) -> pa.Table:
    """`n` rows of one worker sent in `span_s` (seconds from the run's start)."""
    region, _, rtt_ms, offset_ms = REGIONS[region_i]
    worker = f"{region}-w{worker_i}"
    offset_ns = int((offset_ms + 7.0 * worker_i) * 1e6)
    t_ref = BASE_NS + np.sort(rng.uniform(*span_s, n) * 1e9).astype(np.int64)
    local = t_ref - offset_ns
    since_measured = (t_ref - BASE_NS) / 1e9 - shape.warmup_s
    phase = np.where(since_measured < 0, 0, np.where(since_measured < shape.duration_s / 2, 1, 2)).astype(np.int32)
    weights = np.array([e[3] for e in ENDPOINTS])
    ep = rng.choice(len(ENDPOINTS), size=n, p=weights / weights.sum()).astype(np.int8)
    server_ms = np.array([e[4] for e in ENDPOINTS])[ep] * rng.lognormal(0.0, 0.45, n)
    queue_ms = rng.exponential(1.0, n) * np.where(phase == 2, 3.0, 1.0)
    network_ms = rtt_ms * (1 + 0.05 * rng.standard_normal(n)).clip(0.8)
    send_lag = rng.exponential(150_000, n).astype(np.int64)
    latency = ((server_ms + queue_ms + network_ms) * 1e6).astype(np.int64) + send_lag
    status_draw = rng.random(n)
    status = np.select([status_draw < 0.002, status_draw < 0.003, status_draw < 0.004], [1, 2, 3], 0).astype(np.int8)
    timeout = status == 2
    latency[timeout] = 5_000_000_000
    ok = status == 0
    reports = np.array([e[5] for e in ENDPOINTS])[ep] & ok
    t_sent = local + send_lag
    t_done = local + latency
    up_ns = (network_ms * 0.5e6).astype(np.int64)
    receive = np.where(reports, t_ref + send_lag + up_ns, -1)
    server_send = np.where(reports, receive + ((server_ms + queue_ms) * 1e6).astype(np.int64), -1)
    trace = hex_strings(rng.integers(0, 256, size=(n, 16), dtype=np.uint8))
    label = rng.integers(0, 10, n)
    right = ok & (rng.random(n) < 0.97)
    prediction = np.where(ok, np.where(right, label, (label + 1) % 10), -1)
    columns = {
        "run_id": pick(["synthetic-scale"], np.zeros(n)), "trace_id": trace,
        "span_id": hex_strings(rng.integers(0, 256, size=(n, 8), dtype=np.uint8)),
        "region": pick([region], np.zeros(n)), "worker": pick([worker], np.zeros(n)),
        "endpoint": pick([e[0] for e in ENDPOINTS], ep), "model": pick([e[1] for e in ENDPOINTS], ep),
        "protocol": pick([e[2] for e in ENDPOINTS], ep), "phase": phase,
        "sample_index": rng.integers(0, 360, n), "t_intended": local, "t_sent": t_sent, "t_done": t_done,
        "latency_ns": latency, "service_ns": latency - send_lag, "send_lag_ns": send_lag,
        "status": pick(["ok", "http_error", "timeout", "connection"], status),
        "code": pick(["200", "503", "timeout", "refused"], status),
        "error": pick(["", "HTTP 503", "no response within 5.0 s", "ConnectionRefusedError"], status),
        "server_queue_ns": np.where(reports, (queue_ms * 1e6).astype(np.int64), -1),
        "server_compute_ns": np.where(reports, (server_ms * 1e6).astype(np.int64), -1),
        "server_receive_ns": receive, "server_send_ns": server_send,
        "echoed_trace_id": pc.if_else(pa.array(reports), trace, pa.scalar("")),
        "label": label, "prediction": prediction, "correct": right,
        "batch_size": np.ones(n, dtype=np.int32), "correct_count": np.where(ok, right.astype(np.int32), -1),
        "bytes_out": np.full(n, 1_180), "bytes_in": np.where(ok, 310, 0),
        "in_flight": rng.poisson(2.0, n).astype(np.int32) + 1,
        "clock_offset_ns": np.full(n, offset_ns) + rng.integers(-40_000, 40_000, n),
        "clock_uncertainty_ns": np.full(n, 60_000),
    }
    for name, kind, _ in REQUEST_FIELDS:  # the streamed-response columns of a one-shot run: their defaults
        if name not in columns:
            default = OPTIONAL_DEFAULTS[name]
            columns[name] = (np.full(n, default, dtype=np.int32 if kind == "int32" else np.int64)
                             if isinstance(default, int) else pa.repeat(pa.scalar(default, pa.binary() if kind == "binary"
                                                                                  else pa.string()), n))
    schema = arrow_schema(REQUEST_FIELDS)
    return pa.Table.from_arrays([pa.array(columns[f.name], type=f.type) if not isinstance(columns[f.name], pa.Array)
                                 else columns[f.name] for f in schema], schema=schema)


def _clock_rows(rng: np.random.Generator, shape: Shape, region_i: int, worker_i: int) -> pa.Table:
    region, _, _, offset_ms = REGIONS[region_i]
    offset_ns = (offset_ms + 7.0 * worker_i) * 1e6
    t = np.arange(0, shape.warmup_s + shape.duration_s + 10, 10.0)
    local = (BASE_NS + t * 1e9 - offset_ns).astype(np.int64)
    drift = t * 1e9 * 2e-6 * (1 if worker_i else -1)  # ±2 ppm
    delay = rng.uniform(60_000, 120_000, len(t)).astype(np.int64)
    n = len(t)
    return pa.Table.from_pydict({
        "worker": [f"{region}-w{worker_i}"] * n, "region": [region] * n, "server": ["ref:123"] * n,
        "local_ns": local, "offset_ns": (offset_ns + drift + rng.normal(0, 20_000, n)).astype(np.int64),
        "delay_ns": delay, "packets": np.full(n, 4, dtype=np.int32), "stage": ["during"] * n},
        schema=arrow_schema(CLOCK_FIELDS))


def _write(table: pa.Table, path: Path) -> None:
    write_chunk(table, path)  # as a worker's chunk writer writes it


def write_synthetic_run(run_dir: Path, shape: Shape) -> dict:
    """Write a complete run directory of `shape.rows` request rows; returns its manifest."""
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    rng = np.random.default_rng(shape.seed)
    workers = [(r, w) for r in range(len(REGIONS)) for w in range(WORKERS_PER_REGION)]
    shares = np.array([REGIONS[r][1] / WORKERS_PER_REGION for r, _ in workers])
    counts = rng.multinomial(shape.rows, shares / shares.sum())
    chunks_per_worker = max(1, shape.chunks // len(workers))
    summaries = {}
    for (r, w), n in zip(workers, counts):
        wl = layout.worker(REGIONS[r][0], f"{REGIONS[r][0]}-w{w}")
        wl.dir.mkdir(parents=True, exist_ok=True)
        edges = np.linspace(0, shape.warmup_s + shape.duration_s, chunks_per_worker + 1)
        for k, rows in enumerate(rng.multinomial(n, np.full(chunks_per_worker, 1 / chunks_per_worker))):
            _write(_worker_rows(rng, shape, r, w, int(rows), (edges[k], edges[k + 1])), wl.chunk(REQUESTS, k))
        _write(_clock_rows(rng, shape, r, w), wl.chunk(CLOCK, 0))
        summaries[f"{REGIONS[r][0]}-w{w}"] = {"summary": {"planned": int(n), "sent": int(n), "rows_written": int(n),
                                                          "chunks": chunks_per_worker}}
    manifest = {"run_id": run_dir.name, "profile": profile_dict(shape), "valid": True, "invalid_reasons": [],
                "warnings": [], "versions": {"python": "3"}, "host": {}, "seed": shape.seed, "workers": summaries,
                "start_ns": BASE_NS, "end_ns": BASE_NS + int((shape.warmup_s + shape.duration_s) * 1e9)}
    layout.manifest.write_text(json.dumps(manifest))
    return manifest


def latencies_ms(run_dir: Path, endpoint: str, region: str) -> np.ndarray:
    """The truth: measured-phase latencies (ms) of ok requests of one endpoint × region, read straight from
    the chunks with pyarrow (independent of the analysis)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    data = ds.dataset(sorted(RunLayout(run_dir).request_chunks()), format="parquet")
    table = data.to_table(columns=["latency_ns"], filter=(pc.field("phase") > 0) & (pc.field("status") == "ok")
                          & (pc.field("endpoint") == endpoint) & (pc.field("region") == region))
    return table.column("latency_ns").to_numpy() / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--chunks", type=int, default=200)
    ap.add_argument("--rate", type=float, default=3000.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        print(f"synthetic_run: {args.out} is not empty", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    write_synthetic_run(args.out, Shape(args.rows, args.rate, args.chunks, args.seed))
    size = sum(p.stat().st_size for p in args.out.rglob("*.parquet"))
    print(f"{args.rows:,} rows in {time.perf_counter() - t0:.1f} s → {args.out} ({size / 2**20:,.0f} MiB of chunks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
