"""Deltas of Triton-shaped statistics snapshots (endpoints/<name>/stats-before.json, stats-after.json)."""
from __future__ import annotations


def _index(snapshot: dict) -> dict[str, dict]:
    return {m["name"]: m for m in snapshot.get("model_stats", [])}


def endpoint_stat_deltas(stats: dict[str, dict[str, dict]], models: dict[str, str] | None = None) -> list[dict]:
    """Per endpoint × model: request count and mean queue / compute times between the snapshots.

    A server's snapshot covers all its models; `models` (endpoint → model) keeps each endpoint's own.
    """
    rows = []
    for endpoint, snaps in sorted(stats.items()):
        before, after = snaps.get("before"), snaps.get("after")
        if not before or not after:
            continue
        b, a = _index(before), _index(after)
        for model, m in sorted(a.items()):
            if models and endpoint in models and models[endpoint] != model:
                continue
            prev = b.get(model, {"inference_stats": {}, "inference_count": 0, "execution_count": 0})
            d = {}
            for stage, v in m["inference_stats"].items():
                p = prev["inference_stats"].get(stage, {"count": 0, "ns": 0})
                d[stage] = {"count": int(v.get("count", 0)) - int(p.get("count", 0)),
                            "ns": int(v.get("ns", 0)) - int(p.get("ns", 0))}
            n = d.get("success", {}).get("count", 0)
            if n <= 0:
                continue
            rows.append({"endpoint": endpoint, "model": model, "success": n, "fail": d.get("fail", {}).get("count", 0),
                         "inference_count": int(m.get("inference_count", 0)) - int(prev.get("inference_count", 0)),
                         "execution_count": int(m.get("execution_count", 0)) - int(prev.get("execution_count", 0)),
                         **{f"mean_{s}_ms": d[s]["ns"] / d[s]["count"] / 1e6 for s in
                            ("queue", "compute_input", "compute_infer", "compute_output") if d.get(s, {}).get("count")}})
    return rows
