"""Trace files to replay (`load.arrivals.process = "trace"`): a generic CSV / JSONL (`timestamp` in seconds, and
optionally `endpoint`, `region`, `input_tokens`, `output_tokens`, `prompt_id`), the Azure LLM inference trace CSV
(`TIMESTAMP`, `ContextTokens`, `GeneratedTokens`) and Mooncake JSONL (`timestamp` in ms, `input_length`,
`output_length`, `hash_ids`: the 512-token blocks of the prompt, rows sharing leading ids sharing that prefix; a generic
JSONL may carry `hash_ids` too). A file ending in .gz is read through gzip.

Read without pandas (a generator host has only the core install). Every problem is a TraceError naming the file and
its line: a row that does not parse, a timestamp earlier than the one before it (a trace must be sorted), an
endpoint or region the profile does not have.
"""
from __future__ import annotations

import csv
import gzip
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import orjson

from tailrace.contract.profile import Trace
from tailrace.harness.workload.prompts import json_lines

FORMATS = ("csv", "jsonl", "azure", "mooncake")


class TraceError(ValueError):
    """A trace that cannot be replayed (the message names the file and line)."""


@dataclass(frozen=True)
class TraceRows:
    """A trace's rows in file order: time (s, from its first row), and the optional columns (None: absent; -1 /
    "" where a row leaves a present column out); `lines` the file line of each row."""

    time_s: np.ndarray
    lines: np.ndarray
    endpoint: list[str] | None = None
    region: list[str] | None = None
    input_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None
    hash_ids: list[tuple[int, ...]] | None = None  # each row's prompt blocks (Mooncake); () where a row has none

    def __len__(self) -> int:
        return len(self.time_s)


def detect_format(path: Path, first: str) -> str:
    """The format of a trace from its first line (header or object)."""
    if first.lstrip().startswith("{"):
        try:
            doc = orjson.loads(first)
        except orjson.JSONDecodeError:
            raise TraceError(f"{path}:1: not JSON") from None
        return "mooncake" if isinstance(doc, dict) and "input_length" in doc else "jsonl"
    header = [h.strip() for h in first.split(",")]
    return "azure" if "TIMESTAMP" in header and "ContextTokens" in header else "csv"


def _azure_time(text: str) -> float:
    """An Azure trace TIMESTAMP ('2023-11-16 18:15:46.6805900') as POSIX seconds (7 fractional digits kept)."""
    text = text.strip()
    head, _, frac = text.partition(".")
    try:
        seconds = datetime.fromisoformat(head).timestamp()
        return seconds + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise ValueError(f"TIMESTAMP {text!r} is not a date and time like 2023-11-16 18:00:00.0124010") from None


def _number(value, what: str) -> float:
    """A row's time as a finite number (ValueError naming the column and the value)."""
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = float("nan")
    if isinstance(value, bool) or not np.isfinite(t):
        raise ValueError(f"{what} {value!r} is not a number")
    return t


def _int_or_missing(value, what: str) -> int:
    if value is None or value == "":
        return -1
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a whole number ≥ 0, got {value!r}")
    try:
        number = int(value) if not isinstance(value, float) or value.is_integer() else None
    except ValueError:  # a word, or "3.5" as text
        number = None
    if number is None or number < 0:
        raise ValueError(f"{what} must be a whole number ≥ 0, got {value!r}")
    return number


