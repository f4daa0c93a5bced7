"""The per-variant numbers a model-variant decision needs, read from one run (accuracy from responses,
latency with CIs, capacity, peak server memory, model size; for generative variants TTFT, TPOT and output tokens/s)
and the decision itself."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tailrace.analysis.decide.decision import DEFAULT_WEIGHTS, GENERATIVE_WEIGHTS, decide
from tailrace.analysis.read.triton_stats import requests_per_execution
from tailrace.analysis.stats.correlation import correlated_percentiles_ci, time_order
from tailrace.analysis.stats.hardware.attribution import EndpointServing, MonitorScope
from tailrace.analysis.stats.outcomes.accuracy import JUDGED
from tailrace.contract.plan import RunPlan
from tailrace.contract.profile import Endpoint
from tailrace.contract.summary.sections import Decision, VariantRow
from tailrace.contract.summary.tables import EndpointStatistics, Hardware, HardwareEndpointRow, HardwareRow


def _peak_rss_mb(timeline: list[dict]) -> float | None:
    peaks = [s["samples"].get("tailrace_server_peak_rss_bytes") or s["samples"].get("process_resident_memory_bytes")
             for s in timeline]
    peaks = [p for p in peaks if p]
    return max(peaks) / 2**20 if peaks else None


def _slots(plan: RunPlan, endpoint: Endpoint) -> int:
    """Execution slots of the server behind `endpoint` (a started Triton's instances, the embedded slots)."""
    if plan.endpoint_kinds.get(endpoint.name) == "triton":
        return plan.profile.triton.instances
    return plan.profile.embedded.slots.get(endpoint.model, 1) if isinstance(endpoint.model, str) else 1


def endpoint_serving(plan: RunPlan, stat_rows: list[EndpointStatistics]) -> dict[str, EndpointServing]:
    """Each endpoint of one model (not a mix): its model and execution slots × requests per execution seen."""
    batch = requests_per_execution(stat_rows)
    return {e.name: EndpointServing(e.model, _slots(plan, e) * batch.get(e.name, 1.0), e.generative or e.pooling)
            for e in plan.profile.endpoints if isinstance(e.model, str)}


def monitor_scopes(profile) -> list[MonitorScope]:
    """The profile's monitors: whose requests each one's energy per request counts, its declared watts per core."""
    return [MonitorScope(m.name, tuple(m.endpoints) if m.endpoints else None, m.watts_per_core)
            for m in profile.monitors]


def hardware_of(name: str, hardware: Hardware | None) -> dict:
    """A variant's energy per request and exporter-measured memory over its measured phases: measured where a
    monitor watches it alone with an energy counter; else an estimate — the process's CPU-seconds where a monitor
    watches it alone, else its model's — × the declared watts per core (`energy_basis` says which); {} where no
    monitor says."""
    section = hardware or Hardware()
    alone: list[HardwareRow] = [r for r in section.rows if r.endpoints == [name]]
    mine: list[HardwareEndpointRow] = [r for r in section.endpoints if r.endpoint == name]
    out: dict = {}
    for rows, key, basis in ((mine, "energy_per_request_mj", "measured"),
                             (alone, "estimated_energy_per_request_mj", "estimate: process CPU"),
                             (mine, "estimated_energy_per_request_mj", "estimate: model CPU")):
        found = [(getattr(r, key), r.requests) for r in rows if getattr(r, key) is not None and r.requests]
        if found:
            requests = sum(n for _, n in found)
            out |= {"energy_mj": sum(v * n for v, n in found) / requests, "energy_basis": basis}
            break
    peaks = [v for r in alone for v in (r.gpu_memory_max_bytes, r.memory_max_bytes) if v is not None]
    if peaks:
        out["exporter_memory_mb"] = max(peaks) / 2**20
    return out


def _judged(rows: pd.DataFrame) -> pd.DataFrame | None:
    """The graded requests whose answers were judged (prompts.graded: right, wrong, unparsable); None: none."""
    if "grade" not in rows:
        return None
    grades = rows["grade"].astype(str)
    judged = rows[grades.isin(JUDGED).to_numpy()]
    return judged.assign(grade=grades[judged.index]) if len(judged) else None


def per_sample_correct(ok: pd.DataFrame) -> dict[int, bool]:
    """Held-out sample → whether the variant answered it correctly (batch-1 requests; deterministic per model); a
    graded LLM endpoint's: item → its first judged answer right or not."""
    graded = _judged(ok)
    if graded is not None:
        first = graded.sort_values("t_intended_ref", kind="stable") if "t_intended_ref" in graded else graded
        return {int(k): v == "correct" for k, v in first.groupby("item")["grade"].first().items()}
    single = ok[(ok["batch_size"] == 1) & (ok["correct_count"] >= 0)]
    return {int(k): bool(v) for k, v in single.groupby("sample_index")["correct"].first().items()}


def server_compute_ms(stat_rows: list[EndpointStatistics]) -> dict[str, float]:
    """Endpoint → mean compute (input + infer + output) per inference, from the server's statistics deltas
    (for servers that do not report timings in their responses, like Triton)."""
    out = {}
    for r in stat_rows:
        if not r.inference_count or r.mean_compute_infer_ms is None:
            continue
        per_execution = (r.mean_compute_input_ms or 0.0) + r.mean_compute_infer_ms + (r.mean_compute_output_ms or 0.0)
        per_inference = per_execution * (r.execution_count or 0) / r.inference_count
        for endpoint in r.endpoints:
            out[endpoint] = per_inference
    return out


def token_samples(ok: pd.DataFrame) -> dict[str, np.ndarray]:
    """A generative variant's successful streams' TTFT and TPOT (ms, in time order; a stream of one token has no
    TPOT)."""
    if "ttft_ns" not in ok:
        return {}
    if "t_intended_ref" in ok:  # time order: the intervals count the independent samples a series is worth
        ok = ok.iloc[time_order(ok["t_intended_ref"].to_numpy())]
    ttft = ok["ttft_ns"].to_numpy(dtype=float)
    tokens = ok["output_tokens"].to_numpy(dtype=float)
    first, last = ok["t_first_token"].to_numpy(dtype=float), ok["t_last_token"].to_numpy(dtype=float)
    many = (tokens > 1) & (first >= 0)
    return {"ttft": ttft[ttft >= 0] / 1e6, "tpot": (last[many] - first[many]) / (tokens[many] - 1) / 1e6}


def _token_metrics(ok: pd.DataFrame, duration_s: float) -> dict[str, float | list[float | None] | None]:
    """TTFT / TPOT p50 and p95 with intervals, and output tokens/s, of a generative variant (VariantRow's fields)."""
    out: dict[str, float | list[float | None] | None] = {}
    for kind, values in token_samples(ok).items():
        for p, est in correlated_percentiles_ci(values, (50, 95)).items():
            out[f"{kind}_p{p}_ms"], out[f"{kind}_p{p}_ci"] = est.value, [est.ci_low, est.ci_high]
    tokens = ok["output_tokens"].to_numpy(dtype=float) if "output_tokens" in ok else np.empty(0)
    out["output_tokens_per_s"] = float(tokens[tokens > 0].sum() / duration_s) if duration_s else None
    return out


def _capacity(name: str, endpoint: Endpoint, data, mean_compute_ms: float | None, from_responses: bool,
              per_execution: dict[str, float] | None) -> tuple[float | None, str | None]:
    """(capacity in requests/s, where it came from): the profile's measured value, else slots over the mean compute
    — with dynamic batching a request's compute is its batch's, scaled by the requests per execution seen — for a
    one-shot model (a continuous batch's compute is not one request's: an LLM's, a pooling model's)."""
    profile = data.plan.profile
    override = profile.decision.capacity_rps.get(name) if profile.decision else None
    if override:
        return float(override), "measured (profile)"
    if mean_compute_ms and not endpoint.generative and not endpoint.pooling:
        batch = (per_execution or {}).get(name, 1.0) if from_responses else 1.0
        return (_slots(data.plan, endpoint) * batch * 1000 / mean_compute_ms,
                "estimate: slots / mean compute" + (f" × {batch:.1f} requests per execution" if batch > 1.0 else ""))
    return None, None


def _memory_shared_with(name: str, endpoint_stats: dict) -> list[str]:
    """The other endpoints served by the same server process as `name` (their memory is one)."""
    server = endpoint_stats.get(name, {}).get("after", {}).get("server")
    return sorted(n for n, snaps in endpoint_stats.items()
                  if n != name and server and snaps.get("after", {}).get("server") == server)


def variant_row(name: str, g: pd.DataFrame, data, stats_compute_ms: dict[str, float] | None = None,
                per_execution: dict[str, float] | None = None) -> tuple[VariantRow, np.ndarray]:
    """One variant's row and its measured latencies (ms, successful requests of the measured phases)."""
    profile = data.plan.profile
    endpoint = next(e for e in profile.endpoints if e.name == name)
    measured = g[g["phase"] > 0]
    ok = measured[measured["status"] == "ok"]
    lat = ok["latency_ns"].to_numpy(dtype=float) / 1e6
    if "t_intended_ref" in ok:
        lat = lat[time_order(ok["t_intended_ref"].to_numpy())]
    checked = ok[ok["correct_count"] >= 0]  # -1: the endpoint has no check
    samples, correct = int(checked["batch_size"].sum()), int(checked["correct_count"].sum())
    graded = _judged(measured)
    if graded is not None:  # an LLM's graded answers: accuracy over the judged ones
        samples, correct = len(graded), int((graded["grade"] == "correct").sum())
    at = correlated_percentiles_ci(lat, (50, 95, 99))
    compute = ok["server_compute_ns"]
    compute = compute[compute >= 0]
    from_responses = len(compute) > 0
    mean_compute_ms = float(compute.mean() / 1e6) if from_responses else (stats_compute_ms or {}).get(name)
    capacity_rps, capacity_source = _capacity(name, endpoint, data, mean_compute_ms, from_responses, per_execution)
    meta = data.models.get(name) or {}
    row = VariantRow(
        name=name, model=endpoint.model, protocol=endpoint.protocol, requests=int(len(measured)),
        errors=int(len(measured) - len(ok)), samples=samples, correct=correct if samples else None,
        accuracy=correct / samples if samples else None,
        p50_ms=at[50].value, p50_ci=[at[50].ci_low, at[50].ci_high], p95_ms=at[95].value,
        p95_ci=[at[95].ci_low, at[95].ci_high], p99_ms=at[99].value, p99_ci=[at[99].ci_low, at[99].ci_high],
        **(_token_metrics(ok, profile.load.duration_s) if endpoint.generative else {}),
        mean_compute_ms=mean_compute_ms, capacity_rps=capacity_rps, capacity_source=capacity_source,
        memory_mb=_peak_rss_mb(data.metrics_timelines.get(name, [])),
        memory_shared_with=_memory_shared_with(name, data.endpoint_stats),
        model_size_bytes=meta.get("size_bytes"), parameters=meta.get("parameters"),
        build_accuracy=meta.get("heldout_accuracy"))
    return row, lat


def variant_decision(df: pd.DataFrame, data, stat_rows: list[EndpointStatistics],
                     hardware: Hardware | None = None) -> Decision | None:
    """The decision section of summary.json, or None when the profile asks for none. `stat_rows`: the
    run's server statistics deltas (analysis/read/triton_stats.py's endpoint_stat_deltas); `hardware`: the run's
    hardware section (energy per request, exporters' memory)."""
    spec = data.plan.profile.decision
    if spec is None:
        return None
    baseline = spec.baseline
    names = spec.variants or [e.name for e in data.plan.profile.endpoints if e.name != baseline]
    stats_compute = server_compute_ms(stat_rows)
    per_execution = requests_per_execution(stat_rows)
    rows, latencies, correctness, token_latencies = [], {}, {}, {}
    generative = {e.name for e in data.plan.profile.endpoints if e.generative}
    for name in names:
        g = df[df["endpoint"] == name]
        row, lat = variant_row(name, g, data, stats_compute, per_execution)
        row = row.model_copy(update=hardware_of(name, hardware))
        if row.memory_mb is None and row.exporter_memory_mb is not None:  # a monitor of it alone says
            row.memory_mb, row.memory_source = row.exporter_memory_mb, "exporter"
        latencies[name] = lat
        if name in generative:
            token_latencies[name] = token_samples(g[(g["phase"] > 0) & (g["status"] == "ok")])
        answered = per_sample_correct(g[(g["phase"] > 0) & (g["status"] == "ok")])
        if answered:
            correctness[name] = answered
            row.distinct_samples, row.accuracy_distinct = len(answered), sum(answered.values()) / len(answered)
        rows.append(row)
    weights = dict(spec.weights or (GENERATIVE_WEIGHTS if names and set(names) <= generative else DEFAULT_WEIGHTS))
    result = decide(rows, latencies, weights, spec.constraints.model_dump(), correctness, token_latencies)
    if baseline:
        base, _ = variant_row(baseline, df[df["endpoint"] == baseline], data)
        result.baseline = base
        for v in result.variants:
            if v.model == base.model and v.p50_ms is not None and base.p50_ms is not None:
                v.serving_overhead_p50_ms = v.p50_ms - base.p50_ms
                v.model_share_of_p50 = base.p50_ms / v.p50_ms if v.p50_ms else None
    return result
