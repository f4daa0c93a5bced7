"""Reading a run directory (contract/layout.py). Never imports locust, the harness or the endpoints."""
from __future__ import annotations

import bisect
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis.frames import frame_of
from contract.layout import STATS_STAGES, RunLayout
from contract.plan import RunPlan
from contract.profile import ProfileError
from contract.records import CLOCK_FIELDS, FEW_VALUED, OPTIONAL_DEFAULTS, REQUEST_FIELDS, arrow_schema


@dataclass
class SkippedChunk:
    path: str
    reason: str


@dataclass
class RunData:
    """Everything read from one run directory."""

    run_dir: Path
    manifest: dict
    plan: RunPlan  # the resolved plan (every profile default filled in by contract/profile.py)
    requests: pd.DataFrame
    clock: pd.DataFrame
    chunks_read: int = 0
    skipped: list[SkippedChunk] = field(default_factory=list)
    endpoint_stats: dict[str, dict[str, dict]] = field(default_factory=dict)
    stats_timelines: dict[str, list[dict]] = field(default_factory=dict)  # endpoint → periodic snapshots
    cold_starts: dict[str, dict] = field(default_factory=dict)  # endpoint → its server's start timing
    metrics_timelines: dict[str, list[dict]] = field(default_factory=dict)  # endpoint → periodic metric samples
    models: dict[str, dict] = field(default_factory=dict)  # endpoint → its model's build metadata
    sources: list[tuple[int, Path]] = field(default_factory=list)  # (first row in `requests`, its chunk)

    def trace_ids(self, rows) -> list[str]:
        """The trace ids of the requests at rows `rows` of `requests` — from its trace_id column, or, when it
        was not read (tailrace analyze reads it only for the few rows it names), from those rows' chunks."""
        rows = [int(r) for r in rows]
        if "trace_id" in self.requests:
            return [str(t) for t in self.requests["trace_id"].to_numpy()[rows]] if rows else []
        starts = [start for start, _ in self.sources]
        wanted: dict[int, list[int]] = {}
        for r in rows:
            wanted.setdefault(bisect.bisect_right(starts, r) - 1, []).append(r)
        found = {}
        for i, chunk_rows in wanted.items():
            start, path = self.sources[i]
            ids = pq.read_table(path, columns=["trace_id"]).column(0)
            found.update({r: ids[r - start].as_py() for r in chunk_rows})
        return [found[r] for r in rows]


