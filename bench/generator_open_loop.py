"""Benchmark: the open-loop rate one worker core sustains with send-lag p99 ≤ 1 ms (and ≤ 2 ms), as a ratio to
Locust's own closed-loop FastHttpUser maximum, measured side by side in one run, for each send path
(`generator.send_path`: inline, the default, and greenlet).

Target: nginx answering a constant KServe v2 infer response (so the target is never the bottleneck),
pinned to CPU 1 with the master and the SNTP reference; the generator (one Locust worker, or one
closed-loop Locust process) is pinned to CPU 0.

    .venv/bin/python bench/generator_open_loop.py [--seconds 10] [--rates 500,1000,...]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import require, write_section  # noqa: E402
from tailrace.command_lines import tailrace_argv  # noqa: E402
from tailrace.contract.layout import RunLayout  # noqa: E402
from tailrace.endpoints.models.model_build import build_repository  # noqa: E402
from tailrace.harness.services.processes import free_port, start_process  # noqa: E402

RESPONSE = ('{"model_name":"digits_mlp_fp32","model_version":"1","outputs":[{"name":"label","datatype":"INT64",'
            '"shape":[1],"data":[3]}],"parameters":{"queue_ns":1000,"compute_ns":20000}}')
COMMAND = ".venv/bin/python bench/generator_open_loop.py"
READ = ("\nRead: the inline path keeps the median send lag at 0.01–0.04 ms at every rate it holds and holds the tail past "
        "Locust's closed-loop maximum on the same core. Above that rate the tail grows with the core's load: the loop "
        "spins through most gaps, so what it does between sends (reading answers, writing records, the chunk writer's "
        "turns, the rest of the worker's greenlets) comes ever closer to a send. Where the time goes and what was "
        "removed: [DECISIONS.md](DECISIONS.md) (\"the generator's send path\"); what one request costs the core is the "
        "next section.\n")


def start_nginx(work: Path, port: int, tls: tuple[int, Path, Path] | None = None,
                routes: dict[str, str] | None = None):
    """nginx on CPU 1 answering RESPONSE on `port`; `tls` = (port, certificate, key) adds a TLS listener; `routes`:
    other constant JSON answers (any size) by exact path."""
    tls_lines = (f"listen 127.0.0.1:{tls[0]} ssl backlog=4096;\n    ssl_certificate {tls[1]};\n"
                 f"    ssl_certificate_key {tls[2]};") if tls else ""
    route_lines = ""
    if routes:
        work.chmod(0o755)  # nginx's workers (not root) read the files
    for k, (path, body) in enumerate((routes or {}).items()):  # a file each (a config token holds at most 4 kB);
        (work / f"route-{k}.json").write_text(body)  # a POST to a file is answered as a GET (error_page 405)
        route_lines += (f"location = {path} {{ default_type application/json; alias {work}/route-{k}.json; "
                        f"error_page 405 =200 $uri; }}\n    ")
    conf = work / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
worker_cpu_affinity 10;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
daemon off;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  client_body_buffer_size 64k;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    {tls_lines}
    {route_lines}location / {{ default_type application/json; return 200 '{RESPONSE}'; }}
  }}
}}
""")
    return start_process("nginx", [require("nginx"), "-c", str(conf), "-p", str(work)], work / "nginx.log")


def closed_loop_max(work: Path, url: str, body: Path, seconds: int, users: int) -> float:
    """Locust (single process, CPU 0) FastHttpUser closed loop: requests/s."""
    prefix = work / f"closed-{users}"
    subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "locust", "-f",
                    str(Path(__file__).with_name("closed_loop_locustfile.py")), "--headless", "-u", str(users),
                    "-r", str(users), "-t", f"{seconds}s", "--host", url, "--csv", str(prefix), "--only-summary",
                    "--loglevel", "ERROR"], check=True, capture_output=True,
                   env={**__import__("os").environ, "TAILRACE_BENCH_BODY": str(body)})
    with open(f"{prefix}_stats.csv") as fh:
        agg = next(r for r in csv.DictReader(fh) if r["Name"] == "Aggregated")
    return float(agg["Requests/s"])


