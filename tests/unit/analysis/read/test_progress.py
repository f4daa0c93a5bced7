"""A long analysis says what it is doing on a terminal — after DELAY_S, one line rewritten in place, cleared at the
end — and nothing at all where stderr is not a terminal or the analysis is quick."""
from __future__ import annotations

import io

from tailrace.analysis.read.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_long_analysis_shows_its_stage_and_rows_on_a_terminal_and_clears_the_line():
    now = [0.0]
    out = Terminal()
    progress = Progress(out, delay_s=2.0, clock=lambda: now[0])
    progress.rows = 10_000_000
    progress.stage("groups", 1, 40)
    assert out.getvalue() == ""  # a quick start shows nothing
    now[0] = 3.4
    progress.stage("latency_table", 5, 40)
    assert out.getvalue() == "\r\x1b[Kanalysing 10,000,000 rows: latency table (5 of 40), 3 s"
    progress.done()
    assert out.getvalue().endswith("\r\x1b[K") and not progress.shown


def test_nothing_is_written_where_stderr_is_not_a_terminal():
    out = io.StringIO()
    progress = Progress(out, delay_s=0.0)
    progress.stage("latency_table", 5, 40)
    progress.done()
    assert out.getvalue() == ""


def test_tailrace_analyze_writes_no_progress_into_a_log(tmp_path, capsys):
    """Under pytest stderr is no terminal: the analysis's output holds no progress line."""
    from tailrace.cli import main
    from tests.support import profile_dict, write_run

    write_run(tmp_path, profile=profile_dict(100, 5), workers={
        "w0": {"region": "r1", "latency_ms": 5.0, "rate": 50, "duration_s": 5},
        "w1": {"region": "r2", "latency_ms": 5.0, "rate": 50, "duration_s": 5}})
    main(["analyze", str(tmp_path)])
    captured = capsys.readouterr()
    assert "analysing" not in captured.err and "\x1b[K" not in captured.err + captured.out
