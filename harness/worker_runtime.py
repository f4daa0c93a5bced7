"""One generator worker's run: the open-loop schedule, recording, clock sampling, saturation, metrics.

Runs inside a Locust worker (gevent). Settings come from the master's plan message (run id, profile,
start instant in reference time) and from this process's environment (region, worker index, emulated
clock skew, endpoint addresses through the region's proxy), because Locust overwrites a worker's CLI
arguments with the master's.
"""
from __future__ import annotations

import gc
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import gevent
import numpy as np
from gevent.pool import Group

from endpoints.trace_context import format_traceparent, new_ids
from harness.clock import ClockSample, WorkerClock, measure_offset
from harness.profile import Profile, parse_profile
from harness.protocol_clients import GrpcSender, HttpSender, InProcessSender, Outcome
from harness.chunk_shipping import ChunkShipper
from harness.recorder import ChunkWriter, clock_writer, request_writer
from harness.saturation import SaturationMonitor
from harness.schedule import worker_plan


@dataclass(frozen=True)
class WorkerIdentity:
    """Per-process settings, from environment variables."""

    region: str
    index: int
    skew_ms: float
    endpoint_urls: dict[str, str]
    out_dir: str | None
    models_dir: str | None
    metrics_port: int | None

    @property
    def name(self) -> str:
        return f"{self.region}-w{self.index}"

    @classmethod
    def from_env(cls, env=os.environ) -> "WorkerIdentity":
        region = env.get("TAILRACE_REGION")
        if not region:
            raise RuntimeError("TAILRACE_REGION is not set: every tailrace worker needs its region")
        try:
            return cls(region=region, index=int(env.get("TAILRACE_WORKER_INDEX", "0")),
                       skew_ms=float(env.get("TAILRACE_CLOCK_SKEW_MS", "0")),
                       endpoint_urls=json.loads(env.get("TAILRACE_ENDPOINT_URLS", "{}")),
                       out_dir=env.get("TAILRACE_OUT_DIR") or None, models_dir=env.get("TAILRACE_MODELS_DIR") or None,
                       metrics_port=int(env["TAILRACE_METRICS_PORT"]) if env.get("TAILRACE_METRICS_PORT") else None)
        except (ValueError, json.JSONDecodeError) as exc:
            raise RuntimeError(f"bad TAILRACE_* environment: {exc}") from exc


class WorkerMetrics:
    """Prometheus metrics of a worker: latency, send lag, in-flight, errors by class."""

    def __init__(self, port: int | None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        self.registry = CollectorRegistry()
        buckets = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10)
        self.latency = Histogram("tailrace_request_latency_seconds", "Latency from intended send time",
                                 ["region", "endpoint"], buckets=buckets, registry=self.registry)
        self.send_lag = Histogram("tailrace_send_lag_seconds", "Actual minus intended send time", ["region"],
                                  buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 1),
                                  registry=self.registry)
        self.in_flight = Gauge("tailrace_in_flight", "Requests in flight", ["region"], registry=self.registry)
        self.results = Counter("tailrace_requests", "Requests by status class", ["region", "endpoint", "status"],
                               registry=self.registry)
        self._children: dict = {}
        if port:
            start_http_server(port, addr="127.0.0.1", registry=self.registry)

    def record(self, region: str, endpoint: str, status: str, latency_ns: int, lag_ns: int, in_flight: int) -> None:
        """One finished request (label children cached: labels() is slow on the hot path)."""
        key = (region, endpoint, status)
        kids = self._children.get(key)
        if kids is None:
            kids = self._children[key] = (self.latency.labels(region, endpoint), self.send_lag.labels(region),
                                          self.in_flight.labels(region), self.results.labels(region, endpoint, status))
        kids[0].observe(latency_ns / 1e9)
        kids[1].observe(max(lag_ns, 0) / 1e9)
        kids[2].set(in_flight)
        kids[3].inc()


