"""The servers' own counters read from their before / after scrapes: the prefix cache's queries and hits, the requests
abandoned by their clients — from only the lines that name them, each distinct scrape parsed once."""
from __future__ import annotations

import pytest

from tailrace.analysis.read import server_metrics
from tailrace.analysis.read.server_metrics import (
    aborted_deltas,
    aborted_requests,
    prefix_cache_counters,
    prefix_cache_deltas,
)


def _histogram(name: str, model: str, count: int) -> str:
    return (f"# HELP {name} a histogram\n# TYPE {name} histogram\n"
            f'{name}_bucket{{le="0.1",model_name="{model}"}} {count // 2}\n'
            f'{name}_bucket{{le="+Inf",model_name="{model}"}} {count}\n'
            f'{name}_count{{model_name="{model}"}} {count}\n{name}_sum{{model_name="{model}"}} {count * 0.05}\n')


def embedded_scrape(queries: int, hits: int, aborts: int) -> str:
    """As the embedded server exposes them (prometheus_client's text: a counter's TYPE line names its _total
    sample, a _created gauge beside it): many models' histograms around two models' counters."""
    text = "".join(_histogram(f"tailrace:model_{i}_latency_seconds", f"m{i}", 100 + i) for i in range(20))
    text += "# HELP tailrace:prefix_cache_queries_total tokens asked\n# TYPE tailrace:prefix_cache_queries_total counter\n"
    text += f'tailrace:prefix_cache_queries_total{{model_name="lm"}} {queries}\n'
    text += 'tailrace:prefix_cache_queries_total{model_name="other"} 999\n'
    text += "# HELP tailrace:prefix_cache_hits_total tokens found\n# TYPE tailrace:prefix_cache_hits_total counter\n"
    text += f'tailrace:prefix_cache_hits_total{{model_name="lm"}} {hits}\n'
    text += 'tailrace:prefix_cache_hits_total{model_name="other"} 111\n'
    text += "# HELP tailrace:request_success_total finished\n# TYPE tailrace:request_success_total counter\n"
    text += 'tailrace:request_success_total{finished_reason="stop",model_name="lm"} 50\n'
    text += f'tailrace:request_success_total{{finished_reason="abort",model_name="lm"}} {aborts}\n'
    text += "# HELP tailrace:request_success_created finished\n# TYPE tailrace:request_success_created gauge\n"
    text += 'tailrace:request_success_created{finished_reason="abort",model_name="lm"} 1.7965631466648676e+09\n'
    return text


@pytest.fixture(autouse=True)
def fresh_cache():
    server_metrics._families.cache_clear()
    yield
    server_metrics._families.cache_clear()


def test_the_prefix_cache_and_the_aborts_of_one_model_among_many_metrics():
    text = embedded_scrape(400, 150, 7)
    assert prefix_cache_counters(text, "lm") == {"queries": 400.0, "hits": 150.0,
                                                 "metric": "tailrace:prefix_cache_queries / _hits"}
    assert aborted_requests(text, "lm") == (7.0, 'tailrace:request_success_total{finished_reason="abort"}')
    assert prefix_cache_counters(text, "nobody") == {}  # no sample of that model


def test_vllms_aborts_are_the_streams_begun_and_never_finished():
    text = (_histogram("vllm:time_to_first_token_seconds", "lm", 40) + _histogram("vllm:e2e_request_latency_seconds",
                                                                                   "lm", 33)
            + _histogram("vllm:time_per_output_token_seconds", "lm", 500))
    assert aborted_requests(text, "lm") == (7.0, "vllm:time_to_first_token_seconds_count − "
                                                 "vllm:e2e_request_latency_seconds_count (begun, never finished)")
    assert prefix_cache_counters(text, "lm") == {}  # a server without prefix-cache counters


def test_what_is_not_prometheus_text_tells_nothing():
    page = "<html><body>502 Bad Gateway</body></html>"
    assert prefix_cache_counters(page, "lm") == {} and aborted_requests(page, "lm") is None
    broken = "tailrace:prefix_cache_hits_total{model_name=lm 3\ntailrace:request_success_total{{ 1\n"
    assert prefix_cache_counters(broken, "lm") == {} and aborted_requests(broken, "lm") is None


def test_the_run_is_the_after_scrape_less_the_before_and_each_scrape_is_parsed_once(monkeypatch):
    parsed: list[int] = []
    real = server_metrics.text_string_to_metric_families
    monkeypatch.setattr(server_metrics, "text_string_to_metric_families",
                        lambda text: parsed.append(len(text)) or real(text))
    before, after = embedded_scrape(100, 40, 2), embedded_scrape(400, 150, 7)
    scrapes = {e: {"before": before, "after": after} for e in ("chat", "embed", "rerank")}  # one server's
    models = dict.fromkeys(scrapes, "lm")
    assert prefix_cache_deltas(scrapes, models) == dict.fromkeys(
        scrapes, {"queries": 300.0, "hits": 110.0, "metric": "tailrace:prefix_cache_queries / _hits"})
    assert aborted_deltas(scrapes, models) == dict.fromkeys(
        scrapes, (5.0, 'tailrace:request_success_total{finished_reason="abort"}'))
    # two scrapes, each parsed once per statistic (not once per endpoint), and only the lines the statistic reads
    assert len(parsed) == 4 and max(parsed) < len(after) / 5
