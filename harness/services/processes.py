"""Starting and stopping the processes tailrace runs (by PID, bounded in time), and free loopback ports."""
from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import httpx

from tailrace.contract.internal_processes import EMBEDDED_SERVER, EmbeddedServerLaunch, internal_argv
from tailrace.harness.client.tls import default_verify_context

KILLED_WAIT_S = 30.0  # how long a SIGKILLed process is waited for before a stop gives up on it


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost': what counts as this machine when a command binds a port."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


CHOSEN_PORTS_FROM = 10_000  # free_port's ports: from here to the start of the kernel's ephemeral range


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's ephemeral range (net.ipv4.ip_local_port_range): where it picks the port of a connect() or a
    bind(0). Linux's default when it cannot be read."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now, for a process started next to bind. Chosen at random below the
    kernel's ephemeral range: between this choice and that bind (a second or two of imports) the kernel never hands
    it to another process's connect() or bind(0) — a port it had picked itself could be, and the process could not
    start (a run's worker did, in CI, beside vLLM and a browser). Where that range leaves no room below it: the
    kernel's pick."""
    low = min(ephemeral_ports()[0], 65536)
    if low - CHOSEN_PORTS_FROM >= 1024:
        for _ in range(64):
            port = CHOSEN_PORTS_FROM + secrets.randbelow(low - CHOSEN_PORTS_FROM)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def stop_each(stops: Iterable[Callable[[], object]]) -> None:
    """Call every stop in turn, whatever one of them raises (one that fails leaves none of the others running);
    then raise the first failure."""
    failed: list[Exception] = []
    for stop in stops:
        try:
            stop()
        except Exception as exc:  # noqa: BLE001 — raised once every stop has been called
            failed.append(exc)
    if failed:
        raise failed[0]


@dataclass
class ManagedProcess:
    """A child process we started; stopped by its PID only."""

    name: str
    popen: subprocess.Popen
    log_path: Path | None = None
    _log_handle: object = field(default=None, repr=False)
    log_start: int = 0  # where this process's output begins in its log (an earlier process's may precede it)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` s; returns the exit code (None: not gone KILLED_WAIT_S after
        SIGKILL, said in one line on stderr — a stop never raises: what the run measured is kept)."""
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill_and_wait()
            except ProcessLookupError:
                pass
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        return self.popen.returncode

    def kill(self) -> None:
        """SIGKILL at once (used to test crash safety)."""
        if self.popen.poll() is None:
            self._kill_and_wait()

    def _kill_and_wait(self) -> None:
        """SIGKILL, then wait for the exit: on a machine busy starting other servers a killed process has taken
        over 5 s to be gone (CI: PyTriton's launcher, stuck in its own teardown, beside a vLLM start)."""
        try:
            self.popen.kill()
            self.popen.wait(KILLED_WAIT_S)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            print(f"tailrace: {self.name} (PID {self.pid}) still not gone {KILLED_WAIT_S:g} s after SIGKILL",
                  file=sys.stderr)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines this process wrote (for error messages): never an earlier process's, appended to the same
        log (a restart on the same port)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as fh:
            fh.seek(self.log_start)
            text = fh.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def launcher(cpus: list[int] | None, with_parent: bool) -> list[str]:
    """What runs before a command so that it starts as asked, with no Python code between fork and exec (a
    `preexec_fn` makes CPython fork the whole process, and a fork waits for every lock of every thread — a pyarrow
    allocator's, gRPC's — to be free: a test worker's start of a proxy once hung there for good). util-linux's
    `setpriv --pdeathsig KILL`: the command is killed when this process dies, even by SIGKILL, so a killed
    orchestrator leaves no helper behind (a Locust master its workers would keep sending to, an SNTP server);
    `taskset -c`: it (and every thread and child it starts) runs on those CPUs."""
    prefix: list[str] = []
    if with_parent and shutil.which("setpriv"):
        prefix += ["setpriv", "--pdeathsig", "KILL", "--"]
    if cpus:
        prefix += ["taskset", "-c", ",".join(map(str, cpus))]
    return prefix


class _StoppedIfCutShort(subprocess.Popen):
    """A Popen whose start, cut short once the child exists (a Ctrl-C or SIGTERM landing while Popen waits to hear
    that the exec succeeded), kills that child: the Popen is never returned, so nothing else could stop it, and a
    child in its own session is not reached by the terminal's Ctrl-C either (seen: an embedded server left running
    after `tailrace run` ended on the Ctrl-C)."""

    def _execute_child(self, *args, **kwargs) -> None:
        try:
            super()._execute_child(*args, **kwargs)
        except BaseException:
            if self.pid is not None and self.returncode is None:  # forked, and not reaped by a failed exec
                _kill_started(self.pid)
            raise


def _kill_started(pid: int) -> None:
    """SIGKILL a child whose start was cut short, and reap it."""
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def start_process(name: str, argv: list[str], log_path: Path | None = None, env: dict[str, str] | None = None,
                  cwd: Path | None = None, cpus: list[int] | None = None, with_parent: bool = False) -> ManagedProcess:
    """Start `argv` with stdout+stderr to `log_path` (or inherited); `cpus` pins it (and every thread and child
    it starts) to those CPUs; `with_parent`: it dies when this process dies, even by SIGKILL. A start cut short by a
    Ctrl-C or SIGTERM (KeyboardInterrupt) leaves no child running."""
    handle, log_start = None, 0
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(log_path, "ab")
        # where its output will begin, read before it exists: the child shares this file's offset, and one that writes
        # at once (a start that fails in its first milliseconds) had moved it before a tell() after the start
        log_start = handle.tell()
    full_env = {**os.environ, **(env or {})}
    # a shell's background job (`tailrace run … &`) starts with SIGINT ignored, which every child would inherit: a
    # Locust master then ignored the stop it was sent, and the run went on 30 s after it — its default restored for
    # the start (a Python handler is the default after exec anyway)
    restore = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if restore:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    popen: subprocess.Popen | None = None
    try:
        popen = _StoppedIfCutShort([*launcher(cpus, with_parent), *argv], stdout=handle,
                                   stderr=subprocess.STDOUT if handle else None, env=full_env, cwd=cwd,
                                   start_new_session=True)
        if cpus:  # pinned from here on, not from when taskset gets to it (what the caller reads next is pinned)
            try:
                os.sched_setaffinity(popen.pid, cpus)
            except OSError:
                pass  # (it has exited already: nothing to pin)
        return ManagedProcess(name, popen, log_path, handle, log_start)
    except BaseException:
        if popen is not None:  # started, but cut short before its caller had it
            popen.kill()
            popen.wait()
        if handle is not None:
            handle.close()
        raise
    finally:
        if restore:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def wait_http_ok(url: str, process: ManagedProcess | None = None, timeout: float = 30.0, verify=True) -> None:
    """Poll `url` until it answers 200 (`verify`: httpx's, e.g. an ssl context for https); raise RuntimeError with
    the process log if it dies or times out."""
    deadline = time.monotonic() + timeout
    last = ""
    verify = default_verify_context() if verify is True else verify
    with httpx.Client(timeout=1.0, verify=verify) as client:
        while time.monotonic() < deadline:
            if process is not None and not process.alive():
                raise RuntimeError(f"{process.name} exited with {process.popen.returncode}:\n{process.log_tail()}")
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout} s ({last})"
                       + (f"\n{process.log_tail()}" if process else ""))


def start_embedded_endpoint(launch: EmbeddedServerLaunch, log_path: Path | None = None, timeout: float = 60.0,
                            cpus: list[int] | None = None) -> ManagedProcess:
    """Start an embedded server (pinned to `cpus` if given) and wait until it is ready."""
    # with_parent: a Ctrl-C landing after it is ready and before its starter holds it (a window no try closes)
    # still leaves no server behind once the command exits
    proc = start_process(f"endpoint {launch.host}:{launch.http_port}", internal_argv(EMBEDDED_SERVER, launch),
                         log_path, cpus=cpus, with_parent=True)
    try:
        wait_http_ok(f"http://{launch.host}:{launch.http_port}/v2/health/ready", proc, timeout)
    except BaseException:  # not ready, or Ctrl-C / SIGTERM while it started: stopped, not left running
        proc.stop()
        raise
    return proc


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within it, SIGTERM raises KeyboardInterrupt on the main thread, as Ctrl-C does: a `kill PID` (a CI job's
    timeout, a scheduler) stops a run, sweep or capacity search the same way — every process it started stopped by
    its PID, what was measured kept. Elsewhere than the main thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
