"""Benchmark: a worker's chunks a file each, or written together every generator.file_seconds — what the worker's
chunk writer pays, and what `tailrace analyze` then takes.

The rows are a synthetic run's (bench/synthetic_run.py: 6 workers, each closing a chunk every 0.25 s, as a 10-minute
run at 2,000 requests/s leaves them — 1.2 M rows in 14,400 chunks). Each worker's chunks are handed, in order, to the
chunk writer's own loop (harness/spool/chunk_writer_process.py `serve`, in this process, its clock advancing 0.25 s a
chunk) with `file_seconds` 0 (a file a chunk: what it wrote before) and the others; the writer's CPU time (user +
system, the Arrow IPC decoding included) is what that child process would spend. Each variant is a run directory of
its own with the same rows, then analysed by `tailrace analyze` (its own process: wall time, peak RSS), the variants
alternating; every variant's summary.json is compared with the first's, field by field.

`--send-rates R,…` also runs the real harness at each of those requests/s with each file_seconds (bench/generator_open_loop.py's
trial: nginx and the master on CPU 1, one worker and its chunk writer on CPU 0, `--send-seconds` a trial, the
variants alternating): what a file's larger write in the sending loop's sleeps does to the send lag.

    .venv/bin/python bench/chunk_files.py [--seconds 0,1,5] [--repeats 3] [--work /var/tmp/tailrace-scale]
                                          [--send-rates 2000,8000 --send-seconds 10]
"""
from __future__ import annotations

import argparse
import io
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.analysis_scale import TAILRACE, run_dir, summary_differences, timed  # noqa: E402
from bench.common import require, write_section  # noqa: E402
from bench.generator_open_loop import isolate_generator_core, restore_affinity, start_nginx, worker_trial  # noqa: E402
from tailrace.command_lines import tailrace_argv  # noqa: E402
from tailrace.contract.layout import CLOCK, REQUESTS, RunLayout  # noqa: E402
from tailrace.endpoints.models.model_build import build_repository  # noqa: E402
from tailrace.harness.services.processes import free_port, start_process  # noqa: E402
from tailrace.harness.spool.chunk_writer_process import encode_frame, serve  # noqa: E402

COMMAND = ".venv/bin/python bench/chunk_files.py"
ROWS, CHUNKS, CHUNK_S = 1_200_000, 14_400, 0.25


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _frames(worker_dir: Path, prefix: str) -> bytes:
    """A worker's chunks of one log as the frames its writer is sent, in order."""
    paths = sorted(worker_dir.glob(f"{prefix}-*.parquet"))
    return b"".join(encode_frame(pq.read_table(p), prefix, int(p.stem.split("-")[1])) for p in paths)


