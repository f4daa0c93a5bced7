"""deploy/grafana/tailrace.json queries only what live workers export: during a real run, every metric name its
queries use is in each worker's /metrics, labelled with the run."""
from __future__ import annotations

import json
import re

import httpx
import pytest

from tests import ROOT
from tests.support import make_profile, run_with, sleep_until_measuring

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)

DASHBOARD = ROOT / "deploy" / "grafana" / "tailrace.json"


def _queried_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    expressions += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    return {m for e in expressions for m in re.findall(r"\btailrace_[a-z_]+\b", e)}


def test_every_metric_the_dashboard_queries_is_in_a_live_workers_metrics(model_repo, tmp_path):
    queried = _queried_metrics()
    assert {"tailrace_requests_total", "tailrace_request_latency_seconds_bucket", "tailrace_send_lag_seconds_bucket",
            "tailrace_in_flight_requests"} <= queried
    scraped: dict[str, str] = {}

    def scrape(run):
        sleep_until_measuring(run, 2.0)
        for name, port in run.metrics_ports.items():
            scraped[name] = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text

    run, manifest = run_with(make_profile(model_repo, load__duration_s=6), tmp_path, during=scrape)
    assert scraped and set(scraped) == set(run.metrics_ports) == set(run.local_workers.processes)
    for worker, text in scraped.items():
        exported = set(re.findall(r"^(tailrace_[a-z_]+)", text, re.M))
        assert queried <= exported, (worker, queried - exported)
        assert f'run_id="{manifest["run_id"]}"' in text