def open_loop_trial(work: Path, models: Path, url: str, sntp: str, rate: float, seconds: int,
                    send_path: str = "inline", spin_ms: float | None = None) -> dict:
    """One run of the real harness (master on CPU 1, one worker on CPU 0) at `rate`; send lag stats."""
    endpoint = f"""name = "nginx"
url = "{url}"
protocol = "kserve-http"
model = "digits_mlp_fp32"
inputs = [{{ name = "input", datatype = "FP32", shape = [-1, 64] }}]  # nginx has no model metadata"""
    generator = "\n".join([f'send_path = "{send_path}"' if send_path != "default" else "",
                           f"spin_ms = {spin_ms}" if spin_ms is not None else ""])
    df, summary = worker_trial(work, models, sntp, f"bench-{rate:g}", endpoint, rate, seconds, generator=generator)
    lag = df["send_lag_ns"].to_numpy() / 1e6
    achieved = len(df) / seconds
    return {"rate": rate, "achieved": achieved, "lag_p50": float(np.percentile(lag, 50)),
            "lag_p99": float(np.percentile(lag, 99)), "ok": float((df.status == "ok").mean()),
            "sent_ratio": summary["sent"] / max(1, summary["planned"])}


def worker_trial(work: Path, models: Path, sntp: str, name: str, endpoint: str, rate: float, seconds: int,
                 warmup_s: float = 1, generator: str = ""):
    """Run one endpoint (`endpoint`: the body of its [[endpoints]] table) at `rate` for `seconds` with a real master
    (CPU 1) and one worker (CPU 0), region "bench", the SNTP reference `sntp`, output under work/runs (`generator`:
    more lines of the [generator] table): the measured phases' request rows and the worker's summary."""
    profile = work / f"{name}.toml"
    profile.write_text(f"""
name = "{name}"
output_dir = "{work / 'runs'}"
[[endpoints]]
{endpoint}
[[regions]]
name = "bench"
share = 1.0
[load]
rate = {rate}
duration_s = {seconds}
warmup_s = {warmup_s}
seed = 1
[clock]
servers = ["{sntp}"]
interval_s = 60
[embedded]
models_dir = "{models}"
[generator]
send_lag_p99_ms = 2
max_in_flight = 20000
{generator}
""")
    port, env = free_port(), {"TAILRACE_RUN_TOKEN": secrets.token_urlsafe(16)}
    master = start_process("master", ["taskset", "-c", "1", *tailrace_argv(
        "master", str(profile), "--port", str(port), "--models", str(models))], work / f"master-{name}.log", env=env)
    worker_argv = tailrace_argv("worker", "--master", f"127.0.0.1:{port}", "--region", "bench",
                                "--spool", str(work / "spool"))  # never ./tailrace-spool in the checkout
    worker = start_process("worker", ["taskset", "-c", "0", *worker_argv], work / f"worker-{name}.log", env=env)
    master.popen.wait(seconds + 120)
    worker.stop()
    run_dir = max((work / "runs").glob(f"{name}-*"))
    import pandas as pd

    layout = RunLayout(run_dir)
    df = pd.concat([pd.read_parquet(f) for f in layout.request_chunks()])
    return df[df.phase > 0], json.loads(layout.worker("bench", "bench-w0").summary.read_text())

HOUSEKEEPING = ("kdamond",)  # kernel threads, by name, that the bench moves off the generator's core (--isolate)


