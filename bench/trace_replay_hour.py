"""The whole Mooncake conversation trace (profiles/traces/mooncake-conversation.jsonl.gz: 12,031 rows, an hour, prompts
of 0.9k–121k tokens, each built from its 512-token blocks) replayed against bench/stream_sink.py for `--seconds`,
`--time-scale` times as fast (6: the whole hour in 600 s): does the generator stay VALID, keep contact with the
master, and hold its memory flat while it builds ~14k-word prompts ahead of their sends?

Reports: VALID or not (and why), rows sent against the trace's rows in the window, send lag p50 / p99 / max, the
workers' control-channel gaps, the workers' resident memory at 60 s, its peak and at the end (sampled every 5 s), and
the most the workers' builds ahead held (worker.json).

    python bench/trace_replay_hour.py [--seconds 600] [--time-scale 1] [--write]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import write_section  # noqa: E402
from tailrace.harness.services.processes import free_port  # noqa: E402

TRACE = ROOT / "profiles" / "traces" / "mooncake-conversation.jsonl.gz"


def profile(url: str, seconds: int, out: Path, time_scale: float) -> str:
    return f"""name = "mooncake-hour"
output_dir = "{out}"
[[endpoints]]
name = "llm"
url = "{url}"
protocol = "openai-chat"
model = "sink"
[[regions]]
name = "eu-west"
share = 0.5
[[regions]]
name = "us-east"
share = 0.5
[load]
duration_s = {seconds}
warmup_s = 0
seed = 7
[load.arrivals]
process = "trace"
trace = {{ file = "{TRACE}", time_scale = {time_scale} }}
[clock]
servers = ["embedded"]
"""


def worker_rss_mb(parent: psutil.Process, known: dict[int, bool]) -> dict[int, float]:
    """Each Locust worker's resident memory (MB); a command line read once a process (`known`: reading it takes the
    process's memory-map lock, which holds up a worker that maps or unmaps meanwhile)."""
    out = {}
    for child in parent.children(recursive=True):
        try:
            if child.pid not in known:
                line = " ".join(child.cmdline())
                known[child.pid] = "locust" in line and "--worker" in line
            if known[child.pid]:
                out[child.pid] = child.memory_info().rss / 2**20
        except psutil.Error:
            continue
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--time-scale", type=float, default=1.0, help="the trace this many times as fast")
    ap.add_argument("--write", action="store_true", help="write the result into docs/BENCHMARKS.md")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trace-hour-"))
    port = free_port()
    sink = subprocess.Popen([sys.executable, str(ROOT / "bench" / "stream_sink.py"), "--port", str(port), "--log",
                             str(tmp / "sink.jsonl"), "--first-ms", "50", "--gap-ms", "20", "--tokens", "20"])
    try:
        toml = tmp / "p.toml"
        toml.write_text(profile(f"http://127.0.0.1:{port}", args.seconds, tmp / "runs", args.time_scale))
        run = subprocess.Popen([sys.executable, "-m", "tailrace.cli", "run", str(toml), "--quiet"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        parent, samples, started, known = psutil.Process(run.pid), [], time.monotonic(), {}
        while run.poll() is None:
            rss = worker_rss_mb(parent, known)
            if rss:
                samples.append((time.monotonic() - started, sum(rss.values())))
            time.sleep(5)
        output = run.stdout.read()
    finally:
        sink.terminate()
        sink.wait(10)
    run_dir = max((tmp / "runs").glob("mooncake-hour-*"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    from tailrace.analysis.analyze import analyze_run
    from tailrace.harness.workload.traces import read_trace

    df = analyze_run(run_dir).requests
    rows = read_trace(TRACE)
    due = int((rows.time_s < args.seconds * args.time_scale).sum())
    built = [(json.loads(p.read_text()).get("scenario") or {}).get("built_ahead") or {}
             for p in run_dir.glob("regions/*/*/worker.json")]
    lag = df["send_lag_ns"].to_numpy() / 1e6
    gaps = [w for w in manifest.get("warnings", []) if "no contact with the master" in w]
    at_60 = next((mb for t, mb in samples if t >= 60), None)
    requests = ", ".join(str(b.get("peak_requests", "–")) for b in built)
    mib = ", ".join(f"{b.get('peak_bytes', 0) / 2**20:.1f}" for b in built)
    scale = f" --time-scale {args.time_scale:g}" if args.time_scale != 1 else ""
    body = (f"Command: `python bench/trace_replay_hour.py --seconds {args.seconds}{scale}` (2 regions, one worker each, "
            f"against bench/stream_sink.py: 20 tokens a stream)\n\n"
            "| | value |\n|---|---|\n"
            f"| verdict | {'VALID' if manifest['valid'] else 'INVALID: ' + '; '.join(manifest['invalid_reasons'])} |\n"
            f"| rows sent / due in the window | {len(df):,} / {due:,} |\n"
            f"| prompt tokens sent (mean, max) | {df['prompt_tokens_sent'].mean():,.0f}, "
            f"{df['prompt_tokens_sent'].max():,} |\n"
            f"| send lag p50 / p99 / max (ms) | {np.percentile(lag, 50):.2f} / {np.percentile(lag, 99):.2f} / "
            f"{lag.max():.1f} |\n"
            f"| control-channel gaps | {len(gaps)} |\n"
            f"| workers' RSS at 60 s / peak / at the end (MB, both workers) | "
            f"{at_60 or float('nan'):.0f} / {max((mb for _, mb in samples), default=float('nan')):.0f} / "
            f"{samples[-1][1] if samples else float('nan'):.0f} |\n"
            f"| built ahead at most, per worker (requests; MiB of bodies) | {requests}; {mib} |\n")
    print(body)
    print(output[-2000:])
    if args.write:
        write_section("A whole trace's prompts, built as it plays", body)
    return 0 if manifest["valid"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
