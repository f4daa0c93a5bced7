"""Starting and stopping a real Triton Inference Server (PyTriton, in its own virtualenv) on loopback.

`deploy/triton/serve_pytriton.py` runs under `.venv-triton/bin/python` (nvidia-pytriton pins numpy<2);
it spawns `tritonserver` and Python-backend stub processes. Stopping is by PID: SIGTERM to the program we
started, then SIGKILL to whatever is left of its process group (only our own children: it was started in
a new session), then its shared-memory segments in /dev/shm are removed.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from tailrace.harness.services.processes import ManagedProcess, free_port, start_process, wait_http_ok

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVE_SCRIPT = REPO_ROOT / "deploy" / "triton" / "serve_pytriton.py"
DEFAULT_VENV = REPO_ROOT / ".venv-triton"
SHM_DIR = Path("/dev/shm")


class TritonUnavailable(RuntimeError):
    """PyTriton's virtualenv is missing or Triton did not become ready."""


def triton_python(configured: str | None = None) -> Path:
    """The interpreter of the PyTriton virtualenv: `configured`, $TAILRACE_TRITON_PYTHON, or .venv-triton."""
    path = Path(configured or os.environ.get("TAILRACE_TRITON_PYTHON") or DEFAULT_VENV / "bin" / "python")
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.exists():
        raise TritonUnavailable(f"no PyTriton interpreter at {path}: run `make triton` (creates .venv-triton with "
                                "nvidia-pytriton) or set TAILRACE_TRITON_PYTHON")
    return path


def triton_env(python: Path) -> dict[str, str]:
    """Environment for tritonserver: LD_LIBRARY_PATH gets the base interpreter's lib/ (libpython for the
    Python backend stub; without it model loading fails with an RLock `_recursion_count` error)."""
    cfg = python.parent.parent / "pyvenv.cfg"
    prefix = None
    if cfg.exists():
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                prefix = Path(value.strip()).parent
    libdirs = [str(prefix / "lib")] if prefix and (prefix / "lib").is_dir() else []
    existing = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": ":".join(libdirs + ([existing] if existing else []))} if libdirs else {}


@dataclass
class TritonOptions:
    max_batch: int = 16
    queue_delay_us: int = 0
    dynamic_batching: bool = True
    instances: int = 1
    models: tuple[str, ...] = ()


@dataclass
class TritonServer:
    """A running PyTriton program and its ports."""

    process: ManagedProcess
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    trace_log: Path

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"grpc://{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def server_pids(self) -> list[int]:
        """PIDs of the tritonserver processes our program spawned."""
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [c.pid for c in children if _name(c) == "tritonserver"]

    def trace_ids(self) -> set[str]:
        """Trace IDs of the requests Triton forwarded `traceparent` for (flushed about once a second)."""
        if not self.trace_log.exists():
            return set()
        return {line.strip() for line in self.trace_log.read_text().splitlines() if line.strip()}

    def stop(self, timeout: float = 20.0) -> None:
        stop_triton(self, timeout)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return ""


# Starts that fail for a reason of the moment, not of the models, are started again (up to START_ATTEMPTS in all):
# - PyTriton's second and later model instances fetch their config from a Unix socket the first instance serves; they
#   connect as soon as the socket file exists, which is before the first one listens on it. On a busy host the load
#   fails with ConnectionRefusedError in get_config_from_handshake_server and the program exits;
# - Triton's server going away while PyTriton loads a model into it: the load's HTTP connection closed, the Python
#   backend's stubs reporting a non-graceful termination (once in CI, on a loaded machine).
# A fresh start works. What marks each in the program's last lines:
TRANSIENT_STARTS = {
    "a model instance connected to PyTriton's handshake socket before it listened": ("get_config_from_handshake_server",),
    "Triton's server closed the connection while PyTriton loaded a model": ("in load_model", "HTTPConnectionClosed"),
}
START_ATTEMPTS = 3


