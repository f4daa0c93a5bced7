"""Worker clocks: an emulated (skewed) wall clock derived from one monotonic clock, and NTP sampling.

offset = reference − worker clock. A worker told to run `skew_ms` fast reads time.time() + skew; its
measured offset is then ≈ −skew, which the analysis uses to map its timestamps to reference time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import ntplib


class WorkerClock:
    """Epoch ns on this worker's (possibly skewed) clock, derived from time.perf_counter_ns()."""

    def __init__(self, skew_ms: float = 0.0) -> None:
        self.skew_ns = int(skew_ms * 1e6)
        self._mono0 = time.perf_counter_ns()
        self._wall0 = time.time_ns() + self.skew_ns

    def now_ns(self) -> int:
        return self._wall0 + (time.perf_counter_ns() - self._mono0)

    def from_mono(self, mono_ns: int) -> int:
        """Worker epoch ns for a perf_counter_ns() reading."""
        return self._wall0 + (mono_ns - self._mono0)

    def to_mono(self, epoch_ns: int) -> int:
        """perf_counter_ns() value at which this clock will read `epoch_ns`."""
        return self._mono0 + (epoch_ns - self._wall0)


@dataclass(frozen=True)
class ClockSample:
    server: str
    local_ns: int  # worker clock at the sample's midpoint
    offset_ns: int
    delay_ns: int
    packets: int


def split_server(server: str, default_port: int = 123) -> tuple[str, int]:
    """'host:port' → (host, port)."""
    host, sep, port = server.rpartition(":")
    if not sep:
        return server, default_port
    return host, int(port)


def measure_offset(server: str, clock: WorkerClock, packets: int = 4, timeout: float = 1.0) -> ClockSample:
    """Query `server` `packets` times and keep the minimum-delay answer (least queueing, tightest bound).

    ntplib stamps with time.time(); the worker's clock differs from it by exactly its skew, so the
    offset to the worker clock is ntplib's offset minus the skew. Raises OSError if no packet returns.
    """
    host, port = split_server(server)
    client = ntplib.NTPClient()
    best = None
    errors = []
    for _ in range(packets):
        try:
            r = client.request(host, port=port, version=4, timeout=timeout)
        except (ntplib.NTPException, OSError) as exc:
            errors.append(str(exc))
            continue
        if best is None or r.delay < best.delay:
            best = r
    if best is None:
        raise OSError(f"NTP server {server} did not answer ({'; '.join(errors[:2])})")
    # ntplib's orig/dest timestamps are NTP-epoch (1900) seconds on this machine's time.time() clock
    midpoint_local = ntplib.ntp_to_system_time((best.orig_timestamp + best.dest_timestamp) / 2)
    offset_ns = int(round(best.offset * 1e9)) - clock.skew_ns
    local_ns = int(midpoint_local * 1e9) + clock.skew_ns
    return ClockSample(server, local_ns, offset_ns, int(round(best.delay * 1e9)), packets)
