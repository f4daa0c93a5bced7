"""The chunk writer child process, run for real."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import gevent
import gevent.subprocess
import pyarrow.parquet as pq
import pytest

from tailrace.contract.layout import CLOCK, REQUESTS, WorkerLayout
from tailrace.contract.records import CLOCK_FIELDS, REQUEST_COLUMNS, ClockRow, RequestRow
from tailrace.harness.spool import chunk_shipping
from tailrace.harness.spool.chunk_shipping import ChunkShipper
from tailrace.harness.spool.chunk_writer_process import encode_frame
from tailrace.harness.spool.recorder import clock_writer, request_writer

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)


def test_chunk_writer_process_writes_both_logs_frames_together_and_drops_a_torn_last_one(tmp_path):
    w = request_writer(WorkerLayout(tmp_path / "src"), max_rows=1000, max_seconds=100)
    c = clock_writer(WorkerLayout(tmp_path / "src"))
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
    sample = ClockRow(**({f: 0 for f, _, _ in CLOCK_FIELDS} | {"worker": "near-w0", "region": "near", "server": "x",
                                                                "stage": "before"}))
    frames = [encode_frame(w.to_table([row] * n), REQUESTS, i) for i, n in enumerate((3, 5, 2))]
    clock = encode_frame(c.to_table([sample] * 4), CLOCK, 0)
    torn = frames[2][: len(frames[2]) // 2]  # the worker died while sending its last chunk
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tailrace.harness.spool.chunk_writer_process", str(out)],
                          input=frames[0] + clock + frames[1] + torn, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"R" + b"\x01" * 3  # ready, then one acknowledgement a chunk taken in, none for the torn one
    files = sorted(out.glob("requests-*.parquet"))  # the input's end: what it held, one file a log
    assert [f.name for f in files] == ["requests-00000.parquet"]
    assert [pq.read_table(f).num_rows for f in files] == [8]
    assert [pq.read_table(f).num_rows for f in out.glob("clock-*.parquet")] == [4]
    assert not list(out.glob(".*.tmp"))


def test_a_frame_of_an_unknown_log_stops_the_writer_and_names_it(tmp_path):
    w = request_writer(WorkerLayout(tmp_path / "src"), max_rows=1000, max_seconds=100)
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
    frames = encode_frame(w.to_table([row]), REQUESTS, 0) + encode_frame(w.to_table([row]), "../x", 1)
    proc = subprocess.run([sys.executable, "-m", "tailrace.harness.spool.chunk_writer_process", str(tmp_path / "out")],
                          input=frames, capture_output=True, timeout=60)
    assert proc.returncode == 0 and b"chunk 1 of an unknown log '../x'" in proc.stderr
    assert [f.name for f in (tmp_path / "out").iterdir()] == ["requests-00000.parquet"]


def test_a_file_the_writer_cannot_write_ends_it_with_code_1_and_its_worker_says_rows_may_be_lost(tmp_path, capsys):
    """Exit 1, the file named: its worker then knows the chunks it had taken in may be lost (its summary says so)."""
    w = request_writer(WorkerLayout(tmp_path), max_rows=1000, max_seconds=100)
    (tmp_path / "requests-00000.parquet").mkdir()  # (a directory where the file goes: the rename fails)
    (tmp_path / "requests-00000.parquet" / "x").write_text("")
    shipper = ChunkShipper(w, "tailrace worker w0")
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
    w.rows.extend([row] * 3)
    shipper.ship_open_chunk()
    shipper.close()
    assert shipper.child.lost == "exited (1)"
    proc = subprocess.run([sys.executable, "-m", "tailrace.harness.spool.chunk_writer_process", str(tmp_path)],
                          input=encode_frame(w.to_table([row]), REQUESTS, 0), capture_output=True, timeout=60)
    assert proc.returncode == 1 and b"cannot write" in proc.stderr and b"requests-00000.parquet" in proc.stderr


def test_a_writer_found_dead_is_said_once_and_its_chunks_are_written_in_process(tmp_path, capsys):
    w = request_writer(WorkerLayout(tmp_path), max_rows=1000, max_seconds=100)
    shipper = ChunkShipper(w, "tailrace worker w0")
    shipper.child.process.kill()
    shipper.child.process.wait(10)
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
    for n in (2, 3):
        w.rows.extend([row] * n)
        shipper.ship_open_chunk()
    shipper.close()
    said = [line for line in capsys.readouterr().out.splitlines() if "chunk writer" in line]
    assert said == ["tailrace worker w0: chunk writer exited (-9); writing in-process"]
    assert [pq.read_table(f).num_rows for f in sorted(tmp_path.glob("requests-*.parquet"))] == [2, 3]
    assert w.rows_written == 5 and not shipper.failures
    assert shipper.child.lost == "exited (-9)"  # (what it had taken in, if anything, is gone with it)


def test_a_shipped_chunk_keeps_the_writer_busy_until_it_is_on_disk_and_an_idle_writer_is_sched_idle(tmp_path):
    w = request_writer(WorkerLayout(tmp_path), max_rows=1000, max_seconds=100)
    shipper = ChunkShipper(w, "tailrace worker w0", file_seconds=0)  # (a file a chunk)
    child = shipper.child
    assert child.idle() and os.sched_getscheduler(child.process.pid) == os.SCHED_IDLE
    assert not child.busy
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
    w.rows.extend([row] * 500)
    shipper.ship_open_chunk()
    final = w.layout.chunk(REQUESTS, 0)
    deadline = time.monotonic() + 30
    while child.busy and time.monotonic() < deadline:  # busy until the child says the chunk is written
        time.sleep(0.005)
    assert not child.busy and pq.read_table(final).num_rows == 500
    shipper.close()


def test_a_writer_whose_worker_stopped_reading_its_acknowledgements_still_writes_every_chunk(tmp_path):
    w = request_writer(WorkerLayout(tmp_path / "src"), max_rows=1000, max_seconds=100)
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "tailrace.harness.spool.chunk_writer_process", str(out)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the worker is gone: its end of the acknowledgements is closed
    for i in range(3):
        proc.stdin.write(encode_frame(w.to_table([row] * 4), REQUESTS, i))
    proc.stdin.close()
    assert proc.wait(60) == 0, proc.stderr.read()
    assert [pq.read_table(f).num_rows for f in sorted(out.glob("requests-*.parquet"))] == [12]


def _state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_a_held_writer_writes_nothing_until_released(tmp_path):
    w = request_writer(WorkerLayout(tmp_path), max_rows=1000, max_seconds=100)
    shipper = ChunkShipper(w, "tailrace worker w0", file_seconds=0)
    child = shipper.child
    _gated(child)
    assert not child.held  # idle: blocked on its pipe, it takes no turn of the core, and is sent no signal
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
    w.rows.extend([row] * 50)
    shipper.ship_open_chunk()  # the pipe write lets it run for the write; it is held again after
    time.sleep(0.5)
    assert child.held and _state(child.process.pid) == "T" and child.busy
    assert not w.layout.chunk(REQUESTS, 0).exists()
    assert child.catch_up(0, timeout_s=60)  # (a loaded machine: the child imports pyarrow once let run)
    assert not child.busy and pq.read_table(w.layout.chunk(REQUESTS, 0)).num_rows == 50
    shipper.close()


def _holds_on_one_core(tmp_path, due_in_ns: int | None) -> list[str]:
    """Ten rounds of a sending loop that shares one core with its writer (as a pinned worker's does): it lets the
    writer run (release), ships it a chunk, and holds it again with its next send `due_in_ns` away (None: no send
    due). The child's scheduler state after each hold; every chunk is on disk afterwards."""
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    try:
        w = request_writer(WorkerLayout(tmp_path), max_rows=1000, max_seconds=100)
        shipper = ChunkShipper(w, "w0")
        child = shipper.child
        _gated(child)
        row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7,
                                                                  "correct": False}))
        states = []
        for _ in range(10):
            child.release()
            w.rows.extend([row] * 5000)
            shipper.ship_open_chunk()
            assert child.busy
            child.hold(None if due_in_ns is None else time.perf_counter_ns() + due_in_ns)  # (no sleep since)
            assert child.held
            states.append(_state(child.process.pid))
        assert child.catch_up(0, timeout_s=60)
        shipper.close()
        assert sum(pq.read_table(f).num_rows for f in w.layout.dir.glob("requests-*.parquet")) == 50_000
        return states
    finally:
        os.sched_setaffinity(0, cores)