def written_as(source: Path, target: Path, file_seconds: float) -> tuple[float, int]:
    """`source`'s run directory copied to `target`, each worker's chunks written by the chunk writer's loop with
    `file_seconds`: (the writers' CPU seconds, the files written)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.parquet", "report"))
    cpu, files = 0.0, 0
    for _, _, worker in RunLayout(source).workers():
        out = target / worker.dir.relative_to(source)
        for prefix in (REQUESTS, CLOCK):
            frames = _frames(worker.dir, prefix)
            ticks = iter(i * CHUNK_S for i in range(1 << 30))
            started = _cpu()
            files += serve(out, io.BytesIO(frames), None, file_seconds, clock=lambda: next(ticks))
            cpu += _cpu() - started
    return cpu, files


def send_lag_trials(variants: list[float], rate: float, seconds: int, repeats: int) -> dict[float, list[tuple]]:
    """file_seconds → [(send lag p50 ms, p99 ms, achieved /s, files)] of one worker at `rate`, a trial each repeat."""
    require("taskset")
    work = Path(tempfile.mkdtemp(prefix="tailrace-filebench-"))
    build_repository(work / "models")
    nginx_port, sntp_port = free_port(), free_port()
    nginx = start_nginx(work, nginx_port)
    sntp = start_process("sntp", ["taskset", "-c", "1", *tailrace_argv("sntp", "--port", str(sntp_port))],
                         work / "sntp.log")
    endpoint = (f'name = "nginx"\nurl = "http://127.0.0.1:{nginx_port}"\nprotocol = "kserve-http"\n'
                'model = "digits_mlp_fp32"\ninputs = [{ name = "input", datatype = "FP32", shape = [-1, 64] }]')
    time.sleep(1.0)
    moved = isolate_generator_core()
    trials: dict[float, list[tuple]] = {v: [] for v in variants}
    try:
        for r in range(repeats):
            for v in variants:
                name = f"files-{v:g}-{r}"
                df, _ = worker_trial(work, work / "models", f"127.0.0.1:{sntp_port}", name, endpoint, rate, seconds,
                                     generator=f"file_seconds = {v}")
                lag = df["send_lag_ns"].to_numpy() / 1e6
                [run] = list((work / "runs").glob(f"{name}-*"))
                files = len(RunLayout(run).request_chunks())
                trials[v].append((float(np.percentile(lag, 50)), float(np.percentile(lag, 99)), len(df) / seconds,
                                  files))
                print(f"send rate {rate:,.0f}/s, file_seconds {v:g}: send lag p99 {trials[v][-1][1]:.2f} ms, "
                      f"{files} request files", flush=True)
                shutil.rmtree(run)
    finally:
        restore_affinity(moved)
        nginx.stop()
        sntp.stop()
        shutil.rmtree(work, ignore_errors=True)
    return trials


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", default="0,1,5", help="file_seconds to compare, the first the reference")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/tailrace-scale"))
    ap.add_argument("--send-rates", default="", help="also run the harness at these requests/s (comma-separated)")
    ap.add_argument("--send-seconds", type=int, default=10)
    args = ap.parse_args()
    try:
        variants = [float(s) for s in args.seconds.split(",")]
    except ValueError:
        ap.error(f"--seconds {args.seconds!r}: comma-separated numbers")
    try:
        rates = [float(r) for r in args.send_rates.split(",") if r.strip()]
    except ValueError:
        ap.error(f"--send-rates {args.send_rates!r}: comma-separated numbers")
    if args.repeats < 1 or not variants or any(r <= 0 for r in rates) or args.send_seconds < 1:
        ap.error("--repeats and --send-seconds must be at least 1, --seconds name one value or more, "
                 "--send-rates positive rates")
    source = run_dir(args.work, ROWS, 1, CHUNKS)
    writer: dict[float, list[float]] = {v: [] for v in variants}
    analyse: dict[float, list[tuple[float, float]]] = {v: [] for v in variants}
    files: dict[float, int] = {}
    differ: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tailrace-files-", dir=args.work) as tmp:
        for r in range(args.repeats):
            for v in variants:
                target = Path(tmp) / f"{v:g}-{r}"
                cpu, files[v] = written_as(source, target, v)
                writer[v].append(cpu)
                wall, peak = timed([*TAILRACE, "analyze", str(target), "--out", str(target / "report"), "--quiet"])[:2]
                analyse[v].append((wall, peak))
                print(f"repeat {r + 1}, file_seconds {v:g}: writers {cpu:.2f} CPU-s, {files[v]:,} files, "
                      f"analyze {wall:.1f} s, {peak:.2f} GiB", flush=True)
            first = json.loads((Path(tmp) / f"{variants[0]:g}-{r}/report/summary.json").read_text())
            for v in variants[1:]:
                ours = json.loads((Path(tmp) / f"{v:g}-{r}/report/summary.json").read_text())
                differ += summary_differences(_rows_only(ours), _rows_only(first))
            for v in variants:
                shutil.rmtree(Path(tmp) / f"{v:g}-{r}")

    def cell(values: list[float], digits: int) -> str:
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"

    ref = variants[0]
    sending = f" --send-rates {args.send_rates} --send-seconds {args.send_seconds}" if rates else ""
    lines = [f"Command: `{COMMAND} --seconds {args.seconds} --repeats {args.repeats}{sending}` ({ROWS:,} rows in {CHUNKS:,} "
             f"chunks of 0.25 s, 6 workers; the writers' CPU in this process, `tailrace analyze` in its own; medians, "
             "spread in brackets).", "",
             "| file_seconds | files (requests + clock) | writers' CPU s | `tailrace analyze` s | peak GiB | "
             "analyze time over a file a chunk's, per repeat |", "|---|---|---|---|---|---|"]
    for v in variants:
        ratios = [a[0] / b[0] for a, b in zip(analyse[v], analyse[ref])]
        lines.append(f"| {v:g} | {files[v]:,} | {cell(writer[v], 2)} | {cell([a[0] for a in analyse[v]], 1)} | "
                     f"{max(a[1] for a in analyse[v]):.2f} | {', '.join(f'{x:.2f}' for x in ratios)} |")
    lines += ["", "summary.json: the same numbers in every variant and repeat (the chunk counts aside)." if not differ
              else f"summary.json DIFFERS at {len(differ)} field(s): {', '.join(sorted(set(differ))[:8])}."]
    if rates:
        lines += ["", "The harness (one worker on CPU 0 with its chunk writer, nginx and the master on CPU 1; kernel housekeeping "
                      "moved off CPU 0), a trial a repeat, the variants alternating:", "",
                  "| requests/s | file_seconds | request files a trial | achieved /s | send lag p50 ms | "
                  "send lag p99 ms, each trial |", "|---|---|---|---|---|---|"]
        for rate in rates:
            for v, runs in send_lag_trials(variants, rate, args.send_seconds, args.repeats).items():
                lines.append(f"| {rate:,.0f} | {v:g} | {statistics.median(t[3] for t in runs):.0f} | "
                             f"{statistics.median(t[2] for t in runs):,.0f} | "
                             f"{statistics.median(t[0] for t in runs):.3f} | {', '.join(f'{t[1]:.2f}' for t in runs)} |")
    write_section("Chunk files: a file a chunk, or a file every few seconds", "\n".join(lines))
    print("\n".join(lines))
    return 0


def _rows_only(summary: dict) -> dict:
    """A summary without what counts files (its input's chunk counts), which the variants differ in by design."""
    summary = json.loads(json.dumps(summary))
    summary.get("input", {}).pop("chunks_read", None)
    return summary


if __name__ == "__main__":
    sys.exit(main())
