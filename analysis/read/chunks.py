"""Reading a run's Parquet chunks into arrays: the clock samples at once, the request log a few columns at a time.

A ten-million-row log holds ~22 columns; no statistic reads more than a handful. `ChunkColumns` reads a column
from every chunk when a statistic first asks for it and keeps it until the analysis releases it, so a day's log
(100 M rows) never sits in memory whole (analysis/analyze.py orders its statistics by the columns they read).
"""
from __future__ import annotations

import math
import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tailrace.analysis.read.frames import frame_of
from tailrace.contract.layout import REQUESTS
from tailrace.contract.records import FEW_VALUED, arrow_schema

CATEGORICAL = FEW_VALUED  # pandas categoricals (contract/records.py)
# integer columns of a few small values, held in the narrowest type that holds them (int8 for a profile's phases,
# widened as Categorical codes are should a chunk hold more): the log's int32 phase took 381 MB of a day's run's
# memory, and its copies in each endpoint × region group (validity.Group) as much again
NARROW = frozenset({"phase"})
# loaded columns kept between the statistics that read them (ChunkColumns.spare); a larger log is read again
KEEP_BYTES = 2 * 2**30
# chunks this small on average cost more to open than to decode (~0.45 ms a chunk a pass here: a low rate's
# chunk every 0.25 s holds a few rows): such a log that fits is read in one pass, every column at its first load
SMALL_CHUNK_ROWS = 10_000
MERGE_ROWS = 1_000_000  # small chunks are put into the columns in runs of up to this many rows
MERGE_TABLES = 256  # and of this many chunks: a table of a few rows costs ~150 KB however few (12,000 held 2.4 GB)
# small chunks' footers parsed at opening, kept for the first pass up to this much (a long run's thousands: each parse
# ~0.15 ms, mostly under the GIL), then dropped; a parsed footer takes ~12× its bytes on disk (5.4 KB → 66 KB)
SMALL_FOOTERS_BYTES = 256 * 2**20
PARSED_FOOTER_FACTOR = 12


@dataclass
class SkippedChunk:
    path: str
    reason: str


def _request_chunk_paths(skipped: list[SkippedChunk]) -> list[Path]:
    return sorted(Path(s.path) for s in skipped if Path(s.path).name.startswith(REQUESTS + "-"))


def unread_request_chunks(skipped: list[SkippedChunk]) -> list[str]:
    """The reason a run whose request chunks could not all be read is INVALID: their requests are missing from
    every number, and none can say what they held (a damaged chunk is bad input, never a PASS)."""
    lost = _request_chunk_paths(skipped)
    if not lost:
        return []
    names = str(lost[0]) if len(lost) == 1 else f"{lost[0]} and {len(lost) - 1} more"
    return [f"{len(lost)} request chunk(s) could not be read ({names}; the reasons are listed as skipped): their "
            "requests are not in these numbers"]


def missing_requests(recorded: dict[str, int], read: dict[str, int], skipped: list[SkippedChunk]) -> list[str]:
    """The reasons a run is INVALID because requests its workers recorded are not in the run directory: each
    worker whose summary counts more rows written (`recorded`) than its chunks there hold (`read`) — a chunk
    deleted, or never delivered to the master (the worker's spool keeps it for `tailrace collect`). A worker
    with a chunk that could not be read is named by unread_request_chunks instead."""
    damaged = {path.parent.name for path in _request_chunk_paths(skipped)}
    return [f"{worker}: {written - read.get(worker, 0):,} of the {written:,} requests it recorded are not in the "
            "run directory (chunks missing; `tailrace collect SPOOL RUN_DIR` copies those a worker kept)"
            for worker, written in sorted(recorded.items())
            if written > read.get(worker, 0) and worker not in damaged]


class RunDirError(Exception):
    """A run directory that cannot be analysed at all (names the path)."""