def test_a_writer_held_on_its_workers_core_has_stopped_when_hold_returns(tmp_path):
    """A stop takes effect only when the stopped process next runs: on one core with a worker that spins, a child
    signalled and left runnable took a turn later, ahead of the worker (EEVDF lag), and held the core 2.3-2.5 ms
    after the worker woke. `hold` returns once it has stopped."""
    assert _holds_on_one_core(tmp_path, None) == ["T"] * 10


def test_a_writer_held_just_before_a_send_is_left_to_stop_when_it_next_runs(tmp_path):
    """With a send due within STOP_WAIT_SLACK_NS, `hold` does not wait for the stop (at 8,000 KServe requests/s,
    waiting for each stop cost more than it saved): the child is signalled and stops when it next runs."""
    states = _holds_on_one_core(tmp_path, chunk_shipping.STOP_WAIT_SLACK_NS // 3)
    assert "R" in states  # signalled, not yet stopped (a scheduler tick may let one stop meanwhile)


def _gated(child) -> None:
    """Gate `child` for a sending loop, once it has said it is ready (before, it may not be held)."""
    deadline = time.monotonic() + 30
    while not child.ready and time.monotonic() < deadline:
        child.busy  # noqa: B018 - reads its acknowledgements (READY among them)
        child._read_acks()
        time.sleep(0.01)
    assert child.ready
    child.gate(True)


def test_a_writer_that_exited_is_never_signalled_by_its_pid(tmp_path, monkeypatch):
    """A worker's gevent loop reaps every child the moment it exits, so by the next hold a dead writer's pid may
    name another process (pid_max is 32,768 on these machines): holds and releases go through the child's pidfd."""
    shipper = ChunkShipper(request_writer(WorkerLayout(tmp_path), max_rows=1000, max_seconds=100), "w0")
    child = shipper.child
    _gated(child)
    child.process.kill()
    child.process.wait()  # reaped: its pid is free for the next process

    def by_pid(pid, signum):
        raise AssertionError(f"signal {signum} sent to pid {pid}")

    monkeypatch.setattr(os, "kill", by_pid)
    child.outstanding = 1  # (as if a chunk had been sent to it)
    child.hold()
    assert not child.held
    shipper.close()



def test_a_chunk_shipped_while_the_loop_sleeps_leaves_the_writer_free(tmp_path):
    """The loop lets its writer run while it sleeps; a chunk shipped then (by another greenlet) must not stop it for
    the rest of that sleep."""
    w = request_writer(WorkerLayout(tmp_path), max_rows=1000, max_seconds=100)
    shipper = ChunkShipper(w, "w0")
    child = shipper.child
    _gated(child)
    child.release()  # the loop sleeps
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
    w.rows.extend([row] * 50)
    shipper.ship_open_chunk()
    assert child.gated and not child.held
    shipper.close()

def _two_logs(tmp_path, monkeypatch, rows: int):
    """A worker's request and clock shippers, one child between them, `rows` request rows and 10 clock samples open."""
    monkeypatch.setattr(chunk_shipping, "subprocess", gevent.subprocess)  # a worker's (Locust monkey-patches it)
    layout = WorkerLayout(tmp_path)
    requests, clock = request_writer(layout, max_rows=100_000, max_seconds=100), clock_writer(layout)
    request_chunks = ChunkShipper(requests, "w0")
    clock_chunks = ChunkShipper(clock, "w0", child=request_chunks.child)
    row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
    requests.rows.extend([row] * rows)
    clock.rows.extend([ClockRow(**({f: 0 for f, _, _ in CLOCK_FIELDS} | {"worker": "w0", "region": "near",
                                                                       "server": "x", "stage": "during"}))] * 10)
    return layout, request_chunks, clock_chunks


def test_frames_sent_from_two_greenlets_at_once_are_written_whole(tmp_path, monkeypatch):
    """A worker's request and clock shippers send through one child from two greenlets, and a frame larger than the
    pipe waits for room cooperatively: the other's frame must not land inside it (the child would read garbage)."""
    layout, request_chunks, clock_chunks = _two_logs(tmp_path, monkeypatch, 80_000)  # ~3 MB of Arrow: 3 pipes' worth
    gevent.joinall([gevent.spawn(request_chunks.ship_open_chunk), gevent.spawn(clock_chunks.ship_open_chunk)],
                   raise_error=True)
    request_chunks.close()
    assert pq.read_table(layout.chunk(REQUESTS, 0)).num_rows == 80_000
    assert pq.read_table(layout.chunk(CLOCK, 0)).num_rows == 10


def test_a_shipper_killed_in_the_middle_of_its_frame_finishes_it_first(tmp_path, monkeypatch):
    """Killed while it waits for room, with the sending loop holding the writer meanwhile: it lets the writer run and
    finishes its frame (the worker blocked), then dies."""
    layout, request_chunks, clock_chunks = _two_logs(tmp_path, monkeypatch, 80_000)
    child = request_chunks.child
    _gated(child)
    child.release()
    os.kill(child.process.pid, signal.SIGSTOP)  # slow to read, as a child writing Parquet is: the pipe fills
    shipping = gevent.spawn(request_chunks.ship_open_chunk)
    deadline = time.monotonic() + 20  # its rows made into a frame (column by column, yielding), its first bytes sent
    while not child.outstanding and time.monotonic() < deadline:
        gevent.sleep(0.05)
    gevent.sleep(0.2)  # the pipe full
    child.hold()  # the sending loop holds it while the frame waits
    assert not shipping.dead and child.held  # in the middle of its frame
    rescue = threading.Timer(30, os.kill, (child.process.pid, signal.SIGCONT))  # (were the kill below to block)
    rescue.start()
    started = time.monotonic()
    shipping.kill()
    rescue.cancel()
    assert time.monotonic() - started < 20
    clock_chunks.ship_open_chunk()
    request_chunks.close()
    assert pq.read_table(layout.chunk(REQUESTS, 0)).num_rows == 80_000 == request_chunks.writer.rows_written
    assert pq.read_table(layout.chunk(CLOCK, 0)).num_rows == 10

WORKER_DIES_HOLDING = """
import os, sys
from pathlib import Path
from tailrace.contract.layout import WorkerLayout
from tailrace.contract.records import REQUEST_COLUMNS, RequestRow
from tailrace.harness.spool.chunk_shipping import ChunkShipper
from tailrace.harness.spool.recorder import request_writer
w = request_writer(WorkerLayout(Path(sys.argv[1])), max_rows=1000, max_seconds=100)
shipper = ChunkShipper(w, "w0")
while not shipper.child.ready:
    shipper.child._read_acks()
shipper.child.gate(True)
row = RequestRow(**({c: None for c in REQUEST_COLUMNS} | {"trace_id": "b" * 32, "latency_ns": 7, "correct": False}))
w.rows.extend([row] * 30)
shipper.ship_open_chunk()
print(shipper.child.process.pid, flush=True)
os._exit(0)  # dies holding its writer stopped, the chunk unwritten
"""


def test_a_worker_that_dies_holding_its_writer_still_gets_its_chunk_written(tmp_path):
    proc = subprocess.run([sys.executable, "-c", WORKER_DIES_HOLDING, str(tmp_path)], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    writer_pid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 30
    final = WorkerLayout(tmp_path).chunk(REQUESTS, 0)
    while not final.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pq.read_table(final).num_rows == 30
    while os.path.exists(f"/proc/{writer_pid}") and _state(writer_pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{writer_pid}") or _state(writer_pid) == "Z"  # it finished and exited


def test_a_writer_that_does_not_get_the_turn_to_stop_is_waited_for_a_bounded_time(tmp_path, monkeypatch):
    """On a machine busy with other work the idle-class child may not run for many seconds, and a stop takes effect
    only when it runs: a worker that waited for it without bound stalled 40 s in CI. Here the signal is never sent
    and the child looks runnable throughout: `hold` returns after STOP_WAIT_MAX_NS, the child counted as held."""
    w = request_writer(WorkerLayout(tmp_path), max_rows=1000, max_seconds=100)
    shipper = ChunkShipper(w, "w0")
    child = shipper.child
    _gated(child)
    monkeypatch.setattr(chunk_shipping.WriterChild, "_signal", lambda self, signum: True)
    monkeypatch.setattr(chunk_shipping.WriterChild, "_state", lambda self: b"R")
    child.release()
    child.outstanding += 1  # (work it has not said done)
    took: list[float] = []
    holding = threading.Thread(target=lambda: (t := time.perf_counter(), child.hold(None),
                                               took.append(time.perf_counter() - t)), daemon=True)
    holding.start()
    holding.join(timeout=10)
    assert took and chunk_shipping.STOP_WAIT_MAX_NS / 1e9 <= took[0] < 2.0 and child.held
    monkeypatch.undo()
    child.outstanding -= 1
    child.release()
    shipper.close()
