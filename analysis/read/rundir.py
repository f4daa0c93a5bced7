"""Reading a run directory (contract/layout.py). Never imports locust, the harness or the endpoints."""
from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tailrace.analysis.read.chunks import (
    ChunkColumns,
    LateChunkError,
    RunDirError,
    SkippedChunk,
    missing_requests,
    read_chunks,
    read_footer,
    unread_request_chunks,
)
from tailrace.contract.layout import STATS_STAGES, RunLayout
from tailrace.contract.plan import RunPlan
from tailrace.contract.profile import ProfileError
from tailrace.contract.records import CLOCK_FIELDS, OPTIONAL_DEFAULTS, REQUEST_FIELDS

__all__ = ["RunData", "RunDirError", "SkippedChunk", "load_run", "check_fits", "run_validity"]


@dataclass
class RunData:
    """Everything read from one run directory. The request log is `log`, read a few columns at a time
    (analysis/read/chunks.py); `requests` is all of its columns as one DataFrame, read on first use."""

    run_dir: Path
    manifest: dict
    plan: RunPlan  # the resolved plan (every profile default filled in by contract/profile/)
    log: ChunkColumns
    clock: pd.DataFrame
    skipped: list[SkippedChunk] = field(default_factory=list)
    endpoint_stats: dict[str, dict[str, dict]] = field(default_factory=dict)
    stats_timelines: dict[str, list[dict]] = field(default_factory=dict)  # endpoint → periodic snapshots
    cold_starts: dict[str, dict] = field(default_factory=dict)  # endpoint → its server's start timing
    metrics_timelines: dict[str, list[dict]] = field(default_factory=dict)  # endpoint → periodic metric samples
    models: dict[str, dict] = field(default_factory=dict)  # endpoint → its model's build metadata
    metrics_scrapes: dict[str, dict[str, str]] = field(default_factory=dict)  # endpoint → stage → Prometheus text
    _requests: pd.DataFrame | None = None

    @property
    def requests(self) -> pd.DataFrame:
        """Every column of the request log (as read: `load_run`'s `columns`)."""
        if self._requests is None:
            self._requests = self.log.frame(self.log.schema.names)
        return self._requests

    @property
    def chunks_read(self) -> int:
        return len(self.log.sources)

    @property
    def sources(self) -> list[tuple[int, Path]]:
        """(first row in the log, its chunk) of every chunk read."""
        return self.log.sources

    def trace_ids(self, rows) -> list[str]:
        """The trace ids of the requests at rows `rows` of the log — from its trace_id column, or, when it was
        not read (tailrace analyze reads it only for the few rows it names), from those rows' chunks."""
        rows = [int(r) for r in rows]
        if "trace_id" in self.log.schema.names:
            return [str(t) for t in self.log.values("trace_id").to_numpy()[rows]] if rows else []
        starts = [start for start, _ in self.sources]
        wanted: dict[int, list[int]] = {}
        for r in rows:
            wanted.setdefault(bisect.bisect_right(starts, r) - 1, []).append(r)
        found = {}
        for i, chunk_rows in wanted.items():
            start, path = self.sources[i]
            try:
                ids = pq.read_table(path, columns=["trace_id"], page_checksum_verification=True).column(0)
            except (pa.ArrowInvalid, OSError) as exc:  # a damaged page: the analysis starts again without the chunk
                raise LateChunkError(str(path), f"{str(exc).splitlines()[0][:200]} (in column trace_id, read after "
                                                "its other columns: analysed without it)") from None
            found.update({r: ids[r - start].as_py() for r in chunk_rows})
        return [found[r] for r in rows]


def recorded_requests(manifest: dict) -> dict[str, int]:
    """worker → the request rows its summary says it wrote (workers that left a summary)."""
    workers = manifest.get("workers")
    return {name: rows for name, w in (workers.items() if isinstance(workers, dict) else ())
            if isinstance(w, dict) and isinstance(summary := w.get("summary"), dict)
            and isinstance(rows := summary.get("rows_written"), int)}


def run_validity(data: RunData, rows_read: dict[str, int]) -> tuple[bool, list[str]]:
    """(valid, why not) of a run as read: the manifest's own verdict and reasons (a saturated generator, a lost
    worker, ...), request chunks that could not be read, and requests its workers recorded that are not in the
    run directory (`rows_read`: worker → the request rows read from its chunks). `tailrace analyze` and
    `tailrace compare` judge a run by this one rule."""
    found = (unread_request_chunks(data.skipped)
             + missing_requests(recorded_requests(data.manifest), rows_read, data.skipped))
    valid = bool(data.manifest.get("valid", True)) and not found
    reasons = list(data.manifest.get("invalid_reasons") or [])
    if not valid and not reasons and not found:
        reasons = ["its manifest marks the run INVALID (no reason recorded)"]
    return valid, reasons + found


