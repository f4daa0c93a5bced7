"""The open-loop arrival schedule: one seeded global arrival process, split by region, worker, endpoint.

The rate λ(t) is piecewise linear: steps, ramps and spikes over the run, each a segment of it (and a
phase of the report). Arrivals come from unit-rate exponential gaps mapped through the inverse of
Λ(t) = ∫λ (time rescaling), so the process stays Poisson through every change. Each arrival then draws
its region (by share), worker and endpoint (by weight): independent thinning of a Poisson process gives
independent Poisson processes, so each worker's arrivals are Poisson at its share and their
superposition is the global process. Every worker computes the same global draw from the seed and keeps
its own part: no coordination needed, and phase boundaries fall at the same reference instant everywhere.

The other processes (`load.arrivals`): `gamma` draws unit-mean gamma gaps with the asked coefficient of variation
and `constant` unit gaps, both mapped through the same Λ⁻¹ (so steps, ramps and spikes apply to them too); `onoff`
alternates exponential sojourns in its two states, Poisson at each state's rate; `trace` replays a file's instants
(harness/workload/traces.py). The split is the same seeded draw for every process, so the regions' arrivals merged are
the one global process asked for. Thinning keeps only a Poisson process Poisson: a region with share p of a gamma
process sees gaps whose c² is p·(cv² − 1) + 1 (a geometric sum of gamma gaps), nearer 1 than the global cv²; of an
on/off process it sees the same modulation at p times the rates.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tailrace.contract.profile import Arrivals, Load, Profile
from tailrace.contract.rates import Segment, rate_segments
from tailrace.harness.workload.traces import TraceRows, replay


class PhaseClock:
    """The phase an instant of the run falls in (a session's later turn: by its own intended instant); the rate's
    segments made once (made each turn, they were ~3% of the core at 1,250 session turns/s)."""

    def __init__(self, load) -> None:
        self.warmup_s = load.warmup_s
        self.segments = None if load.scenario != "server" or load.arrivals.process in ("trace", "onoff") else \
            rate_segments(load.rate, list(load.phases), load.warmup_s, load.duration_s)

    def at(self, seconds: float) -> int:
        """The phase `seconds` after the start instant: 0 the warm-up, then 1 (by the rate's phases, if any)."""
        if self.segments is None:
            return 0 if seconds < self.warmup_s else 1
        return int(phase_of(self.segments, self.warmup_s, np.asarray([seconds]))[0])


def phase_of(segments: list[Segment], warmup_s: float, times_s: np.ndarray) -> np.ndarray:
    """Phase number of each time: 0 = warm-up, then 1.. per measured segment."""
    starts = np.array([s.start_s for s in segments[1:]])
    phase = np.searchsorted(starts, times_s, side="right")
    return phase if warmup_s > 0 else phase + 1


def unit_gaps(arrivals: Arrivals, rng: np.random.Generator, n: int) -> np.ndarray:
    """n gaps of a unit-rate renewal process: exponential (Poisson), gamma with coefficient of variation cv, or 1."""
    if arrivals.process == "gamma":
        shape = 1.0 / arrivals.cv ** 2
        return rng.gamma(shape, 1.0 / shape, n)
    if arrivals.process == "constant":
        return np.ones(n)
    return rng.exponential(1.0, n)


def onoff_arrivals(arrivals: Arrivals, run_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s) of a two-state Markov-modulated Poisson process over [0, run_s): exponential sojourns of
    mean on_s / off_s, Poisson at on_rate / off_rate in each, starting in a state drawn from its long-run share."""
    a = arrivals
    on = rng.random() < a.on_s / (a.on_s + a.off_s)
    t, times = 0.0, []
    while t < run_s:
        length = rng.exponential(a.on_s if on else a.off_s)
        rate = a.on_rate if on else a.off_rate
        n = rng.poisson(rate * length)
        times.append(t + np.sort(rng.uniform(0.0, length, n)))
        t, on = t + length, not on
    out = np.concatenate(times) if times else np.empty(0)
    return out[out < run_s]


def global_arrivals(segments: list[Segment], seed: int, arrivals: Arrivals | None = None) -> np.ndarray:
    """Arrival times (s) of the process `arrivals` asks for (default Poisson) with the piecewise-linear rate
    `segments` describe (an on/off process makes its own rate; a trace is not drawn: trace_plan)."""
    arrivals = arrivals or Arrivals()
    rng = np.random.default_rng(seed)
    if arrivals.process == "onoff":
        return onoff_arrivals(arrivals, segments[-1].end_s, rng)
    cum = np.concatenate([[0.0], np.cumsum([s.expected for s in segments])])  # Λ at each segment start
    expected = cum[-1]
    n_draw = int(expected + 10 * np.sqrt(expected) * max(1.0, arrivals.cv or 1.0) + 100)
    unit = np.cumsum(unit_gaps(arrivals, rng, n_draw))
    while unit[-1] < expected:
        unit = np.concatenate([unit, unit[-1] + np.cumsum(unit_gaps(arrivals, rng, n_draw))])
    unit = unit[unit < expected]
    k = np.searchsorted(cum, unit, side="right") - 1
    times = np.empty_like(unit)
    for i, seg in enumerate(segments):
        mask = k == i
        if mask.any():
            times[mask] = seg.start_s + seg.invert(unit[mask] - cum[i])
    return times


@dataclass(frozen=True)
class Schedule:
    """One worker's arrivals: offsets (ns) from the start of the run, which endpoint, which phase, which sample, and
    each one's place in the global process (a session's id: unique in the run, the same in every run of the seed)."""

    offsets_ns: np.ndarray
    endpoint_index: np.ndarray
    phase_index: np.ndarray
    sample_index: np.ndarray
    arrival_index: np.ndarray


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request to issue: when (perf_counter_ns), to which endpoint (index), in which phase, which sample; for a
    session endpoint, the session it starts (its id: the arrival's place in the global process)."""

    intended_mono: int
    endpoint: int
    phase: int
    sample: int
    session: int = -1


class ScheduledArrivals:
    """The open-loop (server) scenario's arrivals — of any process: Poisson, gamma, constant, on/off or a trace — at
    start + offset. The start may still move (`start_mono`) until the arrivals are drawn."""

    def __init__(self, schedule: Schedule, start_mono: int) -> None:
        s = schedule
        self.start_mono = start_mono
        self._rows = zip(s.offsets_ns.tolist(), s.endpoint_index.tolist(), s.phase_index.tolist(),
                         s.sample_index.tolist(), s.arrival_index.tolist())

    def rebase(self, delta_ns: int) -> None:
        """The start instant moved by `delta_ns`: so do the arrivals not drawn yet."""
        self.start_mono += delta_ns

    def __iter__(self) -> Iterator[Arrival]:
        return self

    def __next__(self) -> Arrival:
        offset, endpoint, phase, sample, index = next(self._rows)
        return Arrival(self.start_mono + offset, endpoint, phase, sample, index)


@dataclass(frozen=True)
class Split:
    """How the one global process is split: by region (its share), by worker (of its region), by endpoint or
    pipeline (its weight; pipelines after the endpoints); the names are a trace's, whose rows may name their region
    and endpoint (or pipeline)."""

    region_shares: tuple[float, ...]
    region_workers: tuple[int, ...]
    endpoint_weights: tuple[float, ...]
    region_names: tuple[str, ...] = ()
    endpoint_names: tuple[str, ...] = ()

    @classmethod
    def of(cls, profile: Profile) -> "Split":
        return cls(tuple(r.share for r in profile.regions), tuple(r.workers for r in profile.regions),
                   profile.arrival_weights, tuple(r.name for r in profile.regions),
                   tuple(e.name for e in profile.endpoints) + tuple(p.name for p in profile.pipelines))


@dataclass(frozen=True)
class WorkerSlot:
    """Which worker: its region's index in the profile and its index in the region."""

    region_index: int
    worker_index: int


def worker_schedule(load: Load, split: Split, slot: WorkerSlot, n_samples: int, sequential: bool = False,
                    trace: TraceRows | None = None) -> Schedule:
    """The part of the global process that one worker sends (`trace`: the rows of a trace process, read)."""
    arrivals, warmup_s, duration_s = load.arrivals, load.warmup_s, load.duration_s
    region_index, worker_index = slot.region_index, slot.worker_index
    workers_in_region = split.region_workers[region_index]
    rng = np.random.default_rng([load.seed, 1])
    shares = np.asarray(split.region_shares) / np.sum(split.region_shares)
    weights = np.asarray(split.endpoint_weights) / np.sum(split.endpoint_weights)
    if arrivals.process == "trace":
        segments = [Segment(0.0, warmup_s, 0.0, 0.0, "warm-up")] if warmup_s > 0 else []
        segments.append(Segment(warmup_s, warmup_s + duration_s, 0.0, 0.0, "trace replay"))
        rows, times = replay(trace, arrivals.trace, warmup_s + duration_s)
        region = rng.choice(len(shares), size=len(times), p=shares) if trace.region is None else \
            np.array([split.region_names.index(trace.region[i]) for i in rows], dtype=np.int64)
        endpoint = rng.choice(len(weights), size=len(times), p=weights) if trace.endpoint is None else \
            np.array([split.endpoint_names.index(trace.endpoint[i]) for i in rows], dtype=np.int64)
        worker = rng.integers(0, workers_in_region, size=len(times))
        sample = rows.astype(np.int64)  # the trace row: its prompt and output lengths (generative endpoints)
        phase = phase_of(segments, warmup_s, times)
        mine = (region == region_index) & (worker == worker_index)
        return Schedule((times[mine] * 1e9).astype(np.int64), endpoint[mine].astype(np.int32),
                    phase[mine].astype(np.int32), sample[mine], np.flatnonzero(mine))
    segments = rate_segments(load.rate, list(load.phases), warmup_s, duration_s) if arrivals.process != "onoff" else \
        ([Segment(0.0, warmup_s, 0.0, 0.0, "warm-up")] if warmup_s > 0 else []) + \
        [Segment(warmup_s, warmup_s + duration_s, 0.0, 0.0, "on/off")]
    times = global_arrivals(segments, load.seed, arrivals)
    region = rng.choice(len(shares), size=len(times), p=shares)
    worker = rng.integers(0, workers_in_region, size=len(times))
    endpoint = rng.choice(len(weights), size=len(times), p=weights)
    sample = np.arange(len(times)) % n_samples if sequential else rng.integers(0, n_samples, size=len(times))
    phase = phase_of(segments, warmup_s, times)
    mine = (region == region_index) & (worker == worker_index)
    return Schedule((times[mine] * 1e9).astype(np.int64), endpoint[mine].astype(np.int32), phase[mine].astype(np.int32),
                sample[mine].astype(np.int64), np.flatnonzero(mine))

