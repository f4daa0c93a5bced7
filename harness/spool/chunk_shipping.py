"""Closing a worker's chunks without blocking its sending loop: rows → Arrow (cooperatively) → a pipe to the
worker's chunk-writer child process, which writes them as Parquet files, a few seconds' chunks a file
(harness/spool/chunk_writer_process.py).

Writing Parquet on the sending loop blocks it ~1-10 ms per chunk, and a writer thread is worse (it convoys
with the loop on the GIL); a pipe write of the Arrow IPC bytes costs ~0.1 ms. The request log and the clock log
share one child. If it cannot start or dies, chunks are written in-process (slower, never lost).
"""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gevent
from gevent.lock import Semaphore
from gevent.monkey import get_original
from gevent.socket import wait_write

from tailrace.contract.layout import REQUESTS
from tailrace.harness.spool.chunk_writer_process import FILE_SECONDS, READY, WRITTEN, FrameEncoder, encode_frame
from tailrace.harness.spool.recorder import ChunkWriter

_select = get_original("select", "select")  # the kernel's: blocks the whole worker, which is the point in catch_up
RELEASE_ROWS = 256  # rows freed between two yields (~0.1-0.2 ms)
SHIP_SLICE_NS = 200_000  # a worker's chunk converted and let go in pieces of about this (YieldEvery)
PIPE_BYTES = 1 << 20  # Linux's default largest pipe (/proc/sys/fs/pipe-max-size) for an unprivileged process

WRITER_BEHIND = 3  # chunks not yet written at which a sending loop that holds its writer waits for it (keep_up) ...
CATCH_UP_S = 5.0  # ... this long at most: a writer that does not catch up is let go (no longer held nor waited for)
STOP_WAIT_SLACK_NS = 300_000  # a held writer is waited for until it has stopped only with a send this far off or more
STOP_WAIT_MAX_NS = 20_000_000  # ... and at most this long: an idle-class child on a busy machine may not run for long
STOP_POLL_S = 10e-6  # the wait's sleeps (the kernel's: the core is the child's meanwhile)
_sleep = get_original("time", "sleep")


