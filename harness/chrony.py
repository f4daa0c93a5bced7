"""Start chronyd as a loopback NTP server — always with -x, so it never touches the system clock."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from harness.clock import WorkerClock, measure_offset
from harness.processes import ManagedProcess, start_process


def chronyd_path() -> str | None:
    return shutil.which("chronyd") or (str(Path("/usr/sbin/chronyd")) if Path("/usr/sbin/chronyd").exists() else None)


def start_chronyd(port: int, workdir: Path, timeout: float = 20.0) -> ManagedProcess:
    """chronyd -x -d serving the local clock (stratum 10) on 127.0.0.1:port; waits until it answers."""
    binary = chronyd_path()
    if binary is None:
        raise FileNotFoundError("chronyd is not installed (Debian: apt-get install chrony)")
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "chrony.conf"
    conf.write_text("\n".join([
        f"port {port}", "bindaddress 127.0.0.1", "allow 127.0.0.1", "local stratum 10", "cmdport 0",
        f"pidfile {workdir / 'chronyd.pid'}", f"driftfile {workdir / 'chrony.drift'}", "user root", ""]))
    proc = start_process("chronyd", [binary, "-x", "-d", "-f", str(conf)], workdir / "chronyd.log")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"chronyd exited with {proc.popen.returncode}:\n{proc.log_tail()}")
        try:
            measure_offset(f"127.0.0.1:{port}", WorkerClock(0), packets=1, timeout=0.5)
            return proc
        except OSError:
            time.sleep(0.2)
    proc.stop()
    raise RuntimeError(f"chronyd did not answer on 127.0.0.1:{port} within {timeout} s:\n{proc.log_tail()}")
