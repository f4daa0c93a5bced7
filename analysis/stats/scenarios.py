"""What each scenario reports (after MLPerf Inference), and statistics per phase of the rate schedule (pure)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import group_positions, ms_at
from tailrace.analysis.stats.correlation import TimeOrder, correlated_percentiles_ci, time_order
from tailrace.analysis.stats.latency import ONE_SHOT, STREAM, accuracy_of
from tailrace.contract.profile import Profile
from tailrace.contract.rates import Segment, describe_arrivals, load_segments
from tailrace.contract.records import CANCELLED
from tailrace.contract.summary.sections import Scenario
from tailrace.contract.summary.tables import PhaseRow

_TIME = "t_intended_ref"


def _in_time_ms(rows: pd.DataFrame) -> np.ndarray:
    """The rows' latencies (ms) in intended-send order: the order their correlation is measured in."""
    latency = rows["latency_ns"].to_numpy(dtype=float) / 1e6
    return latency[time_order(rows[_TIME].to_numpy())] if _TIME in rows else latency


def phase_segments(profile: Profile) -> list[Segment]:
    """The profile's rate segments (warm-up first when there is one); [] for closed-loop scenarios."""
    load = profile.load
    if load.scenario != "server":
        return []
    return load_segments(load)


def phase_names(profile: Profile) -> dict[int, str]:
    """Phase number → name (0 = warm-up)."""
    segments = phase_segments(profile)
    warm = profile.load.warmup_s > 0
    if not segments:
        return {0: "warm-up", 1: "measured"}
    return {i + (0 if warm else 1): s.name for i, s in enumerate(segments)}


def phase_rates(profile: Profile) -> dict[int, float | None]:
    """Phase number → the offered rate of the whole load in it (requests/s over every endpoint and pipeline; the
    mean of a ramp or spike; None where a trace sets its own)."""
    warm = profile.load.warmup_s > 0
    return {i + (0 if warm else 1): (s.expected / s.width_s if s.expected and s.width_s > 0 else None)
            for i, s in enumerate(phase_segments(profile))}


def phase_boundaries_s(profile: Profile) -> list[float]:
    """Start of every phase after the first, in seconds of the run (for the time plots)."""
    segments = phase_segments(profile)
    if segments:
        return [s.start_s for s in segments[1:]]
    return [profile.load.warmup_s] if profile.load.warmup_s else []


def per_phase_table(df: pd.DataFrame, profile: Profile, order: TimeOrder | None = None,
                    streamed: frozenset[str] = frozenset()) -> list[PhaseRow]:
    """Per phase: requests, errors, requests their client cancelled (neither: as the latency table counts them),
    intended vs achieved rate, and p50 / p95 / p99 with CIs (ms). `order`: the time
    order of `df`'s rows (TimeOrder of its t_intended_ref), when the caller found it. A run that mixes one-shot
    endpoints with `streamed` (generative) ones has a row per phase and kind: a stream's latency is its E2E, never
    pooled with a one-shot latency; each kind's intended rate is its endpoints' share of the phase's."""
    names = phase_names(profile)
    segments = phase_segments(profile)
    warm = profile.load.warmup_s > 0
    rows = []
    ok_rows = (df["status"] == "ok").to_numpy()
    cancelled_rows = (df["status"] == CANCELLED).to_numpy()
    latency_ns = df["latency_ns"].to_numpy()
    times = df[_TIME].to_numpy() if _TIME in df else None
    weights = {e.name: e.weight for e in profile.endpoints}
    pipelines = getattr(profile, "pipelines", ())
    staged = {s.endpoint for p in pipelines for s in p.stages}  # a pipeline's stages: no intended rate
    kinds = sorted({STREAM if name in streamed else ONE_SHOT for name in weights}) or [ONE_SHOT]
    is_stream = df["endpoint"].isin(streamed).to_numpy() if len(kinds) > 1 else None
    for phase, all_idx in group_positions(df, ["phase"]).items():  # ascending positions: each phase in row order
        for kind in kinds:
            idx = all_idx if is_stream is None else all_idx[is_stream[all_idx] == (kind == STREAM)]
            share = sum(w for name, w in weights.items() if (name in streamed) == (kind == STREAM)) / \
                (sum(weights.values()) + sum(p.weight for p in pipelines)) if weights else 1.0
            ok_idx = idx[ok_rows[idx]]
            ok = ms_at(latency_ns, ok_idx if times is None else order.of(ok_idx, times) if order is not None
                       else ok_idx[time_order(times[ok_idx])])  # in time order
            cancelled = int(np.count_nonzero(cancelled_rows[idx]))
            row = {"phase": phase, "name": names.get(phase, str(phase)), "kind": kind, "count": int(len(idx)),
                   "errors": int(len(idx) - len(ok_idx) - cancelled), "cancelled": cancelled}
            seg_index = phase - (0 if warm else 1)
            if 0 <= seg_index < len(segments):
                seg = segments[seg_index]
                row.update({"start_s": seg.start_s, "end_s": seg.end_s,  # a trace's rate is its own: none intended
                            "intended_rate": seg.expected * share / seg.width_s if seg.expected and not any(
                                (e.sessions is not None or e.name in staged) and (e.name in streamed) == (kind == STREAM)
                                for e in profile.endpoints) else None,
                            "achieved_rate": len(idx) / seg.width_s})
            for p, est in correlated_percentiles_ci(ok, (50, 95, 99)).items():
                row[f"p{p}_ms"], row[f"p{p}_ci"] = est.value, [est.ci_low, est.ci_high]
            rows.append(PhaseRow(**row))
    return rows


