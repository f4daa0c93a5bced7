"""The chunk writer child process, run for real."""
from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tailrace.contract.layout import WorkerLayout
from tailrace.contract.records import REQUEST_COLUMNS, RequestRow
from tailrace.harness.spool.chunk_writer_process import encode_frame
from tailrace.harness.spool.recorder import request_writer

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)


def test_chunk_writer_process_writes_frames_and_drops_a_torn_last_one(tmp_path):
    w = request_writer(WorkerLayout(tmp_path / "src"), max_rows=1000, max_seconds=100)
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
    frames = [encode_frame(w.to_table([row] * n), i) for i, n in enumerate((3, 5, 2))]
    torn = frames[2][: len(frames[2]) // 2]  # the worker died while sending its last chunk
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tailrace.harness.spool.chunk_writer_process", str(out), "requests"],
                          input=frames[0] + frames[1] + torn, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    files = sorted(out.glob("requests-*.parquet"))
    assert [f.name for f in files] == ["requests-00000.parquet", "requests-00001.parquet"]
    assert [pq.read_table(f).num_rows for f in files] == [3, 5]
    assert not list(out.glob(".*.tmp"))
