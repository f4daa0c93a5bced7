"""Helpers shared by the benchmarks: wrk runs, result tables, docs/BENCHMARKS.md sections."""
from __future__ import annotations

import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"


def require(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise SystemExit(f"benchmark needs `{tool}` on PATH (Debian: apt-get install {tool})")
    return path


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def run_wrk(url: str, lua: Path, seconds: int, connections: int, cpu: str | None) -> dict:
    """Run wrk once; returns req/s and latency p50/p99 in ms."""
    argv = ([require("taskset"), "-c", cpu] if cpu else []) + [
        require("wrk"), "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(lua), url]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    pct = {p: _ms(v, u) for p, v, u in re.findall(r"^\s+(50|99)(?:\.\d+)?%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)}
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50_ms": pct.get("50"), "p99_ms": pct.get("99"), "non2xx": int(errors.group(1)) if errors else 0}


def shown_command(script: str, argv: list[str]) -> str:
    """A benchmark's command line as docs/BENCHMARKS.md shows it: this machine's paths (a peer tool's binary, a
    baseline checkout) as PATH."""
    return " ".join([f"python {script}", *("PATH" if arg.startswith("/") else arg for arg in argv)])


def write_section(title: str, body: str) -> None:
    """Replace (or append) the `## title` section of docs/BENCHMARKS.md."""
    BENCHMARKS_MD.parent.mkdir(parents=True, exist_ok=True)
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else (
        "# Benchmarks\n\nEvery number here was written by the command shown with it, on the 2-core machine "
        "the project runs on. Ratios are measured side by side in one run, because absolute numbers drift "
        "with machine noise.\n")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = f"## {title}\n\n_Measured {stamp}._\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text) if pattern.search(text) else text.rstrip() + "\n\n" + section
    BENCHMARKS_MD.write_text(text)


ROOMS = ("contract", "harness", "endpoints", "analysis")


def link_rooms(tree: Path) -> Path:
    """A checkout whose rooms import as tailrace.<room> from itself: without the links, `python -m tailrace.cli`
    run in another checkout imports its rooms from the installed (editable) tree — this one's."""
    for room in ROOMS:
        if not (tree / "tailrace" / room).exists():
            (tree / "tailrace" / room).symlink_to(f"../{room}")
    return tree
