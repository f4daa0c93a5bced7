"""Benchmark: results over Locust's channel — bytes shipped per request, and the rows per second one master core
writes into the run directory while its workers' heartbeats stay on time.

A real Locust master with tailrace's locustfile (pinned to CPU 1) admits 4 workers and writes the CHUNK messages
they send. The workers are lean stand-ins on CPU 0 speaking Locust's own protocol (locust.rpc: client_ready,
a heartbeat every second, tailrace's JOIN with the token's proof) that send real request chunks (Parquet, 5,000
rows each, as a worker closes them) at a fixed offered rate and count the ACKs. A master too busy to answer
heartbeats would mark workers missing (master-events.jsonl: worker_left) — the measured rate counts only when
none was. Target: ≥ 20,000 rows/s per master core.

    .venv/bin/python bench/master_ingest.py [--rates 20000,100000,400000] [--seconds 10]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gevent import monkey  # noqa: I001

monkey.patch_all()

import gevent  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402
from tailrace.contract import messages  # noqa: E402
from tailrace.contract.layout import RunLayout  # noqa: E402
from tailrace.contract.master_events import WORKER_LEFT  # noqa: E402
from tailrace.contract.plan import unresolved_plan  # noqa: E402
from tailrace.contract.profile import parse_profile  # noqa: E402
from tailrace.contract.records import REQUEST_FIELDS, RequestRow  # noqa: E402
from tailrace.contract.trace_context import new_ids  # noqa: E402
from tailrace.harness.control.admission import token_proof  # noqa: E402
from tailrace.harness.services.processes import free_port  # noqa: E402
from tailrace.harness.spool.chunk_writer_process import write_chunk  # noqa: E402
from tailrace.harness.spool.recorder import ChunkWriter  # noqa: E402
from tailrace.harness.worker.identity import TOKEN_ENV  # noqa: E402

COMMAND = ".venv/bin/python bench/master_ingest.py"
WORKERS, CHUNK_ROWS, TOKEN = 4, 5000, "bench-token"


def chunk_bytes(tmp: Path) -> tuple[bytes, int]:
    """One realistic closed request chunk (5,000 rows) as a worker writes it."""
    from tailrace.contract.layout import WorkerLayout

    writer = ChunkWriter(WorkerLayout(tmp / "w"), "requests", REQUEST_FIELDS, RequestRow, CHUNK_ROWS, 1.0)
    rng = np.random.default_rng(0)
    rows = []
    for i in range(CHUNK_ROWS):
        lat = int(rng.exponential(3e6))
        trace_id, span_id = new_ids()  # random 128-bit trace ids, as a worker makes them: they do not compress
        rows.append(RequestRow(run_id="bench-run", trace_id=trace_id, span_id=span_id,
                               region="r0", worker="r0-w0", endpoint="mlp-http", model="digits_mlp_fp32",
                               protocol="kserve-http", phase=1, sample_index=i % 540, t_intended=10**18 + i * 10**6,
                               t_sent=10**18 + i * 10**6 + 50_000, t_done=10**18 + i * 10**6 + lat, latency_ns=lat,
                               service_ns=lat - 50_000, send_lag_ns=50_000, status="ok", code="200", error="",
                               server_queue_ns=1000, server_compute_ns=200_000, server_receive_ns=10**18,
                               server_send_ns=10**18, echoed_trace_id="", label=3, prediction=3, correct=True,
                               batch_size=1, correct_count=1, bytes_out=300, bytes_in=250, in_flight=1,
                               clock_offset_ns=0, clock_uncertainty_ns=10_000))
    path = tmp / "requests-00000.parquet"
    write_chunk(writer.to_table(rows), path)
    return path.read_bytes(), CHUNK_ROWS


def fake_worker(host: str, port: int, region: str, data: bytes, chunks_per_s: float, seconds: float, acks: list) -> None:
    """A stand-in worker on Locust's protocol: ready, JOIN, heartbeats, CHUNKs at a fixed rate, ACKs counted."""
    from locust import __version__
    from locust.rpc import Message, rpc

    client_id = f"bench-{region}"
    client = rpc.Client(host, port, client_id)
    client.send(Message("client_ready", __version__, client_id))
    join = messages.Join(client_id, f"{region}-w0", region, 0, token_proof(TOKEN, client_id))
    client.send(Message(messages.JOIN.name, messages.wire(join), client_id))

    def heartbeat():
        while True:
            client.send(Message("heartbeat", {"state": "running", "current_cpu_usage": 1.0,
                                                  "current_memory_usage": 1}, client_id))
            gevent.sleep(1)

    def receive():
        while True:
            msg = client.recv()
            if msg.type == messages.ACK.name:
                acks.append(time.monotonic())

    greenlets = [gevent.spawn(heartbeat), gevent.spawn(receive)]
    gevent.sleep(3)  # admitted before the flood
    start, k = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        due = start + k / chunks_per_s
        gevent.sleep(max(0.0, due - time.monotonic()))
        chunk = messages.Chunk(client_id, f"requests-{k:05d}.parquet", data)
        client.send(Message(messages.CHUNK.name, messages.wire(chunk), client_id))
        k += 1
    gevent.sleep(3)
    gevent.killall(greenlets)
    client.close()


