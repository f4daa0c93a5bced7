"""A child process that writes a worker's request chunks, so the sending loop never blocks on Parquet.

The worker converts rows to Arrow (cooperatively) and pipes each chunk as `<index u32><length u64>` +
an Arrow IPC stream; this process writes it as `<prefix>-<index>.parquet` (temp name + rename: complete
or absent). On end of input — the worker finished, or was killed — it writes what it received and exits,
so a killed worker's shipped chunks still land.

    python -m harness.worker.chunk_writer_process DIRECTORY PREFIX
"""
from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

from contract.layout import WorkerLayout, temporary

HEADER = struct.Struct("<IQ")


def _read_exact(stream, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        data = stream.read(n - got)
        if not data:
            break
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def serve(directory: Path, prefix: str, stream) -> int:
    """Write every frame from `stream` until EOF; returns the number of chunks written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    written = 0
    while True:
        head = _read_exact(stream, HEADER.size)
        if len(head) < HEADER.size:
            return written
        index, length = HEADER.unpack(head)
        payload = _read_exact(stream, length)
        if len(payload) < length:
            return written  # the worker died mid-frame: that chunk was never closed
        table = pa.ipc.open_stream(payload).read_all()
        final = WorkerLayout(directory).chunk(prefix, index)
        tmp = temporary(final)
        pq.write_table(table, tmp, use_dictionary=False, write_statistics=False, compression="snappy")
        os.replace(tmp, final)
        written += 1


def encode_frame(table, index: int) -> bytes:
    """One chunk as a frame for this process's stdin."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    payload = sink.getvalue().to_pybytes()
    return HEADER.pack(index, len(payload)) + payload


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m harness.worker.chunk_writer_process DIRECTORY PREFIX")
    serve(Path(sys.argv[1]), sys.argv[2], sys.stdin.buffer)
