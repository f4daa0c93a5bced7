"""Pipeline statistics (analysis/stats/chains/pipelines.py): end to end from the arrival's intended send to the last
stage's end, per stage from its own intended send; failures by stage; the pipeline SLOs judged on whole pipelines."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tailrace.analysis.report.csv_tables import flat_table
from tailrace.analysis.stats.chains.pipelines import (
    chains_of,
    pipeline_section,
    pipeline_table,
    pipeline_verdicts,
)

MS = 1_000_000
STAGES = {"rag": ["embed", "rerank", "chat"]}


def pipeline_rows(session: int, start_ms: float, stage_ms=(20, 30, 400), region: str = "eu", phase: int = 1,
                  fail_at: int = 0, pause_ms: float = 15, first_token_ms: float = 100, cut_after: int = 0) -> list[dict]:
    """One pipeline's records: stage k sent at its intended instant, answered stage_ms[k] later."""
    rows, t = [], start_ms
    for k, (endpoint, ms) in enumerate(zip(STAGES["rag"], stage_ms), 1):
        failed = k == fail_at
        last = failed or k == 3 or k == cut_after
        end = "error" if failed else "run_end" if k == cut_after else "done" if k == 3 else ""
        rows.append({"pipeline": "rag", "session_id": session, "turn": k, "endpoint": endpoint, "region": region,
                     "phase": phase, "status": "timeout" if failed else "ok", "code": "timeout" if failed else "200",
                     "error": "timed out" if failed else "", "session_end": end, "t_intended": int(t * MS),
                     "t_done": int((t + ms) * MS),
                     "t_first_token": int((t + first_token_ms) * MS) if endpoint == "chat" and not failed else -1,
                     "latency_ns": int(ms * MS), "send_lag_ns": 100_000})
        if last:
            break
        t += ms + (pause_ms if k == 1 else 0)
    return rows


def frame(rows: list[dict]) -> pd.DataFrame:
    plain = {"pipeline": "", "session_id": -1, "turn": 0, "endpoint": "chat", "region": "eu", "phase": 1,
             "status": "ok", "code": "200", "error": "", "session_end": "", "t_intended": 0, "t_done": 5 * MS,
             "t_first_token": MS, "latency_ns": 5 * MS, "send_lag_ns": 0}
    return pd.DataFrame([plain, *rows, plain]).sample(frac=1.0, random_state=1).reset_index(drop=True)


def test_end_to_end_counts_from_the_arrival_and_each_stage_from_its_own_send():
    rows = [r for i in range(40) for r in pipeline_rows(i, 1000.0 * i, stage_ms=(20, 30, 400 + i))]
    table, chains, _ = pipeline_table(frame(rows), STAGES, [], 10.0)
    whole = next(r for r in table if r.region == "*")
    assert (whole.started, whole.done, whole.failed) == (40, 40, 0)
    e2e = np.sort(chains.e2e_ms[np.isfinite(chains.e2e_ms)])
    assert np.allclose(e2e, [20 + 15 + 30 + 400 + i for i in range(40)])  # stages + the pause
    assert np.allclose(np.sort(chains.ttft_ms), [20 + 15 + 30 + 100] * 40)
    stages = whole.stages
    assert [s.endpoint for s in stages] == ["embed", "rerank", "chat"]
    assert stages[0].latency_ms.at("p50").value == 20 and stages[1].latency_ms.at("p50").value == 30
    assert abs(sum(s.share_of_e2e or 0.0 for s in stages) - (20 + 30 + 419.5) / (484.5)) < 1e-9  # the rest: the pause
    assert whole.pipelines_per_s == 4.0


def test_a_failed_stage_ends_its_pipeline_and_the_run_end_is_neither():
    rows = [r for i in range(10) for r in pipeline_rows(i, 1000.0 * i)]
    rows += pipeline_rows(10, 20_000, fail_at=2) + pipeline_rows(11, 21_000, fail_at=2)
    rows += pipeline_rows(12, 22_000, cut_after=1) + pipeline_rows(13, 23_000, phase=0)  # warm-up: not measured
    results = pipeline_section(frame(rows), STAGES, [], ["eu"], 10.0, lambda index: [f"t{i}" for i in index])
    whole = results.section.pipelines[0]
    assert (whole.started, whole.done, whole.failed, whole.run_end) == (13, 10, 2, 1)
    assert whole.e2e_ms.at("p50").n == 10  # only the pipelines done
    assert [f.model_dump() for f in results.section.failures] == [
        {"pipeline": "rag", "stage": 2, "endpoint": "rerank", "status": "timeout", "code": "timeout", "count": 2,
         "example_error": "timed out"}]
    slowest = results.section.slowest[0]
    assert slowest.slowest_stage == 3 and slowest.slowest_endpoint == "chat"
    assert [s.wait_ms for s in slowest.stages] == [0.0, 15.0, 0.0]
    assert all(s.trace_id.startswith("t") for s in slowest.stages)


def test_the_pipeline_slos_are_judged_on_whole_pipelines_with_failures_counted_as_misses():
    fast = [r for i in range(300) for r in pipeline_rows(i, 1000.0 * i, stage_ms=(20, 30, 300))]
    chains, _ = chains_of(frame(fast))
    slos = [{"metric": "pipeline_e2e", "pipeline": "*", "region": "*", "percentile": 95, "threshold_ms": 500},
            {"metric": "pipeline_ttft", "pipeline": "rag", "region": "eu", "percentile": 95, "threshold_ms": 100}]
    e2e, ttft = pipeline_verdicts(chains, slos, ["rag"], ["eu"])
    assert e2e.verdict == "PASS" and e2e.n == 300 and e2e.exceeding == 0 and e2e.endpoint == "rag"
    assert ttft.verdict == "FAIL" and ttft.exceeding == 300  # 165 ms to the first token
    failing = [r for i in range(300) for r in pipeline_rows(i, 1000.0 * i, stage_ms=(20, 30, 300),
                                                             fail_at=3 if i % 7 == 0 else 0)]
    chains, _ = chains_of(frame(failing))
    e2e, _ = pipeline_verdicts(chains, slos, ["rag"], ["eu"])
    assert e2e.verdict == "FAIL" and e2e.exceeding == 43  # 14% failed: above the 5% the p95 allows


def test_goodput_counts_the_pipelines_within_every_pipeline_slo():
    rows = [r for i in range(20) for r in pipeline_rows(i, 1000.0 * i, stage_ms=(20, 30, 100 + 50 * (i % 2)))]
    slos = [{"metric": "pipeline_e2e", "pipeline": "rag", "region": "*", "percentile": 90, "threshold_ms": 180}]
    table, _, _ = pipeline_table(frame(rows), STAGES, slos, 10.0)
    assert table[0].goodput_per_s == 1.0  # the 10 of 20 at 165 ms; the others take 215
    flat = flat_table(table)  # tables/pipelines.csv: the summary's paths as columns, the stages a table of their own
    assert "e2e_ms/p50/ci_low" in flat and "stages" not in flat and flat["goodput_per_s"][0] == 1.0
