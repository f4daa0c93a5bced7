"""A worker's periodic work beside its schedule, each a greenlet: closing request chunks as they fill or age,
sampling the clock, closing send-lag windows on the run's grid, the live page's digest once a second, and (a worker
on its own host) sending closed files to the master."""
from __future__ import annotations

import time
from collections.abc import Callable

import gevent
from gevent.event import Event

from tailrace.contract.profile import Profile
from tailrace.harness.spool.chunk_shipping import ChunkShipper
from tailrace.harness.spool.recorder import ChunkWriter
from tailrace.harness.spool.uplink import ChunkUplink
from tailrace.harness.worker.saturation import SaturationMonitor


class BackgroundWork:
    """Started at the start instant, stopped when the worker finishes (the chunk flusher last, never mid-write)."""

    def __init__(self, profile: Profile, requests: ChunkWriter, request_chunks: ChunkShipper,
                 sample_clock: Callable[[str], None], saturation: SaturationMonitor,
                 uplink: ChunkUplink | None) -> None:
        self.profile, self.requests, self.request_chunks = profile, requests, request_chunks
        self.sample_clock, self.saturation, self.uplink = sample_clock, saturation, uplink
        self.stopping = False
        self._flusher: gevent.Greenlet | None = None
        self._half_full = Event()  # the open request chunk is half full (ChunkWriter.wake): ship it now
        requests.wake = self._half_full.set
        self._others: list[gevent.Greenlet] = []

    def start(self, start_mono: int, live: Callable[[float], None] | None = None) -> None:
        """`live(t_s)`: called each whole second of the run (seconds since the start instant)."""
        self._flusher = gevent.spawn(self._flush_loop)
        self._others = [gevent.spawn(self._clock_loop), gevent.spawn(self._saturation_loop, start_mono)]
        if live is not None:
            self._others.append(gevent.spawn(self._live_loop, start_mono, live))
        if self.uplink is not None:
            self._others.append(gevent.spawn(self._uplink_loop))

    def stop(self) -> None:
        """Stop every loop; the flusher finishes a chunk it is writing (at most 5 s)."""
        self.stopping = True
        for g in self._others:
            g.kill(block=False)
        if self._flusher is not None:
            self._flusher.join(timeout=5)

    def _flush_loop(self) -> None:
        gen = self.profile.generator
        while not self.stopping:
            self._half_full.wait(min(0.25, gen.chunk_seconds))
            self._half_full.clear()
            if self.requests.due() or len(self.requests.rows) >= gen.chunk_rows // 2:
                self.request_chunks.ship_open_chunk()

    def _clock_loop(self) -> None:
        while not self.stopping:
            gevent.sleep(self.profile.clock.interval_s)
            if not self.stopping:
                self.sample_clock("during")

    def _uplink_loop(self) -> None:
        while not self.stopping:
            gevent.sleep(0.5)
            if not self.stopping:
                self.uplink.poll()

    def _live_loop(self, start_mono: int, live: Callable[[float], None]) -> None:
        k = 0
        while not self.stopping:
            k += 1
            gevent.sleep(max(0.0, (start_mono + k * 1_000_000_000 - time.perf_counter_ns()) / 1e9))
            if not self.stopping:
                try:
                    live(float(k))
                except Exception as exc:  # noqa: BLE001 - the live page is a view: it never stops the run
                    print(f"tailrace worker: live report failed: {exc}", flush=True)

    def _saturation_loop(self, start_mono: int) -> None:
        window, k = self.profile.generator.window_s, 0
        while not self.stopping:
            k += 1
            gevent.sleep(max(0.0, (start_mono + int(k * window * 1e9) - time.perf_counter_ns()) / 1e9))
            self.saturation.close_window()
