"""A worker's clock samples against its NTP references: the current offset estimate, and the clock log."""
from __future__ import annotations

from collections.abc import Callable

from contract.records import ClockRow
from harness.worker.clock import ClockSample, WorkerClock, measure_offset


class ClockSampler:
    """Samples every reference; the first reference that answers sets the offset the worker uses."""

    def __init__(self, clock: WorkerClock, servers: list[str], packets: int, worker: str, region: str,
                 record: Callable[[ClockRow], None], log: Callable[[str], None]) -> None:
        self.clock, self.servers, self.packets = clock, servers, packets
        self.worker, self.region = worker, region
        self.record, self.log = record, log
        self.offset: ClockSample | None = None

    @property
    def offset_ns(self) -> int:
        return self.offset.offset_ns if self.offset else 0

    @property
    def uncertainty_ns(self) -> int:
        """Half the kept packet's round trip; -1 before the first sample."""
        return self.offset.delay_ns // 2 if self.offset else -1

    def sample(self, stage: str, packets: int | None = None) -> None:
        """One sample per reference ("before" | "during" | "after"), recorded; failures are logged.

        `packets` overrides the configured count: a reference that is down costs one timeout per packet."""
        for server in self.servers:
            try:
                s = measure_offset(server, self.clock, packets or self.packets)
            except OSError as exc:
                self.log(f"clock sample failed: {exc}")
                continue
            if self.offset is None or server == self.servers[0]:
                self.offset = s
            self.record(ClockRow(worker=self.worker, region=self.region, server=s.server, local_ns=s.local_ns,
                                 offset_ns=s.offset_ns, delay_ns=s.delay_ns, packets=s.packets, stage=stage))
