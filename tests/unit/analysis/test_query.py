"""`tailrace query`: SQL over saved runs' chunks where they lie — every row, the analysis' reference times to the
nanosecond and its numbers, runs told apart, a damaged or refused chunk left out and named, bad input in one line."""
from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tailrace.analysis.query import QueryError, RunQuery

SAVED = Path(__file__).resolve().parents[2] / "data" / "saved_runs"
DEMO, SESSIONS = SAVED / "demo", SAVED / "sessions-pipelines"
KEY = "trace_id || span_id || t_intended::VARCHAR"  # a request (a session's turns share a trace)


def _query(capfd, *args: str) -> subprocess.CompletedProcess:
    """`tailrace query ARGS` as the console script runs it (in this process: its output read from the fds)."""
    from tailrace.cli import main

    try:
        code = main(["query", *args])
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["tailrace", "query", *args], code, out, err)


@pytest.mark.parametrize("run_dir", [DEMO, SESSIONS])
def test_every_request_with_the_analysis_reference_times_to_the_nanosecond(run_dir):
    from tailrace.api import load_requests

    frame = load_requests(run_dir)
    expected = dict(zip(frame["trace_id"].astype(str) + frame["span_id"].astype(str) + frame["t_intended"].astype(str),
                        zip(frame["t_intended_ref"], frame["t_sent_ref"], frame["t_done_ref"],
                            frame["latency_ns"], frame["status"].astype(str))))
    rows = RunQuery([run_dir]).answer(
        f"SELECT {KEY}, t_intended_ref, t_sent_ref, t_done_ref, latency_ns, status FROM requests", 10**7).rows
    assert len(rows) == len(frame) == len(expected)
    assert {r[0]: tuple(r[1:]) for r in rows} == expected


def test_counts_and_percentiles_are_the_summarys():
    """The report's exact percentiles are numpy's linear interpolation, which DuckDB's quantile_cont is too."""
    summary = json.loads((SAVED / "demo.summary.json").read_text())
    quantiles = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}
    rows = RunQuery([DEMO]).answer(
        "SELECT endpoint, region, count(*), count(*) FILTER (status = 'ok'), "
        + ", ".join(f"quantile_cont(latency_ns / 1e6, {q}) FILTER (status = 'ok')" for q in quantiles.values())
        + " FROM requests WHERE phase > 0 GROUP BY ALL", 1000).rows
    got = {(r[0], r[1]): r[2:] for r in rows}
    compared = 0
    for row in summary["latency"]:
        if (row["endpoint"], row["region"]) not in got:
            continue  # a row over several groups (an endpoint's, the overall one)
        n, ok, *values = got[(row["endpoint"], row["region"])]
        assert (n, ok) == (row["count"], row["ok"])
        for name, value in zip(quantiles, values):
            reported = row["percentiles"][name]["value"]
            if reported is not None:  # (None: too few requests for the report to state it)
                assert value == pytest.approx(reported, rel=1e-12), (row["endpoint"], row["region"], name)
                compared += 1
    assert len(got) == 18 and compared >= 36


def test_runs_in_one_set_are_told_apart_and_same_named_ones_by_path(tmp_path):
    a, b = tmp_path / "a" / "demo", tmp_path / "b" / "demo"
    for copy in (a, b):
        shutil.copytree(DEMO, copy)
    rows = RunQuery([a, b, SESSIONS]).answer("SELECT run, count(*) FROM requests GROUP BY run ORDER BY run", 10).rows
    assert rows == sorted([(str(a), 1615), (str(b), 1615), ("sessions-pipelines", 259)])
    models = RunQuery([DEMO, SESSIONS]).answer("SELECT run, count(*) FROM clock_models GROUP BY run ORDER BY run", 10)
    assert models.rows == [("demo", 3), ("sessions-pipelines", 2)]


def test_a_damaged_chunk_is_left_out_and_named_and_the_rest_answered(tmp_path):
    import pyarrow.parquet as pq

    run = tmp_path / "demo"
    shutil.copytree(DEMO, run)
    chunk = sorted(run.glob("regions/eu-west/*/requests-*.parquet"))[3]
    lost = pq.ParquetFile(chunk).metadata.num_rows
    chunk.write_bytes(chunk.read_bytes()[:200])  # cut short: no footer
    query = RunQuery([run])
    assert query.answer("SELECT count(*) FROM requests", 1).rows == [(1615 - lost,)]
    assert list(query.left_out) == [str(chunk)]


