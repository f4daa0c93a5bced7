"""analysis/read/chunks.py: the request log read a few columns at a time."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tailrace.analysis.read.chunks as chunks
from tailrace.analysis.read.chunks import ChunkColumns, SkippedChunk

FIELDS = (("error", "string", ""), ("latency_ns", "int64", ""), ("phase", "int32", ""))


@pytest.fixture(autouse=True)
def column_by_column(monkeypatch, request):
    """These tests read a log column by column, as a log of large chunks is read; theirs are small, and a log of
    small chunks is read whole at its first load (ChunkColumns.one_pass) unless a test asks for that."""
    if "one_pass" not in request.keywords:
        monkeypatch.setattr(chunks, "SMALL_CHUNK_ROWS", 0)


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
    log.load(["phase"])  # 400 rows × 1 byte (chunks.NARROW)
    log.keep_bytes = log.loaded_bytes() + 400 * 8  # room for latency_ns (8 bytes a row), not then for error too
    log.prefetch([("latency_ns",), ("error",)])
    log._prefetcher.join(timeout=10)
    assert [names for _, names in passes] == [["phase"], ["latency_ns"]]
    assert log.values("error").notna().sum() == 200
    assert passes[-1] == ("MainThread", ["error"]), passes


def test_spared_columns_above_the_budget_go_in_the_order_they_are_read_next(tmp_path):
    """Between statistics, a long run's spared columns are kept while they fit in keep_bytes; above it the one read
    again last goes first (then the next), so that the next statistics find theirs loaded. Within a statistic
    (no next reads given) every column it spares goes, as it may hold the others."""
    fields = (("a", "int64", ""), ("b", "int64", ""), ("c", "int64", ""), ("d", "int64", ""))
    files = _chunks(tmp_path, [{name: np.arange(100) for name in "abcd"}])
    log = ChunkColumns(files, fields, [])
    log.load(["a", "b", "c", "d"])  # 800 bytes each
    log.keep_bytes = 2 * 800
    log.spare("a", "b", "c", next_read={"a": 7, "b": 3, "c": 12})  # d: in use by the next statistic
    assert set(log._values) == {"b", "d"}
    log.release("d")
    log.spare("b", next_read={"b": 5})
    assert set(log._values) == {"b"}  # within the budget now: kept
    log.load(["a", "c"])
    log.spare("a", "c")  # within a statistic: both go, b stays
    assert set(log._values) == {"b"}


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


def _passes(monkeypatch) -> list[list[str]]:
    """The columns of each pass over the chunks, as they happen."""
    passes: list[list[str]] = []
    read_now = ChunkColumns._read_now

    def counted(self, names, workers=None):
        before = set(self._values)
        read_now(self, names, workers)
        if set(self._values) - before:
            passes.append(sorted(set(self._values) - before))

    monkeypatch.setattr(ChunkColumns, "_read_now", counted)
    return passes


@pytest.mark.one_pass
def test_a_log_of_small_chunks_is_read_whole_at_its_first_load_with_the_same_values(tmp_path, monkeypatch):
    """Opening a chunk costs more than decoding a few rows: a log whose chunks hold few rows each (a low rate's
    chunk every 0.25 s) is read in one pass, every column at the first load, small chunks put in together —
    the same values, categoricals and nulls as column by column."""
    rng = np.random.default_rng(3)
    parts = [{"error": rng.choice(["", "timeout", "503", None], 7).tolist(), "latency_ns": rng.integers(0, 10**9, 7),
              "phase": rng.integers(0, 3, 7).astype(np.int32)} for _ in range(40)]
    files = _chunks(tmp_path, parts)
    passes = _passes(monkeypatch)
    whole = ChunkColumns(files, FIELDS, [])
    assert whole.one_pass()
    assert list(whole.values("phase")) == [p for part in parts for p in part["phase"]]
    assert passes == [["error", "latency_ns", "phase"]]  # everything, in the first pass
    whole.values("latency_ns"), whole.values("error")
    assert len(passes) == 1
    monkeypatch.setattr(chunks, "SMALL_CHUNK_ROWS", 0)
    apart = ChunkColumns(files, FIELDS, [])
    assert not apart.one_pass()
    for name in ("error", "latency_ns", "phase"):
        a, b = whole.values(name), apart.values(name)
        if isinstance(a, pd.Categorical):
            assert list(a.categories) == list(b.categories) and np.array_equal(a.codes, b.codes), name
        else:
            np.testing.assert_array_equal(a, b)
    assert len(passes) == 4


@pytest.mark.one_pass
def test_a_damaged_chunk_read_in_one_pass_is_skipped_naming_its_column(tmp_path, monkeypatch):
    parts = [{"error": ["a"] * 500, "latency_ns": np.arange(500) * 7919 % 10007,
              "phase": np.ones(500, dtype=np.int32)}] * 6
    files = _chunks(tmp_path, parts)
    pq.write_table(pa.table(parts[2]), files[2], write_page_checksum=True, compression="none")
    meta = pq.read_metadata(files[2]).row_group(0)
    column = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == "latency_ns")
    data = bytearray(files[2].read_bytes())
    first = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    data[first + column.total_compressed_size * 3 // 4] ^= 0x04  # in its values, past the pages' headers
    files[2].write_bytes(bytes(data))
    skipped: list[SkippedChunk] = []
    log = ChunkColumns(files, FIELDS, skipped)
    assert log.one_pass()
    assert len(log.values("phase")) == 2_500  # the other five chunks' rows
    (bad,) = skipped
    assert bad.path == str(files[2]) and bad.reason.startswith("column latency_ns: ") and "CRC" in bad.reason, bad


@pytest.mark.one_pass
@pytest.mark.parametrize("budget_footers", [40, 25])
def test_a_small_chunks_footer_is_parsed_once_for_the_first_pass_within_its_budget(tmp_path, monkeypatch,
                                                                                     budget_footers):
    """A long run's thousands of small chunks: each footer parsed at opening is kept for the first pass (each parse
    ~0.15 ms, under the GIL), up to SMALL_FOOTERS_BYTES — past it a chunk's footer is parsed again when read —
    and none is held after that pass: a later pass parses them again."""
    parts = [{"error": ["", "timeout"], "latency_ns": np.array([i, i + 1]), "phase": np.array([1, 2], np.int32)}
             for i in range(40)]
    files = _chunks(tmp_path, parts)
    footer = chunks.PARSED_FOOTER_FACTOR * pq.read_metadata(files[0]).serialized_size
    monkeypatch.setattr(chunks, "SMALL_FOOTERS_BYTES", budget_footers * footer)
    parsed: dict[str, int] = {}
    read_footer = chunks.read_footer

    def counted(path):
        parsed[path.name] = parsed.get(path.name, 0) + 1
        return read_footer(path)

    monkeypatch.setattr(chunks, "read_footer", counted)
    log = ChunkColumns(files, FIELDS, [])
    assert list(log.values("latency_ns")) == [v for part in parts for v in part["latency_ns"]]
    assert [parsed[f.name] for f in files] == [1] * budget_footers + [2] * (40 - budget_footers)
    log.release("latency_ns")
    log.values("latency_ns")  # a second pass: no footer kept
    assert [parsed[f.name] for f in files] == [2] * budget_footers + [3] * (40 - budget_footers)


def test_a_narrow_column_is_held_in_the_narrowest_type_and_widened_for_a_chunk_that_needs_more(tmp_path):
    """The phase (int32 in the chunks) is held as int8 — a day's run's 381 MB column in 95 MB — and a chunk with a
    phase past int8's range widens it, every value kept."""
    fields = (("phase", "int32", ""), ("x", "int32", ""))
    (tmp_path / "small").mkdir()
    (tmp_path / "many").mkdir()
    small = ChunkColumns(_chunks(tmp_path / "small", [{"phase": np.array([0, 1, 2], dtype=np.int32),
                                                       "x": np.array([7, 8, 9], dtype=np.int32)}]), fields, [])
    assert small.values("phase").dtype == np.int8 and small.values("phase").tolist() == [0, 1, 2]
    assert small.values("x").dtype == np.int32  # only the NARROW columns
    zeros = np.zeros(2, dtype=np.int32)
    many = ChunkColumns(_chunks(tmp_path / "many", [{"phase": np.array([0, 5], dtype=np.int32), "x": zeros},
                                                    {"phase": np.array([127, 300], dtype=np.int32), "x": zeros},
                                                    {"phase": np.array([1, 2], dtype=np.int32), "x": zeros}]),
                        fields, [])
    assert many.values("phase").dtype == np.int16 and many.values("phase").tolist() == [0, 5, 127, 300, 1, 2]
