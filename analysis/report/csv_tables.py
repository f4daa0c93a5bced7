"""report/tables/*.csv, from the typed summary by one flattener: a row per summary row, a column per field, named by
its path in summary.json as a JSON Pointer (RFC 6901) within the row, without the leading '/' (a latency row's p99
interval is `percentiles/p99/ci_low`, its p99.9 `percentiles/p99.9/value`, a token row's TTFT p50
`ttft_ms/p50/value`) — the CSV and the JSON say the same things in the same words. A list of plain values is one
cell (joined by ','); a list of rows inside a row is a table of its own (a pipeline's stages) or left to
summary.json."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from pydantic import BaseModel

from tailrace.contract.summary import RunSummary

# written for every run, empty or not: what a pipeline reading tables/ may count on
CORE_TABLES = ("latency", "scenario", "slos", "decomposition", "queueing", "arrivals", "validity", "phases", "errors",
               "outages", "cold_start", "decision", "server_statistics", "slowest", "clock")


def _flat(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            key = str(key).replace("~", "~0").replace("/", "~1")  # RFC 6901's escapes
            _flat(inner, f"{path}/{key}" if path else key, out)
    elif isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value):
            out[path] = ",".join("" if v is None else str(v) for v in value)
        # a list of rows: its own table, or summary.json's
    else:
        out[path] = value


def flat_row(row: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """One summary row as flat columns (its fields' paths)."""
    out: dict[str, Any] = {}
    _flat(row.model_dump(mode="json") if isinstance(row, BaseModel) else row, "", out)
    return out


def flat_table(rows: Sequence[BaseModel | dict[str, Any]]) -> pd.DataFrame:
    """Summary rows as a table: a row each, a column per field path (in the order first seen)."""
    return pd.DataFrame([flat_row(r) for r in rows])


def _scenario_rows(summary: RunSummary) -> list:
    """The scenario's rows: single-stream's p90s, multi-stream's p99s or offline's regions (server: none)."""
    s = summary.scenario
    return list(s.p90 or s.p99 or s.per_region or [])


def _stage_rows(summary: RunSummary) -> list[dict[str, Any]]:
    """tables/pipeline_stages.csv: each pipeline × region's stages, beside their pipeline and region."""
    if summary.pipelines is None:
        return []
    return [{"pipeline": p.pipeline, "region": p.region, **flat_row(stage)}
            for p in summary.pipelines.pipelines for stage in p.stages]


def summary_tables(summary: RunSummary) -> dict[str, pd.DataFrame]:
    """Every table of a run's summary (CORE_TABLES always; a workload's only where the run has it)."""
    sessions, pipelines, hardware = summary.sessions, summary.pipelines, summary.hardware
    sections: dict[str, Sequence[Any]] = {
        "latency": summary.latency, "scenario": _scenario_rows(summary), "slos": summary.slos,
        "decomposition": summary.decomposition, "queueing": summary.queueing, "arrivals": summary.arrivals,
        "validity": summary.validity, "phases": summary.phases, "errors": summary.errors, "outages": summary.outages,
        "cold_start": summary.cold_start, "decision": summary.decision.variants if summary.decision else [],
        "server_statistics": summary.endpoint_statistics, "slowest": summary.slowest, "clock": summary.clock,
        "tokens": summary.tokens, "ttft_decomposition": summary.ttft_decomposition if summary.tokens else [],
        "embeddings": summary.embeddings, "rerank": summary.rerank,
        "turns": sessions.turns if sessions else [], "sessions": sessions.sessions if sessions else [],
        "prefix_cache": sessions.prefix_cache if sessions else [],
        "pipelines": pipelines.pipelines if pipelines else [], "pipeline_stages": _stage_rows(summary),
        "pipeline_failures": pipelines.failures if pipelines else [], "tokens_by_model": summary.tokens_by_model,
        "hardware": hardware.rows if hardware else [], "hardware_endpoints": hardware.endpoints if hardware else [],
        "cancellations": summary.cancellations, "accuracy": summary.accuracy,
        "accuracy_trends": summary.accuracy_trends}
    return {name: flat_table(rows) for name, rows in sections.items() if rows or name in CORE_TABLES}