class LateChunkError(RunDirError):
    """A chunk that failed on a column read after other columns of its rows were in use: the reader of the
    log starts again with the chunk in `exclude` (analysis/analyze.py does)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def _type_error(name: str, have: pa.DataType, want: pa.DataType) -> str | None:
    """Why a column of type `have` cannot be read as `want` (None: it can)."""
    if pa.types.is_dictionary(have) and have.value_type == want:
        return None  # read as a dictionary (CATEGORICAL): _Column maps it to codes
    if have == want or (pa.types.is_integer(have) and pa.types.is_integer(want)) or pa.types.is_null(have):
        return None
    return f"column {name} is {have}, expected {want}"


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table`'s columns in `schema`'s order and types: an integer column of another width is widened; any
    other type (latency as strings, say) is a ValueError naming the column."""
    columns = []
    for want in schema:
        column = table.column(want.name)
        if (error := _type_error(want.name, column.type, want.type)) is not None:
            raise ValueError(error)
        if column.type != want.type and not pa.types.is_dictionary(column.type):
            column = column.cast(want.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=schema.names)


def read_footer(path: Path) -> pq.FileMetaData:
    """A chunk's footer (pq.read_metadata of the open file: no filesystem resolved for its path)."""
    with pa.OSFile(str(path)) as source:
        return pq.read_metadata(source)


def _read_chunk(path: Path, schema: pa.Schema, optional: dict[str, object],
                meta: pq.FileMetaData | None = None) -> pa.Table:
    """One chunk's `schema` columns (only those read from disk), conformed; ValueError naming what is wrong.
    `meta`: the chunk's footer, when already read (each further column read then skips parsing it again)."""
    meta = read_footer(path) if meta is None else meta
    present, wanted = set(meta.schema.names), schema.names  # (pyarrow builds these lists anew at each access)
    names = [c for c in wanted if c in present]
    # few-valued strings decoded as dictionaries: several times faster than materialising each string
    # pages with a CRC (the chunk writer's) are verified: a damaged page is an error naming the chunk, not other numbers
    with pa.OSFile(str(path)) as source:  # a file, not a path: pyarrow resolves no filesystem for it
        table = pq.ParquetFile(source, metadata=meta, read_dictionary=[c for c in names if c in CATEGORICAL],
                               page_checksum_verification=True).read(columns=names, use_threads=False)
    for name, default in optional.items():  # a column newer than the chunk
        if name in wanted and name not in present:
            kind = schema.field(name).type  # its own type: int32 counts, int64 instants, strings, binary
            table = table.append_column(name, pa.array([default] * table.num_rows, type=kind))
    have = set(table.column_names)
    missing = [c for c in wanted if c not in have]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}")
    return _conform(table, schema)


