"""Benchmark: the send lag of the open loop when one worker core sends embeddings, rerank (32 documents) and chat
requests carrying a 512 × 512 image at a high rate — each kind a run of the real harness (a master on CPU 1, one
Locust worker on CPU 0) against nginx (CPU 1) answering constant replies, so the generator's core is what is
measured. The rates are set from bench/pooling_cpu.py's CPU per request (about 60% of what one core holds of each
kind, and below). Side by side in one run, the kinds alternating per repeat; send lag p50 / p99 of the measured
phase.

    .venv/bin/python bench/workloads_open_loop.py [--seconds 10] [--repeats 3] [--write]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402
from bench.generator_open_loop import isolate_generator_core, restore_affinity, start_nginx, worker_trial  # noqa: E402
from bench.pooling_cpu import replies  # noqa: E402
from tailrace.command_lines import tailrace_argv  # noqa: E402
from tailrace.endpoints.models.model_build import build_repository  # noqa: E402
from tailrace.harness.services.processes import free_port, start_process  # noqa: E402

COMMAND = ".venv/bin/python bench/workloads_open_loop.py"


def kinds(url: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name → (the [[endpoints]] table's body, the rates tried)."""
    return {
        "embeddings, 1 text of 64 words": (f'''name = "embed"
url = "{url}/one"
protocol = "openai-embeddings"
model = "m"
prompts = {{ input_tokens = 64, count = 64 }}''', (4000, 6000)),
        "rerank, 32 documents of 128 words": (f'''name = "rerank"
url = "{url}"
protocol = "rerank"
model = "m"
prompts = {{ input_tokens = 16, count = 16 }}
rerank = {{ documents = 32, document_tokens = 128 }}''', (4000, 6000)),
        "chat, 64 words and a 512 × 512 JPEG": (f'''name = "vlm"
url = "{url}"
protocol = "openai-chat"
model = "m"
prompts = {{ input_tokens = 64, output_tokens = 16, count = 32, images = {{ width = 512, height = 512, distinct = 32 }} }}''',
                                               (3000, 4500))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, runs)")
    args = ap.parse_args()
    results: dict[tuple[str, int], list[tuple[float, float, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="tailrace-workloads-") as tmp:
        work = Path(tempfile.mkdtemp(prefix="tailrace-workloads-kept-")) if args.keep else Path(tmp)
        models = work / "models"
        build_repository(models)
        nginx_port, sntp_port = free_port(), free_port()
        nginx = start_nginx(work, nginx_port, routes=replies())
        sntp = start_process("sntp", ["taskset", "-c", "1", *tailrace_argv("sntp", "--port", str(sntp_port))],
                             work / "sntp.log")
        moved = isolate_generator_core()
        try:
            time.sleep(1)
            table = kinds(f"http://127.0.0.1:{nginx_port}")
            for r in range(args.repeats):
                order = list(table.items()) if r % 2 == 0 else list(reversed(table.items()))
                for name, (endpoint, rates) in order:
                    for rate in rates:
                        key = (name, rate)
                        df, _ = worker_trial(work, models, f"127.0.0.1:{sntp_port}", f"w{r}-{len(results)}-{rate}",
                                             endpoint, rate, args.seconds)
                        lag = df["send_lag_ns"].to_numpy() / 1e6
                        ok = float((df["status"] == "ok").mean())
                        results.setdefault(key, []).append((len(df) / args.seconds, float(np.percentile(lag, 50)),
                                                            float(np.percentile(lag, 99)), ok))
                        print(f"{name} @ {rate}/s: {results[key][-1]}", flush=True)
        finally:
            restore_affinity(moved)
            nginx.stop()
            sntp.stop()
    lines = [f"Command: `{COMMAND} --seconds {args.seconds} --repeats {args.repeats}` (one Locust worker on CPU 0, "
             "the master, the SNTP reference and nginx on CPU 1; median over the repeats, range).", "",
             "| request | asked /s | achieved /s | send lag p50 (ms) | send lag p99 (ms) | ok |", "|---|---|---|---|---|---|"]
    for (name, rate), values in sorted(results.items()):
        achieved, p50, p99, ok = (list(v) for v in zip(*values))
        lines.append(f"| {name} | {rate:,} | {statistics.median(achieved):,.0f} | {statistics.median(p50):.3f} "
                     f"| {statistics.median(p99):.2f} ({min(p99):.2f}–{max(p99):.2f}) | {min(ok):.2%} |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section("Open loop at a high rate of embeddings, rerank and image requests", f"""\
The send lag of one worker core sending each kind at two rates — about 35% and 50% of what bench/pooling_cpu.py says
the core holds of it (the records, the chunk writer and the rest of the worker share the core) — the real harness end
to end.

{text}
""")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
