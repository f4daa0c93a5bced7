"""One generator worker's run, inside a Locust worker (gevent): set up from the run plan, wait for the common
start instant, run the scenario through the request path, close the logs, write worker.json.

The parts: harness/worker/scenarios.py (schedules and the issue loop), requester.py (the request path),
senders.py (protocols), recorder.py + chunk_shipping.py (the log), clock_sampler.py, saturation.py, metrics.py.
"""
from __future__ import annotations

import dataclasses
import gc
import json
import time
from collections.abc import Callable
from pathlib import Path

import gevent

from tailrace.contract.layout import RunLayout, write_atomic
from tailrace.contract.plan import RunPlan
from tailrace.contract.profile import MASTER_CLOCK
from tailrace.harness.client.payloads import AnswerCheck
from tailrace.harness.client.senders import Sender
from tailrace.harness.spool.chunk_shipping import SHIP_SLICE_NS, ChunkShipper, SendLoopTurns, YieldEvery
from tailrace.harness.spool.recorder import clock_writer, request_writer
from tailrace.harness.spool.uplink import ChunkUplink
from tailrace.harness.worker.arrivals import PhaseClock, Schedule, ScheduledArrivals, Split, WorkerSlot, worker_schedule
from tailrace.harness.worker.background import BackgroundWork
from tailrace.harness.worker.chains.pipelines import PipelineRunner, PreparedPipeline
from tailrace.harness.worker.chains.sessions import PreparedSession, SessionRunner
from tailrace.harness.worker.clock import ClockSampler, WorkerClock
from tailrace.harness.worker.descriptors import reserve_for_pools
from tailrace.harness.worker.endpoint_senders import EndpointSenders, RequestBuilds
from tailrace.harness.worker.identity import WorkerIdentity
from tailrace.harness.worker.inline_sends import choose_send_path
from tailrace.harness.worker.live_report import LiveReporter
from tailrace.harness.worker.metrics import WorkerMetrics
from tailrace.harness.worker.requester import RequestPath
from tailrace.harness.worker.saturation import SaturationMonitor
from tailrace.harness.worker.scenarios import IssueLoop, Window, draws, run_scenario
from tailrace.harness.workload.traces import load_trace
from tailrace.harness.workload.turns import PreparedRequest

UPLINK_DRAIN_S = 30.0  # at the end, how long a remote worker waits for the master to acknowledge its files


def _read_off_loop(path: Path) -> bytes:
    """A file's bytes, read on gevent's thread pool (never on the sending loop)."""
    return gevent.get_hub().threadpool.apply(Path.read_bytes, (path,))