# what `tailrace analyze` reads: every column a statistic uses, nothing else (contract/records.py has them all)
# (trace ids are read only for the rows the report names: RunData.trace_ids)
ANALYSIS_COLUMNS = ("region", "worker", "endpoint", "model", "phase", "sample_index",
                    "t_intended", "t_sent", "t_done", "latency_ns", "send_lag_ns", "status", "code", "error",
                    "server_queue_ns", "server_compute_ns", "server_receive_ns", "server_send_ns", "correct",
                    "batch_size", "correct_count", "clock_offset_ns")
# read as well where the run's profile has generative endpoints (analysis/stats/tokens.py)
STREAM_COLUMNS = ("stream_outcome", "ttft_ns", "t_first_token", "t_last_token", "output_tokens", "input_tokens",
                  "token_source", "token_event_us", "token_event_counts", "session_id", "turn", "session_end", "pipeline",
                  "cached_tokens", "ideal_cached_tokens", "prompt_tokens_sent", "reasoning_tokens", "ttfa_ns", "media_count",
                  "media_bytes", "schema_valid", "item", "grade")


def _fill_missing(log: ChunkColumns, name: str, values):
    """Chunks older than a column: batch_size 1, correct_count the 0/1 of `correct`."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f" and name in ("batch_size", "correct_count"):
        missing = np.isnan(values)
        if missing.any():
            fill = 1 if name == "batch_size" else log.values("correct").astype(int)
            return np.where(missing, fill, values).astype(int)
    return values


# peak memory per request row of `tailrace analyze`, measured on synthetic runs (docs/BENCHMARKS.md, "Analysis at
# scale"), with a margin: a run whose log fits, every column kept (10 M rows: 1.7–2.0 GiB), and a larger one, its
# log read a few columns at a time (100 M rows: 7.5–7.9 GiB)
ANALYZE_BYTES_PER_ROW = 240
ANALYZE_BYTES_PER_ROW_LARGE = 105
LARGE_RUN_BYTES = 4 * 2**30  # a run expected to need more than this at ANALYZE_BYTES_PER_ROW is sized as a large one


def analyze_bytes_per_row(rows: int) -> int:
    """About the peak memory per request row `tailrace analyze` needs for a run of `rows` request rows."""
    return ANALYZE_BYTES_PER_ROW if rows * ANALYZE_BYTES_PER_ROW <= LARGE_RUN_BYTES else ANALYZE_BYTES_PER_ROW_LARGE


COMPARE_BYTES_PER_ROW = 120  # with the columns that pair requests by schedule position


def _available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def request_rows(run_dirs: list[Path]) -> int:
    """About the request rows of `run_dirs`, before any is read (what memory their analysis needs): the rows each
    worker's summary says it wrote, where every worker of the manifest left one — a long run's thousands of small
    chunks are not opened for it (each footer parsed is ~0.15 ms) — else the rows in the chunks' footers
    (rows_in_chunks)."""
    rows = 0
    for run_dir in run_dirs:
        layout = RunLayout(Path(run_dir))
        try:
            manifest = json.loads(layout.manifest.read_text())
        except (OSError, ValueError):
            manifest = None  # said when the run is read
        workers = manifest.get("workers") if isinstance(manifest, dict) else None
        workers = workers if isinstance(workers, dict) else {}
        recorded = recorded_requests(manifest) if workers else {}
        if recorded and len(recorded) == len(workers):  # every worker's, else not the whole run's
            rows += sum(recorded.values())
        else:
            rows += rows_in_chunks([run_dir])
    return rows


def rows_in_chunks(run_dirs: list[Path]) -> int:
    """The request rows the chunks of `run_dirs` hold, from their footers (unreadable chunks not counted)."""
    rows = 0
    for run_dir in run_dirs:
        for f in RunLayout(Path(run_dir)).request_chunks():
            try:
                rows += read_footer(f).num_rows
            except (pa.ArrowInvalid, OSError):
                continue  # reported as skipped when read
    return rows


def check_fits(run_dirs: list[Path], bytes_per_row: int, what: str, rows: int | None = None) -> None:
    """RunDirError, before anything is read, when analysing the request rows of `run_dirs` (`rows`, when
    counted already) would need more memory than this machine has available (the kernel would kill the
    analysis, or the machine, half-way). Before it refuses, the rows are counted in the chunks themselves: the
    workers' recorded rows may be more than the run directory holds (a damaged manifest, chunks still on a spool)."""
    rows = request_rows(run_dirs) if rows is None else rows
    available = _available_bytes()
    if available is not None and rows * bytes_per_row > available:
        rows = rows_in_chunks(run_dirs)
    need = rows * bytes_per_row
    if available is not None and need > available:
        raise RunDirError(f"{', '.join(str(d) for d in run_dirs)}: {rows:,} request rows need about "
                          f"{need / 2**30:.1f} GiB to {what}; this machine has {available / 2**30:.1f} GiB available "
                          "— use a machine with more memory (the run directory is left as it is)")


