"""A child process that writes a worker's chunks (requests and clock samples), so the sending loop never blocks on
Parquet.

The worker converts rows to Arrow (cooperatively) and pipes each chunk as `<prefix length u8><index u32><length
u64>`, the prefix (`requests`, `clock`) and an Arrow IPC stream. This process gathers a log's chunks and writes them
together as one file, `<prefix>-<first chunk's index>.parquet` (temp name + rename: complete or absent), once they
span `file_seconds` (generator.file_seconds), at most FILE_ROWS rows a file: the worker closes a chunk every 0.25 s
to keep each step on its sending loop short, but the analysis pays ~1 ms a file to open it, whatever its rows
(docs/DECISIONS.md, "Fewer, larger files"); a busy worker's chunks are large already, and each is written as it
comes. It writes one byte to its stdout for each chunk taken in — after the write where taking it in wrote a file —
so the worker knows when it has no chunk left to handle
(harness/spool/chunk_shipping.py: WriterChild.busy). On end of input — the worker finished, or was killed — it
writes what it holds and exits, so a killed worker's shipped chunks still land. One per worker: each costs ~0.3 s of
CPU to start (pyarrow), while a run's processes start together.

    python -m tailrace.harness.spool.chunk_writer_process DIRECTORY [FILE_SECONDS]
"""
from __future__ import annotations

import os
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tailrace.contract.layout import CLOCK, REQUESTS, WorkerLayout, temporary
from tailrace.contract.records import FEW_VALUED

READY, WRITTEN = b"R", b"\x01"  # what this process says on its stdout: set up; one chunk handled
HEADER = struct.Struct("<BIQ")  # the prefix's length, the chunk's number, the Arrow stream's length
FILE_SECONDS = 5.0  # a log's chunks are written as one file once they span this long (generator.file_seconds) ...
FILE_ROWS = 1_024  # ... as long as they stay within this many rows: a file's write (~2.3 ms) as a chunk's at 2,000/s


def _read_exact(stream, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        data = stream.read(n - got)
        if not data:
            break
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def chunk_encoding(schema) -> dict:
    """pyarrow.parquet.write_table's keyword arguments for a request chunk of `schema` (see write_chunk)."""
    import pyarrow as pa

    return {"use_dictionary": [f.name for f in schema if f.name in FEW_VALUED],
            "column_encoding": {f.name: "DELTA_BINARY_PACKED" for f in schema
                                if pa.types.is_integer(f.type) and f.name not in FEW_VALUED},
            "write_statistics": False, "compression": "lz4", "write_page_checksum": True}


def write_chunk(table, final: Path) -> None:
    """Write `table` as the closed chunk `final`: under a temporary name, then renamed, so it is complete or
    absent. The encodings are chosen for the analysis, which reads every row of the columns it needs
    (docs/BENCHMARKS.md, "Chunk encodings"): dictionary pages only for the few-valued strings (contract/records.py
    FEW_VALUED: faster to write than plain, read ~30% faster), DELTA_BINARY_PACKED for the integers (timestamps,
    latencies, counts: differences that pack into few bits), LZ4 pages and no column statistics. Against plain
    integers in Snappy pages (what it wrote before) the analysis reads its columns in ~0.5× the CPU time, and the
    chunk is 13% smaller and faster to write. Every page carries its CRC-32: a flipped bit in a delta-packed page
    would otherwise decode to other numbers without an error (198 of 200 single-bit flips in a latency page did);
    the reader verifies it (analysis/read/chunks.py), for ~10% of the read. No fsync: the rename survives the
    death of the process, not an OS crash, and fsync would stall the sender. An OSError (a full disk) leaves no
    temporary file and names the chunk."""
    import pyarrow.parquet as pq

    tmp = temporary(final)
    try:
        pq.write_table(table, tmp, **chunk_encoding(table.schema))
        os.replace(tmp, final)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, f"cannot write {final}: {exc.strerror or exc}") from None


class _PendingFile:
    """One log's chunks taken in and not yet written: the file they will be written as, once complete."""

    def __init__(self, directory: Path, prefix: str) -> None:
        self.directory, self.prefix = directory, prefix
        self.tables: list = []
        self.first_index, self.first_seen, self.rows = 0, 0.0, 0

    def add(self, table, index: int, now: float) -> None:
        if not self.tables:
            self.first_index, self.first_seen = index, now
        self.tables.append(table)
        self.rows += table.num_rows

    def complete(self, now: float, file_seconds: float, file_rows: int) -> bool:
        """Whether the chunks taken in make a file now: they span `file_seconds`, or hold `file_rows` rows (a chunk
        that large alone)."""
        return bool(self.tables) and (now - self.first_seen >= file_seconds or self.rows >= file_rows)

    def write(self) -> None:
        """Write the chunks taken in as one file (none: nothing); an OSError names it, and its rows are lost."""
        import pyarrow as pa

        if not self.tables:
            return
        table = self.tables[0] if len(self.tables) == 1 else pa.concat_tables(self.tables)
        self.tables, self.rows = [], 0
        write_chunk(table, WorkerLayout(self.directory).chunk(self.prefix, self.first_index))


class WriteFailed(Exception):
    """A file that could not be written (already said on stderr): the process ends with exit code 1, so its worker
    knows that chunks it had taken in may be lost."""

    def __init__(self, written: int) -> None:
        super().__init__(f"{written} file(s) written before the failure")
        self.written = written


