"""Side by side with the peers on one generative endpoint: tailrace, vLLM's `bench serve` (in .venv-vllm) and
guidellm (its own virtualenv) at the same offered Poisson rate, each tool's numbers from its own output, with what
the server's own metrics say over each tool's run.

Targets: a real vLLM (the tiny Llama of deploy/vllm/tiny_model.py) and the embedded server's synthetic_lm (8 ms
steps). Then the embedded server stalls its engine for 1 s in the middle of each tool's run (fault injection), and
once more for vLLM's bench with --max-concurrency 2: which tools see the stall in TTFT? Prompts: 24 words in,
16 tokens out (ignore_eos), the same words for every tool (the tiny Llama's tokenizer reads them one token each).

    python bench/generative_peers.py --guidellm PATH/bin/guidellm [--rate 8] [--seconds 20] [--repeats 2] [--write]

With --repeats N every run is repeated N times (the servers stay up) and the table gives each number as the median
of the repeats with their range: this VM is noisy.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tailrace.command_lines import tailrace_argv  # noqa: E402
from tailrace.harness.services.processes import free_port, start_process, wait_http_ok  # noqa: E402
from tailrace.harness.services.vllm_server import DEFAULT_MODEL_DIR, start_vllm, vllm_python  # noqa: E402

INPUT, OUTPUT = 24, 16
_VLLM_BENCH = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def server_ttft(url: str, prefix: str) -> tuple[float, float]:
    """(sum, count) of the server's own time-to-first-token histogram."""
    from prometheus_client.parser import text_string_to_metric_families

    total = count = 0.0
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for s in family.samples:
            if s.name == f"{prefix}time_to_first_token_seconds_sum":
                total += s.value
            elif s.name == f"{prefix}time_to_first_token_seconds_count":
                count += s.value
    return total, count


def run_tailrace(url: str, model: str, rate: float, seconds: float, work: Path) -> dict:
    profile = work / "tailrace.toml"
    profile.write_text(f"""name = "peers"
[[endpoints]]
name = "llm"
url = "{url}"
protocol = "openai-completions"
model = "{model}"
timeout_ms = 30000
prompts = {{ input_tokens = {{ mean = {INPUT} }}, output_tokens = {{ mean = {OUTPUT} }}, count = 256 }}
[[regions]]
name = "here"
share = 1.0
[load]
rate = {rate}
duration_s = {seconds}
warmup_s = 2
seed = 7
""")
    subprocess.run(tailrace_argv("run", str(profile), "--out", str(work / "runs"), "--quiet"), cwd=work,
                   capture_output=True, timeout=seconds * 4 + 180)
    summary = json.loads(next((work / "runs").glob("*/report/summary.json")).read_text())
    row = next(r for r in summary["tokens"] if r["endpoint"] == "*")
    return {"ttft_p50": row["ttft_ms"]["p50"]["value"], "ttft_p99": row["ttft_ms"]["p99"]["value"],
            "ttft_max": None, "tpot_p50": row["tpot_ms"]["p50"]["value"],
            "tokens_per_s": row["output_tokens_per_s"], "requests_per_s": row["ok"] / seconds,
            "interval": "yes (order-statistic CIs, 95%)"}