def trial(work: Path, data: bytes, rows_per_s: float, seconds: float) -> dict:
    regions = [{"name": f"r{i}", "share": 1 / WORKERS} for i in range(WORKERS)]
    profile = parse_profile({"name": "ingest", "regions": regions, "load": {"rate": 1, "duration_s": 600},
                             "endpoints": [{"name": "mlp-http", "url": "http://127.0.0.1:1", "protocol": "kserve-http",
                                            "model": "m"}], "clock": {"servers": []}}, "bench")
    run = work / f"run-{rows_per_s:g}"
    plan = unresolved_plan(profile, run.name, str(run))
    run.mkdir(parents=True)
    plan.write(RunLayout(run))
    port = free_port()
    from tailrace.harness.orchestration.lifecycle import LOCUSTFILE
    from tailrace.harness.worker.identity import PLAN_ENV  # noqa: I001

    master = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--master",
                               "--headless", "-u", str(WORKERS), "-r", str(WORKERS), "--expect-workers", str(WORKERS),
                               "-t", f"{seconds + 20:.0f}s", "--master-bind-host", "127.0.0.1", "--master-bind-port",
                               str(port), "--loglevel", "ERROR"], env={**os.environ, PLAN_ENV: str(RunLayout(run).plan),
                                                                       TOKEN_ENV: TOKEN},
                              stdout=open(work / "master.log", "ab"), stderr=subprocess.STDOUT)
    time.sleep(2)
    proc = psutil.Process(master.pid)
    acks: list[float] = []
    per_worker = rows_per_s / WORKERS / CHUNK_ROWS
    workers = [gevent.spawn(fake_worker, "127.0.0.1", port, f"r{i}", data, per_worker, seconds, acks)
               for i in range(WORKERS)]
    gevent.sleep(3)
    cpu0, t0, n0 = proc.cpu_times(), time.monotonic(), len(acks)
    gevent.sleep(seconds)
    cpu1, t1, n1 = proc.cpu_times(), time.monotonic(), len(acks)
    gevent.joinall(workers, timeout=30)
    master.terminate()
    master.wait(30)
    log = run / "master-events.jsonl"
    if not log.exists():
        raise SystemExit(f"the master logged nothing: {(work / 'master.log').read_text()[-2000:]}")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    written = len(RunLayout(run).request_chunks())
    cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (t1 - t0)
    return {"offered": rows_per_s, "ingested": (n1 - n0) * CHUNK_ROWS / (t1 - t0), "master_cpu": cpu,
            "left": sum(WORKER_LEFT.matches(e) for e in events), "files": written}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="20000,100000,400000")
    ap.add_argument("--seconds", type=float, default=10)
    args = ap.parse_args()
    os.sched_setaffinity(0, {0})
    with tempfile.TemporaryDirectory(prefix="tailrace-ingest-") as tmp:
        data, rows = chunk_bytes(Path(tmp))
        results = [trial(Path(tmp), data, float(r), args.seconds) for r in args.rates.split(",")]
    per_row = len(data) / rows
    lines = [f"Command: `{COMMAND} --rates {args.rates} --seconds {args.seconds:g}` (a real Locust master with "
             f"tailrace's locustfile on CPU 1; {WORKERS} stand-in workers on CPU 0 sending real 5,000-row chunks).", "",
             f"Bytes shipped per request: **{per_row:.0f} B** (a closed Parquet chunk as a worker writes it — "
             "delta-packed integers, LZ4 — as sent; the message adds its name and the client id).", "",
             "| offered rows/s | ingested rows/s (acknowledged) | master CPU (cores) | rows/s per master core | "
             "workers marked missing |", "|---|---|---|---|---|"]
    for r in results:
        per_core = r["ingested"] / r["master_cpu"] if r["master_cpu"] > 0 else float("nan")
        lines.append(f"| {r['offered']:,.0f} | {r['ingested']:,.0f} | {r['master_cpu']:.2f} | {per_core:,.0f} | "
                     f"{r['left']} |")
    write_section("Results over Locust's channel: bytes per request and master ingest", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