class RunDirError(Exception):
    """A run directory that cannot be analysed at all (names the path)."""


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table`'s columns in `schema`'s order and types: an integer column of another width is widened; any
    other type (latency as strings, say) is a ValueError naming the column."""
    columns = []
    for want in schema:
        column = table.column(want.name)
        if pa.types.is_dictionary(column.type) and column.type.value_type == want.type:
            pass  # read as a dictionary (CATEGORICAL): _Column maps it to codes
        elif column.type != want.type:
            if not ((pa.types.is_integer(column.type) and pa.types.is_integer(want.type))
                    or pa.types.is_null(column.type)):
                raise ValueError(f"column {want.name} is {column.type}, expected {want.type}")
            column = column.cast(want.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=schema.names)


# what `tailrace analyze` reads: every column a statistic uses, nothing else (contract/records.py has them all)
# (trace ids are read only for the rows the report names: RunData.trace_ids)
ANALYSIS_COLUMNS = ("region", "worker", "endpoint", "model", "phase", "sample_index",
                    "t_intended", "t_sent", "t_done", "latency_ns", "send_lag_ns", "status", "code", "error",
                    "server_queue_ns", "server_compute_ns", "server_receive_ns", "server_send_ns", "correct",
                    "batch_size", "correct_count", "clock_offset_ns")
CATEGORICAL = FEW_VALUED  # pandas categoricals (contract/records.py)


def _read_chunk(path: Path, schema: pa.Schema, optional: dict[str, object]) -> pa.Table:
    """One chunk's `schema` columns (only those read from disk), conformed; ValueError naming what is wrong."""
    present = set(pq.read_schema(path).names)
    names = [c for c in schema.names if c in present]
    # few-valued strings decoded as dictionaries: several times faster than materialising each string
    table = pq.read_table(path, columns=names, read_dictionary=[c for c in names if c in CATEGORICAL])
    for name, default in optional.items():  # a column newer than the chunk
        if name in schema.names and name not in present:
            table = table.append_column(name, pa.array([default] * table.num_rows, type=pa.int32()))
    missing = [c for c in schema.names if c not in table.column_names]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}")
    return _conform(table, schema)


class _Column:
    """One column of the DataFrame being read, filled chunk by chunk into a preallocated array (chunks in
    parallel, each into its own rows): the whole table never exists twice, once in Arrow and once in pandas.
    Strings with few values become categorical codes against categories shared by every chunk (sorted at the
    end, so group-bys order as on strings); other strings stay in Arrow buffers."""

    def __init__(self, field: pa.Field, capacity: int) -> None:
        self.name, self.type = field.name, field.type
        self.categorical = field.name in CATEGORICAL and pa.types.is_string(field.type)
        self.pieces: dict[int, list[pa.Array]] = {}
        self.categories: dict[str, int] = {}
        self._lock = threading.Lock()
        if self.categorical:
            self.values = np.empty(capacity, dtype=np.int32)
        elif not pa.types.is_string(field.type):
            self.values = np.empty(capacity, dtype=self.type.to_pandas_dtype())

    def put(self, start: int, column: pa.ChunkedArray, order: int) -> None:
        """Fill rows start… with `column`, the `order`-th chunk of the run."""
        stop = start + len(column)
        if self.categorical:
            at = start
            for chunk in column.chunks:
                encoded = chunk if pa.types.is_dictionary(chunk.type) else pc.dictionary_encode(chunk)
                with self._lock:
                    codes = np.array([self.categories.setdefault(v, len(self.categories))
                                      for v in encoded.dictionary.to_pylist()] + [-1], dtype=np.int32)
                self.values[at:at + len(chunk)] = codes[encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)]
                at += len(chunk)
        elif pa.types.is_string(self.type):
            self.pieces[order] = column.chunks
        else:
            values = column.to_numpy()
            with self._lock:  # a widening below replaces the array: no write may go to the old one meanwhile
                if column.null_count and self.values.dtype.kind in "iub":  # as pyarrow's to_pandas: NaN / None
                    self.values = self.values.astype(np.float64 if self.values.dtype.kind in "iu" else object)
                self.values[start:stop] = values

    def finish(self, keep: np.ndarray | None):
        """The column's pandas values; `keep`: the rows to keep (None: all) when some chunk was unreadable."""
        if pa.types.is_string(self.type) and not self.categorical:
            return pa.chunked_array([c for order in sorted(self.pieces) for c in self.pieces[order]],
                                    type=self.type).to_pandas()
        values = self.values if keep is None else self.values[keep]
        if self.categorical:
            return pd.Categorical.from_codes(values, list(self.categories)).reorder_categories(sorted(self.categories))
        return values


def _read_chunks(files: list[Path], fields, skipped: list[SkippedChunk], optional: dict[str, object] | None = None,
                 columns: tuple[str, ...] | None = None) -> tuple[pd.DataFrame, list[tuple[int, Path]]]:
    """The chunks' rows as one DataFrame, and where each chunk read begins in it: (first row, path)."""
    schema = arrow_schema(fields)
    if columns is not None:
        schema = pa.schema([f for f in schema if f.name in columns])
    starts, capacity = {}, 0
    for f in files:
        try:
            rows = pq.read_metadata(f).num_rows
        except (pa.ArrowInvalid, OSError) as exc:
            skipped.append(SkippedChunk(str(f), str(exc).splitlines()[0][:200]))
            continue
        starts[f], capacity = capacity, capacity + rows
    built = [_Column(field, capacity) for field in schema]

    def read(order: int, f: Path) -> tuple[Path, str | None]:
        try:
            table = _read_chunk(f, schema, optional or {})
            if table.num_rows != next_start.get(f, capacity) - starts[f]:
                raise ValueError("its rows do not match its metadata")
        except (pa.ArrowInvalid, OSError, ValueError) as exc:
            return f, str(exc).splitlines()[0][:200]
        for column, values in zip(built, table.columns):
            column.put(starts[f], values, order)
        return f, None

    ordered = list(starts)
    next_start = {f: starts[g] for f, g in zip(ordered, ordered[1:])}
    keep = np.ones(capacity, dtype=bool)
    sources, row = [], 0
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # pyarrow and numpy release the GIL
        for f, error in pool.map(read, range(len(ordered)), ordered):
            rows = next_start.get(f, capacity) - starts[f]
            if error is None:
                sources.append((row, f))
                row += rows
            else:
                skipped.append(SkippedChunk(str(f), error))
                keep[starts[f]:starts[f] + rows] = False
    if not sources:
        return pd.DataFrame(columns=list(schema.names)), []
    return frame_of({c.name: c.finish(None if keep.all() else keep) for c in built}), sources


# peak memory per request row, measured on 10 M-row synthetic runs (docs/BENCHMARKS.md, "Analysis at scale")
ANALYZE_BYTES_PER_ROW = 384
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


def check_fits(run_dirs: list[Path], bytes_per_row: int, what: str) -> None:
    """RunDirError, before anything is read, when analysing the request rows of `run_dirs` would need more memory
    than this machine has available (the kernel would kill the analysis, or the machine, half-way)."""
    rows = 0
    for run_dir in run_dirs:
        for f in RunLayout(Path(run_dir)).request_chunks():
            try:
                rows += pq.read_metadata(f).num_rows
            except (pa.ArrowInvalid, OSError):
                continue  # reported as skipped when read
    need, available = rows * bytes_per_row, _available_bytes()
    if available is not None and need > available:
        raise RunDirError(f"{', '.join(str(d) for d in run_dirs)}: {rows:,} request rows need about "
                          f"{need / 2**30:.1f} GiB to {what}; this machine has {available / 2**30:.1f} GiB available "
                          "— use a machine with more memory (the run directory is left as it is)")


def load_run(run_dir: Path, columns: tuple[str, ...] | None = None) -> RunData:
    """Load manifest, every closed request and clock chunk (corrupt ones reported and skipped), endpoint stats.
    `columns`: the request columns to read (default: all of contract/records.py's)."""
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
    requests, sources = _read_chunks(request_files, REQUEST_FIELDS, skipped, OPTIONAL_DEFAULTS, columns)
    if len(requests) and "batch_size" in requests and requests["batch_size"].isna().any():
        requests["batch_size"] = requests["batch_size"].fillna(1).astype(int)
    if len(requests) and "correct_count" in requests and requests["correct_count"].isna().any():
        requests["correct_count"] = requests["correct_count"].fillna(requests["correct"].astype(int)).astype(int)
    clock, _ = _read_chunks(clock_files, CLOCK_FIELDS, skipped)
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
    return RunData(run_dir, manifest, plan, requests, clock, len(sources), skipped, stats, timelines, cold, metrics,
                   models, sources)


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