def test_a_chunk_the_analysis_refused_is_left_out(tmp_path):
    run = tmp_path / "demo"
    shutil.copytree(DEMO, run)
    chunk = sorted(run.glob("regions/us-east/*/requests-*.parquet"))[0]
    (run / "report").mkdir()
    (run / "report" / "summary.json").write_text(json.dumps(
        # analysed by another path to the same run (a relative one, another mount): the same chunk
        {"input": {"chunks_skipped": [{"path": f"/elsewhere/demo/{chunk.relative_to(run)}",
                                       "reason": "CRC checksum verification failed"}]}}))
    query = RunQuery([run])
    (count,), = query.answer("SELECT count(*) FROM requests", 1).rows
    assert count < 1615 and query.left_out == {str(chunk): "CRC checksum verification failed"}


def test_a_chunk_without_the_stream_columns_reads_their_defaults(tmp_path):
    import pyarrow.parquet as pq

    from tailrace.contract.records import STREAM_DEFAULTS

    run = tmp_path / "demo"
    shutil.copytree(DEMO, run)
    chunk = sorted(run.glob("regions/ap-south/*/requests-*.parquet"))[0]
    table = pq.read_table(chunk)
    pq.write_table(table.drop_columns([c for c in STREAM_DEFAULTS if c in table.column_names]), chunk)
    rows = RunQuery([run]).answer(
        f"SELECT ttft_ns, output_tokens, turn, token_source FROM requests WHERE trace_id IN "
        f"({', '.join(repr(t) for t in table.column('trace_id').to_pylist())})", 10**4).rows
    assert rows and set(rows) == {(-1, -1, 0, "")}


def test_bad_input_is_one_line_and_exit_2(tmp_path, capfd):
    for args, says in ((["/nonexistent-run", "--sql", "SELECT 1"], "/nonexistent-run: not a directory"),
                       ([str(tmp_path), "--sql", "SELECT 1"], "no manifest.json"),
                       ([str(DEMO), "--sql", "SELEC 1"], "SQL: Parser Error"),
                       ([str(DEMO), "--sql", "SELECT nope FROM requests"], "SQL: Binder Error"),
                       ([str(DEMO), "--sql", " "], "--sql: the query is empty"),
                       ([str(DEMO), "--sql", "SELECT 1", "--memory-limit", "lots"], "memory limit 'lots'"),
                       ([str(DEMO), "--sql", "SELECT 1", "--csv", str(tmp_path / "no" / "x.csv")], "no directory"),
                       ([str(DEMO)], "give --sql QUERY, or --schema")):
        out = _query(capfd, *args)
        assert out.returncode == 2, (args, out.stderr)
        assert says in out.stderr and "Traceback" not in out.stderr
        assert len([line for line in out.stderr.splitlines() if line.startswith("tailrace")]) <= 1
    with pytest.raises(QueryError, match="no manifest.json"):
        RunQuery([tmp_path])


def test_the_cli_answers_as_a_table_csv_json_and_lists_the_schema(tmp_path, capfd):
    sql = "SELECT endpoint, count(*) AS n FROM requests WHERE phase > 0 GROUP BY endpoint ORDER BY endpoint"
    table = _query(capfd, str(DEMO), "--sql", sql)
    assert table.returncode == 0 and "6 rows" in table.stdout and "llm-chat" in table.stdout
    as_csv = _query(capfd, str(DEMO), "--sql", sql, "--csv", "-")
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert as_csv.returncode == 0 and [r["endpoint"] for r in rows][:2] == ["embed", "llm-chat"]
    out = tmp_path / "n.jsonl"
    as_json = _query(capfd, str(DEMO), "--sql", sql, "--json", str(out))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert as_json.returncode == 0 and "6 rows" in as_json.stderr and sum(r["n"] for r in lines) == sum(
        int(r["n"]) for r in rows)
    schema = _query(capfd, str(DEMO), "--schema")
    assert schema.returncode == 0 and all(v in schema.stdout for v in ("requests", "clock_models", "t_sent_ref"))
    limited = _query(capfd, str(DEMO), "--sql", "SELECT * FROM requests", "--limit", "2")
    assert limited.returncode == 0 and limited.stdout.count("── row") == 2 and "first 2 rows" in limited.stdout


def test_a_directory_of_runs_is_every_run_below_it_and_an_unreadable_one_is_skipped(tmp_path):
    points = tmp_path / "sweep" / "points"
    for name, run in (("rate=3", DEMO), ("rate=6", SESSIONS)):
        shutil.copytree(run, points / name)
    (points / "rate=9").mkdir()
    (points / "rate=9" / "manifest.json").write_text("{}")  # a point that never sent a request
    query = RunQuery([tmp_path / "sweep"])
    assert query.answer("SELECT run, count(*) FROM requests GROUP BY run ORDER BY run", 10).rows == [
        ("rate=3", 1615), ("rate=6", 259)]
    assert list(query.skipped_runs) == [str(points / "rate=9")]
    with pytest.raises(QueryError, match="no readable request chunks"):  # named by the caller: its error
        RunQuery([points / "rate=9"])
