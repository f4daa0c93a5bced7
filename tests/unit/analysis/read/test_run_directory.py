"""Reading a run directory: clocks merged onto one timeline, chunks checked page by page and skipped with their reason,
memory sized and returned, columns read a few at a time."""


from __future__ import annotations

import numpy as np
import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.read.clock_correction import fit_all
from tailrace.analysis.read.rundir import RunDirError, load_run
from tests.support import profile_dict, write_run


def test_skewed_clocks_merged_into_one_timeline(tmp_path):
    """Two workers with clocks ±50 ms off: offsets recovered within 1 ms, the order of events restored."""
    profile = profile_dict(100, 20)
    truth = write_run(tmp_path, profile=profile, workers={
        "r1-w0": {"region": "r1", "offset_ms": -50, "latency_ms": 5, "rate": 50, "duration_s": 20},
        "r2-w0": {"region": "r2", "offset_ms": +50, "latency_ms": 5, "rate": 50, "duration_s": 20}})
    data = load_run(tmp_path)
    models = fit_all(data.clock)
    assert abs(models["r1-w0"].intercept_ns / 1e6 + 50) < 1
    assert abs(models["r2-w0"].intercept_ns / 1e6 - 50) < 1
    a = analyze_run(tmp_path)
    df = a.requests
    true = df["trace_id"].map(truth).to_numpy()
    assert np.max(np.abs(df["t_intended_ref"].to_numpy() - true)) < 1e6  # within 1 ms
    by_truth = np.argsort(true, kind="stable")
    true_gap = np.diff(true[by_truth])
    resolvable = true_gap > 1e6  # events further apart than the clock uncertainty bound (1 ms)
    raw = df["t_intended"].to_numpy()[by_truth]
    ref = df["t_intended_ref"].to_numpy()[by_truth]
    assert (np.diff(raw)[resolvable] < 0).sum() > 50  # the ±50 ms skew misorders many events ...
    assert (np.diff(ref)[resolvable] > 0).all()  # ... and the correction restores their order


def _two_regions(tmp_path, slos=None):
    profile = profile_dict(100, 20, slos=slos or [{"metric": "latency", "percentile": 50, "threshold_ms": 50,
                                                   "endpoint": "*", "region": "*"}])
    write_run(tmp_path, profile=profile, workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 50, "duration_s": 20}})  # r2 sent nothing
    return profile


def test_a_chunk_with_a_wrongly_typed_column_is_skipped_with_its_reason(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    _two_regions(tmp_path)
    chunk = sorted(tmp_path.glob("regions/r1/r1-w0/requests-*.parquet"))[0]
    table = pq.read_table(chunk)
    bad = table.set_column(table.schema.get_field_index("latency_ns"), "latency_ns",
                           pa.array([str(v) for v in table.column("latency_ns").to_pylist()]))
    pq.write_table(bad, chunk.with_name("requests-00999.parquet"))
    s = analyze_run(tmp_path).summary.to_dict()
    (skipped,) = s["input"]["chunks_skipped"]
    assert skipped["path"].endswith("requests-00999.parquet")
    assert skipped["reason"] == "column latency_ns is string, expected int64"
    assert s["input"]["rows_read"] == 1000


def test_a_worker_without_clock_samples_is_named_in_a_warning(tmp_path):
    _two_regions(tmp_path)
    for f in tmp_path.glob("regions/r1/r1-w0/clock-*.parquet"):
        f.unlink()
    s = analyze_run(tmp_path).summary.to_dict()
    assert any(w.startswith("r1-w0: no clock samples") for w in s["warnings"]), s["warnings"]


def test_a_run_directory_without_manifest_is_refused(tmp_path):
    _two_regions(tmp_path)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(RunDirError, match="no manifest.json"):
        load_run(tmp_path)


def test_a_run_too_large_for_this_machine_is_refused_before_reading(tmp_path, monkeypatch, capsys):
    """The analysis would need more memory than is available: exit 2 naming the rows and the memory, no report
    written, the run directory untouched — never the kernel killing the analysis half-way."""
    import tailrace.analysis.read.rundir as rundir
    from tailrace.analysis.analyze_command import analyze_and_report
    from tailrace.analysis.decide.compare import compare_command

    write_run(tmp_path, profile=profile_dict(100, 2), workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 100, "duration_s": 2}})
    before = sorted(p.name for p in tmp_path.rglob("*"))
    monkeypatch.setattr(rundir, "_available_bytes", lambda: 10_000)
    assert analyze_and_report(tmp_path, None, quiet=True) == 2
    err = capsys.readouterr().err
    assert "200 request rows need about" in err and "GiB available" in err and "Traceback" not in err
    assert compare_command(tmp_path, tmp_path, None) == 2
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    monkeypatch.setattr(rundir, "_available_bytes", lambda: 2**40)
    assert analyze_and_report(tmp_path, None, quiet=True) == 0


