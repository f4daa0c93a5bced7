"""The runs as a history: the run directories under the directories given, each one's catalogue line — read from
the catalogue (contract/layout.py's HistoryLayout: one file for every directory of runs, keyed by each run's absolute
path, appended as each report is written) where its summary.json has not changed since, else from the summary.json,
the line appended — and the filters `tailrace runs` takes. A directory that is no run and holds none, a run never
analysed and a damaged summary are each one line, skipped and counted; the rest are listed."""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pydantic import ValidationError

from tailrace.contract.layout import HistoryLayout, ReportLayout, append_line, is_run_dir, write_atomic
from tailrace.contract.summary import RunSummary, SummaryError
from tailrace.contract.summary.history import CatalogueEntry, SummaryHeadline
from tailrace.contract.summary.tables import first_latency_row

MAX_DEPTH = 3  # runs/<run>, runs/<sweep>/points/<run>, runs/<search>/trials/<run>
COMPACT_AT = 10_000  # the catalogue is rewritten once it holds this many lines more than runs


@dataclass
class Catalogue:
    """The runs found, oldest first, and one line for each directory or run left out."""

    entries: list[tuple[Path, CatalogueEntry]] = field(default_factory=list)  # (the run directory, its line)
    skipped: list[str] = field(default_factory=list)


def entry_of(run: str, summary: RunSummary | SummaryHeadline, mtime_ns: int) -> CatalogueEntry:
    """A run's catalogue line from its summary (`run`: its directory's absolute path)."""
    row = first_latency_row(summary.latency)
    tokens = summary.overall_tokens()
    endpoints = [r for r in summary.latency if r.region == "*" and not r.endpoint.startswith("*")]  # each one's own

    def at(q: str) -> float | None:
        return row.percentiles[q].value if row is not None and q in row.percentiles else None

    return CatalogueEntry(run=run, run_id=summary.run_id, profile=summary.profile, start_ns=summary.manifest.start_ns,
                          verdict=summary.verdict, valid=summary.valid,
                          requests=summary.input.rows_read if summary.input is not None else
                          sum(r.count for r in endpoints), errors=sum(r.errors for r in endpoints),
                          achieved_rate=sum(r.achieved_rate for r in endpoints) if endpoints else None, p50_ms=at("p50"),
                          p95_ms=at("p95"), p99_ms=at("p99"),
                          ttft_p99_ms=tokens.ttft_ms.at("p99").value if tokens is not None else None,
                          git_sha=summary.manifest.git_sha, overrides=summary.manifest.overrides or [],
                          summary_mtime_ns=mtime_ns)


def read_headline(run_dir: Path) -> SummaryHeadline:
    """A run's summary.json headline (SummaryError: missing — the run was never analysed — or damaged, naming the
    file)."""
    path = ReportLayout.of_run(run_dir).summary
    try:
        return SummaryHeadline.read(path)
    except FileNotFoundError:
        raise SummaryError(f"{run_dir}: not analysed (no {path.relative_to(run_dir)}; tailrace analyze "
                           f"{run_dir})") from None
    except OSError as exc:
        raise SummaryError(f"{path}: {exc.strerror or exc}") from None


def record_run(run_dir: Path, summary: RunSummary, history: HistoryLayout | None = None) -> None:
    """Append the run's line to the catalogue (as its report is written; a line a reader finds stale — its
    summary.json rewritten since — is read again on the next listing)."""
    run_dir = Path(run_dir).resolve()
    path = ReportLayout.of_run(run_dir).summary
    mtime = path.stat().st_mtime_ns if path.exists() else 0
    append_line((history or HistoryLayout.default()).catalogue,
                entry_of(str(run_dir), summary, mtime).model_dump_json())


def _read_catalogue(path: Path) -> dict[str, CatalogueEntry]:
    """The catalogue's last line per run (a torn or damaged line is left out: the run's summary says it again)."""
    out: dict[str, CatalogueEntry] = {}
    try:
        lines = path.read_bytes().decode("utf-8", "replace").splitlines()  # a damaged line fails below, alone
    except OSError:
        return out
    for line in lines:
        try:
            entry = CatalogueEntry.model_validate_json(line)
        except ValidationError:
            continue
        out[entry.run] = entry
    return out


