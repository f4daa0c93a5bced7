"""The master's live state of a run, for the live page: the workers' LIVE digests added up per region × endpoint and
per second of the run, written to live.jsonl once a second (contract/master_events.py's LIVE_STARTED and LIVE).

Everything here is a live estimate (log-bucketed histograms, harness/worker/live_report.py); the report computes the
exact percentiles, their intervals and the verdicts from the rows afterwards.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from tailrace.contract import master_events
from tailrace.contract.layout import RunLayout
from tailrace.contract.plan import RunPlan
from tailrace.contract.profile import PIPELINE_METRICS
from tailrace.contract.rates import rate_segments
from tailrace.harness.worker.live_report import Histogram, merge, quantile_ns

HISTOGRAMS = ("latency", "send_lag", "ttft", "tpot", "itl")
SLO_TAIL_SAMPLES = 5  # a provisional percentile verdict needs this many samples above the percentile


@dataclass
class Tally:
    """What some workers did over some time, for one region × endpoint."""

    asked: int | None = None
    done: int = 0
    ok: int = 0
    cancelled: int = 0  # abandoned by their client as declared: neither ok nor an error
    output_tokens: int = 0
    errors: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    histograms: dict[str, Histogram] = field(default_factory=lambda: {name: {} for name in HISTOGRAMS})

    def add(self, digest: dict) -> None:
        if digest.get("asked") is not None:
            self.asked = (self.asked or 0) + digest["asked"]
        self.done += digest["done"]
        self.ok += digest["ok"]
        self.cancelled += digest.get("cancelled", 0)
        self.output_tokens += digest.get("output_tokens", 0)
        self.errors.update(digest.get("errors", {}))
        self.outcomes.update(digest.get("outcomes", {}))
        for name in HISTOGRAMS:
            merge(self.histograms[name], digest.get(name, ()))

    def summary(self, seconds: float) -> dict:
        """Rates over `seconds`; p50 and p99 of each distribution (ms; None when empty)."""
        per_s = (lambda n: round(n / seconds, 3)) if seconds > 0 else (lambda n: None)  # noqa: E731
        out = {"asked_per_s": per_s(self.asked) if self.asked is not None else None, "done_per_s": per_s(self.done),
               "errors_per_s": per_s(self.done - self.ok - self.cancelled), "tokens_per_s": per_s(self.output_tokens),
               "done": self.done, "ok": self.ok, "cancelled": self.cancelled, "errors": dict(self.errors),
               "outcomes": dict(self.outcomes)}
        for name in HISTOGRAMS:
            for q in (50, 99):
                value = quantile_ns(self.histograms[name], q / 100)
                out[f"{name}_p{q}_ms"] = round(value / 1e6, 3) if value is not None else None
        return out


@dataclass
class WorkerView:
    """What the page shows of one worker."""

    name: str
    region: str
    state: dict = field(default_factory=dict)  # its last digest's worker fields
    last_t_s: float = 0.0
    gaps: list[list[float]] = field(default_factory=list)  # [start s, length s (None: still silent)]


class LiveBoard:
    """Adds up LIVE digests; `tick()` writes one LIVE line (the master calls it once a second)."""

    def __init__(self, plan: RunPlan, layout: RunLayout, quiet_s: Callable[[], dict[str, float]]) -> None:
        self.plan, self.quiet_s = plan, quiet_s
        self.log = master_events.MasterEventLog(layout, layout.live)
        p = plan.profile
        self.generative = {e.name: e.generative for e in p.endpoints}
        self.points: dict[int, dict[tuple[str, str], Tally]] = {}
        self.changed: set[int] = set()
        self.totals: dict[tuple[str, str], Tally] = {}
        self.measured: dict[tuple[str, str], Tally] = {}  # after the warm-up: what the provisional SLOs judge
        self.workers: dict[str, WorkerView] = {}
        self.warnings: list[str] = []
        self.start_ref_ns: int | None = None
        self.offset_ns = 0

    # -- input ----------------------------------------------------------------------------------------------------
    def started(self, start_ref_ns: int, offset_ns: int) -> None:
        """The run's start instant (reference clock) and this host's offset to it; the first call writes the run's
        shape (LIVE_STARTED)."""
        first = self.start_ref_ns is None
        self.start_ref_ns, self.offset_ns = start_ref_ns, offset_ns
        if first:
            p = self.plan.profile
            self.log.write(master_events.LIVE_STARTED, run_id=self.plan.run_id, regions=[r.name for r in p.regions],
                           endpoints=[{"name": e.name, "generative": e.generative} for e in p.endpoints],
                           workers=[f"{r.name}-w{i}" for r in p.regions for i in range(r.workers)],
                           phases=self.phases(), slos=[s.model_dump(mode="json") for s in p.slos],
                           start_ref_ns=start_ref_ns, run_s=p.load.warmup_s + p.load.duration_s)

    def phases(self) -> list[dict]:
        """The run's phases, seconds from the start instant."""
        load = self.plan.profile.load
        if load.scenario == "server" and load.arrivals.process not in ("trace", "onoff"):
            segments = rate_segments(load.rate, list(load.phases), load.warmup_s, load.duration_s)
            return [{"name": s.name, "start_s": s.start_s, "end_s": s.end_s} for s in segments]
        out = [{"name": "warm-up", "start_s": 0.0, "end_s": load.warmup_s}] if load.warmup_s else []
        return [*out, {"name": "measured", "start_s": load.warmup_s, "end_s": load.warmup_s + load.duration_s}]

    def add(self, worker: str, region: str, digest: dict) -> None:
        """One worker's LIVE digest."""
        t = max(1, math.ceil(digest["t_s"] - 1e-9))  # second k holds (k-1, k]; a last partial one its own
        view = self.workers.setdefault(worker, WorkerView(worker, region))
        view.last_t_s = max(view.last_t_s, digest["t_s"])
        view.state = {k: v for k, v in digest.items() if k not in ("endpoints", "t_s", "interval_s")}
        window = digest.get("window")
        if window and window.get("lagging"):
            text = (f"{worker}: send-lag window {window['start_s']:.0f}–{window['end_s']:.0f} s lagging (p99 "
                    f"{window['p99_ms']:.2f} ms > {self.plan.profile.generator.send_lag_p99_ms:g} ms)")
            if text not in self.warnings:
                self.warnings.append(text)
        measured = digest["t_s"] > self.plan.profile.load.warmup_s
        for endpoint, part in digest["endpoints"].items():
            key = (region, endpoint)
            self.points.setdefault(t, {}).setdefault(key, Tally()).add(part)
            self.totals.setdefault(key, Tally()).add(part)
            if measured:
                self.measured.setdefault(key, Tally()).add(part)
        self.changed.add(t)

    def gap_began(self, worker: str | None, since_s: float) -> None:
        if worker is not None:
            self.workers.setdefault(worker, WorkerView(worker, worker.rsplit("-w", 1)[0])).gaps.append(
                [round(since_s, 1), None])

    def gap_ended(self, worker: str | None, gap_s: float) -> None:
        view = self.workers.get(worker or "")
        if view is not None and view.gaps and view.gaps[-1][1] is None:
            view.gaps[-1][1] = gap_s

    # -- output ---------------------------------------------------------------------------------------------------
    def elapsed_s(self) -> float:
        if self.start_ref_ns is None:
            return 0.0
        return (time.time_ns() + self.offset_ns - self.start_ref_ns) / 1e9

    def tick(self) -> dict | None:
        """Write the LIVE line of now (None before the start instant is known)."""
        if self.start_ref_ns is None:
            return None
        elapsed = self.elapsed_s()
        points = [{"t_s": t, "region": r, "endpoint": e, **tally.summary(1.0)}
                  for t in sorted(self.changed) for (r, e), tally in sorted(self.points[t].items())]
        self.changed = set()
        seconds = max(1.0, max((w.last_t_s for w in self.workers.values()), default=1.0))
        totals = [{"region": r, "endpoint": e, "generative": self.generative.get(e, False),
                   **tally.summary(seconds), **self._region_state(r)}
                  for (r, e), tally in sorted(self.totals.items())]
        line = {"elapsed_s": round(elapsed, 2), "points": points, "totals": totals, "workers": self._workers(),
                "slos": self.slo_verdicts(), "warnings": list(self.warnings)}
        self.log.write(master_events.LIVE, **line)
        return line

    def _region_state(self, region: str) -> dict:
        """The saturation rule's state over a region's workers: the worst last window, lagging windows so far."""
        mine = [w.state for w in self.workers.values() if w.region == region and w.state]
        windows = [s["window"] for s in mine if s.get("window")]
        sessions = [s["sessions_in_flight"] for s in mine if s.get("sessions_in_flight") is not None]
        return {"send_lag_window_p99_ms": max((w["p99_ms"] for w in windows), default=None),
                "lagging_windows": sum(s.get("lagging_windows", 0) for s in mine),
                "behind": any(s.get("behind") for s in mine),
                "saturation": ("behind" if any(s.get("behind") for s in mine) else
                               "lagging" if any(w.get("lagging") for w in windows) else "ok"),
                "sessions_in_flight": sum(sessions) if sessions else None}

    def _workers(self) -> list[dict]:
        quiet = self.quiet_s()
        names = sorted(set(self.workers) | set(quiet))
        out = []
        for name in names:
            view = self.workers.get(name) or WorkerView(name, name.rsplit("-w", 1)[0])
            s = view.state
            out.append({"worker": name, "region": view.region, "last_t_s": view.last_t_s,
                        "heartbeat_age_s": round(quiet[name], 1) if name in quiet else None,
                        "clock_offset_ms": s["clock_offset_ns"] / 1e6 if "clock_offset_ns" in s else None,
                        "clock_uncertainty_ms": (s["clock_uncertainty_ns"] / 1e6
                                                 if s.get("clock_uncertainty_ns", -1) >= 0 else None),
                        "sent": s.get("sent"), "in_flight": s.get("in_flight"),
                        "lagging_windows": s.get("lagging_windows"), "behind": s.get("behind"),
                        "sessions_in_flight": s.get("sessions_in_flight"), "gaps": view.gaps})
        return out

    def slo_verdicts(self) -> list[dict]:
        """Each SLO's provisional verdict on the measured seconds so far, per region × endpoint it covers."""
        out = []
        for slo in self.plan.profile.slos:
            if slo.metric in PIPELINE_METRICS or slo.metric == "accuracy":
                continue  # judged on whole pipelines, or on graded answers, in the report
            for (region, endpoint), tally in sorted(self.measured.items()):
                if slo.region not in ("*", region) or slo.endpoint not in ("*", endpoint):
                    continue
                if slo.metric in ("ttft", "tpot", "itl") and not self.generative.get(endpoint):
                    continue
                if slo.metric == "latency" and slo.endpoint == "*" and self.generative.get(endpoint):
                    continue  # as the report: a streamed endpoint's goals are ttft, tpot, itl and e2e
                out.append({"metric": slo.metric, "region": region, "endpoint": endpoint,
                            **provisional_verdict(slo.metric, slo.percentile, slo.threshold_ms, slo.threshold,
                                                  tally)})
        return out


def provisional_verdict(metric: str, percentile: float | None, threshold_ms: float | None,
                        threshold: float | None, tally: Tally) -> dict:
    """PASS / FAIL on the live estimate, or WAIT while too few samples reach the percentile's tail."""
    if metric == "error_rate":
        if tally.done == 0:
            return {"target": f"≤ {threshold:.2%}", "estimate": None, "verdict": "WAIT", "n": 0}
        rate = (tally.done - tally.ok) / tally.done
        return {"target": f"≤ {threshold:.2%}", "estimate": f"{rate:.2%}", "n": tally.done,
                "verdict": "PASS" if rate <= threshold else "FAIL"}
    hist = tally.histograms["latency" if metric == "e2e" else metric]
    n = sum(hist.values())
    target = f"p{percentile:g} < {threshold_ms:g} ms"
    value = quantile_ns(hist, percentile / 100)
    if value is None or n * (1 - percentile / 100) < SLO_TAIL_SAMPLES:
        return {"target": target, "estimate": None if value is None else round(value / 1e6, 2), "verdict": "WAIT",
                "n": n}
    return {"target": target, "estimate": round(value / 1e6, 2), "n": n,
            "verdict": "PASS" if value / 1e6 < threshold_ms else "FAIL"}