class WorkerRun:
    """Everything one worker does for one run."""

    def __init__(self, identity: WorkerIdentity, plan_msg: dict, client_id: str = "") -> None:
        self.identity = identity
        self.client_id = client_id
        self.run_id: str = plan_msg["run_id"]
        self.profile: Profile = parse_profile(plan_msg["profile"], "profile from the master")
        self.start_ref_ns: int = int(plan_msg["start_ref_ns"])
        self.ntp_servers: list[str] = plan_msg["ntp_servers"]
        region_names = [r.name for r in self.profile.regions]
        if identity.region not in region_names:
            raise RuntimeError(f"worker region {identity.region!r} is not in the profile's regions {region_names}")
        self.region = self.profile.regions[region_names.index(identity.region)]
        if identity.index >= self.region.workers:
            raise RuntimeError(f"worker index {identity.index} but region {self.region.name} has "
                               f"{self.region.workers} worker(s)")
        # where chunks go: this worker's --out-dir, else the profile's shared ship_dir, else the master's run dir
        ship_dir = self.profile.generator.ship_dir
        run_dir = Path(identity.out_dir or (Path(ship_dir) / self.run_id if ship_dir else plan_msg["run_dir"]))
        self.dir = run_dir / "regions" / identity.region / identity.name
        models_dir = Path(identity.models_dir or plan_msg["models_dir"])
        with np.load(models_dir / self.profile.inputs.dataset) as data:
            self.X, self.y = data["X"].astype(np.float32), data["y"].astype(np.int64)
        self.clock = WorkerClock(identity.skew_ms)
        self.requests: ChunkWriter = request_writer(self.dir, self.profile.generator.chunk_rows,
                                                    self.profile.generator.chunk_seconds)
        self.clock_log: ChunkWriter = clock_writer(self.dir)
        self.requests.warm_up()
        label = f"tailrace worker {identity.name}"
        self.request_chunks = ChunkShipper(self.requests, label, yield_fn=lambda: gevent.sleep(0))
        self.clock_chunks = ChunkShipper(self.clock_log, label)
        self.offset: ClockSample | None = None
        self.saturation = SaturationMonitor(identity.name, int(self.profile.generator.send_lag_p99_ms * 1e6),
                                            self.profile.generator.max_in_flight,
                                            stall_max_ns=int(self.profile.generator.stall_max_ms * 1e6))
        self.start_mono = 0  # set when the schedule starts
        self.metrics = WorkerMetrics(identity.metrics_port)
        self.in_flight = 0
        self.sent = 0
        self.planned = 0
        self.scenario_stats: dict = {"scenario": self.profile.load.scenario}
        self.batch_size = self.samples_per_request(self.profile)  # read per request: computed once
        self.models_dir = models_dir
        self.started_ns = self.clock.now_ns()
        self.finished_ns = 0
        self._done = False
        self._background: list[gevent.Greenlet] = []
        self.senders = self._make_senders()

    @staticmethod
    def samples_per_request(profile: Profile) -> int:
        """The scenario's query / batch size, else the profile's inputs.batch_size."""
        load = profile.load
        return {"multi-stream": load.samples_per_query, "offline": load.offline_batch}.get(
            load.scenario, profile.inputs.batch_size)

    def _make_senders(self) -> list:
        senders = []
        pool = self.profile.generator.max_in_flight + 100  # the pool must never cap open-loop concurrency
        batch = self.batch_size
        stride = batch if self.profile.load.scenario == "offline" else 1  # offline batches start at multiples
        for ep in self.profile.endpoints:
            url = self.identity.endpoint_urls.get(ep.name, ep.url)
            auth = (ep.auth_header, ep.auth_value() or "") if ep.auth_header else None
            timeout_s = ep.timeout_ms / 1000
            if ep.protocol == "kserve-http":
                senders.append(HttpSender(url, ep.model, self.X, batch, timeout_s, pool, auth, stride))
            elif ep.protocol == "kserve-grpc":
                senders.append(GrpcSender(url, ep.model, self.X, batch, timeout_s, auth, stride))
            else:
                path = self.models_dir / ep.model / "1" / "model.onnx"
                if not path.exists():
                    raise RuntimeError(f"endpoint {ep.name}: inprocess needs {path} (an ONNX model)")
                senders.append(InProcessSender(str(path), self.X, batch, stride))
        return senders

    # -- clocks ---------------------------------------------------------------------------------
    def sample_clock(self, stage: str) -> None:
        for server in self.ntp_servers:
            try:
                s = measure_offset(server, self.clock, self.profile.clock.packets)
            except OSError as exc:
                print(f"tailrace worker {self.identity.name}: clock sample failed: {exc}", flush=True)
                continue
            if self.offset is None or server == self.ntp_servers[0]:
                self.offset = s
            self.clock_log.add({"worker": self.identity.name, "region": self.identity.region, "server": s.server,
                                "local_ns": s.local_ns, "offset_ns": s.offset_ns, "delay_ns": s.delay_ns,
                                "packets": s.packets, "stage": stage})
        self.clock_chunks.ship_open_chunk()  # a Parquet write here would stall sending for ms

    def _clock_loop(self) -> None:
        while not self._done:
            gevent.sleep(self.profile.clock.interval_s)
            if not self._done:
                self.sample_clock("during")

    # -- background -----------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        while not self._done:
            gevent.sleep(min(0.25, self.profile.generator.chunk_seconds))
            if self.requests.due() or len(self.requests.rows) >= self.profile.generator.chunk_rows // 2:
                self.request_chunks.ship_open_chunk()

    def warm_up(self) -> None:
        """Open connections before the start instant, so that connecting is not counted as send lag."""
        for sender in self.senders:
            try:
                sender.warm_up()
            except Exception as exc:  # noqa: BLE001 - an unreachable endpoint shows up as errors in the run
                print(f"tailrace worker {self.identity.name}: warm-up failed: {exc}", flush=True)

    def _saturation_loop(self, start_mono: int) -> None:
        window = self.profile.generator.window_s
        k = 0
        while not self._done:
            k += 1
            target = start_mono + int(k * window * 1e9)
            gevent.sleep(max(0.0, (target - time.perf_counter_ns()) / 1e9))
            self.saturation.close_window()

    # -- the schedule ---------------------------------------------------------------------------
    def run(self) -> None:
        """Sample the clock, wait for the common start instant, run the scenario, drain."""
        p = self.profile
        self.sample_clock("before")
        offset_ns = self.offset.offset_ns if self.offset else 0
        plan = None
        if p.load.scenario == "server":
            plan = worker_plan(
                rate=p.load.rate, phases=list(p.load.phases), warmup_s=p.load.warmup_s,
                duration_s=p.load.duration_s, seed=p.load.seed, region_shares=[r.share for r in p.regions],
                region_index=[r.name for r in p.regions].index(self.region.name),
                workers_in_region=self.region.workers, worker_index=self.identity.index,
                endpoint_weights=[e.weight for e in p.endpoints], n_samples=len(self.X),
                sequential=p.inputs.selection == "sequential")
            self.planned = len(plan.offsets_ns)
        self.warm_up()
        # Setup objects (datasets, pre-encoded requests) never need the cyclic collector again, and the
        # per-request garbage is acyclic: fewer, younger collections keep GC pauses out of the send path.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 1000)
        # the start instant is given in reference time; on this clock it is start_ref − offset
        start_local_ns = self.start_ref_ns - offset_ns
        start_mono = self.start_mono = self.clock.to_mono(start_local_ns)
        if start_mono < time.perf_counter_ns():
            print(f"tailrace worker {self.identity.name}: start instant already passed by "
                  f"{(time.perf_counter_ns() - start_mono) / 1e6:.0f} ms; late arrivals count as send lag", flush=True)
        self._background = [gevent.spawn(self._flush_loop), gevent.spawn(self._clock_loop),
                            gevent.spawn(self._saturation_loop, start_mono)]
        if plan is not None:
            self._run_open_loop(plan, start_mono)
        else:
            self._wait_until(start_mono)
            end_mono = start_mono + int((p.load.warmup_s + p.load.duration_s) * 1e9)
            {"single-stream": self._run_single_stream, "multi-stream": self._run_multi_stream,
             "offline": self._run_offline}[p.load.scenario](start_mono, end_mono)
        self.finish()

    def _wait_until(self, mono_ns: int) -> None:
        """Sleep, then yield-spin the last stretch (gevent timers wake ~1 ms late)."""
        wait_ns = mono_ns - time.perf_counter_ns() - int(self.profile.generator.spin_ms * 1e6)
        if wait_ns > 0:
            gevent.sleep(wait_ns / 1e9)
        while time.perf_counter_ns() < mono_ns:
            gevent.sleep(0)

    def _drain(self, group: Group) -> None:
        group.join(timeout=max(e.timeout_ms for e in self.profile.endpoints) / 1000 + 2)

    def _phase_at(self, start_mono: int, mono_ns: int) -> int:
        return 0 if mono_ns - start_mono < self.profile.load.warmup_s * 1e9 else 1

    def _run_open_loop(self, plan, start_mono: int) -> None:
        """server: every planned arrival sent at its intended time, never waiting for responses."""
        group = Group()
        spin_ns = int(self.profile.generator.spin_ms * 1e6)
        offsets, endpoints, phases, samples = (plan.offsets_ns.tolist(), plan.endpoint_index.tolist(),
                                               plan.phase_index.tolist(), plan.sample_index.tolist())
        for i in range(self.planned):
            intended_mono = start_mono + offsets[i]
            wait_ns = intended_mono - time.perf_counter_ns() - spin_ns
            if wait_ns > 0:
                gevent.sleep(wait_ns / 1e9)
            # yield-spin the last stretch: gevent timers wake ~1 ms late, and each sleep(0) lets the hub
            # handle ready responses, so precision does not cost starved I/O
            while time.perf_counter_ns() < intended_mono:
                gevent.sleep(0)
            group.spawn(self._one_request, intended_mono, endpoints[i], phases[i], samples[i])
        self._drain(group)

    def _choices(self, stream: int = 0):
        """A seeded stream of (endpoint index, sample index) draws for the closed-loop scenarios."""
        p = self.profile
        rng = np.random.default_rng([p.load.seed, 2, [r.name for r in p.regions].index(self.region.name),
                                     self.identity.index, stream])
        weights = np.asarray([e.weight for e in p.endpoints]) / sum(e.weight for e in p.endpoints)
        sequential = p.inputs.selection == "sequential"
        stride = self.batch_size if p.load.scenario == "offline" else 1
        k = 0
        while True:
            endpoints = rng.choice(len(weights), size=1024, p=weights)
            samples = (np.arange(k, k + 1024) * stride if sequential
                       else rng.integers(0, max(1, len(self.X) // stride), size=1024) * stride) % len(self.X)
            k += 1024
            yield from zip(endpoints.tolist(), samples.tolist())

    def _run_single_stream(self, start_mono: int, end_mono: int) -> None:
        """single-stream: one request at a time; the next is sent the moment the previous completes."""
        draws = self._choices()
        while (now := time.perf_counter_ns()) < end_mono:
            endpoint, sample = next(draws)
            self._one_request(now, endpoint, self._phase_at(start_mono, now), sample)
            self.planned += 1

    def _run_multi_stream(self, start_mono: int, end_mono: int) -> None:
        """multi-stream: a query of samples_per_query every interval_ms; a tick that finds the previous
        query still in flight is missed (counted, nothing sent)."""
        interval_ns = int(self.profile.load.interval_ms * 1e6)
        draws = self._choices()
        group = Group()
        current = None
        ticks = missed = missed_measured = ticks_measured = 0
        tick_mono = start_mono
        while tick_mono < end_mono:
            self._wait_until(tick_mono)
            phase = self._phase_at(start_mono, tick_mono)
            ticks += 1
            ticks_measured += phase > 0
            if current is not None and not current.ready():
                missed += 1
                missed_measured += phase > 0
            else:
                endpoint, sample = next(draws)
                current = group.spawn(self._one_request, tick_mono, endpoint, phase, sample)
                self.planned += 1
            tick_mono += interval_ns
        self._drain(group)
        self.scenario_stats.update({"intervals": ticks, "missed_intervals": missed,
                                    "intervals_measured": ticks_measured, "missed_measured": missed_measured,
                                    "interval_ms": self.profile.load.interval_ms,
                                    "samples_per_query": self.profile.load.samples_per_query})

    def _run_offline(self, start_mono: int, end_mono: int) -> None:
        """offline: offline_concurrency streams, each sending a batch the moment its previous one completes."""

        def stream(index: int) -> None:
            draws = self._choices(index + 1)
            while (now := time.perf_counter_ns()) < end_mono:
                endpoint, sample = next(draws)
                self._one_request(now, endpoint, self._phase_at(start_mono, now), sample)
                self.planned += 1

        group = Group()
        for i in range(self.profile.load.offline_concurrency):
            group.spawn(stream, i)
        self._drain_until(group, end_mono)
        self.scenario_stats.update({"batch": self.profile.load.offline_batch,
                                    "concurrency": self.profile.load.offline_concurrency})

    def _drain_until(self, group: Group, end_mono: int) -> None:
        remaining = max(0.0, (end_mono - time.perf_counter_ns()) / 1e9)
        group.join(timeout=remaining + max(e.timeout_ms for e in self.profile.endpoints) / 1000 + 2)

    def _one_request(self, intended_mono: int, endpoint_index: int, phase: int, sample: int) -> None:
        ep = self.profile.endpoints[endpoint_index]
        trace_id, span_id = new_ids()
        offset = self.offset
        headers = {"traceparent": format_traceparent(trace_id, span_id), "x-tailrace-region": self.identity.region,
                   "x-tailrace-run": self.run_id,
                   "x-tailrace-clock-offset-ns": str(offset.offset_ns if offset else 0)}
        sent = [0]
        self.in_flight += 1
        in_flight_at_send = self.in_flight

        def on_sent() -> None:
            sent[0] = time.perf_counter_ns()

        try:
            outcome = self.senders[endpoint_index].send(sample, headers, on_sent)
        except Exception as exc:  # noqa: BLE001 - never stop the generator
            outcome = Outcome(status="bad_response", code="exception", error=f"{type(exc).__name__}: {exc}"[:200])
        done = time.perf_counter_ns()
        self.in_flight -= 1
        if not sent[0]:
            sent[0] = done
        lag = sent[0] - intended_mono
        self.sent += 1
        if phase > 0:  # the warm-up is not measured, and absorbs start-up hiccups (first chunk, first GC)
            self.saturation.observe_send(intended_mono - self.start_mono, lag, in_flight_at_send)
        label = int(self.y[sample])
        batch = self.batch_size
        correct_count = 0
        if outcome.status == "ok" and outcome.predictions is not None:
            if batch == 1:
                correct_count = int(outcome.prediction == label)
            else:
                labels = np.take(self.y, range(sample, sample + batch), mode="wrap")
                correct_count = int(np.count_nonzero(outcome.predictions == labels))
        latency = done - intended_mono
        self.requests.add({
            "run_id": self.run_id, "trace_id": trace_id, "span_id": span_id, "region": self.identity.region,
            "worker": self.identity.name, "endpoint": ep.name, "model": ep.model, "protocol": ep.protocol,
            "phase": phase, "sample_index": sample, "t_intended": self.clock.from_mono(intended_mono),
            "t_sent": self.clock.from_mono(sent[0]), "t_done": self.clock.from_mono(done), "latency_ns": latency,
            "service_ns": done - sent[0], "send_lag_ns": lag, "status": outcome.status, "code": outcome.code,
            "error": outcome.error, "server_queue_ns": outcome.server_queue_ns,
            "server_compute_ns": outcome.server_compute_ns, "server_receive_ns": outcome.server_receive_ns,
            "server_send_ns": outcome.server_send_ns, "echoed_trace_id": outcome.echoed_trace_id, "label": label,
            "prediction": outcome.prediction, "correct": outcome.status == "ok" and outcome.prediction == label,
            "batch_size": batch, "correct_count": correct_count,
            "bytes_out": outcome.bytes_out, "bytes_in": outcome.bytes_in, "in_flight": in_flight_at_send,
            "clock_offset_ns": offset.offset_ns if offset else 0,
            "clock_uncertainty_ns": offset.delay_ns // 2 if offset else -1,
        })
        self.metrics.record(self.identity.region, ep.name, outcome.status, latency, lag, self.in_flight)

    def finish(self) -> dict:
        """Stop background work, close the last chunks, write worker.json; idempotent."""
        if self._done:
            return self.summary()
        self._done = True
        flusher, *others = self._background or [None]
        for g in others:
            g.kill(block=False)
        if flusher is not None:
            flusher.join(timeout=5)  # let a chunk being written finish: never kill a write half-way
        self.saturation.close_window(final=True)
        self.request_chunks.ship_open_chunk()
        self.request_chunks.close()  # every shipped chunk is on disk before worker.json says how many there are
        try:
            self.sample_clock("after")
        except Exception as exc:  # noqa: BLE001
            print(f"tailrace worker {self.identity.name}: final clock sample failed: {exc}", flush=True)
        self.clock_chunks.close()
        for s in self.senders:
            s.close()
        self.finished_ns = self.clock.now_ns()
        summary = self.summary()
        tmp = self.dir / ".worker.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, self.dir / "worker.json")
        return summary

    def summary(self) -> dict:
        reasons, warnings = self.saturation.verdict()
        return {"worker": self.identity.name, "region": self.identity.region, "client_id": self.client_id,
                "planned": self.planned, "sent": self.sent, "rows_written": self.requests.rows_written,
                "chunks": self.requests.chunks_written, "clock_skew_ms_emulated": self.identity.skew_ms,
                "last_offset_ns": self.offset.offset_ns if self.offset else None,
                "max_send_lag_p99_ms": self.saturation.max_lag_p99_ns / 1e6,
                "peak_in_flight": self.saturation.peak_in_flight, "invalid_reasons": reasons, "warnings": warnings,
                "send_lag_windows": len(self.saturation.windows),
                "lagging_windows": [w.as_dict() for w in self.saturation.windows if w.lagging],
                "scenario": self.scenario_stats,
                "started_ns": self.started_ns, "finished_ns": self.finished_ns}
