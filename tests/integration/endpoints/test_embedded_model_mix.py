"""A weighted model mix for real: `tailrace run` of a gateway endpoint whose requests draw one of the embedded
server's two models by weight, and of agents whose sessions draw one for all their turns — each request asking for
its model (the server's own per-model counts equal tailrace's), the tables split by model, an SLO naming a model
judged on its requests only. (LoRA adapters on vLLM: tests/integration/harness/services/test_vllm.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.analyze_command import write_outputs
from tailrace.contract.layout import RunLayout
from tests.support import assert_valid, make_profile, run_with

pytestmark = pytest.mark.shares_machine


def served_by_model(text: str) -> dict[str, float]:
    """The embedded server's finished requests by model (tailrace:request_success_total)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "tailrace:request_success_total":
                out[s.labels["model_name"]] = out.get(s.labels["model_name"], 0.0) + s.value
    return out


def test_a_weighted_model_mix_per_request_and_per_session(model_repo, tmp_path):
    mix = [{"name": "synthetic_lm", "weight": 3}, {"name": "tiny_lm", "weight": 1}]
    endpoints = [{"name": "gateway", "url": "embedded", "protocol": "openai-chat", "model": mix,
                  "prompts": {"input_tokens": 12, "output_tokens": 6, "count": 8}},
                 {"name": "agents", "url": "embedded", "protocol": "anthropic-messages", "model_draw": "session",
                  "model": [{"name": "synthetic_lm"}, {"name": "tiny_lm"}],
                  "prompts": {"input_tokens": 8, "output_tokens": 4}, "sessions": {"turns": 3, "think_s": 0.05}}]
    profile = make_profile(model_repo, endpoints=endpoints, load={"rate": 24, "duration_s": 5, "warmup_s": 1,
                                                                  "seed": 4},
                           slos=[{"metric": "ttft", "percentile": 90, "threshold_ms": 3000, "endpoint": "gateway",
                                  "model": "tiny_lm"}])
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    analysis = analyze_run(run.run_dir)
    df = analysis.requests
    assert (df["status"] == "ok").all(), df["error"].unique()
    gateway = df[df["endpoint"] == "gateway"]
    share = (gateway["model"] == "tiny_lm").mean()
    assert set(gateway["model"]) == {"synthetic_lm", "tiny_lm"} and 0.08 < share < 0.45, share
    agents = df[df["endpoint"] == "agents"]
    assert agents.groupby("session_id")["model"].nunique().max() == 1  # a session keeps its model
    assert set(agents["model"]) == {"synthetic_lm", "tiny_lm"} and agents["turn"].max() >= 2
    # each request asked for its model: the server's own count per model over the run is ours
    layout = RunLayout(Path(run.run_dir))
    before, after = (served_by_model(layout.metrics_scrape("gateway", stage).read_text()) for stage in ("before", "after"))
    served = {k: v - before.get(k, 0.0) for k, v in after.items()}  # (before: the cold-start probe's request)
    ours = df.groupby("model", observed=True).size().to_dict()
    assert served == {k: float(v) for k, v in ours.items()}, (served, ours)
    summary = analysis.summary
    rows = {(r.endpoint, r.model, r.region): r for r in summary.tokens_by_model}
    measured = gateway[gateway["phase"] > 0]
    for model in ("synthetic_lm", "tiny_lm"):
        assert rows[("gateway", model, "*")].requests == int((measured["model"] == model).sum())
    assert ("agents", "tiny_lm", "*") in rows and all(r.model != "*" for r in summary.tokens_by_model)
    named = [v for v in summary.slos if v.model == "tiny_lm"]
    assert named and {v.endpoint for v in named} == {"gateway"}
    assert sum(v.n for v in named if v.region != "*") == int((measured["model"] == "tiny_lm").sum())
    write_outputs(analysis, run.run_dir / "report")
    page = (run.run_dir / "report" / "index.html").read_text()
    assert "id='tokens-by-model'" in page and "gateway · tiny_lm" in page
    assert "TTFT p99 per region × endpoint · model" in page and page.count("<svg") >= 2
    assert (run.run_dir / "report" / "tables" / "tokens_by_model.csv").exists()
