"""SQL over runs' request logs where they lie (`tailrace query`): DuckDB reads the run directories' Parquet chunks in
place — only the columns and row groups a query needs, on every core, spilling to disk where it must — so a question
the report does not answer is one query, at any size of run, with no copy of the log.

Views, one row per request or sample, every run given in one set (`run`: the run directory's name):
- `requests`: every column of contract/records.py (a column an older or one-shot run left out: its default), and
  `t_intended_ref`, `t_sent_ref`, `t_done_ref` — the times on the reference clock, by the same fitted model and the
  same arithmetic as the analysis (analysis/read/clock_correction.py: equal to the nanosecond).
- `clock`: the workers' clock samples; `clock_models`: each worker's fitted offset model.

DuckDB does not check the chunks' page checksums as the analysis' reader does (docs/DECISIONS.md): a chunk the
analysis refused (its summary.json's skipped chunks) is left out, and one DuckDB cannot read is left out and named.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tailrace.contract.layout import ReportLayout, RunLayout
from tailrace.contract.records import CLOCK_FIELDS, OPTIONAL_DEFAULTS, REQUEST_FIELDS

REFERENCE_TIMES = ("t_intended", "t_sent", "t_done")  # the analysis' reference-clock columns (add_reference_times)
SQL_TYPES = {"string": "VARCHAR", "int64": "BIGINT", "int32": "INTEGER", "bool": "BOOLEAN", "binary": "BLOB",
             "float64": "DOUBLE"}
MAX_UNREADABLE = 64  # chunks left out one by one before the query gives up


class QueryError(Exception):
    """What stops a query, in one line (names the run directory, the chunk or the SQL's error)."""


@dataclass
class RunFiles:
    """One run directory's chunks, as the views read them."""

    name: str
    path: Path
    requests: list[Path]
    clock: list[Path]
    left_out: dict[str, str] = field(default_factory=dict)  # chunk → why it is not read


def run_files(run_dir: Path, name: str) -> RunFiles:
    """A run directory's request and clock chunks, less those its analysis refused (QueryError: not a run)."""
    layout = RunLayout(run_dir)
    if not run_dir.is_dir():
        raise QueryError(f"{run_dir}: not a directory")
    if not layout.manifest.exists():
        raise QueryError(f"{run_dir}: no manifest.json — not a tailrace run directory")
    refused = _refused_by_analysis(run_dir)
    chunks = layout.request_chunks()
    requests = [p for p in chunks if _within_run(p) not in refused]
    if not requests:
        raise QueryError(f"{run_dir}: no readable request chunks (regions/<region>/<worker>/)")
    return RunFiles(name, run_dir, requests, layout.clock_chunks(),
                    {str(p): refused[_within_run(p)] for p in chunks if _within_run(p) in refused})


def _within_run(chunk: Path | str) -> tuple[str, ...]:
    """A chunk's place in its run directory (region, worker, file): the same whichever path the run was read by."""
    return Path(chunk).parts[-3:]


def _refused_by_analysis(run_dir: Path) -> dict[tuple[str, ...], str]:
    """The chunks the run's last analysis could not read (_within_run → reason), from its summary.json if any."""
    summary = ReportLayout.of_run(run_dir).summary
    try:
        skipped = json.loads(summary.read_text())["input"]["chunks_skipped"]
        return {_within_run(str(s["path"])): str(s["reason"]) for s in skipped}
    except (OSError, ValueError, KeyError, TypeError):
        return {}  # never analysed, or a summary of another shape: every chunk is read


def runs_named(paths: list[Path]) -> list[Path]:
    """The run directories `paths` name: each a run, or a directory of runs (a sweep's points, a capacity search's
    trials, a directory of runs: `tailrace runs`' search, three levels down), in order, each once."""
    from tailrace.analysis.history.catalogue import find_runs

    out: list[Path] = []
    for path in map(Path, paths):
        found = find_runs(path) if path.is_dir() and not RunLayout(path).manifest.exists() else [path]
        out += [run for run in (found or [path]) if run not in out]  # none found: run_files says why it is not one
    return out


def unique_names(run_dirs: list[Path]) -> list[str]:
    """Each run's `run` value: its directory's name, or its path where two share a name."""
    names = [Path(d).resolve().name for d in run_dirs]
    return [n if names.count(n) == 1 else str(d) for n, d in zip(names, run_dirs)]


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "''::BLOB"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def _files_sql(files: list[Path]) -> str:
    return "[" + ", ".join(_literal(str(p)) for p in files) + "]"


def request_select(run: RunFiles, present: set[str]) -> str:
    """The requests of one run: every REQUEST_FIELDS column (absent ones as their default), the run's name, and the
    reference-clock times joined from its clock models (view clock_models)."""
    columns = []
    for name, kind, _ in REQUEST_FIELDS:
        sql_type = SQL_TYPES[kind]
        if name in present:
            default = OPTIONAL_DEFAULTS.get(name)
            columns.append(f"coalesce(r.{name}, CAST({_literal(default)} AS {sql_type})) AS {name}"
                           if name in OPTIONAL_DEFAULTS and default is not None else f"r.{name}")
        else:
            columns.append(f"CAST({_literal(OPTIONAL_DEFAULTS.get(name))} AS {sql_type}) AS {name}")
    # analysis/read/clock_correction.py's OffsetModel.to_reference, operation for operation: the local time as a
    # double, less t0, times the slope, plus the intercept, rounded half to even, added to the local time; a worker
    # without a model (no clock samples) by the offset stamped on the row
    for t in REFERENCE_TIMES:
        columns.append(f"CASE WHEN m.samples_used > 0 THEN r.{t} + CAST(round_even((CAST(r.{t} AS DOUBLE) - "
                       f"CAST(m.t0_ns AS DOUBLE)) * m.slope + m.intercept_ns, 0) AS BIGINT) "
                       f"ELSE r.{t} + r.clock_offset_ns END AS {t}_ref")
    return (f"SELECT {_literal(run.name)} AS run, {', '.join(columns)} "
            f"FROM read_parquet({_files_sql(run.requests)}, union_by_name = true) r "
            f"LEFT JOIN clock_models m ON m.run = {_literal(run.name)} AND m.worker = r.worker")


def clock_select(run: RunFiles) -> str | None:
    if not run.clock:
        return None
    names = ", ".join(name for name, _, _ in CLOCK_FIELDS)
    return (f"SELECT {_literal(run.name)} AS run, {names} "
            f"FROM read_parquet({_files_sql(run.clock)}, union_by_name = true)")


def unreadable_chunk(message: str, runs: list[RunFiles]) -> tuple[RunFiles, Path] | None:
    """The run and request chunk a DuckDB error names, if it names one."""
    for run in runs:
        for path in run.requests:
            if str(path) in message:
                return run, path
    return None


def duckdb_settings(memory_limit: str | None, temp_dir: Path | None) -> dict[str, str | bool | int | float | list[str]]:
    """DuckDB's settings for a query: every core; its memory limit and spill directory where given."""
    settings: dict[str, str | bool | int | float | list[str]] = {"threads": os.cpu_count() or 1, "preserve_insertion_order": False}
    if memory_limit:
        settings["memory_limit"] = memory_limit
    if temp_dir is not None:
        settings["temp_directory"] = str(temp_dir)
    return settings


CLOCK_MODEL_COLUMNS = ("run VARCHAR, worker VARCHAR, t0_ns BIGINT, intercept_ns DOUBLE, slope DOUBLE, "
                       "uncertainty_ns DOUBLE, samples_used BIGINT, samples_total BIGINT")


class RunQuery:
    """A DuckDB connection with the views of `run_dirs` (QueryError: one is not a run). `sql` answers a query; a
    chunk DuckDB cannot read is left out (named in `left_out`) and the query asked again."""

    def __init__(self, run_dirs: list[Path], memory_limit: str | None = None, temp_dir: Path | None = None) -> None:
        import duckdb

        dirs = runs_named(run_dirs)
        named = {Path(d) for d in run_dirs}
        self.runs: list[RunFiles] = []
        self.skipped_runs: dict[str, str] = {}  # a run found in a directory of runs that cannot be read: why
        for run_dir, name in zip(dirs, unique_names(dirs)):
            try:
                self.runs.append(run_files(run_dir, name))
            except QueryError as exc:
                if run_dir in named:  # named by the caller: its error is the query's
                    raise
                self.skipped_runs[str(run_dir)] = str(exc)
        if not self.runs:
            raise QueryError(f"no readable run in {', '.join(map(str, run_dirs))} ({len(self.skipped_runs)} skipped)")
        # where sorts and joins past the memory limit spill: never the caller's working directory (DuckDB's default)
        self._spill = tempfile.TemporaryDirectory(prefix="tailrace-query-") if temp_dir is None else None
        try:
            self.con = duckdb.connect(config=duckdb_settings(
                memory_limit, Path(self._spill.name) if self._spill is not None else temp_dir))
        except duckdb.Error as exc:  # a memory limit DuckDB cannot read is the likely one
            raise QueryError(f"{f'memory limit {memory_limit!r}' if memory_limit else 'DuckDB'}: {_first_line(exc)}"
                             ) from None
        self.con.execute(f"CREATE TABLE clock_models ({CLOCK_MODEL_COLUMNS})")
        for run in self.runs:
            rows = [(run.name, m.worker, m.t0_ns, m.intercept_ns, m.slope, m.uncertainty_ns, m.samples_used,
                     m.samples_total) for m in clock_models(run).values()]
            if rows:
                self.con.executemany("INSERT INTO clock_models VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        self._make_views()

    @property
    def left_out(self) -> dict[str, str]:
        return {path: why for run in self.runs for path, why in run.left_out.items()}

    def _make_views(self) -> None:
        import duckdb

        selects = []
        for run in self.runs:
            present = self._columns(run)
            selects.append(request_select(run, present))
        self.con.execute("CREATE OR REPLACE VIEW requests AS " + " UNION ALL BY NAME ".join(selects))
        clocks = [c for c in (clock_select(run) for run in self.runs) if c is not None]
        try:
            self.con.execute("CREATE OR REPLACE VIEW clock AS " + (
                " UNION ALL BY NAME ".join(clocks) if clocks else
                "SELECT NULL::VARCHAR AS run, " + ", ".join(f"NULL::{SQL_TYPES[k]} AS {n}" for n, k, _ in CLOCK_FIELDS)
                + " WHERE false"))
        except duckdb.Error as exc:
            raise QueryError(f"clock chunks: {_first_line(exc)}") from None

    def _columns(self, run: RunFiles) -> set[str]:
        """The request columns the run's chunks hold (one left out if DuckDB cannot read its schema)."""
        import duckdb

        for _ in range(MAX_UNREADABLE):
            try:
                return {row[0] for row in self.con.execute(
                    f"DESCRIBE SELECT * FROM read_parquet({_files_sql(run.requests)}, union_by_name = true)").fetchall()}
            except duckdb.Error as exc:
                self._leave_out(exc)
        raise QueryError(f"{run.path}: more than {MAX_UNREADABLE} request chunks unreadable")

    def _leave_out(self, exc: Exception) -> None:
        """Leave out the chunk `exc` names, or raise QueryError with it."""
        found = unreadable_chunk(str(exc), self.runs)
        if found is None:
            hint = (" — an exact quantile holds its groups' values: a larger --memory-limit, fewer groups, or "
                    "approx_quantile" if "Out of Memory" in str(exc) else "")
            raise QueryError(f"SQL: {_first_line(exc)}{hint}") from None
        run, path = found
        run.requests.remove(path)
        run.left_out[str(path)] = _first_line(exc)
        if not run.requests:
            raise QueryError(f"{run.path}: no readable request chunks ({path}: {_first_line(exc)})")

    def _attempt(self, work):
        """`work()`, again with a chunk left out wherever DuckDB names one it cannot read."""
        import duckdb

        for _ in range(MAX_UNREADABLE):
            try:
                return work()
            except duckdb.Error as exc:
                self._leave_out(exc)
                self._make_views()
        raise QueryError(f"more than {MAX_UNREADABLE} request chunks unreadable")

    def answer(self, query: str, limit: int) -> Answer:
        """The first `limit` rows of `query`'s result (the last statement's, where it has several)."""
        def work() -> Answer:
            result = self.con.execute(query)
            if result.description is None:  # a statement that returns no rows (CREATE VIEW …)
                return Answer([], [], [], False)
            names = [d[0] for d in result.description]
            types = [str(d[1]) for d in result.description]
            rows = result.fetchmany(limit + 1)
            return Answer(names, types, rows[:limit], len(rows) > limit)
        return self._attempt(work)

    def frame(self, query: str):
        """`query`'s whole result as a pandas DataFrame (the Python API)."""
        return self._attempt(lambda: self.con.execute(query).df())

    def export(self, query: str, kind: str, path: Path) -> int:
        """Write `query`'s whole result to `path` as CSV with a header or as JSON lines (`kind`), through DuckDB
        (out of core: no row held here); the rows written."""
        if kind not in ("csv", "json"):
            raise ValueError(f"export as {kind!r}: csv or json")
        options = "FORMAT csv, HEADER true" if kind == "csv" else "FORMAT json"

        def work() -> int:
            written = self.con.execute(f"COPY ({query.strip().rstrip(';')}) TO {_literal(str(path))} ({options})")
            count = written.fetchone()
            return int(count[0]) if count else 0
        return self._attempt(work)


@dataclass
class Answer:
    """A query's columns (names and DuckDB types) and its first rows; `more`: rows beyond them."""

    names: list[str]
    types: list[str]
    rows: list[tuple]
    more: bool


def clock_models(run: RunFiles) -> dict:
    """The run's clock models, as its analysis fits them (analysis/read/clock_correction.py) from the same samples
    read the same way (a damaged clock chunk skipped)."""
    from tailrace.analysis.read.chunks import read_chunks
    from tailrace.analysis.read.clock_correction import fit_all

    skipped: list = []
    samples = read_chunks(run.clock, CLOCK_FIELDS, skipped) if run.clock else None
    for s in skipped:
        run.left_out[str(s.path)] = s.reason
    return fit_all(samples) if samples is not None and len(samples) else {}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