class _Column:
    """One column being read, filled chunk by chunk into a preallocated array (chunks in parallel, each into its
    own rows): the column never exists twice, once in Arrow and once in numpy. Strings with few values become
    categorical codes against categories shared by every chunk (sorted at the end, so group-bys order as on
    strings); other strings stay in Arrow buffers."""

    def __init__(self, field: pa.Field, capacity: int) -> None:
        self.name, self.type = field.name, field.type
        self.categorical = field.name in CATEGORICAL and pa.types.is_string(field.type)
        self.pieces: dict[int, list[pa.Array]] = {}
        self.categories: dict[str, int] = {}
        self._lock = threading.Lock()
        self.narrow = field.name in NARROW and pa.types.is_integer(field.type)
        if self.categorical or self.narrow:  # codes as pandas keeps them for < 128 categories; widened if there are more
            self.values = np.empty(capacity, dtype=np.int8)
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
                    if len(self.categories) > np.iinfo(self.values.dtype).max and self.values.dtype != np.int32:
                        self.values = self.values.astype(np.int32)
                    indices = encoded.indices.fill_null(-1) if encoded.indices.null_count else encoded.indices
                    self.values[at:at + len(chunk)] = codes[indices.to_numpy(zero_copy_only=False)]
                at += len(chunk)
        elif pa.types.is_string(self.type):
            self.pieces[order] = column.chunks
        else:
            values = column.to_numpy()
            with self._lock:  # a widening below replaces the array: no write may go to the old one meanwhile
                if column.null_count and self.values.dtype.kind in "iub":  # as pyarrow's to_pandas: NaN / None
                    self.values = self.values.astype(np.float64 if self.values.dtype.kind in "iu" else object)
                elif self.narrow and len(values) and self.values.dtype.kind == "i":
                    self._widen_for(values)
                self.values[start:stop] = values

    def _widen_for(self, values: np.ndarray) -> None:
        """A NARROW column's array widened, where `values` do not fit its type (up to the chunk's own type)."""
        held = np.iinfo(self.values.dtype)
        low, high = int(values.min()), int(values.max())
        if low < held.min or high > held.max:
            wide = next(t for t in (np.int16, np.int32, np.int64) if np.iinfo(t).min <= low and high <= np.iinfo(t).max)
            self.values = self.values.astype(wide)

    def finish(self, keep: np.ndarray | None):
        """The column's pandas values; `keep`: the rows to keep (None: all) when some chunk was unreadable."""
        if pa.types.is_string(self.type) and not self.categorical:
            return pa.chunked_array([c for order in sorted(self.pieces) for c in self.pieces[order]],
                                    type=self.type).to_pandas()
        values = self.values if keep is None else self.values[keep]
        if self.categorical:  # codes renumbered to the sorted categories (a lookup, -1 staying -1 at the end)
            names = sorted(self.categories)
            if names != list(self.categories):
                rank = {name: i for i, name in enumerate(names)}
                values = np.array([rank[name] for name in self.categories] + [-1], dtype=values.dtype)[values]
            return pd.Categorical.from_codes(values, names)
        return values


def _named(path: Path, schema: pa.Schema, optional: dict[str, object], meta: pq.FileMetaData | None,
           exc: BaseException) -> str:
    """The reason a chunk failed to read as `schema` (`exc`), naming the first column that fails on its own where
    several were read together (a page's CRC error names no column)."""
    reason = str(exc).splitlines()[0][:200]
    if len(schema) > 1 and not reason.startswith("column "):
        for field in schema:
            try:
                _read_chunk(path, pa.schema([field]), optional, meta)
            except (pa.ArrowInvalid, OSError, ValueError) as alone:
                return f"column {field.name}: {str(alone).splitlines()[0][:200]}"
    return reason


def _in_order(pool: ThreadPoolExecutor, read: Callable[[int], tuple], count: int, ahead: int = 32) -> Iterator[tuple]:
    """read(0), read(1), … read(count - 1) on `pool`, in order, at most `ahead` read before they are taken (the
    pool's map would read every chunk before the first is taken: their tables all in memory at once)."""
    pending: deque[Future] = deque()
    for i in range(count):
        pending.append(pool.submit(read, i))
        if len(pending) >= ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _put_in(read: Callable[[int], tuple], built: list[_Column], starts: list[int], stops: list[int], workers: int,
            watch: Callable[[int], None]) -> list[str | None]:
    """Every chunk read (`read(order)`, on `workers` threads) and its columns put into `built`, in order; `watch(rows
    read so far)` told after each. Each chunk's error, None where it was read."""
    with ThreadPoolExecutor(max_workers=workers) as pool:  # pyarrow and numpy release the GIL
        small, errors = _SmallChunks(built), []
        for order, (error, table) in enumerate(_in_order(pool, read, len(starts))):
            errors.append(error)
            small.add(starts[order], order, table)
            watch(stops[order])
        small.flush()
    return errors