def _pidfd(pid: int) -> int:
    """A pidfd for `pid` (Linux 5.3+), or -1: without one the child is never held."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


class WriterChild:
    """A worker's chunk-writer process: frames in, until closed."""

    def __init__(self, directory: Path, label: str, file_seconds: float = FILE_SECONDS) -> None:
        self.label = label
        self.outstanding = 0  # frames sent that the child has not said handled (its acks, one byte each)
        self.ack_fd = -1
        self._pidfd = -1  # how it is signalled: never by its pid, which the gevent loop frees the moment it exits
        self._stat_fd = -1  # its /proc/PID/stat, opened at its first stop (`_state`)
        self.held = False  # stopped (SIGSTOP) by its worker: it runs only while the worker sleeps (hold/release)
        self.gated = False  # its worker's sending loop runs (`gate`): held except while the loop sleeps
        self.loose = True  # the sending loop sleeps (`release` … `hold`), or is not gated: the child may run
        self._sending = Semaphore()
        self.ready = False  # it has said READY: its parent-death signal is set, so it may be held
        self.lost: str | None = None  # how it ended when it ended with an error: chunks it had taken in may be lost
        try:
            self.process: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-m", "tailrace.harness.spool.chunk_writer_process", str(directory), repr(file_seconds)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as exc:
            print(f"{label}: chunk writer did not start ({exc}); writing in-process", flush=True)
            self.process = None
            return
        self.ack_fd = self.process.stdout.fileno()
        os.set_blocking(self.ack_fd, False)
        os.set_blocking(self.process.stdin.fileno(), False)  # written by _write_whole: waits cooperatively
        self._pidfd = _pidfd(self.process.pid)  # opened before the child can say READY: it names this child only
        try:  # a few chunks' room in the pipe: the child (lowest priority) may fall a little behind a busy worker
            fcntl.fcntl(self.process.stdin.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
        except OSError:
            pass

    def send(self, frame: bytes | tuple[bytes, memoryview]) -> bool:
        """Hand a frame (or its parts) over; False when the child is gone (the caller writes the chunk itself). One
        frame at a time: the request and clock shippers send from different greenlets, and a write that finds the
        pipe full waits cooperatively."""
        with self._sending:
            if self.process is None:
                return False
            if self.process.poll() is not None:
                print(f"{self.label}: chunk writer exited ({self.process.returncode}); writing in-process", flush=True)
                self._ended(self.process.returncode)
                self._gone()
                return False
            self._read_acks()
            self._go()  # a write that finds the pipe full waits for the child to read: it must be able to run
            self.outstanding += 1  # counted from its first byte: a child with part of a frame has work (hold)
            try:
                killed = self._write_whole((frame,) if isinstance(frame, bytes) else frame)
                if killed is not None:
                    raise killed
                return True
            except OSError as exc:
                print(f"{self.label}: chunk writer failed ({exc}); writing in-process", flush=True)
                self._gone()
                return False
            finally:  # sent while the sending loop runs: the child woken by the frame is stopped again at once
                if self.gated and not self.loose and self.process is not None:
                    self._stop()

    def _write_whole(self, parts) -> BaseException | None:
        """Write every byte of a frame, never part of one. A greenlet killed while it waits for room (the background
        loops' end) first finishes the frame, the worker blocked meanwhile — a torn frame would make the child read the
        next one's bytes as this one's; the kill is returned, for `send` to raise once the frame counts as sent."""
        fd, killed = self.process.stdin.fileno(), None
        for part in parts:
            view = memoryview(part).cast("B")
            while view:
                try:
                    view = view[os.write(fd, view):]
                except BlockingIOError:
                    if killed is not None:  # the whole worker waits here: the child must run (the loop may have
                        self._go()  # held it while this greenlet waited)
                        _select([], [fd], [])
                        continue
                    try:
                        wait_write(fd)
                    except BaseException as exc:  # noqa: BLE001 - raised by send once the frame is whole
                        killed = exc
        return killed

    @property
    def busy(self) -> bool:
        """The child has chunks to handle (it was sent frames it has not acknowledged: taken in, or written where one
        completed a file; never when it is gone). A held child writes no acknowledgement, so its pipe is read only when
        it may have run (and by `hold`): no read a turn of a spinning loop (9% of the inline loop's samples at 4,000/s
        when it read every turn)."""
        if self.outstanding and not self.held:
            self._read_acks()
        return self.outstanding > 0

    def _read_acks(self) -> None:
        if self.ack_fd < 0:
            return
        try:
            data = os.read(self.ack_fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.ready = self.ready or READY in data
            self.outstanding = max(0, self.outstanding - data.count(WRITTEN))
        else:  # the child is gone: nothing of it is pending any more (send() says so when it is next used)
            self.outstanding = 0
            self.ack_fd = -1

    def gate(self, on: bool) -> None:
        """From now on (`on`) the child is held except while its worker's sending loop sleeps (`release` … `hold`
        around each sleep); or (off) it runs whenever it has work."""
        self.gated = on
        if on:
            self.hold()
        else:
            self.release()

    def hold(self, due_ns: int | None = None) -> None:
        """The sending loop runs again: while gated, a child with chunks to write is stopped (SIGSTOP) until
        `release`, and — unless the loop's next send (`due_ns`) is within STOP_WAIT_SLACK_NS — this waits until it
        has stopped (~5-20 µs; `_stop`). An idle child, blocked on its pipe, takes no turn of the core and is left as
        it is. A worker that dies while holding it lets it go on (its parent-death signal is SIGCONT:
        chunk_writer_process.py)."""
        self.loose = False
        if not self.gated or self.process is None or self.held:
            return
        self._read_acks()  # what it wrote while it ran
        if self.outstanding:
            self._stop(due_ns)

    def release(self) -> None:
        """The sending loop sleeps (or is no longer gated): a held child may run again (SIGCONT)."""
        self.loose = True
        self._go()

    def _stop(self, due_ns: int | None = None) -> None:
        """SIGSTOP the child and, unless a send is due within STOP_WAIT_SLACK_NS of now, wait until it has stopped. A
        stop only takes effect when the stopped process next runs, and a child left runnable while its worker spins is
        owed a turn of the core that it takes after the worker wakes (EEVDF lag; docs/DECISIONS.md). Right before a
        send the wait would cost more than it saves. The wait is bounded (STOP_WAIT_MAX_NS): on a machine busy with
        other work the child (SCHED_IDLE) may not get the turn it needs to stop for many seconds, and a worker that
        waited for it unbounded stalled 40 s in CI, every send of the run late."""
        if not self.ready or self._pidfd < 0 or not self._signal(signal.SIGSTOP):
            return
        self.held = True
        if due_ns is not None and due_ns - time.perf_counter_ns() < STOP_WAIT_SLACK_NS:
            return  # (it stops when it next runs)
        if self._state() != b"R":  # asleep (its pipe, or the disk: it takes no turn then) or gone: nothing to wait for
            return
        deadline = time.perf_counter_ns() + STOP_WAIT_MAX_NS  # (stopped, exited or gone: no longer R)
        while self._state() == b"R" and time.perf_counter_ns() < deadline:
            _sleep(STOP_POLL_S)

    def _state(self) -> bytes:
        """The child's scheduler state, one letter (/proc/PID/stat: R running or runnable, S or D asleep, T stopped);
        b"" when it cannot be read."""
        if self._stat_fd < 0:
            try:
                self._stat_fd = os.open(f"/proc/{self.process.pid}/stat", os.O_RDONLY)
            except OSError:
                return b""
        try:
            stat = os.pread(self._stat_fd, 512, 0)
        except OSError:
            return b""
        end = stat.rfind(b")")  # after the command name, which may hold spaces and parentheses
        return stat[end + 2:end + 3] if end >= 0 else b""

    def _go(self) -> None:
        if self.held:
            self.held = False
            self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> bool:
        """Signal the child through its pidfd: once it has exited, the signal goes nowhere (ESRCH). By pid, a child
        that exited and was reaped (the gevent loop reaps every child at once) could be another process by now, one
        this worker would stop."""
        try:
            signal.pidfd_send_signal(self._pidfd, signum)
            return True
        except OSError:
            return False

    def catch_up(self, most: int, timeout_s: float = 5.0) -> bool:
        """Let the child run, the worker waiting, until at most `most` frames are unwritten (or `timeout_s`): a
        worker that never sleeps long enough for its writer waits for it here, which shows as send lag. False: it
        did not catch up in time."""
        self._go()
        deadline = time.monotonic() + timeout_s
        while self.busy and self.outstanding > most and time.monotonic() < deadline:
            _select([self.ack_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not self.loose:
            self.hold()
        return not self.busy or self.outstanding <= most

    def keep_up(self, behind: int, timeout_s: float, log=print) -> bool:
        """With `behind` or more chunks unwritten, wait for the child until fewer are (catch_up). False: it did not
        catch up within `timeout_s` (a disk that does not take its writes) and is let go — no longer held, and the
        caller no longer waits for it; said in `log`."""
        if self.outstanding < behind or self.catch_up(behind - 1, timeout_s):
            return True
        self.gate(False)
        log(f"chunk writer: {self.outstanding} chunks still unwritten after {timeout_s:g} s; it is no longer held nor "
            "waited for")
        return False

    def idle(self) -> bool:
        """Move the child to SCHED_IDLE: it then runs only while its worker sleeps, and a worker that wakes takes the
        core back at once (at nice 19 the child kept it until the scheduler's next tick, up to 4 ms). The worker must
        then sleep while `busy` (harness/worker/scenarios.py: IssueLoop._pump_until). False: not possible here."""
        if self.process is None or not hasattr(os, "SCHED_IDLE"):
            return False
        try:
            os.sched_setscheduler(self.process.pid, os.SCHED_IDLE, os.sched_param(0))
            return True
        except OSError:
            return False

    def close(self) -> None:
        """Wait until every frame sent is on disk (a frame being sent is finished first)."""
        with self._sending:
            if self.process is None:
                return
            self.gated = False
            self.release()
            try:
                self.process.stdin.close()
                self._ended(self.process.wait(timeout=30))
            except Exception as exc:  # noqa: BLE001
                print(f"{self.label}: chunk writer did not finish: {exc}", flush=True)
                self.lost = f"did not finish ({exc})"
            self._gone()

    def _ended(self, code: int) -> None:
        """Its exit code, once it has ended: anything but 0 (killed, or a file it could not write) may have cost the
        chunks it had taken in and not yet written (a few seconds' rows: it writes them together)."""
        if code != 0 and self.lost is None:
            self.lost = f"exited ({code})"

    def _gone(self) -> None:
        self.release()
        for fd in (self._pidfd, self._stat_fd):
            if fd >= 0:
                os.close(fd)
        self._pidfd = self._stat_fd = -1
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.ack_fd = -1
        self.outstanding = 0
        self.process = None


GIVE_WAY_S = 50e-6  # a background greenlet's pause, on a timer, while the sending loop waits (YieldEvery)


class SendLoopTurns:
    """How many turns the worker's sending loop has taken (harness/worker/scenarios.py IssueLoop counts them in the
    one instance the worker gives it and its background work): background work that finds no new turn after its pause
    knows the loop is waiting on its timer or its answers, not taking turns with it."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class YieldEvery:
    """A yield_fn for a worker's background work (a chunk's conversion, the live digest): it gives the event loop a
    turn only once `budget_ns` has passed since this greenlet last got one (a chunk's columns a few at a time: a
    busy sending loop leaves others few turns, and a chunk must ship faster than the next one fills).

    The pause is `sleep(0)` while the sending loop takes turns with it, and a timer while that loop waits on its
    own: gevent runs `sleep(0)` callbacks one after another until none is left before it looks at its timers and
    sockets, so a chain of such pieces would keep a waiting sending loop off the core for the whole chain; on a
    timer, each piece waits for the loop's next pass. A spinning loop lets gevent look at its timers only every few
    ms, so then the pause is a turn. (What was measured: docs/DECISIONS.md.)"""

    def __init__(self, budget_ns: int, loop_turns: SendLoopTurns) -> None:
        self.budget_ns, self.loop_turns = budget_ns, loop_turns
        self._resumed = 0
        self._loop_waits = False  # the sending loop took no turn during this greenlet's last pause

    def __call__(self) -> None:
        if time.perf_counter_ns() - self._resumed >= self.budget_ns:
            before = self.loop_turns.count
            gevent.sleep(GIVE_WAY_S if self._loop_waits else 0)
            self._loop_waits = self.loop_turns.count == before
            self._resumed = time.perf_counter_ns()


class ChunkShipper:
    """Ships the closed chunks of one ChunkWriter to a writer child (its own, or `child` when given)."""

    def __init__(self, writer: ChunkWriter, label: str, yield_fn=None, child: WriterChild | None = None,
                 file_seconds: float = FILE_SECONDS) -> None:
        self.writer, self.label, self.yield_fn = writer, label, yield_fn
        self.failures: list[str] = []  # chunks that could not be written (a full disk): their rows are lost
        # the first Arrow IPC encode initialises lazily (~15 ms): never in the middle of a run
        encode_frame(writer.to_table([]), writer.prefix, 0)
        self.child = child if child is not None else WriterChild(writer.directory, label, file_seconds)
        # the reused encoding buffer: a request chunk of 5,000 one-shot rows is ~1.3 MB; a larger one is encoded the
        # plain way (FrameEncoder)
        self.frames = FrameEncoder(8 << 20 if writer.prefix == REQUESTS else 1 << 20)

    def ship(self, rows: list[dict]) -> None:
        """Close a chunk of `rows` (no-op when empty)."""
        if not rows:
            return
        table = self.writer.to_table(rows, between_columns=self.yield_fn)
        index = self.writer.reserve()
        frame = self.frames.encode(table, self.writer.prefix, index)
        if self.yield_fn is not None:
            self.yield_fn()
        try:
            sent = self.child.send(frame)
        except BaseException:  # killed once its frame was whole (WriterChild._write_whole): the chunk is the child's
            self._count(table)
            raise
        if sent:
            self._count(table)
            self._let_go(rows)
            return
        try:
            self.writer.write_table(table, index)
        except OSError as exc:
            if not self.failures:
                print(f"{self.label}: {exc.strerror}", flush=True)
            self.failures.append(f"{exc.strerror} ({table.num_rows} rows lost)")

    def _count(self, table) -> None:
        self.writer.rows_written += table.num_rows
        self.writer.chunks_written += 1

    def _let_go(self, rows: list) -> None:
        """Empty `rows` a slice at a time, yielding between slices: a chunk's rows freed at once (~45,000 objects at
        1,300 rows, when the live digest has already let go of them) held the sending loop 1-1.5 ms."""
        while rows:
            del rows[-RELEASE_ROWS:]
            if rows and self.yield_fn is not None:
                self.yield_fn()

    def ship_open_chunk(self) -> None:
        self.ship(self.writer.take())

    def close(self) -> None:
        """Wait until every shipped chunk is on disk (the child's, shared or not: after this, nothing more is sent to
        it)."""
        self.child.close()
