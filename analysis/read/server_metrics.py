"""The servers' own Prometheus counters, read from a run's before / after scrapes (endpoints/<e>/metrics-*.prom):
the prefix-cache counters of vLLM (`vllm:prefix_cache_queries`, `vllm:prefix_cache_hits`, in tokens) and of the
embedded server (`tailrace:` with the same names), for the endpoint's model."""
from __future__ import annotations

from functools import lru_cache

from prometheus_client.parser import text_string_to_metric_families

PREFIX_CACHE = ("prefix_cache_queries", "prefix_cache_hits")
# what the aborted requests are counted from: the embedded server's request_success_total{finished_reason="abort"},
# vLLM's first-token and end-to-end histograms
ABORT_FAMILIES = ("request_success", "time_to_first_token_seconds", "e2e_request_latency_seconds")


@lru_cache(maxsize=32)
def _families(text: str, mentioned: tuple[str, ...]) -> tuple | None:
    """The metric families of `text`'s lines that mention any of `mentioned` (their # HELP and # TYPE lines too): a
    server's scrape holds every model's histograms, and a statistic reads two or three of its counters — the rest is
    not parsed. None: those lines are not Prometheus' text format. Cached: the endpoints a server serves share its
    scrapes, and more than one statistic reads them (the demo's analysis parsed one 24 KB scrape 24 times: 0.4 s)."""
    lines = "".join(f"{line}\n" for line in text.splitlines() if any(name in line for name in mentioned))
    try:
        return tuple(text_string_to_metric_families(lines))
    except (ValueError, TypeError):
        return None


def prefix_cache_counters(text: str, model: str) -> dict[str, float]:
    """{'queries': …, 'hits': …, 'metric': the family's prefix} of `model` (label model_name or model) in one scrape;
    {} when the server exposes no prefix-cache counters (or the text is not Prometheus' format)."""
    out: dict = {}
    for family in _families(text, PREFIX_CACHE) or ():
        prefix, _, name = family.name.rpartition(":")
        if name not in PREFIX_CACHE:
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total") and family.type == "counter":
                continue
            if sample.labels.get("model_name", sample.labels.get("model")) not in (model, None):
                continue
            key = "queries" if name == "prefix_cache_queries" else "hits"
            out[key] = out.get(key, 0.0) + float(sample.value)
            out["metric"] = f"{prefix}:prefix_cache_queries / _hits" if prefix else "prefix_cache_queries / _hits"
    return out if "queries" in out and "hits" in out else {}


def prefix_cache_deltas(scrapes: dict[str, dict[str, str]], models: dict[str, str]) -> dict[str, dict]:
    """endpoint → {'queries', 'hits', 'metric'}: its model's prefix-cache counters after the run minus before."""
    out = {}
    for endpoint, stages in scrapes.items():
        before = prefix_cache_counters(stages.get("before", ""), models.get(endpoint, ""))
        after = prefix_cache_counters(stages.get("after", ""), models.get(endpoint, ""))
        if after:
            out[endpoint] = {"queries": after["queries"] - before.get("queries", 0.0),
                             "hits": after["hits"] - before.get("hits", 0.0), "metric": after["metric"]}
    return out


def prefix_cache_timeline(samples: list[dict], t0_ns: int) -> list[tuple[float, float]]:
    """(seconds since `t0_ns` at the interval's middle, the hit ratio over the interval) between consecutive
    periodic samples of an endpoint's metrics (metrics-timeline.jsonl) that carry prefix-cache counters."""
    points, previous = [], None
    for sample in samples:
        values = sample.get("samples") or {}
        hits = sum(v for k, v in values.items() if k.split("{")[0].endswith("prefix_cache_hits_total"))
        queries = sum(v for k, v in values.items() if k.split("{")[0].endswith("prefix_cache_queries_total"))
        if not any(k.split("{")[0].endswith("prefix_cache_queries_total") for k in values):
            continue
        if previous is not None and queries > previous[2]:
            middle = (sample["t_ns"] + previous[0]) / 2
            points.append(((middle - t0_ns) / 1e9, (hits - previous[1]) / (queries - previous[2])))
        previous = (sample["t_ns"], hits, queries)
    return points


def aborted_requests(text: str, model: str) -> tuple[float, str] | None:
    """(requests of `model` the server abandoned because their client left, how that is counted) in one scrape;
    None when the server's metrics cannot tell (or the text is not Prometheus' format).

    The embedded server counts them as vLLM names them, `tailrace:request_success_total{finished_reason="abort"}`.
    vLLM's own (0.x, V1 engine) never counts a client's abort there: its output processor drops the request before
    the finished-request statistics are taken. What its metrics do tell is the streams that began and never finished:
    every request's first token is in `vllm:time_to_first_token_seconds`, only finished ones in
    `vllm:e2e_request_latency_seconds` — the difference counts the aborts after a first token."""
    families = _families(text, ABORT_FAMILIES)
    if families is None:
        return None
    samples: dict[str, float] = {}
    for family in families:
        for sample in family.samples:
            if sample.labels.get("model_name", model) != model:
                continue
            key = sample.name + ("{abort}" if sample.labels.get("finished_reason") == "abort" else "")
            samples[key] = samples.get(key, 0.0) + float(sample.value)
    if "tailrace:request_success_total{abort}" in samples or "tailrace:request_success_total" in samples:
        return samples.get("tailrace:request_success_total{abort}", 0.0), \
            'tailrace:request_success_total{finished_reason="abort"}'
    first, finished = "vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count"
    if first in samples and finished in samples:
        return samples[first] - samples[finished], f"{first} − {finished} (begun, never finished)"
    return None


def aborted_deltas(scrapes: dict[str, dict[str, str]], models: dict[str, str]) -> dict[str, tuple[float, str]]:
    """endpoint → (its model's aborted requests after the run minus before, how they are counted): the server's own
    count of the streams its clients abandoned (an endpoint whose server cannot tell is absent)."""
    out = {}
    for endpoint, stages in scrapes.items():
        after = aborted_requests(stages.get("after", ""), models.get(endpoint, ""))
        if after is not None:
            before = aborted_requests(stages.get("before", ""), models.get(endpoint, ""))
            out[endpoint] = (after[0] - (before[0] if before else 0.0), after[1])
    return out
