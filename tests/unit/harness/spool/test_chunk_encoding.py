"""A request chunk's encodings: integers delta-packed, few-valued strings as dictionaries, LZ4 pages — and every
value read back as written (nulls, negative and extreme integers, unsorted timestamps)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tailrace.contract.layout import WorkerLayout
from tailrace.contract.records import FEW_VALUED, REQUEST_COLUMNS, RequestRow
from tailrace.harness.spool.chunk_writer_process import write_chunk
from tailrace.harness.spool.recorder import request_writer


def _rows(n: int) -> list[RequestRow]:
    rng = np.random.default_rng(7)
    t0 = 1_764_000_000_000_000_000
    sent = t0 + np.cumsum(rng.exponential(3e5, n)).astype(np.int64)
    sent[5] -= 10**9  # out of order: delta packing takes negative differences too
    rows = []
    for i in range(n):
        ok = i % 7 != 3
        rows.append(RequestRow(**({c: None for c in REQUEST_COLUMNS} | {
            "trace_id": f"{i:032x}", "span_id": f"{i:016x}", "region": ("eu", "us", "ap")[i % 3],
            "worker": f"w{i % 2}", "endpoint": "digits", "status": "ok" if ok else "timeout",
            "code": None if ok else "deadline", "phase": i % 3, "t_intended": int(sent[i]) - 5,
            "t_sent": int(sent[i]), "t_done": int(sent[i]) + 1_000_000 + i,
            "latency_ns": 2**62 if i == 11 else -3 if i == 12 else 1_000_005 + i,
            "server_queue_ns": None if not ok else i * 1000, "correct": ok, "batch_size": 1,
            "correct_count": -1 if i == 4 else int(ok), "clock_offset_ns": -250_000 + i})))
    return rows


def test_a_chunk_packs_integers_by_delta_in_lz4_pages_and_reads_back_every_value(tmp_path):
    writer = request_writer(WorkerLayout(tmp_path / "w"), max_rows=1000, max_seconds=100)
    table = writer.to_table(_rows(500))
    path = tmp_path / "requests-00000.parquet"
    write_chunk(table, path)
    back = pq.read_table(path)
    assert back.schema.equals(table.schema)
    for name in table.column_names:
        assert back.column(name).to_pylist() == table.column(name).to_pylist(), name
    group = pq.read_metadata(path).row_group(0)
    for i in range(group.num_columns):
        column = group.column(i)
        field = table.schema.field(column.path_in_schema)
        assert column.compression == "LZ4", field.name  # pyarrow's name for Parquet's LZ4_RAW codec
        if pa.types.is_integer(field.type):
            assert "DELTA_BINARY_PACKED" in column.encodings, field.name
        if field.name in FEW_VALUED and table.column(field.name).null_count < len(table):
            assert column.has_dictionary_page, field.name
        assert not column.is_stats_set, field.name