def _max_concurrency(sent: np.ndarray, done: np.ndarray) -> int:
    """The most intervals [sent, done) open at one instant."""
    if len(sent) == 0:
        return 0
    events = np.concatenate([np.stack([sent, np.ones_like(sent)], 1), np.stack([done, -np.ones_like(done)], 1)])
    events = events[np.lexsort((events[:, 1], events[:, 0]))]  # at equal times, a completion comes first
    return int(np.cumsum(events[:, 1]).max())


def _percentile_rows(measured: pd.DataFrame, percentile: float) -> list[dict]:
    rows = []
    for (endpoint, region), g in measured.groupby(["endpoint", "region"], sort=True):
        ok = g[g.status == "ok"]
        est = correlated_percentiles_ci(_in_time_ms(ok), (percentile,))[percentile]
        rows.append({"endpoint": endpoint, "region": region, "queries": int(len(g)), "errors": int(len(g) - len(ok)),
                     f"p{percentile:g}_ms": est.value, "ci_low": est.ci_low, "ci_high": est.ci_high,
                     "note": est.as_dict()["note"]})
    return rows


def scenario_summary(df: pd.DataFrame, profile: Profile, worker_summaries: dict[str, dict]) -> Scenario:
    """The scenario's own numbers: single-stream p90, multi-stream p99 per query and missed intervals,
    offline samples/s. `df` holds every row (phase 0 = warm-up); `worker_summaries` come from worker.json."""
    load = profile.load
    scenario = load.scenario
    out: dict = {"scenario": scenario}
    if scenario == "server":  # open loop: its numbers are the latency table's
        return Scenario(scenario=scenario, arrivals=describe_arrivals(load))
    measured = df[df["phase"] > 0]
    if scenario == "single-stream":
        out["p90"] = _percentile_rows(measured, 90)
        out["max_in_flight_per_region"] = {
            region: _max_concurrency(g["t_sent_ref"].to_numpy(), g["t_done_ref"].to_numpy())
            for region, g in df.groupby("region")}
        out["queries_per_s"] = len(measured) / load.duration_s
    elif scenario == "multi-stream":
        out["p99"] = _percentile_rows(measured, 99)
        regions: dict[str, dict] = {}
        for s in worker_summaries.values():
            st = (s or {}).get("scenario") or {}
            r = regions.setdefault(s["region"], {"intervals": 0, "missed": 0})
            r["intervals"] += st.get("intervals_measured", 0)
            r["missed"] += st.get("missed_measured", 0)
        for r in regions.values():
            r["missed_fraction"] = r["missed"] / r["intervals"] if r["intervals"] else None
        out["intervals"] = regions
        out["interval_ms"], out["samples_per_query"] = load.interval_ms, load.samples_per_query
    elif scenario == "offline":
        ok = measured[measured.status == "ok"]
        duration = load.duration_s
        out["samples_per_s"] = float(ok["batch_size"].sum() / duration)
        out["batches_per_s"] = float(len(ok) / duration)
        out["per_region"] = [{"region": region, "samples_per_s": float(g["batch_size"].sum() / duration),
                              "batches": int(len(g)),
                              "p50_batch_ms": float(np.percentile(g["latency_ns"], 50) / 1e6) if len(g) else None}
                             for region, g in ok.groupby("region", sort=True)]
        out["accuracy"] = accuracy_of(ok)
        out["batch"], out["concurrency_per_worker"] = load.offline_batch, load.offline_concurrency
    return Scenario.model_validate(out)