class _SmallChunks:
    """Puts small chunks' tables into the columns `built` as they come, in row order: each run of consecutive ones as
    one table of up to MERGE_ROWS rows and MERGE_TABLES chunks (few-valued strings on one dictionary), since a column's
    put costs as much for a few rows as for thousands. At most one run's tables wait in memory."""

    def __init__(self, built: list[_Column]) -> None:
        self.built = built
        self.run: list[pa.Table] = []
        self.start, self.order, self.rows = 0, 0, 0

    def add(self, start: int, order: int, table: pa.Table | None) -> None:
        """The chunk `order` at row `start`: its table, or None (put already, or unreadable: the run ends)."""
        if table is None or self.rows + table.num_rows > MERGE_ROWS or len(self.run) >= MERGE_TABLES:
            self.flush()
        if table is None:
            return
        if not self.run:
            self.start, self.order = start, order
        self.run.append(table)
        self.rows += table.num_rows

    def flush(self) -> None:
        if self.run:
            merged = pa.concat_tables(self.run).unify_dictionaries().combine_chunks()
            for column, values in zip(self.built, merged.columns):
                column.put(self.start, values, self.order)
        self.run, self.rows = [], 0


def _schema_problem(meta: pq.FileMetaData, schema: pa.Schema, optional: dict[str, object],
                    seen: list[tuple[pq.ParquetSchema, str | None]] | None = None) -> str | None:
    """What makes a chunk's file schema (from its footer, `meta`) unreadable as `schema` (None: nothing). `seen`:
    the schemas judged already, with their answers (a run's chunks share one or two; comparing is cheaper)."""
    if seen is not None:
        for known, problem in seen:
            if meta.schema.equals(known):
                return problem
        problem = _schema_problem(meta, schema, optional)
        seen.append((meta.schema, problem))
        return problem
    have = meta.schema.to_arrow_schema()
    missing = [f.name for f in schema if f.name not in have.names and f.name not in optional]
    if missing:
        return f"missing column(s) {', '.join(missing)}"
    for want in schema:
        if want.name in have.names and (error := _type_error(want.name, have.field(want.name).type,
                                                             want.type)) is not None:
            return error
    return None


