"""How often do the shipped profiles come out VALID on this machine, with nothing else running?

Runs each profile `--repeats` times with `tailrace run` (as shipped: the default send-lag threshold unless the
profile sets one) and counts VALID runs; the INVALID reasons and the warnings are listed. Target: every profile
VALID in at least 9 of 10 runs. Writes its section of docs/BENCHMARKS.md.

    .venv/bin/python bench/validity.py --repeats 10 profiles/smoke.toml profiles/demo.toml ...
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402
from tailrace.contract.layout import RunLayout  # noqa: E402


def run_once(profile: Path, out: Path) -> dict:
    """One `tailrace run` of `profile` into `out`; the manifest's verdict on it."""
    before = set(out.iterdir()) if out.exists() else set()
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=1800)
    new = sorted(set(out.iterdir()) - before) if out.exists() else []
    if not new:
        return {"valid": False, "reasons": [f"no run directory (exit {proc.returncode}): {proc.stderr[-300:]}"],
                "warnings": [], "exit": proc.returncode, "seconds": time.monotonic() - started}
    manifest = json.loads(RunLayout(new[-1]).manifest.read_text())
    return {"valid": manifest["valid"], "reasons": manifest["invalid_reasons"], "warnings": manifest["warnings"],
            "exit": proc.returncode, "seconds": time.monotonic() - started,
            "steal": (manifest.get("host_cpu") or {}).get("steal_fraction")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="+", type=Path)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tailrace-validity-") as tmp:
        for profile in args.profiles:
            results = []
            for k in range(args.repeats):
                r = run_once(profile, Path(tmp) / profile.stem)
                results.append(r)
                print(f"{profile.name} run {k + 1}: {'VALID' if r['valid'] else 'INVALID'} exit {r['exit']} "
                      f"({r['seconds']:.0f} s) {r['reasons'][:1]}", flush=True)
            rows.append((profile, results))
    lines = ["Each profile run as shipped with `tailrace run`, one after another, nothing else running.", "",
             "| profile | VALID | exit codes | host steal per run | INVALID reasons | warnings (runs with any) |",
             "|---|---|---|---|---|---|"]
    for profile, results in rows:
        valid = sum(r["valid"] for r in results)
        codes = ", ".join(f"{c}×{n}" for c, n in sorted(Counter(r["exit"] for r in results).items()))
        steal = ", ".join(f"{r['steal']:.1%}" if r.get("steal") is not None else "–" for r in results)
        reasons = "; ".join(sorted({x for r in results for x in r["reasons"]})) or "–"
        warned = sum(bool(r["warnings"]) for r in results)
        lines.append(f"| {profile} | **{valid} of {len(results)}** | {codes} | {steal} | {reasons} | {warned} |")
    command = f"`.venv/bin/python bench/validity.py --repeats {args.repeats} {' '.join(map(str, args.profiles))}`"
    write_section("Shipped profiles: VALID runs on this machine", f"Command: {command}\n\n" + "\n".join(lines))
    print("\n".join(lines))
    return 0 if all(sum(r["valid"] for r in res) >= 0.9 * len(res) for _, res in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
