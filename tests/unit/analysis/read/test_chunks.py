"""analysis/read/chunks.py: the request log read a few columns at a time."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailrace.analysis.read.chunks import ChunkColumns, SkippedChunk

FIELDS = (("error", "string", ""), ("latency_ns", "int64", ""), ("phase", "int32", ""))


def _chunks(tmp_path, parts: list[dict]) -> list:
    files = []
    for i, part in enumerate(parts):
        path = tmp_path / f"requests-{i:05d}.parquet"
        pq.write_table(pa.table(part), path)
        files.append(path)
    return files


def test_a_few_valued_column_with_more_values_than_a_byte_holds_reads_right(tmp_path):
    """error is a categorical: codes start as one byte and widen when the chunks hold > 127 distinct values."""
    errors = [f"error {i}" for i in range(300)]
    parts = [{"error": errors[:100] * 2, "latency_ns": np.arange(200), "phase": np.ones(200, dtype=np.int32)},
             {"error": errors[100:] + [None], "latency_ns": np.arange(201), "phase": np.ones(201, dtype=np.int32)}]
    log = ChunkColumns(_chunks(tmp_path, parts), FIELDS, [])
    got = log.values("error")
    assert isinstance(got, pd.Categorical) and list(got.categories) == sorted(errors)  # renumbered: "error 10" < "error 2"
    assert list(got.astype(object)[:200]) == errors[:100] * 2
    assert list(got.astype(object)[200:400]) == errors[100:] and pd.isna(got[400])


def test_columns_are_read_when_asked_for_freed_and_read_again_the_same(tmp_path):
    parts = [{"error": ["a"] * 5, "latency_ns": np.arange(5) * 10, "phase": np.arange(5, dtype=np.int32)}] * 3
    skipped: list[SkippedChunk] = []
    log = ChunkColumns(_chunks(tmp_path, parts), FIELDS, skipped, columns=("latency_ns", "phase"))
    assert log.rows == 15 and log._values == {} and "error" not in log
    first = log.frame(["latency_ns"])
    assert list(first.columns) == ["latency_ns"] and list(first.index) == list(range(15))
    assert set(log._values) == {"latency_ns"}
    log.release("latency_ns")
    assert log._values == {} and np.array_equal(log.values("latency_ns"), first["latency_ns"].to_numpy())
    log.put("latency_ms", log.values("latency_ns") / 1e6)
    assert "latency_ms" in log and log.names == ["latency_ns", "phase", "latency_ms"]
    with pytest.raises(ValueError, match="column x: 3 values for 15 rows"):
        log.put("x", np.zeros(3))
    with pytest.raises(KeyError, match="error"):
        log.load(["error"])
    assert skipped == []


def _counting_reads(log: ChunkColumns) -> list[tuple[str, list[str]]]:
    """(thread name, columns) of each pass `log` makes over its chunks."""
    import threading

    passes: list[tuple[str, list[str]]] = []
    read_now = log._read_now

    def counted(names, workers=None):
        wanted = [n for n in names if n not in log._values]
        if wanted:
            passes.append((threading.current_thread().name, wanted))
        read_now(names, workers)
    log._read_now = counted
    return passes


def _three_columns(tmp_path) -> list:
    parts = [{"error": ["a", None] * 50, "latency_ns": np.arange(100) + 100 * i,
              "phase": np.full(100, i, dtype=np.int32)} for i in range(4)]
    return _chunks(tmp_path, parts)


def test_columns_read_ahead_are_the_columns_read_when_asked_for_and_read_once(tmp_path):
    """prefetch reads its batches in the background: a statistic asking for such a column waits for it, gets what
    reading it on demand gives, and the chunks are not read for it again."""
    files = _three_columns(tmp_path)
    plain = ChunkColumns(files, FIELDS, [])
    want = {n: plain.values(n) for n in ("phase", "latency_ns", "error")}
    log = ChunkColumns(files, FIELDS, [])
    passes = _counting_reads(log)
    log.load(["phase"])
    log.prefetch([("latency_ns",), ("error", "phase")])  # phase is loaded: not read again
    assert np.array_equal(log.values("latency_ns"), want["latency_ns"])
    assert log.values("error").equals(want["error"])
    assert log._prefetcher is not None
    log._prefetcher.join(timeout=10)
    assert passes == [("MainThread", ["phase"]), ("tailrace-prefetch", ["latency_ns"]),
                      ("tailrace-prefetch", ["error"])], passes


def test_a_batch_that_does_not_fit_in_the_kept_memory_is_read_when_asked_for(tmp_path):
    """A long run's log is not read ahead: a batch that would take the loaded columns past keep_bytes is left to
    be read when a statistic asks for it."""
    log = ChunkColumns(_three_columns(tmp_path), FIELDS, [])
    passes = _counting_reads(log)
    log.load(["phase"])  # 400 rows × 4 bytes
    log.keep_bytes = 1_600 + 400 * 8  # room for latency_ns (8 bytes a row), not then for error too
    log.prefetch([("latency_ns",), ("error",)])
    log._prefetcher.join(timeout=10)
    assert [names for _, names in passes] == [["phase"], ["latency_ns"]]
    assert log.values("error").notna().sum() == 200
    assert passes[-1] == ("MainThread", ["error"]), passes


def test_a_column_that_fails_when_read_ahead_raises_where_it_is_asked_for(tmp_path):
    """A chunk whose latency pages are corrupt fails in the background read: the error is raised to the statistic
    that asks for the column (a LateChunkError naming the chunk: the analysis runs again without it), and the
    batches after it are left to be read when asked for."""
    from tailrace.analysis.read.chunks import LateChunkError
    from tests.unit.analysis.read.test_run_directory import _corrupt_latency_pages

    files = _three_columns(tmp_path)
    _corrupt_latency_pages(files[2])
    log = ChunkColumns(files, FIELDS, [])
    passes = _counting_reads(log)
    log.load(["phase"])
    log.prefetch([("latency_ns",), ("error",)])
    log._prefetcher.join(timeout=10)
    with pytest.raises(LateChunkError) as raised:
        log.values("latency_ns")
    assert raised.value.path == str(files[2])
    assert [names for _, names in passes] == [["phase"], ["latency_ns"]]  # error was not read ahead


def test_a_one_shot_runs_chunks_read_every_stream_column_with_its_default(tmp_path):
    """A run without generative endpoints writes no stream columns (and older runs never had them): every one reads
    back with its own type's default — not one chunk skipped (an int32-only filler had skipped them all)."""
    from tailrace.contract.layout import WorkerLayout
    from tailrace.contract.records import OPTIONAL_DEFAULTS, REQUEST_FIELDS, STREAM_DEFAULTS, RequestRow
    from tailrace.harness.spool.recorder import request_writer

    writer = request_writer(WorkerLayout(tmp_path / "w"), max_rows=10, max_seconds=100, streams=False)
    row = RequestRow(*(0 if kind in ("int64", "int32") else "x" if kind == "string" else True
                       for name, kind, _ in REQUEST_FIELDS if name not in STREAM_DEFAULTS))
    path = writer.write([row] * 3)
    assert not set(STREAM_DEFAULTS) & set(pq.read_schema(path).names)
    skipped: list[SkippedChunk] = []
    log = ChunkColumns([path], REQUEST_FIELDS, skipped, OPTIONAL_DEFAULTS)
    frame = log.frame(list(STREAM_DEFAULTS))
    assert skipped == [] and len(frame) == 3
    for name, default in STREAM_DEFAULTS.items():
        assert list(frame[name].astype(object)) == [default] * 3, name
