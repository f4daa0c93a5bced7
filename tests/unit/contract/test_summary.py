"""A run's result is one typed object (contract/summary.py) and summary.json its serialisation: a real run's
summary (the demo's, written as version 1) reads, round-trips exactly and validates against the documented JSON
Schema; a wrong one is refused naming the file and the field."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tailrace.contract.summary import SUMMARY_VERSION, RunSummary, SummaryError, summary_schema
from tests import ROOT

DEMO = Path(__file__).parent / "data" / "demo_summary.json"


def test_a_real_runs_summary_round_trips_and_is_read_by_attribute():
    raw = json.loads(DEMO.read_text())
    s = RunSummary.from_json(DEMO.read_text(), str(DEMO))
    assert s.to_dict() == raw and json.loads(s.to_json()) == raw  # nothing added, nothing lost, version kept
    assert s.summary_version == 1 and s.verdict == raw["verdict"] and s.input.rows_read == raw["input"]["rows_read"]
    overall = s.latency_row()
    first_overall = next(r for r in raw["latency"] if r["endpoint"].startswith("*") and r["region"] == "*")
    assert (overall.endpoint, overall.count) == (first_overall["endpoint"], first_overall["count"])
    assert overall.p99.value == first_overall["percentiles"]["p99"]["value"]
    stream = s.overall_tokens()
    assert stream is not None and stream.ttft.at("p50").value == next(
        r for r in raw["tokens"] if r["endpoint"] == "*" and r["region"] == "*")["ttft_ms"]["p50"]["value"]
    assert all(type(v).__name__ == "SloVerdict" for v in s.slos) and s.queueing[0].utilization >= 0
    assert s.manifest.host_cpu is not None and s.manifest.versions["tailrace"]


def test_the_documented_schema_is_the_models_and_a_real_summary_validates_against_it():
    documented = json.loads((ROOT / "docs" / "summary.schema.json").read_text())
    assert documented == summary_schema(), "docs/summary.schema.json is stale: python -m tailrace.contract.summary"
    jsonschema.validate(json.loads(DEMO.read_text()), documented)
    broken = json.loads(DEMO.read_text()) | {"valid": "maybe"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, documented)


def test_a_summary_this_tailrace_cannot_read_is_refused_naming_the_file_and_the_field():
    raw = json.loads(DEMO.read_text())
    with pytest.raises(SummaryError, match=r"^run/summary.json: latency\.0\.count: "):
        RunSummary.of(raw | {"latency": [raw["latency"][0] | {"count": "many"}]}, "run/summary.json")
    with pytest.raises(SummaryError, match=r"summary_version 99 is not one this tailrace reads"):
        RunSummary.of(raw | {"summary_version": 99})
    with pytest.raises(SummaryError, match="not JSON"):
        RunSummary.from_json("{", "x.json")
    assert RunSummary.of(raw | {"summary_version": SUMMARY_VERSION}).summary_version == SUMMARY_VERSION


def test_keys_a_newer_writer_adds_are_kept():
    raw = json.loads(DEMO.read_text())
    newer = raw | {"energy": {"joules": 12.5}, "latency": [raw["latency"][0] | {"p99_9_ci": [1.0, 2.0]}]}
    assert RunSummary.of(newer).to_dict() == newer


def test_inputs_per_second_counts_each_pooling_endpoint_once_over_its_regions():
    raw = json.loads(DEMO.read_text())
    assert RunSummary.of(raw).inputs_per_s() is None  # no embeddings or rerank endpoint

    def row(endpoint: str, region: str, rate: float) -> dict:
        return {"endpoint": endpoint, "region": region, "requests": 10, "ok": 10, "inputs": 40, "inputs_per_s": rate}

    raw["embeddings"] = [row("bge", "eu", 30.0), row("bge", "us", 10.0), row("bge", "*", 40.0)]
    raw["rerank"] = [row("reranker", "eu", 160.0)]  # one region: its row is the endpoint's
    summary = RunSummary.of(raw)
    assert summary.inputs_per_s() == 200.0
    assert summary.embedding_row("reranker").inputs_per_s == 160.0 and summary.embedding_row("bge").region == "*"
    with pytest.raises(KeyError, match="no embeddings or rerank row for endpoint 'nope'"):
        summary.embedding_row("nope")


def test_todays_demo_summary_with_its_pipelines_reads_by_attribute_and_validates():
    """The demo as `make demo` runs it now (summary_version 2, a RAG pipeline beside the endpoints)."""
    path = DEMO.with_name("demo_summary_v2.json")
    raw = json.loads(path.read_text())
    s = RunSummary.from_json(path.read_text(), str(path))
    assert s.to_dict() == raw and s.summary_version == SUMMARY_VERSION
    jsonschema.validate(raw, summary_schema())
    rag = s.pipelines.row("rag")
    assert rag.done <= rag.started and [st.endpoint for st in rag.stages] == ["embed", "rerank", "llm-chat"]
    assert rag.e2e_ms.p50.value == raw["pipelines"]["pipelines"][0]["e2e_ms"]["p50"]["value"]
    assert rag.ttft_ms.p50.value < rag.e2e_ms.p50.value
    assert s.pipelines.slowest[0].stages[0].trace_id and any(v.metric == "pipeline_e2e" for v in s.slos)
    with pytest.raises(KeyError, match="no pipelines row for 'rga'"):
        s.pipelines.row("rga")
