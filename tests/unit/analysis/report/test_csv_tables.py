"""tables/*.csv from the typed summary by one flattener: every cell is the summary.json value at the path its column
names, every table a pipeline may count on is written even when empty, and a list of rows inside a row (a
pipeline's stages) is a table of its own."""
from __future__ import annotations

import json

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS
from tailrace.analysis.report.csv_tables import CORE_TABLES, flat_row, flat_table, summary_tables
from tests.unit.analysis.test_same_numbers import golden_run

SECTIONS = {"latency": "latency", "slos": "slos", "arrivals": "arrivals", "validity": "validity", "clock": "clock",
            "errors": "errors", "phases": "phases", "server_statistics": "endpoint_statistics"}


def _at(doc, path: str):
    for key in path.split("/"):
        doc = doc[key.replace("~1", "/").replace("~0", "~")]
    return doc


def test_every_cell_is_the_summarys_value_at_its_columns_path(tmp_path):
    summary = analyze_run(golden_run(tmp_path / "run"), ANALYSIS_COLUMNS).summary
    doc = json.loads(json.dumps(summary.to_dict()))
    tables = summary_tables(summary)
    assert set(CORE_TABLES) <= set(tables) and "tokens" not in tables and "pipelines" not in tables
    for table, section in SECTIONS.items():
        rows = doc[section]
        assert len(tables[table]) == len(rows), table
        for i, row in enumerate(rows):
            for column in tables[table].columns:
                value = _at(row, column) if column in flat_row(row) else None
                cell = tables[table][column].iloc[i]
                if isinstance(value, list):
                    value = ",".join(map(str, value))
                assert value == cell or (value is None and (cell is None or cell != cell)), (table, column, value, cell)
    assert "percentiles/p99/ci_low" in tables["latency"] and "percentiles/p99.9/value" in tables["latency"]
    errors = tables["errors"]
    assert errors["example_trace_ids"].str.count(",").max() == 2  # three trace IDs, one cell


def test_a_list_of_rows_is_its_own_table_and_plain_lists_are_one_cell():
    rows = [{"pipeline": "rag", "region": "*", "e2e_ms": {"p50": {"value": 3.0, "ci_low": 2.0, "ci_high": 4.0}},
             "stages": [{"stage": 1, "endpoint": "embed"}], "sources": ["a", "b"]}]
    flat = flat_table(rows)
    assert list(flat.columns) == ["pipeline", "region", "e2e_ms/p50/value", "e2e_ms/p50/ci_low", "e2e_ms/p50/ci_high",
                                  "sources"]
    assert flat["sources"][0] == "a,b"
    assert list(flat_table([{"by/slash": {"a~b": 1}}]).columns) == ["by~1slash/a~0b"]  # RFC 6901's escapes
