"""Benchmark: what the live page costs — the master's CPU and the generators' send lag with no page served, with the
page served and nobody watching, and with two headless-Chromium pages open, in one run of interleaved repeats.

Each run is a real `tailrace run` (2 regions, one worker each, the embedded endpoint on its own CPU) at `--rate`
for `--seconds`. Measured per run: the CPU seconds of the Locust master (the LIVE digests' aggregate, the event
logs, the channel) and of the orchestrating `tailrace run` process (the page's server and its feeds), sampled until
the master exits; the workers' send-lag p99 (the largest window's, worker.json) and the rows recorded.

    .venv/bin/python bench/live_page_cost.py [--rate 400] [--seconds 30] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import write_section  # noqa: E402
from tailrace.endpoints.models.model_build import DATA_FILE, build_repository  # noqa: E402
from tailrace.harness.services.processes import free_port  # noqa: E402

COMMAND = ".venv/bin/python bench/live_page_cost.py"
MODES = ("off", "served", "two pages")


def profile(models: Path, path: Path, rate: float, seconds: float) -> Path:
    cpus = sorted(os.sched_getaffinity(0))
    endpoint_cpus, generator_cpus = (cpus[-1:], cpus[:1]) if len(cpus) >= 2 else (None, None)
    path.write_text(f"""
name = "live-cost"
[[endpoints]]
name = "mlp"
url = "embedded"
protocol = "kserve-http"
model = "digits_mlp_fp32"
data = "{models / DATA_FILE}"
[[regions]]
name = "eu"
share = 0.5
delay_ms = 2
[[regions]]
name = "us"
share = 0.5
delay_ms = 10
[load]
rate = {rate}
duration_s = {seconds}
warmup_s = 2
seed = 11
[embedded]
models_dir = "{models}"
{f"cpus = {endpoint_cpus}" if endpoint_cpus else ""}
[generator]
{f"cpus = {generator_cpus}" if generator_cpus else ""}
""")
    return path


class CpuWatch(threading.Thread):
    """The CPU seconds of the `tailrace run` process and of its Locust master child, as the master exits (the
    analysis after it is not the page's)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.run_cpu, self.master_cpu, self.done = pid, 0.0, 0.0, False

    def run(self) -> None:
        top = psutil.Process(self.pid)
        master = None
        while not self.done:
            try:
                if master is not None and not master.is_running():
                    return
                t = top.cpu_times()
                self.run_cpu = t.user + t.system
                if master is None:
                    master = next((c for c in top.children(recursive=True)
                                   if "--master" in " ".join(c.cmdline())), None)
                if master is not None:
                    m = master.cpu_times()
                    self.master_cpu = m.user + m.system
            except psutil.Error:
                pass
            time.sleep(0.2)


def open_pages(port: int, stop: threading.Event) -> None:
    """Two headless-Chromium pages on the run's live page until `stop`."""
    from playwright.sync_api import sync_playwright

    executable = "/usr/bin/chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        pages = [browser.new_page() for _ in range(2)]
        for page in pages:
            for _ in range(100):
                try:
                    page.goto(f"http://127.0.0.1:{port}/")
                    break
                except Exception:  # noqa: BLE001 - not listening yet
                    time.sleep(0.2)
        stop.wait()
        browser.close()


def one_run(profile_path: Path, out: Path, mode: str) -> dict:
    port = free_port()
    ui = "off" if mode == "off" else f"127.0.0.1:{port}"
    run = subprocess.Popen([sys.executable, "-m", "tailrace.cli", "run", str(profile_path), "--out", str(out),
                            "--ui-bind", ui, "--quiet"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watch = CpuWatch(run.pid)
    watch.start()
    stop = threading.Event()
    pages = threading.Thread(target=open_pages, args=(port, stop), daemon=True) if mode == "two pages" else None
    if pages is not None:
        pages.start()
    code = run.wait(timeout=600)
    watch.done = True
    stop.set()
    if pages is not None:
        pages.join(timeout=30)
    [run_dir] = sorted((p for p in out.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)[-1:]
    workers = [json.loads(p.read_text()) for p in run_dir.glob("regions/*/*/worker.json")]
    return {"mode": mode, "code": code, "master_cpu_s": watch.master_cpu, "run_cpu_s": watch.run_cpu,
            "lag_p99_ms": max(w["max_send_lag_p99_ms"] for w in workers), "rows": sum(w["rows_written"] for w in workers)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=400)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        build_repository(tmp / "models")
        prof = profile(tmp / "models", tmp / "p.toml", args.rate, args.seconds)
        results = []
        for k in range(args.repeats):
            for mode in MODES:  # interleaved: the machine's drift touches every mode alike
                r = one_run(prof, tmp / "runs", mode)
                print(json.dumps(r), flush=True)
                results.append(r)
    rows = ["| live page | Locust master CPU (s) | `tailrace run` CPU (s) | send-lag p99, worst window (ms) | rows |",
            "|---|---|---|---|---|"]
    spread = lambda xs, f: f"{f.format(statistics.median(xs))} ({f.format(min(xs))}–{f.format(max(xs))})"  # noqa: E731
    for mode in MODES:
        mine = [r for r in results if r["mode"] == mode]
        rows.append(f"| {mode} | {spread([r['master_cpu_s'] for r in mine], '{:.2f}')} | "
                    f"{spread([r['run_cpu_s'] for r in mine], '{:.2f}')} | "
                    f"{spread([r['lag_p99_ms'] for r in mine], '{:.2f}')} | {spread([r['rows'] for r in mine], '{:.0f}')} |")
    body = (f"`{COMMAND} --rate {args.rate:g} --seconds {args.seconds:g} --repeats {args.repeats}` — a real `tailrace run`, "
            f"2 regions × 1 worker at {args.rate:g} req/s for {args.seconds:g} s (+2 s warm-up), the endpoint on its own "
            f"CPU; the three modes interleaved, {args.repeats} runs each: median (min–max).\n\n" + "\n".join(rows) +
            "\n\n**Target:** two open pages move neither the master's CPU nor the workers' send lag beyond the spread "
            "between runs of one mode. The LIVE digests and their aggregate run in every mode (the master writes "
            "live.jsonl whether or not anyone watches); `tailrace run`'s CPU is counted up to the master's exit (its start-up "
            "and the endpoint check included, the analysis after not).")
    write_section("Live page cost", body)
    print(body)


if __name__ == "__main__":
    main()
