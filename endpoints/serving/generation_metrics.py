"""Prometheus metrics of the embedded generative models, named after vLLM's (`vllm:` → `tailrace:`), so what scrapes a
real vLLM's /metrics reads the embedded server's the same way: requests running and waiting, prompt and generation
tokens, finished requests by reason, and per-request histograms of time to first token, inter-token latency,
end to end, queue, prefill and decode time (seconds, measured by the server from the request's arrival)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "tailrace:"
_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                    20.0, 40.0, 80.0)
_ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
                0.5, 0.75, 1.0, 2.5)


class GenerationMetrics:
    """One registry's generative metrics, labelled by model_name."""

    def __init__(self, registry: CollectorRegistry) -> None:
        label = ["model_name"]
        self.running = Gauge(PREFIX + "num_requests_running", "Requests in the running batch", label,
                             registry=registry)
        self.waiting = Gauge(PREFIX + "num_requests_waiting", "Requests waiting to be admitted", label,
                             registry=registry)
        self.prompt_tokens = Counter(PREFIX + "prompt_tokens", "Prompt tokens prefilled", label, registry=registry)
        self.generation_tokens = Counter(PREFIX + "generation_tokens", "Tokens generated", label, registry=registry)
        self.success = Counter(PREFIX + "request_success", "Requests finished", label + ["finished_reason"],
                               registry=registry)
        # vLLM's prefix-cache counters, in tokens: prompt tokens looked up, and of them found cached
        self.prefix_queries = Counter(PREFIX + "prefix_cache_queries", "Prompt tokens looked up in the prefix cache",
                                      label, registry=registry)
        self.prefix_hits = Counter(PREFIX + "prefix_cache_hits", "Prompt tokens found in the prefix cache", label,
                                   registry=registry)
        self.cache_usage = Gauge(PREFIX + "kv_cache_usage_perc", "Fraction of the prefix cache's blocks in use",
                                 label, registry=registry)
        self.refused = Counter(PREFIX + "request_refused", "Requests refused because the waiting queue was full",
                               label, registry=registry)

        def histogram(name: str, text: str, buckets=_LATENCY_BUCKETS) -> Histogram:
            return Histogram(PREFIX + name, text, label, buckets=buckets, registry=registry)

        self.ttft = histogram("time_to_first_token_seconds", "Arrival to the first token generated")
        self.itl = histogram("inter_token_latency_seconds", "Between consecutive tokens of a request", _ITL_BUCKETS)
        self.e2e = histogram("e2e_request_latency_seconds", "Arrival to the last token generated")
        self.queue = histogram("request_queue_time_seconds", "Arrival to admission into the running batch")
        self.prefill = histogram("request_prefill_time_seconds", "Admission to the first token")
        self.decode = histogram("request_decode_time_seconds", "First token to the last")
