"""`tailrace run` reads and corrects a run once: the spans it exports after the analysis, from the rows the
analysis read, are the spans `tailrace export otlp` makes from the run directory on its own."""
from __future__ import annotations

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.otel.export import READ
from tailrace.analysis.otel.spans import SPAN_COLUMNS, run_resource, sample_rows, spans_of
from tailrace.analysis.read.clock_correction import add_reference_times, fit_all
from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS, load_run
from tailrace.contract.trace_context import Sample
from tests.support import profile_dict, write_run


def _spans(df, plan, sample: str) -> list[str]:
    rows = sample_rows(Sample.parse(sample), df)
    return [s.to_json() for batch in spans_of(df, rows, run_resource(plan.run_id, plan.profile.name), 64)
            for s in batch]


def test_the_spans_from_the_analysis_rows_are_the_export_commands(tmp_path):
    write_run(tmp_path, profile=profile_dict(100, 5), workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 50, "duration_s": 5, "errors": 0.1},
        "r2-w0": {"region": "r2", "latency_ms": 7, "rate": 50, "duration_s": 5}})
    data = load_run(tmp_path, READ)
    alone = add_reference_times(data.requests, fit_all(data.clock))
    analysis = analyze_run(tmp_path, ANALYSIS_COLUMNS, retain=SPAN_COLUMNS)
    assert set(SPAN_COLUMNS) <= set(analysis.requests.columns) and len(analysis.requests) == len(alone) == 500
    for sample in ("all", "slowest:7,errors"):
        assert _spans(analysis.requests, analysis.data.plan, sample) == _spans(alone, data.plan, sample)
