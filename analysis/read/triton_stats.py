"""Server-side statistics (Triton's statistics extension, or the embedded endpoint's twin of it).

Snapshots are saved per endpoint (endpoints/<name>/stats-before.json, stats-after.json, stats-timeline.jsonl);
endpoints that reach the same server and model (an HTTP and a gRPC endpoint on one Triton) share one
server-side counter, so deltas are reported once per (server, model) with the endpoints it covers.
"""
from __future__ import annotations

from typing import Any

from tailrace.contract.summary.tables import EndpointStatistics, ServerTimelinePoint

STAGES = ("queue", "compute_input", "compute_infer", "compute_output")
_EMPTY: dict[str, Any] = {"inference_stats": {}, "inference_count": 0, "execution_count": 0, "batch_stats": []}


def _index(snapshot: dict) -> dict[str, dict]:
    return {m["name"]: m for m in snapshot.get("model_stats", [])}


def model_delta(before: dict | None, after: dict) -> dict:
    """Counter deltas of one model's statistics between two snapshots (pure)."""
    before = before or _EMPTY
    stages = {}
    for stage, v in after.get("inference_stats", {}).items():
        p = before.get("inference_stats", {}).get(stage, {"count": 0, "ns": 0})
        stages[stage] = {"count": int(v.get("count", 0)) - int(p.get("count", 0)),
                         "ns": int(v.get("ns", 0)) - int(p.get("ns", 0))}
    prev_batches = {int(b["batch_size"]): b for b in before.get("batch_stats", [])}
    batches = {}
    for b in after.get("batch_stats", []):
        size = int(b["batch_size"])
        n = int(b["compute_infer"]["count"]) - int(prev_batches.get(size, {}).get("compute_infer", {}).get("count", 0))
        if n > 0:
            batches[size] = n
    return {"stages": stages, "batches": batches,
            "inference_count": int(after.get("inference_count", 0)) - int(before.get("inference_count", 0)),
            "execution_count": int(after.get("execution_count", 0)) - int(before.get("execution_count", 0))}


def _mean_ms(stages: dict, stage: str) -> float | None:
    s = stages.get(stage, {})
    return s["ns"] / s["count"] / 1e6 if s.get("count") else None


def endpoint_stat_deltas(stats: dict[str, dict[str, dict]],
                         models: dict[str, str] | None = None) -> list[EndpointStatistics]:
    """One row per (server, model): requests, failures, mean queue / compute times, batching, and the
    endpoints it covers. `stats` is endpoint → {"before": snapshot, "after": snapshot}; `models`
    (endpoint → model) picks each endpoint's own model out of snapshots that cover a whole server."""
    groups: dict[tuple[str, str], dict] = {}
    for endpoint, snaps in sorted(stats.items()):
        before, after = snaps.get("before"), snaps.get("after")
        if not before or not after:
            continue
        b, a = _index(before), _index(after)
        for model, m in sorted(a.items()):
            if models and endpoint in models and models[endpoint] != model:
                continue
            key = (after.get("server") or endpoint, model)
            if key in groups:
                groups[key]["endpoints"].append(endpoint)
                continue
            d = model_delta(b.get(model), m)
            n = d["stages"].get("success", {}).get("count", 0)
            if n <= 0 and not d["stages"].get("fail", {}).get("count"):
                continue
            executions = d["execution_count"]
            groups[key] = {
                "endpoints": [endpoint], "server": after.get("server"), "kind": after.get("kind", "unknown"),
                "model": model, "success": n, "fail": d["stages"].get("fail", {}).get("count", 0),
                "inference_count": d["inference_count"], "execution_count": executions,
                "mean_batch": d["inference_count"] / executions if executions else None,
                "batch_sizes": {str(k): v for k, v in sorted(d["batches"].items())},
                **{f"mean_{s}_ms": _mean_ms(d["stages"], s) for s in STAGES}}
    return [EndpointStatistics(**row, endpoint=" + ".join(row["endpoints"])) for row in groups.values()]


def requests_per_execution(stat_rows: list[EndpointStatistics]) -> dict[str, float]:
    """Endpoint → requests per execution of its model on its server (1 without dynamic batching, whatever
    each request's own batch size)."""
    out = {}
    for row in stat_rows:
        if row.execution_count and row.success:
            for endpoint in row.endpoints:
                out[endpoint] = max(1.0, row.success / row.execution_count)
    return out


def stats_timeline(timeline: list[dict], model: str) -> list[ServerTimelinePoint]:
    """Interval rows from consecutive periodic snapshots: requests/s, failures and mean queue / compute."""
    points = [(s["t_ns"], _index(s).get(model)) for s in timeline]
    known = [(t, m) for t, m in points if m is not None]
    rows = []
    for (t0, m0), (t1, m1) in zip(known, known[1:]):
        d = model_delta(m0, m1)
        seconds = (t1 - t0) / 1e9
        ok = d["stages"].get("success", {}).get("count", 0)
        if seconds <= 0 or ok < 0:  # a restarted server resets its counters: skip that interval
            continue
        rows.append(ServerTimelinePoint(
            t_ns=t1, interval_s=seconds, success_per_s=ok / seconds, fail=d["stages"].get("fail", {}).get("count", 0),
            mean_batch=d["inference_count"] / d["execution_count"] if d["execution_count"] > 0 else None,
            **{f"mean_{s}_ms": _mean_ms(d["stages"], s) for s in STAGES}))
    return rows
