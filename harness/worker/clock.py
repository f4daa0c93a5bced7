"""Worker clocks: an emulated (skewed) wall clock derived from one monotonic clock, and NTP sampling.

offset = reference − worker clock. A worker told to run `skew_ms` fast reads time.time() + skew; its
measured offset is then ≈ −skew, which the analysis uses to map its timestamps to reference time.

`ClockSampler`: the current offset estimate against the references, and the clock log.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import ntplib

from tailrace.contract.records import ClockRow

START_UNCERTAINTY_NS = 100_000  # a start-up offset known less well than this (half its round trip) is measured
# again before the start instant is placed on the worker's clock (sample_again_if_unsure); loopback's is ~20 µs


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


class ClockSampler:
    """Samples every reference; the first reference that answers sets the offset the worker uses."""

    def __init__(self, clock: WorkerClock, servers: list[str], packets: int, worker: str, region: str,
                 record: Callable[[ClockRow], None], log: Callable[[str], None]) -> None:
        self.clock, self.servers, self.packets = clock, servers, packets
        self.worker, self.region = worker, region
        self.record, self.log = record, log
        self.offset: ClockSample | None = None
        self.failed_at: list[float] = []  # epoch s of each sample no reference answered (its last offset kept)

    @property
    def offset_ns(self) -> int:
        return self.offset.offset_ns if self.offset else 0

    @property
    def uncertainty_ns(self) -> int:
        """Half the kept packet's round trip; -1 before the first sample."""
        return self.offset.delay_ns // 2 if self.offset else -1

    def sample(self, stage: str, packets: int | None = None, keep_better: bool = False) -> None:
        """One sample per reference ("before" | "during" | "after"), recorded; failures are logged.

        `packets` overrides the configured count: a reference that is down costs one timeout per packet.
        `keep_better`: the new sample replaces the offset in use only if its round trip is shorter (the same
        reference's: a second look at a start-up offset, measured while the machine was busy)."""
        answered = False
        for server in self.servers:
            try:
                s = measure_offset(server, self.clock, packets or self.packets)
            except OSError as exc:
                self.log(f"clock sample failed: {exc}")
                continue
            answered = True
            if self._takes(server, s, keep_better):
                self.offset = s
            self.record(ClockRow(worker=self.worker, region=self.region, server=s.server, local_ns=s.local_ns,
                                 offset_ns=s.offset_ns, delay_ns=s.delay_ns, packets=s.packets, stage=stage))
        if not answered and self.servers:
            self.failed_at.append(time.time())

    def _takes(self, server: str, s: ClockSample, keep_better: bool) -> bool:
        """Does sample `s` (from `server`) become the offset in use? The first one does, and then the first
        reference's — unless `keep_better` and the one in use, the same reference's, had the shorter round trip."""
        if self.offset is None:
            return True
        if server != self.servers[0]:
            return False
        return not (keep_better and self.offset.server == server and self.offset.delay_ns <= s.delay_ns)

    def sample_again_if_unsure(self, log: Callable[[str], None], limit_ns: int = START_UNCERTAINTY_NS) -> bool:
        """A start-up offset known to worse than `limit_ns` (a long round trip: the machine busy starting its
        processes) is measured again, and the shorter round trip's kept: the worker places the start instant on
        its clock with it, so its error shifts every send against the other workers' (CI saw 1.7 ms, from a 3.6 ms
        round trip, turn a constant process from two regions into one with gap cv 0.18). True: sampled again."""
        first = self.uncertainty_ns
        if first <= limit_ns:
            return False
        failures = len(self.failed_at)
        self.sample("before", keep_better=True)
        again = "no answer, the first kept" if len(self.failed_at) > failures else f"±{self.uncertainty_ns / 1e6:.3f} ms"
        log(f"clock: the start-up offset was known to ±{first / 1e6:.3f} ms; measured again: {again}")
        return True

    def gap_warning(self, start_s: float) -> str | None:
        """What the worker did without its clock reference (seconds from the start instant), or None."""
        if not self.failed_at:
            return None
        first, last = self.failed_at[0] - start_s, self.failed_at[-1] - start_s
        return (f"{self.worker}: {len(self.failed_at)} clock sample(s) got no answer from the reference between "
                f"{first:.1f} and {last:.1f} s; the last offset was kept meanwhile, and the analysis fits the "
                "samples on either side")