def isolate_generator_core() -> list[tuple[int, str, set[int]]]:
    """Move the movable kernel housekeeping threads (HOUSEKEEPING) off CPU 0 for the run, as `isolcpus` would on a
    dedicated generator host: returns (pid, name, old affinity) to restore. On this VM, DAMON's kdamond (memory
    reclaim, not ours) held CPU 0 for 3-6 ms at a time, dozens of times a run, with the worker runnable and waiting
    (its schedstat; docs/DECISIONS.md). It applies to every trial alike, Locust's closed loop included."""
    moved = []
    for stat in Path("/proc").glob("[0-9]*/comm"):
        try:
            name, pid = stat.read_text().strip(), int(stat.parent.name)
        except (OSError, ValueError):
            continue
        if name.startswith(HOUSEKEEPING):
            try:
                old = os.sched_getaffinity(pid)
                if 0 in old and len(old) > 1:
                    os.sched_setaffinity(pid, old - {0})
                    moved.append((pid, name, old))
            except OSError as exc:
                print(f"cannot move {name} ({pid}) off CPU 0: {exc}", flush=True)
    return moved


def restore_affinity(moved: list[tuple[int, str, set[int]]]) -> None:
    for pid, _, old in moved:
        try:
            os.sched_setaffinity(pid, old)
        except OSError:
            pass