def run_vllm_bench(url: str, model: str, rate: float, seconds: float, work: Path, concurrency: int | None = None
                   ) -> dict:
    out = work / f"vllm-bench-{concurrency or 'open'}.json"
    argv = [str(vllm_python()), "-c", _VLLM_BENCH, "--backend", "openai", "--base-url", url, "--endpoint",
            "/v1/completions", "--model", model, "--tokenizer", str(DEFAULT_MODEL_DIR), "--dataset-name", "random",
            "--random-input-len", str(INPUT), "--random-output-len", str(OUTPUT), "--num-prompts",
            str(int(rate * seconds)), "--request-rate", str(rate), "--ignore-eos", "--seed", "7", "--save-result",
            "--result-dir", str(work), "--result-filename", out.name, "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99,100"]
    if concurrency:
        argv += ["--max-concurrency", str(concurrency)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 4 + 300,
                          env={"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    if not out.exists():
        return {"error": (done.stderr or done.stdout)[-300:]}
    r = json.loads(out.read_text())
    return {"ttft_p50": r.get("median_ttft_ms"), "ttft_p99": r.get("p99_ttft_ms"), "ttft_max": r.get("p100_ttft_ms"),
            "tpot_p50": r.get("median_tpot_ms"), "tokens_per_s": r.get("output_throughput"),
            "requests_per_s": r.get("request_throughput"), "interval": "no"}


def run_guidellm(guidellm: str, url: str, model: str, rate: float, seconds: float, work: Path) -> dict:
    prompts = work / "prompts.jsonl"
    words = (ROOT / "build" / "vllm-model" / "tokenizer.json")
    vocab = [w for w in json.loads(words.read_text())["model"]["vocab"] if w.isalpha()][:400]
    prompts.write_text("".join(json.dumps({"prompt": " ".join(vocab[(i * 7 + k) % len(vocab)] for k in range(INPUT)),
                                           "output_tokens_count": OUTPUT, "prompt_tokens_count": INPUT}) + "\n"
                               for i in range(2000)))
    out = work / "guidellm.json"
    done = subprocess.run([guidellm, "run", "--backend", f"kind=openai_http,target={url},model={model}",
                           "--profile", f"kind=poisson,rate={rate}", "--constraint",
                           f"kind=max_duration,seconds={seconds:g}", "--data", f"kind=json_file,path={prompts}",
                           "--output", f"kind=json,path={out}", "--disable-console-interactive"],
                          capture_output=True, text=True, timeout=seconds * 4 + 300)
    if not out.exists():
        return {"error": (done.stderr or done.stdout)[-300:]}
    m = json.loads(out.read_text())["benchmarks"][0]["metrics"]

    def stat(name: str, key: str):
        s = m[name]["successful"]
        return s["percentiles"][key] if key.startswith("p") else s[key]

    return {"ttft_p50": stat("time_to_first_token_ms", "p50"), "ttft_p99": stat("time_to_first_token_ms", "p99"),
            "ttft_max": stat("time_to_first_token_ms", "max"), "tpot_p50": stat("inter_token_latency_ms", "p50"),
            "tokens_per_s": m["output_tokens_per_second"]["successful"]["mean"],
            "requests_per_s": m["requests_per_second"]["successful"]["mean"], "interval": "yes (mean and percentile CIs)"}


def measured(tool: str, target: str, run, url: str, prefix: str, stall_at: float | None = None) -> dict:
    """One tool's run with the server's own TTFT mean over it; `stall_at`: stall the engine 1 s that far in."""
    before = server_ttft(url, prefix)
    timer = threading.Timer(stall_at, lambda: httpx.post(f"{url}/v2/debug/stall", json={"seconds": 1.0},
                                                         timeout=5)) if stall_at else None
    if timer:
        timer.start()
    result = run()
    after = server_ttft(url, prefix)
    n = after[1] - before[1]
    return {"tool": tool, "target": target, **result,
            "server_ttft_mean": (after[0] - before[0]) / n * 1e3 if n else None, "server_requests": int(n)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--guidellm", required=True)
    ap.add_argument("--rate", type=float, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        vllm = start_vllm(work, max_num_seqs=16, cpus=[1])
        embedded_port = free_port()
        embedded = start_process("embedded", tailrace_argv(
            "serve", "--models", str(ROOT / "build" / "models"), "--model", "synthetic_lm", "--http-port",
            str(embedded_port), "--grpc-port", str(free_port()), "--enable-fault-injection"), work / "embedded.log")
        embedded_url = f"http://127.0.0.1:{embedded_port}"
        try:
            wait_http_ok(f"{embedded_url}/v1/models", embedded, timeout=60)
            for repeat in range(args.repeats):
                for target, url, model, prefix in (("vLLM (tiny Llama)", vllm.url, vllm.model, "vllm:"),
                                                   ("embedded synthetic_lm", embedded_url, "synthetic_lm", "tailrace:")):
                    for tool, run in (("tailrace", lambda d: run_tailrace(url, model, args.rate, args.seconds, d)),
                                      ("vLLM bench serve", lambda d: run_vllm_bench(url, model, args.rate, args.seconds, d)),
                                      ("guidellm 0.8.1", lambda d: run_guidellm(args.guidellm, url, model, args.rate,
                                                                              args.seconds, d))):
                        d = Path(tempfile.mkdtemp(dir=work))
                        rows.append({**measured(tool, target, lambda: run(d), url, prefix), "repeat": repeat})
                        print(json.dumps(rows[-1]), flush=True)
                stall_at = args.seconds / 2 + 2
                for tool, run in (("tailrace", lambda d: run_tailrace(embedded_url, "synthetic_lm", args.rate,
                                                                      args.seconds, d)),
                                  ("vLLM bench serve", lambda d: run_vllm_bench(embedded_url, "synthetic_lm", args.rate,
                                                                                args.seconds, d)),
                                  ("vLLM bench serve --max-concurrency 2", lambda d: run_vllm_bench(
                                      embedded_url, "synthetic_lm", args.rate, args.seconds, d, concurrency=2)),
                                  ("guidellm 0.8.1", lambda d: run_guidellm(args.guidellm, embedded_url, "synthetic_lm",
                                                                          args.rate, args.seconds, d))):
                    d = Path(tempfile.mkdtemp(dir=work))
                    rows.append({**measured(tool, "embedded synthetic_lm, 1 s stall", lambda: run(d), embedded_url,
                                              "tailrace:", stall_at), "repeat": repeat})
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            embedded.stop()
            vllm.stop()
    if args.write:
        from bench.common import shown_command, write_section

        def f(values: list) -> str:
            """The median of the repeats, with their range when there are several."""
            values = sorted(v for v in values if v is not None)
            if not values:
                return "—"
            mid = values[len(values) // 2] if len(values) % 2 else (values[len(values) // 2 - 1]
                                                                       + values[len(values) // 2]) / 2
            return f"{mid:,.1f}" + (f" ({values[0]:,.1f}–{values[-1]:,.1f})" if len(values) > 1 else "")

        lines = ["| target | tool | TTFT p50 | TTFT p99 | TTFT max | TPOT p50 | output tokens/s | requests/s | "
                 "intervals | server's mean TTFT | runs |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        groups: dict[tuple[str, str], list[dict]] = {}
        for r in rows:
            groups.setdefault((r["target"], r["tool"]), []).append(r)
        for (target, tool), runs in groups.items():
            good = [r for r in runs if "error" not in r]
            failed = [r["error"][:100] for r in runs if "error" in r]
            if not good:
                lines.append(f"| {target} | {tool} | failed: {failed[0]} | | | | | | | | {len(runs)} |")
                continue
            col = lambda key: f([r[key] for r in good])  # noqa: E731
            lines.append(f"| {target} | {tool} | {col('ttft_p50')} | {col('ttft_p99')} | {col('ttft_max')} | "
                         f"{col('tpot_p50')} | {col('tokens_per_s')} | {col('requests_per_s')} | {good[0]['interval']} "
                         f"| {col('server_ttft_mean')} | {len(good)}" + (f" ({len(failed)} failed)" if failed else "")
                         + " |")
        command = shown_command("bench/generative_peers.py", sys.argv[1:])
        write_section("Generative endpoints: tailrace beside vLLM's bench and guidellm",
                      "All times in ms; each cell the median of the runs (their range).\n\n" + "\n".join(lines)
                      + f"\n\nCommand: `{command}`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