def find_runs(root: Path, depth: int = MAX_DEPTH) -> list[Path]:
    """The run directories at or below `root` (a run's own subdirectories are not searched), by path."""
    if is_run_dir(root):
        return [root]
    if depth == 0:
        return []
    found: list[Path] = []
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return found
    for child in children:
        found += find_runs(child, depth - 1)
    return found


def catalogue(dirs: Sequence[Path], history: HistoryLayout | None = None) -> Catalogue:
    """Every run under `dirs`, its line from the catalogue where still current, else from its summary (then
    appended), oldest first. A catalogue grown to COMPACT_AT lines more than it has runs is rewritten with one each."""
    history = history or HistoryLayout.default()
    out = Catalogue()
    seen: set[Path] = set()
    lines, known = _read_catalogue_counted(history.catalogue)
    for root in dirs:
        runs = find_runs(Path(root))
        if not runs:
            out.skipped.append(f"{root}: not a run directory, and holds none")
            continue
        for run_dir in runs:
            if run_dir.resolve() in seen:
                continue
            seen.add(run_dir.resolve())
            entry = _current_entry(run_dir, out.skipped, known, history)
            if entry is not None:
                out.entries.append((run_dir, entry))
    out.entries.sort(key=lambda e: (e[1].start_ns or 0, e[1].run_id))
    if lines - len(known) > COMPACT_AT:
        _compact(history.catalogue, known)
    return out


def _read_catalogue_counted(path: Path) -> tuple[int, dict[str, CatalogueEntry]]:
    """(the catalogue's lines, its last line per run)."""
    try:
        lines = path.read_bytes().count(b"\n")
    except OSError:
        return 0, {}
    return lines, _read_catalogue(path)


def _compact(path: Path, known: dict[str, CatalogueEntry]) -> None:
    """One line per run still there (a line appended meanwhile may be lost: that run's summary is read again)."""
    kept = [e for run, e in known.items() if Path(run).is_dir()]
    try:
        write_atomic(path, "".join(e.model_dump_json() + "\n" for e in kept))
    except OSError:
        pass


def _current_entry(run_dir: Path, skipped: list[str], known: dict[str, CatalogueEntry],
                   history: HistoryLayout) -> CatalogueEntry | None:
    """The run's line: the catalogue's where it is as new as the summary, else read again (and appended)."""
    key = str(run_dir.resolve())
    path = ReportLayout.of_run(run_dir).summary
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        mtime = None
    entry = known.get(key)
    if entry is not None and mtime is not None and entry.summary_mtime_ns == mtime:
        return entry
    try:
        summary = read_headline(run_dir)
    except SummaryError as exc:
        skipped.append(str(exc))
        return None
    entry = entry_of(key, summary, mtime or 0)
    known[key] = entry
    try:
        append_line(history.catalogue, entry.model_dump_json())
    except OSError:
        pass  # a catalogue this user cannot write: listed all the same, read again next time
    return entry


def parse_when(text: str) -> int:
    """An ISO date or date-time (UTC unless it says) as epoch ns; ValueError names what it expected."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r}: expected an ISO date or date-time, e.g. 2026-12-04 or 2026-12-04T16:30") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1e9)


def selected(entries: Iterable[tuple[Path, CatalogueEntry]], profile: str | None = None, verdict: str | None = None,
             since_ns: int | None = None, until_ns: int | None = None) -> list[tuple[Path, CatalogueEntry]]:
    """The entries of a profile, a verdict, started within [since, until) — pure."""
    return [(d, e) for d, e in entries
            if (profile is None or e.profile == profile) and (verdict is None or e.verdict == verdict.upper())
            and (since_ns is None or (e.start_ns or 0) >= since_ns) and (until_ns is None or (e.start_ns or 0) < until_ns)]


def as_json_lines(entries: Iterable[tuple[Path, CatalogueEntry]]) -> str:
    """The listed entries as JSON lines (each with its run directory's path)."""
    return "".join(json.dumps({"run_dir": str(d), **e.model_dump(mode="json")}) + "\n" for d, e in entries)