def _columns_bytes(schema: pa.Schema, rows: int, names: list[str]) -> int:
    """About what `rows` rows of the columns `names` take once read (categorical codes 1 byte, strings ~16)."""
    def a_row(field: pa.Field) -> int:
        if field.name in CATEGORICAL:
            return 1
        return 16 if pa.types.is_string(field.type) or pa.types.is_binary(field.type) else max(1, field.type.bit_width // 8)
    return rows * sum(a_row(schema.field(n)) for n in names)


def furthest_read_first(next_read: dict[str, float], sizes: dict[str, int], budget: float) -> list[str]:
    """The kept columns (`next_read`: each one's next reader, a step) to release so that the loaded ones (`sizes`:
    bytes of every loaded column) fit in `budget`: those read again last first (Belady's rule), only as many as it
    takes."""
    loaded, out = sum(sizes.values()), []
    for name in sorted(next_read, key=next_read.__getitem__, reverse=True):
        if loaded <= budget:
            break
        loaded -= sizes.get(name, 0)
        out.append(name)
    return out


def _nbytes(values: object) -> int:
    """The memory a loaded column takes (a categorical: its codes)."""
    if isinstance(values, pd.Categorical):
        return int(values.codes.nbytes)
    if isinstance(values, pd.Series):
        return int(values.memory_usage(deep=False))
    return int(getattr(values, "nbytes", 0))


class ChunkColumns:
    """The rows of a run's chunks of one kind, read column by column.

    Opening reads each chunk's footer: a chunk whose metadata or schema is wrong is skipped (`skipped`), and so
    is one in `exclude` (path → reason). The first `load` reads its columns from every remaining chunk, and a
    chunk that fails then is skipped too; once rows are in use a chunk failing on a later column is a
    LateChunkError (dropping its rows then would take them from some statistics and not others). Columns stay
    loaded until `release`d. Columns asked for later may be read ahead in the background (`prefetch`).
    """

    def __init__(self, files: list[Path], fields, skipped: list[SkippedChunk],
                 optional: dict[str, object] | None = None, columns: Iterable[str] | None = None,
                 fill: Callable[[ChunkColumns, str, object], object] | None = None,
                 exclude: dict[str, str] | None = None) -> None:
        schema = arrow_schema(fields)
        wanted = None if columns is None else set(columns)
        self.schema = pa.schema([f for f in schema if wanted is None or f.name in wanted])
        self.optional = {k: v for k, v in (optional or {}).items() if k in self.schema.names}
        self.skipped = skipped
        self._fill = fill  # (log, name, values) → values with a column's missing entries filled in
        self.sources: list[tuple[int, Path]] = []  # (first row, chunk), in row order
        self.rows = 0
        self._stops: list[int] = []
        # a large chunk's footer, kept for every pass; a small chunk's (~66–200 KB parsed, for a few rows: 14,400 of
        # them held 3 GB) for the first pass only, within SMALL_FOOTERS_BYTES, and is read again when its chunk is
        self._footers: list[pq.FileMetaData | None] = []
        small_footers = 0
        self._values: dict[str, object] = {}
        self._derived: dict[str, Callable[[ChunkColumns], object]] = {}
        self._inputs: dict[str, tuple[str, ...]] = {}
        self.keep_bytes: float = KEEP_BYTES  # spare() frees columns above this
        self._kept_for: dict[str, float] = {}  # a spared column still loaded → when it is read next (a step)
        self._settled = False  # True once a load has read every chunk: a later failure is an error
        self._lock = threading.RLock()  # the loaded columns: a prefetch adds to them as the statistics read them
        self._prefetching: dict[str, threading.Event] = {}  # column → set when its background read has ended
        self._prefetch_errors: dict[str, BaseException] = {}  # column → what its background read raised
        self._prefetcher: threading.Thread | None = None
        # told (columns, rows read, the log's rows) as a pass puts each chunk in, and rows read = rows at its end
        self.on_read: Callable[[list[str], int, int], None] | None = None
        seen: list[tuple[pq.ParquetSchema, str | None]] = []
        for f in files:
            try:
                problem = (exclude or {}).get(str(f))
                if problem is None:
                    meta = read_footer(f)
                    problem = _schema_problem(meta, self.schema, self.optional, seen)
            except (pa.ArrowInvalid, OSError) as exc:
                problem = str(exc).splitlines()[0][:200]
            if problem is not None:
                skipped.append(SkippedChunk(str(f), problem))
                continue
            self.sources.append((self.rows, f))
            self.rows += meta.num_rows
            self._stops.append(self.rows)
            parsed = PARSED_FOOTER_FACTOR * meta.serialized_size if meta.num_rows < SMALL_CHUNK_ROWS else 0
            kept = small_footers + parsed <= SMALL_FOOTERS_BYTES
            small_footers += parsed if kept else 0
            self._footers.append(meta if kept else None)

    @property
    def names(self) -> list[str]:
        """Every column this log can give: those read from the chunks, derived or `put` on it."""
        extra = [n for n in [*self._derived, *self._values] if n not in self.schema.names]
        return list(self.schema.names) + list(dict.fromkeys(extra))

    def __contains__(self, name: str) -> bool:
        return name in self.schema.names or name in self._values or name in self._derived

    def derive(self, name: str, compute: Callable[[ChunkColumns], object], inputs: Iterable[str] = ()) -> None:
        """A column computed from others (`compute(log)`, reading `inputs`) when first asked for; released like
        any other and computed again if asked for after."""
        self._derived[name] = compute
        self._inputs[name] = tuple(inputs)

    def inputs_of(self, name: str) -> tuple[str, ...]:
        """The columns a derived column is computed from (as declared to `derive`)."""
        return self._inputs.get(name, ())

    def load(self, names: Iterable[str]) -> None:
        """Read the columns `names` not yet loaded from every chunk, in one pass (chunks in parallel); derived
        ones are computed after."""
        names = list(dict.fromkeys(names))
        self._read([n for n in names if n not in self._derived])
        for name in names:
            if name in self._derived and name not in self._values:
                before = set(self._values)
                self.put(name, self._derived[name](self))
                # the columns it was computed from leave as they came: a derived column read again late in a
                # long run's analysis does not keep its inputs loaded
                self.release(*(n for n in set(self._values) - before if n != name and n not in names))

    def prefetch(self, batches: Iterable[Iterable[str]]) -> None:
        """Read the columns of `batches` (each batch one pass over the chunks, in order) in a background thread
        while the statistics before them compute: the analysis keeps one core busy, and pyarrow decodes and numpy
        copies without the GIL on the other. A statistic asking for such a column waits for its batch rather than
        reading it again, and gets any error its reading raised. A batch is read only if, with the columns loaded
        when its turn comes, it fits in keep_bytes: a long run's log is read when asked for, as without prefetch."""
        if self.one_pass():  # read whole already, or at the first load
            return
        plan = []
        for batch in batches:
            names = [n for n in dict.fromkeys(batch) if n in self.schema.names and n not in self._values
                     and n not in self._prefetching]
            if names:
                plan.append((names, threading.Event()))
                self._prefetching.update(dict.fromkeys(names, plan[-1][1]))
        if plan:
            self._prefetcher = threading.Thread(target=self._read_ahead, args=(plan,), name="tailrace-prefetch",
                                                daemon=True)
            self._prefetcher.start()

    def _read_ahead(self, plan: list[tuple[list[str], threading.Event]]) -> None:
        failed = False
        for names, done in plan:
            try:  # after a failure the rest is read when asked for (a LateChunkError starts the analysis again)
                if not failed and self.loaded_bytes() + _columns_bytes(self.schema, self.rows, names) <= self.keep_bytes:
                    self._read_now(names, workers=1)  # one decoding thread: the statistics have the other core
            except BaseException as exc:  # noqa: BLE001 — raised where the column is asked for
                self._prefetch_errors.update(dict.fromkeys(names, exc))
                failed = True
            finally:
                done.set()

    def one_pass(self) -> bool:
        """Whether this log is read whole at its first load: its chunks are small (opening them, not decoding
        them, is the cost of a pass) and every column fits in keep_bytes."""
        return bool(self.sources) and self.rows < SMALL_CHUNK_ROWS * len(self.sources) and self.fits()

    def fits(self) -> bool:
        """Whether every column of the log fits in keep_bytes at once (a long run's log does not)."""
        return _columns_bytes(self.schema, self.rows, list(self.schema.names)) <= self.keep_bytes

    def _read(self, names: list[str]) -> None:
        if threading.current_thread() is not self._prefetcher:
            for name in names:  # a column being read ahead: waited for, not read twice
                done = self._prefetching.pop(name, None)
                if done is not None:
                    done.wait()
                    if (error := self._prefetch_errors.pop(name, None)) is not None:
                        raise error
        self._read_now(names)

    def _read_now(self, names: list[str], workers: int | None = None) -> None:
        wanted = [n for n in names if n not in self._values]
        unknown = [n for n in wanted if n not in self.schema.names]
        if unknown:
            raise KeyError(f"not a column read from this run's chunks: {', '.join(unknown)}")
        if not wanted:
            return
        if not self._settled and self.one_pass():  # the first pass reads every column
            wanted += [n for n in self.schema.names if n not in self._values and n not in wanted]
        schema = pa.schema([self.schema.field(n) for n in wanted])
        built = [_Column(field, self.rows) for field in schema]

        def read(order: int) -> tuple[str | None, pa.Table | None]:
            """(why the chunk could not be read, or None; its table where it is small: _SmallChunks)."""
            start, path = self.sources[order]
            try:
                table = _read_chunk(path, schema, self.optional, self._footers[order])
                if table.num_rows != self._stops[order] - start:
                    raise ValueError("its rows do not match its metadata")
            except (pa.ArrowInvalid, OSError, ValueError) as exc:
                return _named(path, schema, self.optional, self._footers[order], exc), None
            if table.num_rows < SMALL_CHUNK_ROWS:
                return None, table
            for column, values in zip(built, table.columns):
                column.put(start, values, order)
            return None, None

        watch = self.on_read or (lambda names, read, rows: None)
        try:
            errors = _put_in(read, built, [start for start, _ in self.sources], self._stops,
                             workers or os.cpu_count() or 1, lambda read_so_far: watch(wanted, read_so_far, self.rows))
        finally:
            watch(wanted, self.rows, self.rows)  # the pass is over
        keep = None
        if any(errors):
            first = next((self.sources[i][1], e) for i, e in enumerate(errors) if e)
            if self._settled:
                raise LateChunkError(str(first[0]), f"{first[1]} (in column(s) {', '.join(wanted)}, read after "
                                                    "its other columns: analysed without it)")
            keep = np.ones(self.rows, dtype=bool)
            sources, stops, footers, row = [], [], [], 0
            for (start, path), stop, footer, error in zip(self.sources, self._stops, self._footers, errors):
                if error is None:
                    sources.append((row, path))
                    row += stop - start
                    stops.append(row)
                    footers.append(footer)
                else:
                    self.skipped.append(SkippedChunk(str(path), error))
                    keep[start:stop] = False
            self.sources, self._stops, self._footers, self.rows = sources, stops, footers, row
        if not self._settled:  # the small chunks' footers served their first pass: parsed again if read again
            self._footers = [f if f is not None and f.num_rows >= SMALL_CHUNK_ROWS else None for f in self._footers]
        self._settled = True
        finished = {column.name: column.finish(keep) for column in built}
        with self._lock:
            self._values.update(finished)
        if self._fill is not None:  # from what was read here: another thread may release a column meanwhile (spare)
            for name in wanted:
                filled = self._fill(self, name, finished[name])
                with self._lock:
                    self._values[name] = filled

    def values(self, name: str):
        """One column's values (numpy array, Categorical, or Series of strings), loading it if needed."""
        self.load([name])
        return self._values[name]

    def put(self, name: str, values) -> None:
        """Add (or replace) a column computed from others, e.g. a time on the reference clock."""
        if len(values) != self.rows:
            raise ValueError(f"column {name}: {len(values)} values for {self.rows} rows")
        with self._lock:
            self._values[name] = values

    def release(self, *names: str) -> None:
        """Forget loaded columns (they are read, or derived, again if asked for)."""
        with self._lock:
            for name in names:
                self._values.pop(name, None)
                self._kept_for.pop(name, None)

    def loaded_bytes(self) -> int:
        """The memory the loaded columns take."""
        with self._lock:
            return sum(_nbytes(v) for v in self._values.values())

    def spare(self, *names: str, next_read: dict[str, int] | None = None) -> None:
        """Columns the next statistics do not read, though later ones may: kept while the loaded columns fit in
        `keep_bytes`. Above it, given `next_read` (each one's next reader), those kept are released furthest read
        first until the rest fit; without it (within a statistic, which may hold the others), all of `names`."""
        spared = [n for n in names if n in self.schema.names or n in self._derived]
        if next_read is None:
            return self.release(*spared) if self.loaded_bytes() > self.keep_bytes else None
        with self._lock:
            self._kept_for.update({n: next_read.get(n, math.inf) for n in spared if n in self._values})
            sizes = {n: _nbytes(v) for n, v in self._values.items()}
        self.release(*furthest_read_first(self._kept_for, sizes, self.keep_bytes))

    def frame(self, names: Iterable[str]) -> pd.DataFrame:
        """A DataFrame of the columns `names` (loaded as needed), sharing their arrays: rows labelled 0…rows-1."""
        names = list(dict.fromkeys(names))
        if self.sources:
            self.load([n for n in names if n not in self._values])
        if not self.sources:  # no chunk could be read
            return pd.DataFrame(columns=names)
        return frame_of({n: self._values[n] for n in names}, pd.RangeIndex(self.rows))


def read_chunks(files: list[Path], fields, skipped: list[SkippedChunk]) -> pd.DataFrame:
    """Every column of the chunks `files` as one DataFrame (the clock samples: a few rows per second)."""
    log = ChunkColumns(files, fields, skipped)
    return log.frame(log.schema.names)
