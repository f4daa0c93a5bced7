"""The chunk writer's files: a log's chunks written together once they span file_seconds or hold file_rows rows."""
from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailrace.contract.layout import CLOCK, REQUESTS
from tailrace.harness.spool.chunk_writer_process import WRITTEN, WriteFailed, encode_frame, serve


def _table(first: int, rows: int, extra: bool = False) -> pa.Table:
    columns = {"latency_ns": pa.array(range(first, first + rows), type=pa.int64())}
    if extra:
        columns["ttft_ns"] = pa.array([0] * rows, type=pa.int64())
    return pa.table(columns)


def _serve(tmp_path, frames: list[tuple[float, bytes]], **kwargs) -> tuple[int, bytes]:
    """serve() over `frames` (arrival time, frame), the clock reading each one's time as it is taken in."""
    times = iter(t for t, _ in frames)
    acks = io.BytesIO()
    written = serve(tmp_path, io.BytesIO(b"".join(f for _, f in frames)), acks, clock=lambda: next(times), **kwargs)
    return written, acks.getvalue()


def _files(tmp_path, prefix: str = REQUESTS) -> dict[str, list[int]]:
    return {p.name: pq.read_table(p).column("latency_ns").to_pylist() for p in sorted(tmp_path.glob(f"{prefix}-*"))}


def test_chunks_are_written_together_once_they_span_file_seconds_and_the_rest_at_the_end(tmp_path):
    frames = [(i * 0.25, encode_frame(_table(10 * i, 10), REQUESTS, i)) for i in range(30)]
    frames.insert(3, (0.6, encode_frame(pa.table({"offset_ns": pa.array([7], type=pa.int64())}), CLOCK, 0)))
    written, acks = _serve(tmp_path, frames, file_seconds=5.0)
    files = _files(tmp_path)
    # chunks 0-20 span 5 s (0 → 5.0): one file, named by its first chunk; chunks 21-29 at the input's end
    assert list(files) == ["requests-00000.parquet", "requests-00021.parquet"]
    assert files["requests-00000.parquet"] == list(range(210)) and files["requests-00021.parquet"] == list(range(210, 300))
    assert [pq.read_table(p).num_rows for p in tmp_path.glob(f"{CLOCK}-*")] == [1]  # its own log, its own file
    assert written == 3 and acks == WRITTEN * 31  # one acknowledgement a chunk taken in
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_file_holds_at_most_file_rows_a_larger_chunk_is_written_alone_and_each_chunk_alone_at_zero_s(tmp_path):
    sizes = [4, 4, 4, 12, 4, 4, 4, 4]
    frames = [(0.0, encode_frame(_table(100 * i, n), REQUESTS, i)) for i, n in enumerate(sizes)]
    written, acks = _serve(tmp_path / "rows", frames, file_seconds=60.0, file_rows=10)
    # two chunks (8 rows: a third would pass 10), one, the 12-row chunk alone (written as it comes), two, two at the end
    assert {name: len(v) for name, v in _files(tmp_path / "rows").items()} == {
        "requests-00000.parquet": 8, "requests-00002.parquet": 4, "requests-00003.parquet": 12,
        "requests-00004.parquet": 8, "requests-00006.parquet": 8}
    assert written == 5 and acks == WRITTEN * 8
    _serve(tmp_path / "each", frames, file_seconds=0)
    assert list(_files(tmp_path / "each")) == [f"requests-{i:05d}.parquet" for i in range(8)]


def test_a_chunk_of_another_schema_starts_a_file_of_its_own(tmp_path):
    frames = [(0.0, encode_frame(_table(0, 3), REQUESTS, 0)), (0.25, encode_frame(_table(3, 2, extra=True), REQUESTS, 1)),
              (0.5, encode_frame(_table(5, 2, extra=True), REQUESTS, 2))]
    _serve(tmp_path, frames)
    assert _files(tmp_path) == {"requests-00000.parquet": [0, 1, 2], "requests-00001.parquet": [3, 4, 5, 6]}


def test_a_file_that_cannot_be_written_stops_the_writer_naming_it(tmp_path, capsys):
    (tmp_path / "requests-00000.parquet").mkdir()  # (a directory where the file goes: the rename fails)
    (tmp_path / "requests-00000.parquet" / "x").write_text("")
    frames = [(i * 1.0, encode_frame(_table(i, 1), REQUESTS, i)) for i in range(4)]
    acks = io.BytesIO()
    times = iter(t for t, _ in frames)
    with pytest.raises(WriteFailed) as failed:
        serve(tmp_path, io.BytesIO(b"".join(f for _, f in frames)), acks, clock=lambda: next(times), file_seconds=2.0)
    assert failed.value.written == 0
    assert acks.getvalue() == WRITTEN * 2  # the chunk that completed the failing file is not acknowledged
    assert "cannot write" in capsys.readouterr().err and "requests-00000.parquet" not in [
        p.name for p in tmp_path.glob("*.parquet") if p.is_file()]
    assert not list(tmp_path.glob(".*.tmp"))