class TritonTransientStart(TritonUnavailable):
    """A start that failed for a reason of the moment (`why`, one of TRANSIENT_STARTS): starting again should work."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


def transient_start(tail: str) -> str | None:
    """Why a failed start's last lines say it failed for a reason of the moment, or None."""
    return next((why for why, marks in TRANSIENT_STARTS.items() if all(mark in tail for mark in marks)), None)


def start_triton(models_dir: Path, log_dir: Path, host: str = "127.0.0.1", options: TritonOptions | None = None,
                 python: str | None = None, ports: tuple[int, int, int] | None = None,
                 timeout: float = 180.0, log: Callable[[str], None] | None = None) -> TritonServer:
    """Start Triton on `host` serving `models_dir`; returns once every model is ready. A start that failed for a
    reason of the moment (TRANSIENT_STARTS) is started again, up to START_ATTEMPTS in all, each said to `log`."""
    interpreter, attempt = triton_python(python), 1
    while True:
        try:
            return _start_once(models_dir, log_dir, host, options or TritonOptions(), interpreter, ports, timeout)
        except TritonTransientStart as exc:
            if attempt == START_ATTEMPTS:
                raise TritonUnavailable(f"Triton's start failed {START_ATTEMPTS} times ({exc.why}):\n{exc}") from None
            attempt += 1
            if log is not None:
                log(f"Triton: {exc.why}; starting again (attempt {attempt} of {START_ATTEMPTS})")


def _start_once(models_dir: Path, log_dir: Path, host: str, options: TritonOptions, interpreter: Path,
                ports: tuple[int, int, int] | None, timeout: float) -> TritonServer:
    http_port, grpc_port, metrics_port = ports or (free_port(host), free_port(host), free_port(host))
    log_dir.mkdir(parents=True, exist_ok=True)
    ready_file = log_dir / f"triton-{http_port}.ready.json"
    ready_file.unlink(missing_ok=True)
    trace_log = log_dir / f"triton-{http_port}.trace-ids.txt"
    argv = [str(interpreter), str(SERVE_SCRIPT), "--models", str(Path(models_dir).resolve()), "--host", host,
            "--http-port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port),
            "--max-batch", str(options.max_batch), "--queue-delay-us", str(options.queue_delay_us),
            "--instances", str(options.instances), "--ready-file", str(ready_file), "--trace-log", str(trace_log)]
    if not options.dynamic_batching:
        argv.append("--no-dynamic-batching")
    for model in options.models:
        argv += ["--model", model]
    proc = start_process(f"triton {host}:{http_port}", argv, log_dir / f"triton-{http_port}.log",
                         env=triton_env(interpreter))
    server = TritonServer(proc, host, http_port, grpc_port, metrics_port, trace_log)
    deadline = time.monotonic() + timeout
    try:
        while not ready_file.exists():
            if not proc.alive():
                tail = proc.log_tail(40)
                message, why = f"Triton exited with {proc.popen.returncode}:\n{tail}", transient_start(tail)
                raise TritonTransientStart(message, why) if why else TritonUnavailable(message)
            if time.monotonic() > deadline:
                raise TritonUnavailable(f"Triton not ready after {timeout:.0f} s:\n{proc.log_tail(40)}")
            time.sleep(0.2)
        wait_http_ok(f"{server.http_url}/v2/health/ready", proc, max(5.0, deadline - time.monotonic()))
    except BaseException:
        stop_triton(server)
        raise
    return server


def stop_triton(server: TritonServer, timeout: float = 20.0) -> None:
    """Stop our PyTriton program, then any of its children still alive, then remove its /dev/shm segments."""
    pid = server.process.pid
    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    server.process.stop(timeout)
    leftovers = [p for p in family if p.pid != pid and _running(p)]
    for p in leftovers:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(leftovers, timeout=10)
    remove_shm_segments(pid)


def remove_shm_segments(pid: int) -> list[Path]:
    """Remove the Python-backend shared-memory regions PyTriton names after the program's PID."""
    removed = []
    if SHM_DIR.is_dir():
        for seg in SHM_DIR.glob(f"pytrtion{pid}-*"):
            try:
                seg.unlink()
                removed.append(seg)
            except OSError:
                pass
    return removed