class WorkerRun:
    """Everything one worker does for one run."""

    def __init__(self, identity: WorkerIdentity, plan: RunPlan, start_ref_ns: int, client_id: str = "",
                 senders: list[Sender] | None = None, ship=None,
                 ready: Callable[[float], int | None] | None = None,
                 live: Callable[[dict], None] | None = None) -> None:
        """`start_ref_ns`: the plan's start instant (reference clock). `ready(timeout_s)`: tell the master this worker
        is ready and wait up to `timeout_s` for an earlier start instant (None: none came). `live(digest)`: send the
        live page's digest to the master, once a second (harness/worker/live_report.py)."""
        p = self.profile = plan.profile
        self.identity, self.plan, self.start_ref_ns, self.client_id = identity, plan, start_ref_ns, client_id
        self.ready, self.live = ready, live
        self.live_reporter: LiveReporter | None = None
        regions = [r.name for r in p.regions]
        if identity.region not in regions:
            raise RuntimeError(f"worker region {identity.region!r} is not in the profile's regions {regions}")
        self.region_index = regions.index(identity.region)
        self.region = p.regions[self.region_index]
        if identity.index >= self.region.workers:
            raise RuntimeError(f"worker index {identity.index} but region {self.region.name} has "
                               f"{self.region.workers} worker(s)")
        if identity.spool:  # on its own host: its spool, sent to the master (harness/spool/uplink.py)
            run_dir = Path(identity.spool) / plan.run_id
        else:
            run_dir = Path(identity.out_dir or (Path(p.generator.ship_dir) / plan.run_id if p.generator.ship_dir
                                                else plan.run_dir))
        self.layout = RunLayout(run_dir).worker(identity.region, identity.name)
        self.models_dir = Path(identity.models_dir or plan.models_dir)
        self.clock = WorkerClock(identity.skew_ms)
        gen = p.generator
        self.requests = request_writer(self.layout, gen.chunk_rows, gen.chunk_seconds,
                                       streams=any(e.generative or e.pooling for e in p.endpoints))
        self.requests.warm_up()
        label = f"tailrace worker {identity.name}"
        self.loop_turns = SendLoopTurns()  # the sending loop's turns, counted for its background work
        self.request_chunks = ChunkShipper(self.requests, label, yield_fn=YieldEvery(SHIP_SLICE_NS, self.loop_turns),
                                           file_seconds=gen.file_seconds)
        self.clock_chunks = ChunkShipper(clock_writer(self.layout), label, child=self.request_chunks.child)
        servers = [s.replace(MASTER_CLOCK + ":", f"{identity.master_host or '127.0.0.1'}:", 1)
                   if s.startswith(MASTER_CLOCK + ":") else s for s in plan.ntp_servers]
        self.clocks = ClockSampler(self.clock, servers, p.clock.packets, identity.name, identity.region,
                                   self.clock_chunks.writer.add, self.log)
        self.uplink = ChunkUplink(self.layout, ship, read=_read_off_loop) if ship is not None else None
        self.saturation = SaturationMonitor(identity.name, int(gen.send_lag_p99_ms * 1e6), gen.max_in_flight,
                                            stall_max_ns=int(gen.stall_max_ms * 1e6),
                                            behind_max_ns=int(gen.behind_max_s * 1e9))
        arrivals = p.load.arrivals
        self.trace = load_trace(arrivals.trace, Path(plan.data_root or "."), list(Split.of(p).endpoint_names),
                                [r.name for r in p.regions]) if arrivals.process == "trace" else None
        built = EndpointSenders(plan, identity, self.region.name, self.models_dir, self.trace)
        senders = senders if senders is not None else built.all()
        self.session_endpoints, self.trace_prompts = built.session_endpoints, built.trace_prompts
        checks = [AnswerCheck(ep.check, s.payloads.samples, s.payloads.request.batched)
                  for ep, s in zip(p.endpoints, senders)]
        self.n_samples = max(len(s.payloads.samples) for s in senders)
        self.path = RequestPath(plan, identity, senders, checks, self.clock, self.clocks, self.requests,
                                self.saturation, WorkerMetrics(identity.metrics_port, identity.metrics_bind, plan.run_id))
        self.loop = IssueLoop(self._issue, int(gen.spin_ms * 1e6), plan.drain_s, loop_turns=self.loop_turns)
        self.window: Window | None = None
        self.phases = PhaseClock(p.load)
        self.sessions = SessionRunner(self.path.send, self.loop.wait_turn, self.session_endpoints, p.load.seed,
                                      lambda: self.window.end_mono, self._phase_at)
        self.pipelines = PipelineRunner(self.path.send, self.loop.wait_turn, built.pipelines(),
                                        lambda: self.window.end_mono)
        if self.session_endpoints or self.trace_prompts or self.pipelines.pipelines:  # built ahead (build_ahead.py)
            self.loop.prepare = RequestBuilds(self.sessions, self.trace_prompts, self.pipelines)
        choose_send_path(self.loop, p, self.path, self.request_chunks.child, self.log,
                         self.sessions if self.session_endpoints else None)
        self.planned: int | None = 0  # None: a closed-loop scenario, whose plan is what it issued
        self.scenario_stats: dict = {"scenario": p.load.scenario}
        self.started_ns = self.clock.now_ns()
        self.finished_ns = 0
        self.background = BackgroundWork(p, self.requests, self.request_chunks, self.sample_clock, self.saturation,
                                          self.uplink)
        self._finisher: gevent.Greenlet | None = None
        # silences of the master (epoch s: last heartbeat before, first after; None: it never came back)
        self.control_gaps: list[tuple[float, float | None]] = []

    def _issue(self, item) -> None:
        """An arrival of the schedule: a session or a pipeline started, or one request sent."""
        if isinstance(item, PreparedSession):
            self.sessions.run(item)
        elif isinstance(item, PreparedPipeline):
            self.pipelines.run(item)
        elif isinstance(item, PreparedRequest):
            self.path.send(item.arrival, item.turn)
        else:
            self.path.send(item)

    def _phase_at(self, mono_ns: int) -> int:
        """The phase an instant of the run falls in (a session's later turn: by its own intended instant)."""
        return self.phases.at((mono_ns - self.path.start_mono) / 1e9)

    def log(self, message: str) -> None:
        print(f"tailrace worker {self.identity.name}: {message}", flush=True)

    # -- background -----------------------------------------------------------------------------
    def sample_clock(self, stage: str, packets: int | None = None) -> None:
        self.clocks.sample(stage, packets)
        self.clock_chunks.ship_open_chunk()  # a Parquet write here would stall sending for ms

    def warm_up(self) -> None:
        """Grow the descriptor table to the pools' size (harness/worker/descriptors.py), open connections."""
        self.log(reserve_for_pools(len(self.path.senders), self.plan.pool_limits.connections))
        for sender in self.path.senders:
            try:
                sender.warm_up()
            except Exception as exc:  # noqa: BLE001 - an unreachable endpoint shows up as errors in the run
                self.log(f"warm-up failed: {exc}")

    # -- the run --------------------------------------------------------------------------------
    def schedule(self) -> Schedule | None:
        """The server scenario's arrivals for this worker (None for the closed-loop scenarios)."""
        p = self.profile
        if p.load.scenario != "server":
            return None
        return worker_schedule(p.load, Split.of(p), WorkerSlot(self.region_index, self.identity.index), self.n_samples,
                               p.inputs.selection == "sequential", self.trace)

    def run(self) -> None:
        """Sample the clock, build the first requests, wait for the start instant, run the scenario, drain, finish."""
        load = self.profile.load
        self.sample_clock("before")
        schedule = self.schedule()
        self.warm_up()
        # the start instant is given in reference time; on this clock it is start_ref − offset
        planned_mono = self.clock.to_mono(self.start_ref_ns - self.clocks.offset_ns)
        arrivals = ScheduledArrivals(schedule, planned_mono) if schedule is not None else None
        ahead = self.loop.build_ahead(arrivals) if arrivals is not None else None
        if ahead is not None:  # the first requests built now, while the start instant is still to come
            ahead.prime(planned_mono, gevent.sleep, self.log)
        # set-up objects never need the cyclic collector again, per-request garbage is acyclic: fewer GC pauses
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 1000)
        if self.clocks.sample_again_if_unsure(self.log):  # (the start instant is placed on this clock below)
            self.clock_chunks.ship_open_chunk()
        if self.ready is not None:  # every worker ready: the master may start the run before the plan's instant
            now_ref = self.clock.now_ns() + self.clocks.offset_ns
            early = self.ready((self.start_ref_ns - now_ref) / 1e9)
            if early is not None and early < self.start_ref_ns:
                self.log(f"every worker is ready: starting {(self.start_ref_ns - early) / 1e9:.1f} s before the "
                         "plan's instant")
                self.start_ref_ns = early
        start_mono = self.path.start_mono = self.clock.to_mono(self.start_ref_ns - self.clocks.offset_ns)
        if arrivals is not None:
            (ahead or arrivals).rebase(start_mono - planned_mono)
        if start_mono < time.perf_counter_ns():
            self.log(f"start instant already passed by {(time.perf_counter_ns() - start_mono) / 1e6:.0f} ms; "
                     "late arrivals count as send lag")
        if self.live is not None:
            self.live_reporter = LiveReporter.of_worker(self.profile, schedule, self.path, self.clocks, self.saturation,
                                                        self.sessions if self.session_endpoints else None, self.live,
                                                        self.loop_turns)
        self.background.start(start_mono, self.live_reporter.report if self.live_reporter is not None else None)
        window = self.window = Window(start_mono, start_mono + int((load.warmup_s + load.duration_s) * 1e9),
                                     int(load.warmup_s * 1e9))
        self.planned = len(schedule.offsets_ns) if schedule is not None else None  # closed loop: what it issued
        self.scenario_stats = run_scenario(
            self.loop, self.plan, window, ahead or arrivals,
            lambda stream: draws(self.plan, self.region_index, self.identity.index, self.n_samples, stream))
        if ahead is not None:
            self.scenario_stats["built_ahead"] = ahead.summary()
        self.finish()

    def stop_issuing(self) -> None:
        """Stopped early (Ctrl-C, the live page): nothing more is sent; what is in flight is answered and kept."""
        self.loop.stop()
        if self.window is not None:
            self.window = dataclasses.replace(self.window, end_mono=min(self.window.end_mono, time.perf_counter_ns()))

    @property
    def finishing(self) -> bool:
        """finish() has begun (its files are being closed, or are)."""
        return self._finisher is not None

    def finish(self, master_lost: bool = False) -> dict:
        """Stop background work, close the last chunks, write worker.json, and (remote) send what the master
        lacks — unless the master is gone: then the spool keeps it; idempotent. The work runs in a greenlet of
        its own, so Locust killing the calling user (its stop timeout) never leaves worker.json unwritten;
        a second caller waits for the first."""
        if self._finisher is None:
            self._finisher = gevent.spawn(self._finish, master_lost)
        self._finisher.join()
        return self.summary()

    def _finish(self, master_lost: bool) -> None:
        self.background.stop()  # a chunk being written is finished: never killed half-way
        self.saturation.close_window(final=True)
        if self.live_reporter is not None and self.path.start_mono:  # the last, partial second
            try:
                self.live_reporter.report((time.perf_counter_ns() - self.path.start_mono) / 1e9)
            except Exception as exc:  # noqa: BLE001 - the live page is a view: it never costs the run its files
                self.log(f"last live report not sent: {exc}")
        self.request_chunks.ship_open_chunk()
        try:  # with the master gone its reference may be too: one packet each, so the worker stops in time
            self.sample_clock("after", 1 if master_lost else None)
        except Exception as exc:  # noqa: BLE001
            self.log(f"final clock sample failed: {exc}")
        self.request_chunks.close()  # both logs' chunks on disk (one writer) before worker.json says how many
        for s in self.path.senders:
            s.close()
        if self.loop.inline is not None:
            self.loop.inline.close()
        self.finished_ns = self.clock.now_ns()
        summary = self.summary()
        try:
            write_atomic(self.layout.summary, json.dumps(summary, indent=2))
        except OSError as exc:  # a full disk: the manifest then says this worker left no summary
            self.log(exc.strerror)
        if self.uplink is not None and master_lost:
            self.log(f"master lost: results kept in {self.layout.dir} (tailrace collect)")
        elif self.uplink is not None:
            unacked = self.uplink.drain(UPLINK_DRAIN_S, sleep=gevent.sleep)
            self.log(f"sent {self.uplink.files_sent} file(s), {self.uplink.bytes_sent:,} bytes to the master" +
                     (f"; {len(unacked)} not acknowledged, kept in {self.layout.dir} (tailrace collect)"
                      if unacked else ""))

    def summary(self) -> dict:
        reasons, warnings = self.saturation.verdict()
        for shipper in (self.request_chunks, self.clock_chunks):
            if shipper.failures:
                reasons.append(f"{self.identity.name}: {len(shipper.failures)} chunk(s) could not be written, their "
                               f"rows are lost (first: {shipper.failures[0]})")
        lost = self.request_chunks.child.lost
        if lost is not None:  # (the rows missing, if any, make the run INVALID: analysis/read/chunks.py)
            warnings.append(f"{self.identity.name}: its chunk writer {lost}: the chunks it held, if any, are lost — "
                            "requests missing from the run directory are not kept for `tailrace collect`")
        warnings += gap_warnings(self.identity.name, self.start_ref_ns, self.control_gaps)
        if self.path.unknown_events:
            warnings.append(f"{self.identity.name}: {self.path.unknown_events} stream event(s) of a type tailrace does "
                            "not read were skipped (a newer server's events: their tokens, if any, are not counted)")
        clock_gap = self.clocks.gap_warning(self.start_ref_ns / 1e9)
        if clock_gap:
            warnings.append(clock_gap)
        sat = self.saturation
        planned = self.loop.counts.issued if self.planned is None else self.planned
        return {"worker": self.identity.name, "region": self.identity.region, "client_id": self.client_id,
                "planned": planned, "sent": self.path.sent, "start_ref_ns": self.start_ref_ns,
                "rows_written": self.requests.rows_written,
                "chunks": self.requests.chunks_written, "clock_skew_ms_emulated": self.identity.skew_ms,
                "last_offset_ns": self.clocks.offset.offset_ns if self.clocks.offset else None,
                "max_send_lag_p99_ms": sat.max_lag_p99_ns / 1e6, "peak_in_flight": sat.peak_in_flight,
                "invalid_reasons": reasons, "warnings": warnings, "send_lag_windows": len(sat.windows),
                "lagging_windows": [w.as_dict() for w in sat.windows if w.lagging],
                "scenario": self.scenario_stats, "started_ns": self.started_ns, "finished_ns": self.finished_ns,
                **({"sessions": self.sessions.summary()} if self.session_endpoints else {}),
                **({"pipelines": self.pipelines.summary()} if self.pipelines.pipelines else {}),
                "control_gaps": [[since, back] for since, back in self.control_gaps]}


def gap_warnings(worker: str, start_ref_ns: int, gaps: list[tuple[float, float | None]]) -> list[str]:
    """One line a silence of the master (`gaps`: epoch s, last heartbeat before and first after; None: it never
    came back): when (seconds from the start instant) and how long."""
    start_s = start_ref_ns / 1e9
    out = []
    for since, back in gaps:
        if back is None:
            out.append(f"{worker}: no contact with the master from {since - start_s:.1f} s on; it "
                       f"stopped after generator.master_timeout_s, its spool kept (tailrace collect)")
        else:
            out.append(f"{worker}: no contact with the master for {back - since:.1f} s at "
                       f"{since - start_s:.1f}–{back - start_s:.1f} s; the schedule went on")
    return out