def load_run(run_dir: Path, columns: tuple[str, ...] | None = None, first: tuple[str, ...] | None = None,
             exclude: dict[str, str] | None = None,
             on_read: Callable[[list[str], int, int], None] | None = None) -> RunData:
    """Load manifest, every closed request and clock chunk (corrupt ones reported and skipped), endpoint stats.
    `columns`: the request columns that can be read (default: all of contract/records.py's); `first`: those
    read now (default: all of them), the others when a statistic asks for them (RunData.log); `exclude`:
    request chunks to skip (path → the reason reported); `on_read`: told as each pass over the chunks reads them
    (ChunkColumns.on_read)."""
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: not a directory")
    if not layout.manifest.exists():
        raise RunDirError(f"{run_dir}: no manifest.json — not a tailrace run directory, or its run never started; "
                          f"without the run's plan there is nothing to check its results against")
    try:
        manifest = json.loads(layout.manifest.read_text())
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{layout.manifest}: not valid JSON: {exc}") from None
    try:
        plan = RunPlan.from_manifest(manifest, str(layout.manifest))
    except ProfileError as exc:
        raise RunDirError(str(exc).splitlines()[0]) from None
    skipped: list[SkippedChunk] = []
    request_files = layout.request_chunks()
    clock_files = layout.clock_chunks()
    if not request_files:
        raise RunDirError(f"{run_dir}: no request chunks under regions/*/*/")
    if columns is not None and any(e.generative or e.pooling for e in plan.profile.endpoints):
        columns = tuple(dict.fromkeys((*columns, *STREAM_COLUMNS)))  # streams' token columns (pooling: input tokens)
    log = ChunkColumns(request_files, REQUEST_FIELDS, skipped, OPTIONAL_DEFAULTS, columns, _fill_missing, exclude)
    log.on_read = on_read
    log.frame(log.schema.names if first is None else first)  # reads them; a chunk that fails is skipped now
    clock = read_chunks(clock_files, CLOCK_FIELDS, skipped)
    endpoints = layout.endpoint_names()
    stats: dict[str, dict[str, dict]] = {}
    for name in endpoints:
        for stage in STATS_STAGES:
            snapshot = _read_json(layout.stats_snapshot(name, stage), skipped)
            if snapshot is not None:
                stats.setdefault(name, {})[stage] = snapshot
    timelines = {n: _read_jsonl(layout.stats_timeline(n), skipped) for n in endpoints
                 if layout.stats_timeline(n).exists()}
    metrics = {n: _read_jsonl(layout.metrics_timeline(n), skipped) for n in endpoints
               if layout.metrics_timeline(n).exists()}
    cold = {n: d for n in endpoints if (d := _read_json(layout.cold_start(n), skipped)) is not None}
    models = {n: d for n in endpoints if (d := _read_json(layout.model_metadata(n), skipped)) is not None}
    scrapes = {n: {stage: path.read_text(errors="replace") for stage in STATS_STAGES
                   if (path := layout.metrics_scrape(n, stage)).exists()} for n in endpoints}
    return RunData(run_dir, manifest, plan, log, clock, skipped, stats, timelines, cold, metrics, models,
                   {n: v for n, v in scrapes.items() if v})


def _read_json(path: Path, skipped: list[SkippedChunk]) -> dict | None:
    """The JSON object in `path`; None when absent, or unreadable (then reported)."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        skipped.append(SkippedChunk(str(path), f"not valid JSON: {exc}"))
        return None


def _read_jsonl(path: Path, skipped: list[SkippedChunk]) -> list[dict]:
    """The JSON lines of `path`; a torn last line (the writer was killed) is reported and skipped."""
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            skipped.append(SkippedChunk(f"{path}:{n}", f"not valid JSON: {exc}"))
    return rows