def serve(directory: Path, stream, acks=None, file_seconds: float = FILE_SECONDS, file_rows: int = FILE_ROWS,
          clock: Callable[[], float] = time.monotonic) -> int:
    """Take every frame from `stream` until EOF, each log's chunks written together as one file once they span
    `file_seconds` (0: each chunk its own file), never more than `file_rows` rows in a file unless one chunk has more
    (a busy worker's chunks are large: each is written as it comes), and a byte to `acks` for each chunk once
    handled (after the write where taking it in wrote a file); returns the number of files written. At EOF, a torn last
    frame or an unknown log, what was taken in is written. A file that cannot be written raises WriteFailed, the
    reason on stderr (the process exits 1; the worker then writes in-process and records that rows may be lost). A
    worker gone (its end of `acks` closed) stops the acks, never the writing: what it shipped still lands."""
    import pyarrow as pa

    directory.mkdir(parents=True, exist_ok=True)
    pending = {prefix: _PendingFile(directory, prefix) for prefix in (REQUESTS, CLOCK)}
    written = 0

    def write(pending_file: _PendingFile) -> None:
        nonlocal written
        if not pending_file.tables:
            return
        try:
            pending_file.write()
        except OSError as exc:
            print(f"chunk writer: {exc.strerror}", file=sys.stderr, flush=True)
            raise WriteFailed(written) from None
        written += 1

    def write_all() -> int:
        for pending_file in pending.values():
            write(pending_file)
        return written

    while True:
        head = _read_exact(stream, HEADER.size)
        if len(head) < HEADER.size:
            return write_all()
        prefix_length, index, length = HEADER.unpack(head)
        prefix = _read_exact(stream, prefix_length)
        payload = _read_exact(stream, length)
        if len(payload) < length:
            return write_all()  # the worker died mid-frame: that chunk was never closed
        prefix = prefix.decode("ascii", "replace")
        if prefix not in pending:
            print(f"chunk writer: chunk {index} of an unknown log {prefix!r}: stopping", file=sys.stderr, flush=True)
            return write_all()
        table = pa.ipc.open_stream(payload).read_all()
        pending_file, now = pending[prefix], clock()
        if pending_file.tables and (pending_file.rows + table.num_rows > file_rows
                                    or not table.schema.equals(pending_file.tables[0].schema)):
            write(pending_file)  # (one file, one schema, within file_rows)
        pending_file.add(table, index, now)
        if pending_file.complete(now, file_seconds, file_rows):
            write(pending_file)
        if acks is not None:
            try:
                acks.write(WRITTEN)
                acks.flush()
            except OSError:
                acks = None


def encode_frame(table, prefix: str, index: int) -> bytes:
    """Chunk `index` of the `prefix` log (contract/layout.py: REQUESTS, CLOCK) as a frame for this process's stdin."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    payload = sink.getvalue().to_pybytes()
    name = prefix.encode("ascii")
    return HEADER.pack(len(name), index, len(payload)) + name + payload


class FrameEncoder:
    """encode_frame into one reused, pre-touched buffer: a chunk's Arrow IPC stream (~0.3 MB at 4,000 req/s) written
    into fresh memory cost the worker's loop 0.8-2 ms a chunk (allocation, growth, first-touch page faults); here, in
    runs at 3,000-4,000 req/s, 0.25 ms median, 0.47 ms at most (142 chunks). A chunk larger than the buffer is encoded
    the plain way."""

    def __init__(self, capacity: int = 8 << 20) -> None:
        import pyarrow as pa

        self._memory = bytearray(capacity)  # zero-filled: its pages are touched once, here
        self._target = pa.py_buffer(self._memory)

    def encode(self, table, prefix: str, index: int) -> tuple[bytes, memoryview] | bytes:
        """Chunk `index` of the `prefix` log as the parts of one frame (header, payload), to be written before the next
        call (the payload is a view of the reused buffer)."""
        import pyarrow as pa

        sink = pa.FixedSizeBufferWriter(self._target)
        try:
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
        except OSError:  # larger than the buffer
            return encode_frame(table, prefix, index)
        length = sink.tell()
        name = prefix.encode("ascii")
        return HEADER.pack(len(name), index, length) + name, memoryview(self._memory)[:length]


def yield_to_the_sender() -> None:
    """The lowest nice value (19): the writer shares its worker's core, and a chunk woken up by its frame must not
    take the core from the worker while a send is due. An inline open loop, which spins towards its sends, moves its
    writer to SCHED_IDLE and sleeps in the kernel while it has chunks to write (WriterChild.idle): at nice 19 the
    writer still held the core until the next 4 ms tick (docs/DECISIONS.md)."""
    try:
        os.nice(19)
    except OSError:
        pass


def go_on_if_orphaned() -> bool:
    """A worker may hold this process stopped while it spins (harness/spool/chunk_shipping.py: WriterChild.hold). If
    the worker dies then, the kernel sends this process SIGCONT (its parent-death signal), and it writes what it was
    sent, as any orphaned writer does. False: the signal could not be set (this process must then never be held)."""
    import signal

    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGCONT), 0, 0, 0) == 0  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m tailrace.harness.spool.chunk_writer_process DIRECTORY [FILE_SECONDS]")
    may_be_held = go_on_if_orphaned()
    acks = sys.stdout.buffer
    try:
        if may_be_held:
            acks.write(READY)  # from now on its worker may hold it stopped (WriterChild.hold)
            acks.flush()
    except OSError:  # its worker is gone already: what it sent is still written
        acks = None
    yield_to_the_sender()
    try:
        serve(Path(sys.argv[1]), sys.stdin.buffer, acks, float(sys.argv[2]) if len(sys.argv) == 3 else FILE_SECONDS)
    except WriteFailed:
        sys.exit(1)