def test_a_large_run_is_sized_for_a_log_read_a_few_columns_at_a_time(tmp_path, monkeypatch, capsys):
    """A run whose analysis is expected to need more than LARGE_RUN_BYTES with every column kept is checked
    against the memory it needs reading its log a few columns at a time (a day's 100 M rows: ~9.8 GiB, not 22); a
    smaller one at every column kept. Both keep the memory they free, one heap for every thread."""
    import tailrace.analysis.read.process_memory as process_memory
    import tailrace.analysis.read.rundir as rundir
    from tailrace.analysis.analyze_command import analyze_and_report

    write_run(tmp_path, profile=profile_dict(100, 2), workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 100, "duration_s": 2}})
    monkeypatch.setattr(rundir, "_available_bytes", lambda: 10_000)
    monkeypatch.setattr(rundir, "request_rows", lambda run_dirs: 100_000_000)
    monkeypatch.setattr(rundir, "rows_in_chunks", lambda run_dirs: 100_000_000)  # what it counts before refusing
    heaps: list[bool] = []
    monkeypatch.setattr(process_memory, "reuse_freed_memory", lambda: heaps.append(True) or {})
    assert analyze_and_report(tmp_path, None, quiet=True, exits=True) == 2 and heaps == [True]
    assert "100,000,000 request rows need about 9.8 GiB" in capsys.readouterr().err
    monkeypatch.setattr(rundir, "request_rows", lambda run_dirs: 10_000_000)
    monkeypatch.setattr(rundir, "rows_in_chunks", lambda run_dirs: 10_000_000)
    assert analyze_and_report(tmp_path, None, quiet=True, exits=True) == 2 and heaps == [True, True]
    assert "10,000,000 request rows need about 2.2 GiB" in capsys.readouterr().err


