"""A worker's clock samples against its NTP references: the current offset estimate, and the clock log."""
from __future__ import annotations

import time
from collections.abc import Callable

from tailrace.contract.records import ClockRow
from tailrace.harness.worker.clock import ClockSample, WorkerClock, measure_offset


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

    def sample(self, stage: str, packets: int | None = None) -> None:
        """One sample per reference ("before" | "during" | "after"), recorded; failures are logged.

        `packets` overrides the configured count: a reference that is down costs one timeout per packet."""
        answered = False
        for server in self.servers:
            try:
                s = measure_offset(server, self.clock, packets or self.packets)
            except OSError as exc:
                self.log(f"clock sample failed: {exc}")
                continue
            answered = True
            if self.offset is None or server == self.servers[0]:
                self.offset = s
            self.record(ClockRow(worker=self.worker, region=self.region, server=s.server, local_ns=s.local_ns,
                                 offset_ns=s.offset_ns, delay_ns=s.delay_ns, packets=s.packets, stage=stage))
        if not answered and self.servers:
            self.failed_at.append(time.time())

    def gap_warning(self, start_s: float) -> str | None:
        """What the worker did without its clock reference (seconds from the start instant), or None."""
        if not self.failed_at:
            return None
        first, last = self.failed_at[0] - start_s, self.failed_at[-1] - start_s
        return (f"{self.worker}: {len(self.failed_at)} clock sample(s) got no answer from the reference between "
                f"{first:.1f} and {last:.1f} s; the last offset was kept meanwhile, and the analysis fits the "
                "samples on either side")
