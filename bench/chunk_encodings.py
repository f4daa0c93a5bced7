"""Benchmark: a request chunk's Parquet encodings — what the analysis pays to read its columns, what the worker's
chunk writer pays to write them, and their size.

The rows are a synthetic run's (bench/synthetic_run.py, the same as bench/analysis_scale.py analyses): every
`--every`-th chunk, rewritten in each encoding, then the analysis's columns (analysis/read/rundir.py ANALYSIS_COLUMNS)
read from every chunk as analysis/read/chunks.py reads them (one chunk per call, footers read once, few-valued strings
as dictionaries). The encodings alternate within each repeat, so they see the same machine noise; CPU seconds of
this process (user + system), per row. `written` is the chunk writer's own choice (harness/worker/
chunk_writer_process.py chunk_encoding, page CRCs verified as the analysis does; the other variants carry them
too); `snappy, plain integers` is what it wrote before (no CRCs).

    .venv/bin/python bench/chunk_encodings.py [--rows 10000000] [--every 5] [--repeats 5] [--work /var/tmp/tailrace-scale]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402
from bench.synthetic_run import Shape, write_synthetic_run  # noqa: E402
from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS  # noqa: E402
from tailrace.contract.layout import RunLayout  # noqa: E402
from tailrace.contract.records import FEW_VALUED  # noqa: E402
from tailrace.harness.spool.chunk_writer_process import chunk_encoding  # noqa: E402

COMMAND = ".venv/bin/python bench/chunk_encodings.py"


def _variants(schema: pa.Schema) -> dict[str, dict]:
    """label → write_table keyword arguments."""
    written = chunk_encoding(schema)
    plain = {k: v for k, v in written.items() if k != "column_encoding"}  # the same, integers plain
    before = {k: v for k, v in plain.items() if k != "write_page_checksum"} | {"compression": "snappy"}
    return {"written (delta integers, LZ4)": written,
            "snappy, plain integers (before)": before,
            "uncompressed, plain integers": plain | {"compression": "none"},
            "LZ4, plain integers": plain | {"compression": "lz4"},
            "delta integers, zstd 1": written | {"compression": "zstd", "compression_level": 1}}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _write(tables: list[pa.Table], out: Path, options: dict) -> tuple[float, int]:
    """(CPU s, bytes) to write `tables` as chunks under `out`."""
    started, size = _cpu(), 0
    for i, table in enumerate(tables):
        path = out / f"requests-{i:05d}.parquet"
        pq.write_table(table, path, **options)
        size += path.stat().st_size
    return _cpu() - started, size


def _read(out: Path, count: int) -> float:
    """CPU s to read the analysis's columns from the chunks under `out`, as analysis/read/chunks.py does."""
    paths = [out / f"requests-{i:05d}.parquet" for i in range(count)]
    footers = [pq.read_metadata(p) for p in paths]
    dictionaries = [c for c in ANALYSIS_COLUMNS if c in FEW_VALUED]
    started = _cpu()
    for path, meta in zip(paths, footers):
        pq.ParquetFile(path, metadata=meta, read_dictionary=dictionaries, page_checksum_verification=True).read(
            columns=list(ANALYSIS_COLUMNS), use_threads=False)
    return _cpu() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000, help="the synthetic run whose chunks are sampled")
    ap.add_argument("--every", type=int, default=5, help="take every k-th chunk")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/tailrace-scale"))
    args = ap.parse_args()
    if args.every < 1 or args.repeats < 1:
        ap.error("--every and --repeats must be at least 1")
    run_dir = args.work / f"synthetic-{args.rows}-seed1"
    if not (run_dir / "manifest.json").exists():
        print(f"writing {args.rows:,} rows → {run_dir}", flush=True)
        write_synthetic_run(run_dir, Shape(args.rows, seed=1))
    tables = [pq.read_table(p) for p in sorted(RunLayout(run_dir).request_chunks())[::args.every]]
    rows = sum(t.num_rows for t in tables)
    variants = _variants(tables[0].schema)
    results: dict[str, dict[str, list[float]]] = {label: {"read": [], "write": []} for label in variants}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="tailrace-encodings-", dir=args.work) as tmp:
        for r in range(args.repeats):
            for label, options in variants.items():
                out = Path(tmp) / str(list(variants).index(label))
                out.mkdir(exist_ok=True)
                write_s, sizes[label] = _write(tables, out, options)
                results[label]["write"].append(write_s / rows * 1e9)
                results[label]["read"].append(_read(out, len(tables)) / rows * 1e9)
            print(f"repeat {r + 1}: " + ", ".join(f"{label.split(' (')[0]} {results[label]['read'][-1]:.0f}"
                                                  for label in variants) + " ns/row read", flush=True)
    before, now = "snappy, plain integers (before)", "written (delta integers, LZ4)"

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.0f} ({min(values):.0f}–{max(values):.0f})"

    ratios = [a / b for a, b in zip(results[now]["read"], results[before]["read"])]
    lines = [f"Command: `{COMMAND} --rows {args.rows} --every {args.every} --repeats {args.repeats}` ({len(tables)} "
             f"chunks, {rows:,} rows; the analysis's {len(ANALYSIS_COLUMNS)} columns read from each; CPU time of "
             "one process, user + system; medians, spread in brackets).", "",
             "| encoding | read ns/row | write ns/row | bytes/row |", "|---|---|---|---|"]
    lines += [f"| {label} | {cell(r['read'])} | {cell(r['write'])} | {sizes[label] / rows:.1f} |"
              for label, r in results.items()]
    lines += ["", f"Reading the written encoding over reading the one before, per repeat: "
              f"{', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f})."]
    write_section("Chunk encodings: what the analysis reads, what the writer writes", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