def test_clock_models_map_times_as_their_formula_in_place(monkeypatch):
    """OffsetModel.to_reference (in place, a block at a time: here over two blocks and a part) gives
    t + round(offset_at(t)) to the nanosecond, into a slice of a larger array as to a new one; to_reference fills each
    worker's run by its model."""
    import pandas as pd

    import tailrace.analysis.read.clock_correction as clock_correction
    from tailrace.analysis.read.clock_correction import OffsetModel, to_reference, worker_runs

    monkeypatch.setattr(clock_correction, "CLOCK_BLOCK", 1 << 16)
    rng = np.random.default_rng(5)
    t = 1_790_000_000_000_000_000 + np.sort(rng.integers(0, 3_600 * 10**9, 2 * clock_correction.CLOCK_BLOCK + 18_928))
    models = {"w1": OffsetModel("w1", int(t[0]), 12_345.678, 3.2e-6, 1.0, 5, 5),
              "w2": OffsetModel("w2", int(t[-1]), -40e6, -1e-5, 1.0, 5, 5)}
    for model in models.values():
        want = t + np.round(model.offset_at(t)).astype(np.int64)
        assert np.array_equal(model.to_reference(t), want)
        into = np.zeros(len(t) + 10, dtype=np.int64)
        model.to_reference(t, out=into[5:-5])
        assert np.array_equal(into[5:-5], want) and not into[:5].any() and not into[-5:].any()
    workers = pd.Categorical(np.repeat(["w1", "w2", "w3"], [70_000, 50_000, len(t) - 120_000]))
    offsets = rng.integers(-1000, 1000, len(t))
    ref = to_reference(t, offsets, worker_runs(workers), models)
    assert np.array_equal(ref[:70_000], t[:70_000] + np.round(models["w1"].offset_at(t[:70_000])).astype(np.int64))
    assert np.array_equal(ref[70_000:120_000], models["w2"].to_reference(t[70_000:120_000]))
    assert np.array_equal(ref[120_000:], t[120_000:] + offsets[120_000:])  # w3 has no model: its stamped offsets
    # runs computed side by side: a worker's rows in several runs, and rows of no worker (left 0), each its own
    names = np.repeat(["w1", "w2", "w1", "w3", "w2"], [30_000, 20_000, 40_000, 25_000, len(t) - 115_000]).astype(object)
    names[100_000:100_010] = None
    runs = worker_runs(pd.Categorical(names))
    ref = to_reference(t, offsets, runs, models)
    for worker, rows in runs:
        want = models[worker].to_reference(t[rows]) if worker in models else t[rows] + offsets[rows]
        assert np.array_equal(ref[rows], want), (worker, rows)
    assert not ref[100_000:100_010].any() and len(runs) == 6


def test_chunks_older_than_a_column_are_read_with_its_default(tmp_path):
    """Chunks written before batch_size / correct_count existed (contract/records.py OPTIONAL_DEFAULTS), mixed
    with newer ones and read in parallel: every row gets batch 1 and its correct flag as its count."""
    import pyarrow.parquet as pq

    from tailrace.contract.layout import RunLayout

    write_run(tmp_path, profile=profile_dict(400, 5), chunk_rows=100, workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 200, "duration_s": 5, "errors": 0.2},
        "r2-w0": {"region": "r2", "latency_ms": 5, "rate": 200, "duration_s": 5, "errors": 0.2}})
    chunks = RunLayout(tmp_path).request_chunks()
    for path in chunks[::2]:
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["batch_size", "correct_count"]), path)
    df = load_run(tmp_path).requests
    assert len(df) == 2000 and len(chunks) == 20
    assert (df["batch_size"] == 1).all()
    assert (df["correct_count"] == df["correct"].astype(int)).all() and (~df["correct"]).sum() > 100


def test_an_analysing_process_keeps_freed_memory_and_small_pages():
    """reuse_freed_memory (process_memory.settle's, for tailrace analyze / compare before they analyse) takes
    effect in the process: transparent huge pages off (PR_GET_THP_DISABLE), a thread's memory from the one heap,
    the heap's top never trimmed, and it reports the effective settings."""
    import json
    import subprocess
    import sys

    code = ("import ctypes, json, threading; from tailrace.analysis.read.process_memory import reuse_freed_memory\n"
            "libc = ctypes.CDLL(None); libc.malloc.restype = libc.sbrk.restype = ctypes.c_void_p\n"
            "def in_thread():\n"
            "    block = []; t = threading.Thread(target=lambda: block.append(libc.malloc(1 << 20))); t.start()\n"
            "    t.join(); return block[0]\n"
            "before = in_thread() if SETTLE == 'late' else None\n"
            "s = reuse_freed_memory() if SETTLE else {}\n"
            "libc.free.argtypes, libc.malloc.argtypes = [ctypes.c_void_p], [ctypes.c_size_t]\n"
            "big = libc.malloc(5 << 29); top = libc.sbrk(0); libc.free(big)  # 2.5 GiB of address space, never touched\n"
            "print(json.dumps([s, libc.prctl(42, 0, 0, 0, 0), in_thread() < libc.sbrk(0), bool(big) and libc.sbrk(0) == top]))")

    def run(settle: str):
        return json.loads(subprocess.run([sys.executable, "-c", f"SETTLE = {settle!r}\n" + code], capture_output=True,
                                         text=True, check=True, timeout=60).stdout)

    settings, thp_disabled, thread_block_in_main_heap, top_kept = run("first")
    assert settings == {"malloc_mmap_max": 0, "malloc_trim_threshold": "never", "malloc_arena_max": 1,
                        "transparent_huge_pages": "off"}
    assert thp_disabled == 1
    assert thread_block_in_main_heap  # a thread's block comes from the one heap (below its break)
    assert top_kept  # 2.5 GiB from the heap's top, freed, never handed back (a 200 M-row run's columns are 1.6 GB)
    assert run("")[2] is False  # by default a thread's comes from an arena of its own
    # glibc fixes its limit on heaps at a thread's first allocation: settled after one, a thread's block is still
    # its own arena's — why the analysing processes settle before anything else starts a thread
    assert run("late")[2] is False


