"""Crash-safe request and clock logs: rows are written in closed Parquet chunks (temp name + rename).

A chunk is complete or absent, never torn: a killed worker process loses at most the rows of its open
chunk. (An OS crash can lose recent chunks: they are not fsynced — see write_table.)
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from tailrace.contract.layout import CLOCK, REQUESTS, WorkerLayout
from tailrace.contract.records import CLOCK_FIELDS, ONE_SHOT_FIELDS, REQUEST_FIELDS, ClockRow, RequestRow, arrow_schema
from tailrace.harness.spool.chunk_writer_process import write_chunk

# with a flusher (ChunkWriter.wake), an open chunk this many times max_rows is written by add() itself: at 8,000
# requests/s a chunk written there (to Arrow and Parquet, on the sending loop) stopped sends for 13-32 ms
FULL_CAP = 4


class ChunkWriter:
    """Buffers typed rows (contract.records) and writes closed chunks every `max_rows` rows or `max_seconds`."""

    def __init__(self, layout: WorkerLayout, prefix: str, fields, row_type: type, max_rows: int,
                 max_seconds: float) -> None:
        self.layout = layout
        self.directory = layout.dir
        self.prefix = prefix
        self.row_type = row_type
        self.schema = arrow_schema(fields)
        self._columns = [(f.name, f.type) for f in self.schema]
        self.max_rows = max_rows
        self.max_seconds = max_seconds
        self.rows: list[tuple] = []
        self.chunks_written = 0
        self._next_index = 0
        self.rows_written = 0
        self._opened = time.monotonic()
        self.tap = None  # called with rows before they leave the buffer (the live page's digest), off the send path
        # a worker's chunk flusher, told when the open chunk is half full: it ships the chunk off the send path, and
        # add() writes a chunk itself only at FULL_CAP × max_rows (a flusher that never got a turn)
        self.wake: Callable[[], None] | None = None
        self._tapped = 0  # rows of the open chunk already handed to the tap
        self.directory.mkdir(parents=True, exist_ok=True)

    def add(self, row: tuple) -> None:
        rows = self.rows
        rows.append(row)
        if self.wake is None:
            if len(rows) >= self.max_rows:
                self.flush()
        elif len(rows) == (self.max_rows + 1) // 2:  # (chunk_rows = 1: at once)
            self.wake()
        elif len(rows) >= FULL_CAP * self.max_rows:
            self.flush()

    def due(self) -> bool:
        """True when the open chunk is older than max_seconds."""
        return bool(self.rows) and time.monotonic() - self._opened >= self.max_seconds

    def warm_up(self) -> None:
        """Convert one dummy row: pyarrow's first string conversion costs ~0.3 s once per process, which
        must not land in the middle of a run."""
        samples = {pa.string(): "warm-up", pa.int64(): 0, pa.int32(): 0, pa.bool_(): False, pa.binary(): b"\0"}
        self.to_table([self.row_type(*(samples[kind] for _, kind in self._columns))] * 2)

    def tap_new(self) -> None:
        """Hand the rows added since the last call to the tap."""
        if self.tap is not None:
            self.tap(self.rows[self._tapped:])
            self._tapped = len(self.rows)

    def take(self) -> list[tuple]:
        """Detach the open chunk's rows (to write them elsewhere, e.g. on a native thread)."""
        self.tap_new()
        self._tapped = 0
        self._opened = time.monotonic()
        rows, self.rows = self.rows, []
        return rows

    def flush(self) -> Path | None:
        """Close the open chunk (atomic rename); returns its path, or None when empty."""
        return self.write(self.take())

    def to_table(self, rows: list[tuple], between_columns=None) -> pa.Table:
        """Rows → Arrow, column by column (~20× faster than Table.from_pylist, which holds the GIL for ms).

        `between_columns` is called after each column: the generator yields to its event loop there, so a
        big chunk never blocks sending for more than one column's conversion (~0.1 ms).
        """
        # rows → columns lazily: a row type's trailing fields that this writer's schema leaves out are never built
        columns = zip(*rows) if rows else [()] * len(self._columns)
        arrays = []
        for values, (_, kind) in zip(columns, self._columns):
            arrays.append(pa.array(values, type=kind))
            if between_columns is not None:
                between_columns()
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def write(self, rows: list[tuple]) -> Path | None:
        """Write `rows` as the next closed chunk (temp name, fsync, rename)."""
        if not rows:
            return None
        return self.write_table(self.to_table(rows), self.reserve())

    def reserve(self) -> int:
        """The next chunk number, taken now (by the caller's thread) so concurrent writes never share a name."""
        index = self._next_index
        self._next_index += 1
        return index

    def write_table(self, table: pa.Table, index: int) -> Path:
        """Write an already converted chunk under a reserved number."""
        final = self.layout.chunk(self.prefix, index)
        write_chunk(table, final)
        self.chunks_written += 1
        self.rows_written += table.num_rows
        return final


def request_writer(layout: WorkerLayout, max_rows: int, max_seconds: float, streams: bool = True) -> ChunkWriter:
    """The request log's writer; `streams`: the run has generative or pooling endpoints (else the stream columns,
    input_tokens among them, are left out)."""
    return ChunkWriter(layout, REQUESTS, REQUEST_FIELDS if streams else ONE_SHOT_FIELDS, RequestRow, max_rows,
                       max_seconds)


def clock_writer(layout: WorkerLayout) -> ChunkWriter:
    return ChunkWriter(layout, CLOCK, CLOCK_FIELDS, ClockRow, 10_000, 0.0)
