"""Reading a run directory (the contract in DESIGN.md). Never imports locust or the harness runtime."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.record_schema import CLOCK_FIELDS, OPTIONAL_DEFAULTS, REQUEST_COLUMNS


@dataclass
class SkippedChunk:
    path: str
    reason: str


@dataclass
class RunData:
    """Everything read from one run directory."""

    run_dir: Path
    manifest: dict
    requests: pd.DataFrame
    clock: pd.DataFrame
    chunks_read: int = 0
    skipped: list[SkippedChunk] = field(default_factory=list)
    endpoint_stats: dict[str, dict[str, dict]] = field(default_factory=dict)
    stats_timelines: dict[str, list[dict]] = field(default_factory=dict)  # endpoint → periodic snapshots
    cold_starts: dict[str, dict] = field(default_factory=dict)  # endpoint → its server's start timing
    metrics_timelines: dict[str, list[dict]] = field(default_factory=dict)  # endpoint → periodic metric samples
    models: dict[str, dict] = field(default_factory=dict)  # endpoint → its model's build metadata


class RunDirError(Exception):
    """A run directory that cannot be analysed at all (names the path)."""


def _read_chunks(files: list[Path], columns: tuple[str, ...], skipped: list[SkippedChunk],
                 optional: dict[str, object] | None = None) -> tuple[pd.DataFrame, int]:
    tables = []
    for f in files:
        try:
            table = pq.read_table(f)
            for name, default in (optional or {}).items():  # a column newer than the chunk
                if name not in table.column_names:
                    table = table.append_column(name, pa.array([default] * table.num_rows, type=pa.int32()))
            missing = [c for c in columns if c not in table.column_names]
            if missing:
                raise ValueError(f"missing column(s) {', '.join(missing)}")
            tables.append(table.select(list(columns)))
        except (pa.ArrowInvalid, OSError, ValueError) as exc:
            skipped.append(SkippedChunk(str(f), str(exc).splitlines()[0][:200]))
    if not tables:
        return pd.DataFrame(columns=list(columns)), 0
    return pa.concat_tables(tables).to_pandas(), len(tables)


def load_run(run_dir: Path) -> RunData:
    """Load manifest, every closed request and clock chunk (corrupt ones reported and skipped), endpoint stats."""
    run_dir = Path(run_dir)
    manifest_path = run_dir / "manifest.json"
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: not a directory")
    try:
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{manifest_path}: not valid JSON: {exc}") from None
    skipped: list[SkippedChunk] = []
    request_files = sorted(run_dir.glob("regions/*/*/requests-*.parquet"))
    clock_files = sorted(run_dir.glob("regions/*/*/clock-*.parquet"))
    if not request_files:
        raise RunDirError(f"{run_dir}: no request chunks under regions/*/*/")
    requests, n_req = _read_chunks(request_files, REQUEST_COLUMNS, skipped, OPTIONAL_DEFAULTS)
    if len(requests):
        requests["batch_size"] = requests["batch_size"].fillna(1).astype(int)
        requests["correct_count"] = requests["correct_count"].fillna(requests["correct"].astype(int)).astype(int)
    clock, _ = _read_chunks(clock_files, tuple(n for n, _, _ in CLOCK_FIELDS), skipped)
    stats: dict[str, dict[str, dict]] = {}
    for f in sorted(run_dir.glob("endpoints/*/stats-*.json")):
        try:
            stats.setdefault(f.parent.name, {})[f.stem.removeprefix("stats-")] = json.loads(f.read_text())
        except json.JSONDecodeError as exc:
            skipped.append(SkippedChunk(str(f), f"not valid JSON: {exc}"))
    timelines = {f.parent.name: _read_jsonl(f, skipped) for f in sorted(run_dir.glob("endpoints/*/stats-timeline.jsonl"))}
    cold = _read_json_per_endpoint(run_dir, "cold-start.json", skipped)
    models = _read_json_per_endpoint(run_dir, "model.json", skipped)
    metrics = {f.parent.name: _read_jsonl(f, skipped)
               for f in sorted(run_dir.glob("endpoints/*/metrics-timeline.jsonl"))}
    return RunData(run_dir, manifest, requests, clock, n_req, skipped, stats, timelines, cold, metrics, models)


def _read_json_per_endpoint(run_dir: Path, name: str, skipped: list[SkippedChunk]) -> dict[str, dict]:
    out = {}
    for f in sorted(run_dir.glob(f"endpoints/*/{name}")):
        try:
            out[f.parent.name] = json.loads(f.read_text())
        except json.JSONDecodeError as exc:
            skipped.append(SkippedChunk(str(f), f"not valid JSON: {exc}"))
    return out


def _read_jsonl(path: Path, skipped: list[SkippedChunk]) -> list[dict]:
    """The JSON lines of `path`; a torn last line (the writer was killed) is reported and skipped."""
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            skipped.append(SkippedChunk(f"{path}:{n}", f"not valid JSON: {exc}"))
    return rows