def test_an_analysing_process_settles_its_memory_before_it_starts_anything(tmp_path, monkeypatch):
    """analyze_and_report (tailrace analyze, a run's report) applies the memory settings first — before the figure
    process (a pipe and its thread) and before any chunk is read (Arrow's threads) — where the process exits after;
    not at all where it goes on (the Python API)."""
    from tailrace.analysis import analyze_command
    from tailrace.analysis.read import process_memory
    from tailrace.analysis.report import figures

    happened: list[str] = []
    monkeypatch.setattr(process_memory, "settle", lambda: happened.append("settle") or {})
    monkeypatch.setattr(analyze_command, "start_figures", lambda: happened.append("figures") or figures.InlineFigures())
    monkeypatch.setattr(analyze_command, "_analyze_and_report", lambda *a, **k: happened.append("analyse") or 0)
    for exits in (True, False):
        happened.clear()
        assert analyze_command.analyze_and_report(tmp_path, None, quiet=True, exits=exits) == 0
        assert happened == (["settle", "figures", "analyse"] if exits else ["figures", "analyse"])


def _synthetic(tmp_path, rows: int = 30_000):
    from bench.synthetic_run import Shape, write_synthetic_run

    run_dir = tmp_path / "run"
    write_synthetic_run(run_dir, Shape(rows, chunks=12, seed=5))
    return run_dir


@pytest.mark.parametrize("keep_bytes", ["default", 0, "three columns"])
def test_reading_a_few_columns_at_a_time_gives_the_numbers_of_reading_them_all(tmp_path, monkeypatch, keep_bytes):
    """`tailrace analyze` reads the log a few columns at a time and frees each after its last reader; the
    Python API reads it whole. Same summary, same tables, and only the report's columns are left loaded —
    also when every spared column is freed and read again (keep_bytes 0: a day's log, above KEEP_BYTES), and when
    some are kept, those read next first (room for three 8-byte columns)."""
    import json

    import tailrace.analysis.read.chunks as chunks
    from tailrace.analysis.analyze import REPORT_COLUMNS
    from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS
    from tailrace.analysis.report.figures import Figures
    from tailrace.analysis.stats.timeline import timeline

    class Submitted(Figures):  # what tailrace analyze's figure process would be handed
        ahead = True

        def __init__(self) -> None:
            self.args: dict[str, tuple] = {}

        def submit(self, name: str, *args) -> None:
            self.args[name] = args

    run_dir = _synthetic(tmp_path)
    if keep_bytes == "three columns":
        import pyarrow.parquet as pq

        from tailrace.contract.layout import RunLayout
        keep_bytes = 3 * 8 * sum(pq.read_metadata(p).num_rows for p in RunLayout(run_dir).request_chunks())
    if keep_bytes != "default":
        monkeypatch.setattr(chunks, "KEEP_BYTES", keep_bytes)
    figures = Submitted()
    whole, lazy = analyze_run(run_dir), analyze_run(run_dir, ANALYSIS_COLUMNS, figures=figures)
    # the figures' numbers, whether the statistics computed beside each other (default) or in order (0)
    assert sorted(figures.args) == ["clock_offsets", "decomposition_bars", "heatmap_p99", "latency_cdfs",
                                    "over_time_of", "queue_vs_utilization"]
    line, _, outages = figures.args["over_time_of"]
    expected = timeline(lazy.requests)
    assert line.whole_s == expected.whole_s and line.p99_ms.keys() == expected.p99_ms.keys()
    for region, p99 in expected.p99_ms.items():
        np.testing.assert_array_equal(line.p99_ms[region], p99)
        np.testing.assert_array_equal(line.requests[region], expected.requests[region])
    assert outages == lazy.summary.to_dict()["outages"] and figures.args["latency_cdfs"] == (lazy.cdfs,)
    assert json.dumps(lazy.summary, default=str) == json.dumps(whole.summary, default=str)
    assert lazy.tables.keys() == whole.tables.keys()
    for name, table in whole.tables.items():
        assert lazy.tables[name].equals(table), name
    assert sorted(lazy.data.log._values) == sorted(REPORT_COLUMNS)
    assert list(lazy.requests.columns) == list(REPORT_COLUMNS)
    assert lazy.summary.to_dict()["input"]["rows_read"] == 30_000 and lazy.summary.to_dict()["latency"][-1]["count"] > 0


