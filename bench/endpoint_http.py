"""Benchmark: embedded endpoint batch-1 HTTP inference vs a bare uvicorn+Starlette constant route.

Both servers run pinned to CPU 0, wrk runs on CPU 1 with the same settings, alternating rounds in one
run; the ratio of median req/s is the result (target ≥ 0.70). `--baseline DIR` (a checkout of another commit,
e.g. `git worktree add DIR REV`) also serves the same model from that tree, in the same alternating rounds, and
reports this tree's req/s over that one's per round: a change to the server measured side by side.

    .venv/bin/python bench/endpoint_http.py [--seconds 8] [--rounds 5] [--connections 16] [--baseline DIR]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import require, run_wrk, write_section  # noqa: E402
from tailrace.command_lines import tailrace_argv  # noqa: E402
from tailrace.endpoints.models.model_build import build_repository, load_heldout  # noqa: E402
from tailrace.harness.services.processes import free_port, start_process, wait_http_ok  # noqa: E402

COMMAND = ".venv/bin/python bench/endpoint_http.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    ap.add_argument("--baseline", type=Path, default=None, help="a checkout of another commit to serve alongside")
    args = ap.parse_args()
    if args.baseline is not None and not (args.baseline / "endpoints").is_dir():
        ap.error(f"--baseline {args.baseline}: not a tailrace checkout (no endpoints/)")
    taskset = require("taskset")
    work = Path(tempfile.mkdtemp(prefix="tailrace-bench-"))
    repo = work / "models"
    build_repository(repo)
    X, _ = load_heldout(repo)
    body = '{"inputs":[{"name":"input","datatype":"FP32","shape":[1,64],"data":[%s]}]}' % ",".join(
        repr(float(v)) for v in np.asarray(X[0]))
    lua = work / "post.lua"
    lua.write_text('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                   f"wrk.body = '{body}'\n")

    p_base = free_port()
    procs = {"baseline": start_process("baseline", [taskset, "-c", "0", sys.executable, str(Path(__file__).with_name(
        "baseline_app.py")), str(p_base)], work / "baseline.log")}
    urls = {"baseline": f"http://127.0.0.1:{p_base}/v2/models/digits_mlp_fp32/infer"}
    servers = [("tailrace", [], None), ("batching", ["--max-batch", "digits_mlp_fp32=32"], None)]
    if args.baseline is not None:  # the other tree's server: `python -m` imports the packages of its cwd
        servers += [("tailrace@baseline", [], args.baseline.resolve()),
                    ("batching@baseline", ["--max-batch", "digits_mlp_fp32=32"], args.baseline.resolve())]
    for key, extra, cwd in servers:
        p_http, p_grpc = free_port(), free_port()
        procs[key] = start_process(key, [taskset, "-c", "0", *tailrace_argv(
            "serve", "--models", str(repo), "--model", "digits_mlp_fp32", "--http-port", str(p_http),
            "--grpc-port", str(p_grpc), *extra)], work / f"{key.replace('@', '-')}.log", cwd=cwd)
        urls[key] = f"http://127.0.0.1:{p_http}/v2/models/digits_mlp_fp32/infer"
        wait_http_ok(f"http://127.0.0.1:{p_http}/v2/health/ready", procs[key])
    rows = {k: [] for k in urls}
    try:
        for url in urls.values():  # warm-up
            run_wrk(url, lua, 2, args.connections, "1")
        before = _stats(urls["batching"])
        for _ in range(args.rounds):
            for key, url in urls.items():
                rows[key].append(run_wrk(url, lua, args.seconds, args.connections, "1"))
        after = _stats(urls["batching"])
    finally:
        for proc in procs.values():
            proc.stop()
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("rps", "p50_ms", "p99_ms")} for k, v in rows.items()}
    errors = sum(r["non2xx"] for v in rows.values() for r in v)
    ratio = med["tailrace"]["rps"] / med["baseline"]["rps"]
    ratio_batching = med["batching"]["rps"] / med["baseline"]["rps"]
    table = "| server (CPU 0, wrk on CPU 1) | req/s (median) | p50 ms | p99 ms | per round req/s |\n|---|---|---|---|---|\n"
    for k, label in (("baseline", "bare uvicorn+Starlette constant JSON"),
                     ("tailrace", "tailrace serve, digits_mlp_fp32 batch-1 JSON infer"),
                     ("batching", "same, with `--max-batch digits_mlp_fp32=32` (dynamic batching)")):
        table += (f"| {label} | {med[k]['rps']:,.0f} | {med[k]['p50_ms']:.2f} | {med[k]['p99_ms']:.2f} | "
                  f"{', '.join(format(r['rps'], ',.0f') for r in rows[k])} |\n")
    per_execution = (after["success"] - before["success"]) / max(1, after["executions"] - before["executions"])
    verdict = "meets" if max(ratio, ratio_batching) >= 0.70 else "MISSES"
    body_md = (f"Command: `{COMMAND} --seconds {args.seconds} --rounds {args.rounds} --connections "
               f"{args.connections}`\n\nwrk -t1 -c{args.connections}, {args.rounds} alternating rounds of "
               f"{args.seconds} s each, non-2xx responses: {errors}.\n\n{table}\n"
               f"**Ratio tailrace / bare route: {ratio:.2f} without batching, {ratio_batching:.2f} with dynamic "
               f"batching** ({verdict} the ≥ 0.70 target).\n\nEvery request is batch-1 (one 64-feature row). With "
               f"`--max-batch` the server ran {per_execution:.1f} requests per onnxruntime execution on average "
               "(from its statistics extension: successes / execution_count over the measured rounds).\n")
    if args.baseline is not None:
        body_md += ("\nSide by side with `--baseline DIR` (a checkout of the tree before the change), alternated in "
                    "the same rounds:\n\n"
                    "| server | this tree req/s (median) | baseline req/s (median) | this / baseline per round "
                    "(median) |\n|---|---|---|---|\n")
        for key in ("tailrace", "batching"):
            per_round = [new["rps"] / old["rps"] for new, old in zip(rows[key], rows[key + "@baseline"])]
            body_md += (f"| {key} | {med[key]['rps']:,.0f} | {med[key + '@baseline']['rps']:,.0f} | "
                        f"{', '.join(f'{x:.2f}' for x in per_round)} ({statistics.median(per_round):.2f}) |\n")
    print(body_md)
    if not args.no_write:
        write_section("Embedded endpoint: HTTP inference vs bare Starlette", body_md)
    return 0 if errors == 0 else 1


def _stats(infer_url: str) -> dict:
    """Successes and executions so far, from the endpoint's statistics extension."""
    entry = httpx.get(infer_url.removesuffix("/infer") + "/stats", timeout=10).json()["model_stats"][0]
    return {"success": entry["inference_stats"]["success"]["count"], "executions": entry["execution_count"]}


if __name__ == "__main__":
    sys.exit(main())