def read_trace(path: Path, fmt: str = "auto") -> TraceRows:
    """Every row of a trace file, checked (TraceError names the file and line)."""
    try:
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    except (OSError, EOFError) as exc:
        raise TraceError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a text file") from None
    lines = text.splitlines()
    first = next((ln for ln in lines if ln.strip()), None)
    if first is None:
        raise TraceError(f"{path}: empty")
    fmt = detect_format(path, first) if fmt == "auto" else fmt
    records: list[tuple[int, dict]] = []
    if fmt in ("csv", "azure"):
        reader = csv.DictReader(lines)
        need = "TIMESTAMP" if fmt == "azure" else "timestamp"
        if need not in (reader.fieldnames or []):
            raise TraceError(f"{path}:1: the header has no {need} column (it has {', '.join(reader.fieldnames or [])})")
        records = [(reader.line_num, row) for row in reader]
    else:
        records = json_lines(path, lines, TraceError)
    if not records:
        raise TraceError(f"{path}: no rows")
    keys = {"azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
            "mooncake": ("timestamp", "input_length", "output_length")}.get(fmt, ("timestamp", "input_tokens",
                                                                                 "output_tokens"))
    has = {k: any(r.get(k) not in (None, "") for _, r in records) for k in (*keys, "endpoint", "region")}
    times, lines_of, inputs, outputs, endpoints, regions, blocks = [], [], [], [], [], [], []
    with_blocks = any("hash_ids" in r for _, r in records) if fmt in ("jsonl", "mooncake") else False
    previous = -np.inf
    for n, row in records:
        try:
            raw = row.get(keys[0])
            if raw is None or raw == "":
                raise ValueError(f"no {keys[0]}")
            if fmt == "azure":
                t = _azure_time(str(raw))
            else:
                t = _number(raw, keys[0]) / (1000.0 if fmt == "mooncake" else 1.0)
            inputs.append(_int_or_missing(row.get(keys[1]), keys[1]))
            outputs.append(_int_or_missing(row.get(keys[2]), keys[2]))
            if with_blocks:
                blocks.append(_hash_ids(row.get("hash_ids")))
        except (TypeError, ValueError) as exc:
            raise TraceError(f"{path}:{n}: {exc}") from None
        if t < previous:
            raise TraceError(f"{path}:{n}: timestamp {raw} is earlier than the row before it: a trace must be sorted "
                             "by time")
        previous = t
        times.append(t)
        lines_of.append(n)
        endpoints.append(str(row.get("endpoint") or ""))
        regions.append(str(row.get("region") or ""))
    time_s = np.asarray(times, dtype=float)
    return TraceRows(time_s - time_s[0], np.asarray(lines_of, dtype=np.int64),
                     endpoints if has["endpoint"] else None, regions if has["region"] else None,
                     np.asarray(inputs, dtype=np.int64) if has[keys[1]] else None,
                     np.asarray(outputs, dtype=np.int64) if has[keys[2]] else None, blocks if with_blocks else None)


def _hash_ids(value) -> tuple[int, ...]:
    """A row's hash_ids: a list of whole numbers (none: an empty tuple)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"hash_ids must be a list of whole numbers, got {str(value)[:60]}")
    return tuple(value)


def check_names(path: Path, rows: TraceRows, endpoints: list[str], regions: list[str]) -> None:
    """Every row's endpoint and region (where the trace has them) is one of the profile's."""
    for column, known in (("endpoint", endpoints), ("region", regions)):
        values = getattr(rows, column)
        if values is None:
            continue
        for line, value in zip(rows.lines, values):
            if value and value not in known:
                raise TraceError(f"{path}:{line}: {column} {value!r} is not one of the profile's "
                                 f"({', '.join(known)})")
            if not value:
                raise TraceError(f"{path}:{line}: no {column} (the trace names one on other rows)")


def replay(rows: TraceRows, spec: Trace, run_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(row index, instant in s of the run) of every arrival the replay sends within `run_s`: the rows of the
    window [start_s, start_s + window_s) of the trace's own time, `time_scale` times as fast, from the run's start;
    with `loop`, the window again and again (its period: window_s, else the rows' span plus their mean gap)."""
    t = rows.time_s
    end = spec.start_s + spec.window_s if spec.window_s else np.inf
    chosen = np.flatnonzero((t >= spec.start_s) & (t < end))
    if not len(chosen):
        raise TraceError(f"{spec.file}: no rows between {spec.start_s:g} s and {end:g} s of the trace")
    at = (t[chosen] - spec.start_s) / spec.time_scale
    if spec.loop:
        span = t[chosen[-1]] - t[chosen[0]]
        gap = span / (len(chosen) - 1) if len(chosen) > 1 else 1.0
        period = (spec.window_s or (t[chosen[-1]] - spec.start_s + gap)) / spec.time_scale
        copies = int(np.ceil(run_s / period)) if period > 0 else 1
        chosen = np.tile(chosen, copies)
        at = np.concatenate([at + k * period for k in range(copies)])
    keep = at < run_s
    return chosen[keep], at[keep]


def load_trace(spec: Trace, data_root: Path, endpoints: list[str], regions: list[str]) -> TraceRows:
    """The profile's trace, read and checked against its endpoints and regions."""
    path = Path(spec.file) if Path(spec.file).is_absolute() else data_root / spec.file
    rows = read_trace(path, spec.format)
    check_names(path, rows, endpoints, regions)
    return rows