def _corrupt_latency_pages(chunk) -> None:
    """Overwrite a chunk's first latency_ns page past its header: its footer and other columns still read."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(chunk).row_group(0)
    column = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == "latency_ns")
    data = bytearray(chunk.read_bytes())
    start = column.data_page_offset + 24  # past the page header: into the compressed values
    data[start:start + 64] = bytes(range(64))
    chunk.write_bytes(bytes(data))


def test_a_chunk_unreadable_in_a_later_column_is_skipped_and_the_analysis_run_again(tmp_path):
    """A chunk whose footer and first columns read but whose latency pages are corrupt: found only when the
    latency column is read, after statistics used its other columns. It is reported as skipped and every
    statistic is computed without it (the run analysed again), never half with it."""
    import pyarrow.parquet as pq

    from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS

    run_dir = _synthetic(tmp_path)
    chunk = sorted(run_dir.glob("regions/*/*/requests-*.parquet"))[0]
    rows = pq.read_metadata(chunk).num_rows
    _corrupt_latency_pages(chunk)
    with pytest.raises(Exception):
        pq.read_table(chunk, columns=["latency_ns"])
    pq.read_table(chunk, columns=["worker", "phase", "status", "endpoint", "region"])  # these still read

    summary = analyze_run(run_dir, ANALYSIS_COLUMNS).summary.to_dict()
    (skipped,) = summary["input"]["chunks_skipped"]
    assert skipped["path"] == str(chunk) and "latency_ns" in skipped["reason"], skipped
    assert summary["input"]["rows_read"] == 30_000 - rows
    assert sum(r["count"] for r in summary["phases"]) == 30_000 - rows


def _flip_one_bit(chunk, column_name: str) -> None:
    """Flip one bit in the middle of a chunk's `column_name` pages: a damage no decoder notices by itself."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(chunk).row_group(0)
    column = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column_name)
    data = bytearray(chunk.read_bytes())
    data[column.data_page_offset + column.total_compressed_size // 2] ^= 0x04
    chunk.write_bytes(bytes(data))


@pytest.mark.parametrize("column_name", ["latency_ns", "trace_id"])
def test_one_flipped_bit_in_a_chunk_is_found_by_its_page_checksum_and_the_chunk_skipped(tmp_path, column_name):
    """Delta-packed pages decode a flipped bit to other numbers without complaint: the chunk writer's page CRCs
    make it an error naming the chunk, and the analysis runs again without it — also when the damage is in
    the trace ids, read last and only for the rows the report names."""
    import pyarrow.parquet as pq

    from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS

    run_dir = _synthetic(tmp_path)
    clean = analyze_run(run_dir, ANALYSIS_COLUMNS).summary.to_dict()
    named = {r["trace_id"] for r in clean["slowest"]}
    chunks = sorted(run_dir.glob("regions/*/*/requests-*.parquet"))
    chunk = next(c for c in chunks if named & set(pq.read_table(c, columns=["trace_id"]).column(0).to_pylist()))
    rows = pq.read_metadata(chunk).num_rows
    _flip_one_bit(chunk, column_name)
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(chunk, columns=[column_name], page_checksum_verification=True)
    summary = analyze_run(run_dir, ANALYSIS_COLUMNS).summary.to_dict()
    (skipped,) = summary["input"]["chunks_skipped"]
    assert skipped["path"] == str(chunk) and "CRC" in skipped["reason"] and column_name in skipped["reason"]
    assert summary["input"]["rows_read"] == 30_000 - rows
    assert clean["valid"] and not summary["valid"] and summary["verdict"] == "INVALID" and summary["exit_code"] == 4
    assert summary["invalid_reasons"][-1].startswith(f"1 request chunk(s) could not be read ({chunk};")


def test_only_unreadable_request_chunks_make_a_run_invalid():
    """The requests are the measurement: a request chunk that cannot be read is missing from every number. A torn
    last line of a server-statistics log or a damaged clock chunk is reported as skipped, and the run stands."""
    from tailrace.analysis.read.chunks import SkippedChunk, unread_request_chunks

    others = [SkippedChunk("/r/endpoints/a/stats-timeline.jsonl:7", "not valid JSON"),
              SkippedChunk("/r/regions/eu/eu-w0/clock-00002.parquet", "CRC mismatch")]
    assert unread_request_chunks(others) == []
    lost = [SkippedChunk("/r/regions/eu/eu-w0/requests-00007.parquet", "CRC mismatch"),
            SkippedChunk("/r/regions/us/us-w1/requests-00003.parquet", "truncated")]
    (reason,) = unread_request_chunks(others + lost)
    assert reason.startswith("2 request chunk(s) could not be read (/r/regions/eu/eu-w0/requests-00007.parquet and 1 "
                             "more;")


def test_a_run_directory_missing_chunks_a_worker_wrote_is_invalid_and_names_the_worker(tmp_path):
    """A request chunk deleted, or never delivered to the master, leaves nothing to skip: the analysis counts each
    worker's rows against what its summary says it wrote, so the rest can never PASS as if it were the run."""
    import json

    import pyarrow.parquet as pq

    from tailrace.analysis.read.chunks import SkippedChunk, missing_requests
    from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS

    run_dir = _synthetic(tmp_path)
    assert analyze_run(run_dir, ANALYSIS_COLUMNS).summary.to_dict()["valid"]
    chunk = sorted(run_dir.glob("regions/*/*/requests-*.parquet"))[0]
    rows, worker = pq.read_metadata(chunk).num_rows, chunk.parent.name
    written = json.loads((run_dir / "manifest.json").read_text())["workers"][worker]["summary"]["rows_written"]
    chunk.unlink()
    summary = analyze_run(run_dir, ANALYSIS_COLUMNS).summary.to_dict()
    assert not summary["valid"] and summary["verdict"] == "INVALID" and summary["exit_code"] == 4
    assert summary["invalid_reasons"] == [f"{worker}: {rows:,} of the {written:,} requests it recorded are not in the "
                                          "run directory (chunks missing; `tailrace collect SPOOL RUN_DIR` copies "
                                          "those a worker kept)"]
    # a worker with a damaged chunk is named once, by the damaged chunk
    assert missing_requests({worker: written}, {worker: written - rows},
                            [SkippedChunk(str(chunk), "CRC mismatch")]) == []


def test_the_rows_memory_is_sized_for_are_the_workers_recorded_ones_else_the_chunks(tmp_path, monkeypatch):
    """Sizing memory before a read counts the rows each worker's summary says it wrote, without opening a chunk (a
    long run's thousands of small chunks: a footer parsed each); where a worker left no summary, or the manifest is
    not JSON, the chunks' footers are counted."""
    import json

    import pyarrow.parquet as pq

    import tailrace.analysis.read.rundir as rundir

    write_run(tmp_path, profile=profile_dict(100, 2), workers={
        "r1-w0": {"region": "r1", "latency_ms": 5, "rate": 100, "duration_s": 2}})
    in_chunks = sum(pq.read_metadata(p).num_rows for p in tmp_path.glob("regions/*/*/requests-*.parquet"))
    manifest_path = tmp_path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["workers"] = {"r1-w0": {"summary": {"rows_written": 12_345}}}
    manifest_path.write_text(json.dumps(manifest))
    with monkeypatch.context() as m:
        m.setattr(rundir, "read_footer", lambda path: pytest.fail(f"opened {path}"))
        assert rundir.request_rows([tmp_path]) == 12_345
    manifest["workers"]["r2-w0"] = {"left_reason": "disconnected"}  # no summary: its rows are not known
    manifest_path.write_text(json.dumps(manifest))
    assert rundir.request_rows([tmp_path]) == in_chunks > 0
    manifest["workers"]["r2-w0"] = "damaged"  # a worker that is not an object: counted from the chunks, no traceback
    manifest_path.write_text(json.dumps(manifest))
    assert rundir.request_rows([tmp_path]) == in_chunks
    manifest_path.write_text("{not json")
    assert rundir.request_rows([tmp_path]) == in_chunks
    # recorded rows the run directory does not hold (a damaged manifest): counted in the chunks before a refusal
    manifest["workers"] = {"r1-w0": {"summary": {"rows_written": 10**11}}}
    manifest_path.write_text(json.dumps(manifest))
    monkeypatch.setattr(rundir, "_available_bytes", lambda: 2**30)
    rundir.check_fits([tmp_path], 240, "analyse", rundir.request_rows([tmp_path]))


def test_theil_sen_is_scipys_line_to_the_bit(monkeypatch):
    """The clock models' Theil–Sen line (slopes made a block of rows at a time, their median selected) is
    scipy.stats.theilslopes' slope and intercept to the bit — with equal local times (no slope between them), equal
    offsets, and samples spread over several blocks — and fit_all fits every worker as fit_offset does alone."""
    import pandas as pd
    from scipy import stats

    import tailrace.analysis.read.clock_correction as clock_correction
    from tailrace.analysis.read.clock_correction import fit_offset, theil_sen

    monkeypatch.setattr(clock_correction, "PAIRS_BLOCK", 4_096)  # ~10–60 rows a block here
    rng = np.random.default_rng(11)
    for _ in range(60):
        n = int(rng.integers(4, 400))
        x = np.sort(rng.integers(0, 86_400 * 10**9, n)).astype(float)
        x[rng.random(n) < 0.1] = x[0]  # samples at one instant: no slope between them
        y = np.round(rng.normal(0, 1e5, n) + x * 2e-6, int(rng.integers(-3, 2)))  # rounded: equal offsets too
        want = stats.theilslopes(y, x)
        assert theil_sen(y, x) == (float(want.slope), float(want.intercept))
    samples = pd.DataFrame({"server": "ntp", "worker": np.repeat(["w1", "w2", "w3"], 200),
                            "local_ns": np.tile(np.arange(200) * 10**9, 3) + 1_790_000_000 * 10**9,
                            "offset_ns": rng.normal(0, 1e5, 600), "delay_ns": rng.integers(50_000, 90_000, 600)})
    models = fit_all(samples)
    assert list(models) == ["w1", "w2", "w3"]
    for worker, g in samples.groupby("worker"):
        assert models[worker] == fit_offset(worker, g)