def median_trial(runs: list[dict]) -> dict:
    """The trial with the median send-lag p99, with every trial's p99 attached."""
    ordered = sorted(runs, key=lambda r: r["lag_p99"])
    return {**ordered[len(ordered) // 2], "lag_p99_trials": [r["lag_p99"] for r in runs]}


def sustained(trials: list[dict], path: str, lag_ms: float) -> float:
    """The highest rate up to which every rate's median trial on `path` held send-lag p99 ≤ `lag_ms`, delivered the
    rate and got its answers (a rate that passes above one that failed is noise, not capacity)."""
    held = 0.0
    for t in sorted((t for t in trials if t["path"] == path), key=lambda t: t["rate"]):
        if not (t["lag_p99"] <= lag_ms and t["achieved"] >= 0.95 * t["rate"] and t["ok"] > 0.999):
            break
        held = t["rate"]
    return held


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rates", default="1000,2000,3000,4000,5000,6000")
    ap.add_argument("--users", type=int, default=64, help="closed-loop FastHttpUser users")
    ap.add_argument("--repeats", type=int, default=3,
                    help="trials per rate and send path; a rate is sustained when the median trial's send-lag p99 "
                         "is within the bound (one 10 s trial's p99 swings by ±1 ms on this machine)")
    ap.add_argument("--send-paths", default="inline,greenlet",
                    help="generator.send_path values to run side by side (inline: the default; `default`: leave it "
                         "unset, for a tree older than the setting)")
    ap.add_argument("--spin-ms", type=float, default=None,
                    help="generator.spin_ms for the open-loop trials (default: the profile's default, 1.5)")
    ap.add_argument("--no-isolate", action="store_true",
                    help="leave the kernel's housekeeping threads (kdamond) free to run on the generator's core")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    require("taskset")
    import signal

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))  # clean up on kill
    paths = args.send_paths.split(",")
    work = Path(tempfile.mkdtemp(prefix="tailrace-genbench-"))
    models = work / "models"
    build_repository(models)
    body = work / "body.json"
    body.write_text(json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                            "data": [0.0] * 64}]}))
    nginx_port, sntp_port = free_port(), free_port()
    nginx = start_nginx(work, nginx_port)
    sntp = start_process("sntp", ["taskset", "-c", "1", *tailrace_argv("sntp", "--port", str(sntp_port))],
                         work / "sntp.log")
    url = f"http://127.0.0.1:{nginx_port}"
    time.sleep(1.0)
    trials = []
    moved = [] if args.no_isolate else isolate_generator_core()
    isolation = (f"Kernel housekeeping moved off CPU 0 for the run: {', '.join(sorted({n for _, n, _ in moved}))}."
                 if moved else "Kernel housekeeping left as it was.")
    print(isolation, flush=True)
    try:
        closed = closed_loop_max(work, url, body, args.seconds, args.users)
        print(f"closed-loop FastHttpUser max: {closed:,.0f} req/s", flush=True)
        going = set(paths)
        for rate in [float(r) for r in args.rates.split(",")]:
            runs: dict[str, list[dict]] = {path: [] for path in going}
            for _ in range(args.repeats):  # the paths alternate, so a slow spell of the VM hits each alike
                for path in sorted(going):
                    runs[path].append(open_loop_trial(work, models, url, f"127.0.0.1:{sntp_port}", rate,
                                                      args.seconds, path, args.spin_ms))
            for path in sorted(going):
                t = {**median_trial(runs[path]), "path": path}
                trials.append(t)
                print(f"{path:>8} {rate:>6,.0f}/s: achieved {t['achieved']:,.0f}/s, send lag p50 {t['lag_p50']:.2f} "
                      f"ms p99 {t['lag_p99']:.2f} ms (trials: {', '.join(f'{r:.2f}' for r in t['lag_p99_trials'])}), "
                      f"ok {t['ok']:.3f}", flush=True)
                if t["lag_p99"] > 20 or t["achieved"] < 0.8 * rate:
                    going.discard(path)  # far past its limit: higher rates only cost time
            if not going:
                break
        closed_again = closed_loop_max(work, url, body, args.seconds, args.users)
    finally:
        restore_affinity(moved)
        nginx.stop()
        sntp.stop()
        shutil.rmtree(work / "runs", ignore_errors=True)
    closed_ref = (closed + closed_again) / 2
    table = ("| send path | open-loop target rate /s | achieved /s | send lag p50 ms | send lag p99 ms (median trial) "
             "| p99 of each trial | ok |\n|---|---|---|---|---|---|---|\n")
    for t in sorted(trials, key=lambda t: (t["path"], t["rate"])):
        table += (f"| {t['path']} | {t['rate']:,.0f} | {t['achieved']:,.0f} | {t['lag_p50']:.2f} | {t['lag_p99']:.2f} | "
                  f"{', '.join(f'{v:.2f}' for v in t['lag_p99_trials'])} | {t['ok']:.3f} |\n")
    verdicts = ""
    for path in paths:
        at_1, at_2 = sustained(trials, path, 1.0), sustained(trials, path, 2.0)
        held = lambda rate: (f"up to {rate:,.0f} req/s ({rate / closed_ref:.2f} of Locust's closed loop)" if rate  # noqa: E731
                             else "at none of the rates tried")
        verdicts += f"- **{path}**: send-lag p99 ≤ 1 ms **{held(at_1)}**; ≤ 2 ms {held(at_2)}.\n"
    body_md = (f"Command: `{COMMAND} --seconds {args.seconds} --rates {args.rates} --users {args.users} "
               f"--repeats {args.repeats} --send-paths {args.send_paths}"
               f"{f' --spin-ms {args.spin_ms:g}' if args.spin_ms is not None else ''}"
               f"{' --no-isolate' if args.no_isolate else ''}`\n\n"
               f"Target: nginx (CPU 1) answering a constant KServe v2 response. Generator on CPU 0: one tailrace "
               f"Locust worker (master and SNTP reference on CPU 1; the worker's chunk writer shares CPU 0), or one "
               f"Locust process with {args.users} FastHttpUser users in a closed loop, measured before and after the "
               f"open-loop trials. Each rate ran {args.repeats} times per send path, the paths alternating; the table "
               f"shows each rate's median trial by p99. {isolation}\n\n"
               f"Closed-loop FastHttpUser maximum: {closed:,.0f} and {closed_again:,.0f} req/s (mean {closed_ref:,.0f})."
               f"\n\n{table}\n{verdicts}{READ}")
    print(body_md)
    if not args.no_write:
        write_section("Generator: open-loop rate per worker core vs Locust closed loop", body_md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
