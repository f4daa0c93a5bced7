"""A long analysis says what it is doing on a terminal — after DELAY_S, one line rewritten in place, cleared at the
end — and nothing at all where stderr is not a terminal or the analysis is quick."""
from __future__ import annotations

import io
import time

from tailrace.analysis.read.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_long_analysis_shows_its_stage_and_rows_on_a_terminal_and_clears_the_line():
    now = [0.0]
    out = Terminal()
    progress = Progress(out, delay_s=2.0, clock=lambda: now[0], tick_s=None)
    progress.rows = 10_000_000
    progress.stage("groups", 1, 40)
    assert out.getvalue() == ""  # a quick start shows nothing
    now[0] = 3.4
    progress.stage("latency_table", 5, 40)
    assert out.getvalue() == "\r\x1b[Kanalysing 10,000,000 rows, 3 s: latency table (5 of 40)"
    progress.done()
    assert out.getvalue().endswith("\r\x1b[K") and not progress.shown


def test_nothing_is_written_where_stderr_is_not_a_terminal():
    out = io.StringIO()
    progress = Progress(out, delay_s=0.0, tick_s=0.01)
    progress.stage("latency_table", 5, 40)
    progress.reading(["t_sent"], 10, 100)
    time.sleep(0.1)
    progress.done()
    assert out.getvalue() == "" and progress._ticker is None


def test_a_pass_over_the_chunks_shows_its_columns_and_the_rows_read_of_the_total(monkeypatch):
    """Before the first statistic (the log's first load) and during one: the pass begun last is shown, with its
    rows read of the log's, and goes from the line when it ends; a long list of columns is cut to its first two, and
    the line to the terminal's width."""
    monkeypatch.setenv("COLUMNS", "200")
    now = [5.0]
    out = Terminal()
    progress = Progress(out, delay_s=2.0, clock=lambda: now[0], tick_s=None)
    progress.started = 0.0
    progress.reading(["worker", "phase", "status", "endpoint"], 25_000_000, 100_000_000)
    progress.draw()
    assert out.getvalue().endswith(
        "\x1b[Kanalysing 100,000,000 rows, 5 s: reading worker, phase and 2 more: 25.0 M of 100.0 M rows")
    progress.reading(["worker", "phase", "status", "endpoint"], 100_000_000, 100_000_000)  # that pass is over
    progress.draw()  # between the first load and the first statistic (the clocks' fits): the rows stay known
    assert out.getvalue().endswith("\x1b[Kanalysing 100,000,000 rows, 5 s")
    progress.stage("decomposition", 5, 32)
    assert out.getvalue().endswith("\x1b[Kanalysing 100,000,000 rows, 5 s: decomposition (5 of 32)")
    progress.reading(["server_queue_ns"], 4_000, 100_000_000)
    now[0] = 9.0
    progress.draw()
    assert out.getvalue().endswith(
        "\x1b[Kanalysing 100,000,000 rows, 9 s: decomposition (5 of 32); reading server_queue_ns: 4,000 of 100.0 M rows")
    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal: the line cut, never wrapped onto a second one
    progress.draw()
    last = out.getvalue().rsplit("\x1b[K", 1)[1]
    assert len(last) == 59 and last.startswith("analysing 100,000,000 rows, 9 s: decomp") and last.endswith("…")
    progress.done()


def test_the_line_is_drawn_again_while_a_statistic_goes_on_and_never_after_the_end(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = Terminal()
    progress = Progress(out, delay_s=0.0, tick_s=0.01)
    progress.rows = 1_000
    progress.stage("queueing", 7, 32)
    progress.reading(["server_send_ns"], 500, 1_000)
    deadline = time.monotonic() + 5
    while "reading server_send_ns: 500 of 1,000 rows" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "queueing (7 of 32); reading server_send_ns: 500 of 1,000 rows" in out.getvalue()  # the ticker drew it
    progress.done()
    written = out.getvalue()
    assert written.endswith("\r\x1b[K") and not progress._ticker.is_alive()
    time.sleep(0.05)
    assert out.getvalue() == written


def test_every_pass_of_the_reader_is_told_and_ends_at_the_logs_rows(tmp_path, monkeypatch):
    """ChunkColumns tells its `on_read` the columns and the rows put in, chunk by chunk, and the end of each pass: the
    first load's columns, then a column read later in a pass of its own (chunks counted as large here: a log of
    small chunks is read whole at its first load)."""
    from tailrace.analysis.read import chunks
    from tailrace.analysis.read.rundir import load_run
    from tests.support import profile_dict, write_run

    monkeypatch.setattr(chunks, "SMALL_CHUNK_ROWS", 10)
    write_run(tmp_path, profile=profile_dict(100, 5), workers={
        "w0": {"region": "r1", "latency_ms": 5.0, "rate": 50, "duration_s": 5},
        "w1": {"region": "r2", "latency_ms": 5.0, "rate": 50, "duration_s": 5}})
    told: list[tuple[tuple[str, ...], int, int]] = []
    data = load_run(tmp_path, ("worker", "phase", "latency_ns"), first=("worker",),
                    on_read=lambda names, read, rows: told.append((tuple(names), read, rows)))
    data.log.values("latency_ns")
    rows = data.log.rows
    assert len(data.log.sources) == 2 and rows == 500 and all(total == rows for _, _, total in told)
    assert [(names, read) for names, read, _ in told] == [
        (("worker",), 250), (("worker",), 500), (("worker",), 500),  # each chunk put in, then the pass's end
        (("latency_ns",), 250), (("latency_ns",), 500), (("latency_ns",), 500)]


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
