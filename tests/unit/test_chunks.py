"""analysis/chunks.py: the request log read a few columns at a time."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.chunks import ChunkColumns, SkippedChunk

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
    assert isinstance(got, pd.Categorical) and len(got.categories) == 300
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
