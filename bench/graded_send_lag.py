"""Benchmark: what grading costs the generator — the send lag of one worker core streaming chat requests, every one a
graded GSM8K-form item (prompts.graded, last_number) beside the same requests ungraded, at rates bench/stream_worker.py
holds; and one grade's cost on its own.

The target is bench/stream_sink.py on CPU 1 (beside the master and the SNTP reference): 20 tokens a request, the
first 50 ms after it arrives, then an event every 20 ms. One real Locust worker on CPU 0 (its chunk writer too) runs a
seeded Poisson open loop of openai-chat requests at each rate, the two kinds alternating, `--repeats` trials each;
the table shows each kind's median trial by send-lag p99 and every trial's p99. The sink's replies are its own
words, so the grades are unparsable: the grader still reads every reply to its end, which is the cost measured.

    .venv/bin/python bench/graded_send_lag.py [--rates 500,1000] [--seconds 10] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import require, write_section  # noqa: E402
from bench.generator_open_loop import isolate_generator_core, median_trial, restore_affinity, worker_trial  # noqa: E402
from tailrace.command_lines import tailrace_argv  # noqa: E402
from tailrace.endpoints.models.model_build import build_repository  # noqa: E402
from tailrace.harness.services.processes import free_port, start_process, wait_http_ok  # noqa: E402
from tailrace.harness.workload import graders  # noqa: E402

TITLE = "Generator: graded items in the stream"
TOKENS, FIRST_MS, GAP_MS = 20, 50.0, 20.0
ITEMS = Path(__file__).resolve().parent.parent / "profiles" / "graded" / "arithmetic.jsonl"


def endpoint_text(url: str, graded: bool) -> str:
    graded_part = f', graded = {{ file = "{ITEMS}" }}' if graded else ""
    return f"""name = "sink"
url = "{url}"
protocol = "openai-chat"
model = "sink"
prompts = {{ input_tokens = {{ mean = 64 }}, output_tokens = {{ mean = {TOKENS} }}{graded_part} }}
"""


def trial(work: Path, models: Path, sntp: str, rate: float, seconds: int, graded: bool, k: int) -> dict:
    name = f"graded-{'g' if graded else 'p'}{k}-{rate:g}"
    port = free_port()
    sink = start_process("sink", ["taskset", "-c", "1", sys.executable, str(Path(__file__).with_name("stream_sink.py")),
                                  "--port", str(port), "--log", str(work / f"sink-{name}.jsonl"), "--first-ms",
                                  str(FIRST_MS), "--gap-ms", str(GAP_MS), "--tokens", str(TOKENS)],
                         work / f"{name}.log")
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/health", sink, timeout=20)
        df, summary = worker_trial(work, models, sntp, name, endpoint_text(f"http://127.0.0.1:{port}", graded),
                                   rate, seconds, warmup_s=2)
    finally:
        sink.stop()
    lag = df.send_lag_ns.to_numpy() / 1e6
    span_s = (df.t_intended.max() - df.t_intended.min()) / 1e9
    grades = df["grade"].astype(str) if "grade" in df else None
    return {"rate": rate, "graded": graded, "achieved": len(df) / span_s,
            "lag_p50": float(np.percentile(lag, 50)), "lag_p99": float(np.percentile(lag, 99)),
            "ok": float((df.status == "ok").mean()),
            "graded_share": float((grades != "").mean()) if grades is not None else 0.0,
            "sent_ratio": summary["sent"] / max(1, summary["planned"])}


def grade_cost_us() -> dict[str, float]:
    """One grade's cost (µs, best of 5 × 2,000) on a 200-word reply: last_number and choice."""
    reply = " ".join(["step"] * 190 + ["so", "the", "answer", "is", "####", "1,072"])
    number = graders.number_within(1e-6)
    out = {}
    for name, grader, reference in (("last_number", number, "1072"), ("choice", graders.choice, "B")):
        best = min(timeit.repeat(lambda g=grader, r=reference: graders.grade_request(
            "ok", "complete", "stop", reply, r, g), number=2000, repeat=5))
        out[name] = best / 2000 * 1e6
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="500,1000")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    require("taskset")
    import signal

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    rows = []
    with tempfile.TemporaryDirectory(prefix="tailrace-gradedbench-") as tmp:
        work = Path(tmp)
        models = work / "models"
        build_repository(models)
        sntp_port = free_port()
        sntp = start_process("sntp", ["taskset", "-c", "1", *tailrace_argv("sntp", "--port", str(sntp_port))],
                             work / "sntp.log")
        moved = isolate_generator_core()
        try:
            for rate in [float(r) for r in args.rates.split(",")]:
                runs: dict[bool, list[dict]] = {False: [], True: []}
                for k in range(args.repeats):  # alternating: a slow spell of the VM hits both kinds alike
                    for graded in (False, True):
                        runs[graded].append(trial(work, models, f"127.0.0.1:{sntp_port}", rate, args.seconds,
                                                  graded, k))
                        print(json.dumps(runs[graded][-1]), flush=True)
                rows += [{**median_trial(runs[g]), "lag_p99_trials": [r["lag_p99"] for r in runs[g]]}
                         for g in (False, True)]
        finally:
            restore_affinity(moved)
            sntp.stop()
    cost = grade_cost_us()
    table = ("| requests | target /s | achieved /s | graded share | send lag p50 / p99 ms (median trial) | "
             "p99 of each trial | ok |\n|---|---|---|---|---|---|---|\n")
    for t in rows:
        table += (f"| {'graded (last_number)' if t['graded'] else 'not graded'} | {t['rate']:,.0f} | "
                  f"{t['achieved']:,.0f} | {t['graded_share']:.2f} | {t['lag_p50']:.2f} / {t['lag_p99']:.2f} | "
                  f"{', '.join(f'{v:.2f}' for v in t['lag_p99_trials'])} | {t['ok']:.3f} |\n")
    body = (f"Command: `.venv/bin/python bench/graded_send_lag.py --rates {args.rates} --seconds {args.seconds} "
            f"--repeats {args.repeats}`\n\nTarget: bench/stream_sink.py on CPU 1, {TOKENS} tokens a request; one "
            "tailrace worker on CPU 0, Poisson openai-chat requests, every request a graded item "
            "(profiles/graded/arithmetic.jsonl, last_number) or none, the kinds alternating.\n\n" + table
            + f"\nOne grade, on a 200-word reply: last_number {cost['last_number']:.1f} µs, choice "
            f"{cost['choice']:.1f} µs.\n\nRead: the grade is made when the record is written, in the issue loop's "
            "slack, never between an arrival's instant and its send; at these rates it is a few microseconds in "
            "each request's ~hundreds of microseconds of work on the core.\n")
    print(body)
    if not args.no_write:
        write_section(TITLE, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
