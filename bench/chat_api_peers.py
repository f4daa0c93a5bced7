"""Anthropic Messages and OpenAI Responses beside aiperf, on one real vLLM (the tiny Llama of
deploy/vllm/tiny_model.py, CPU 1) serving /v1/messages and /v1/responses. Each tool sends the same work at the same
Poisson rate for the same time — INPUT tokens in, up to OUTPUT out — and each tool's TTFT (mean, p50, p99, from its
own output) is set beside the server's own: vLLM's `time_to_first_token_seconds` histogram (from its engine's receipt
of the request to its first token), scraped before and after each tool's run. The gap, client mean − server mean, is
what comes before vLLM's engine and after its first token: the way there and back, vLLM's API server (parsing,
the chat template, tokenizing, translating the API) and the client's own delays.

    python bench/chat_api_peers.py --aiperf PATH/bin/aiperf [--rate 6] [--seconds 15] [--repeats 2] [--write]

With --repeats N each tool's runs repeat N times, alternating (the server stays up); the table gives the median of the
repeats and their range.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import write_section  # noqa: E402
from bench.pooling_peers import measured, peer_table, tailrace_summary  # noqa: E402
from tailrace.harness.services.vllm_server import SERVED_NAME, start_vllm  # noqa: E402

INPUT, OUTPUT = 32, 16
PROTOCOLS = {"messages": "anthropic-messages", "responses": "openai-responses"}


def server_ttft(url: str) -> tuple[float, float]:
    """(sum, count) of vLLM's own time-to-first-token histogram."""
    from prometheus_client.parser import text_string_to_metric_families

    total = count = 0.0
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for s in family.samples:
            if s.name == "vllm:time_to_first_token_seconds_sum":
                total += s.value
            elif s.name == "vllm:time_to_first_token_seconds_count":
                count += s.value
    return total, count


def run_tailrace(url: str, mode: str, rate: float, seconds: float, tokenizer: Path, work: Path) -> dict:
    endpoint = (f'protocol = "{PROTOCOLS[mode]}"\nprompts = {{ input_tokens = {INPUT}, output_tokens = {OUTPUT}, '
                f'count = 512, tokenizer = "{tokenizer}" }}\n')
    summary = tailrace_summary(url, mode, endpoint, rate, seconds, work)
    row = next(r for r in summary["tokens"] if r["endpoint"] == mode)
    ttft = row["ttft_ms"]
    return {"requests": row["requests"], "errors": row["requests"] - row["ok"], "mean": ttft["mean"],
            "p50": ttft["p50"]["value"], "p99": (ttft.get("p99") or {}).get("value")}


def run_aiperf(aiperf: str, url: str, mode: str, rate: float, seconds: float, tokenizer: Path, work: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"aiperf-{mode}-", dir=work))
    argv = ["taskset", "-c", "0", aiperf, "profile", "--model", SERVED_NAME, "--tokenizer", str(tokenizer), "--url", url,
            "--request-rate", str(rate), "--arrival-pattern", "poisson", "--request-count", str(int(rate * seconds)),
            "--random-seed", "7", "--artifact-dir", str(out), "--ui-type", "none", "--endpoint-type", mode,
            "--streaming", "--isl", str(INPUT), "--isl-stddev", "0", "--osl", str(OUTPUT), "--osl-stddev", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 4 + 300)
    found = sorted(out.rglob("profile_export_aiperf.json"))
    if not found:
        return {"error": (done.stderr or done.stdout)[-400:]}
    doc = json.loads(found[-1].read_text())
    latency = doc.get("time_to_first_token") or next(m for m in doc.get("records", [])
                                                      if m.get("tag") == "time_to_first_token")
    count = doc.get("request_count", {})
    errors = doc.get("error_request_count", {})
    return {"requests": int(count.get("avg", 0)) if isinstance(count, dict) else count,
            "errors": int(errors.get("avg", 0)) if isinstance(errors, dict) else (errors or 0),
            "mean": latency.get("avg"), "p50": latency.get("p50"), "p99": latency.get("p99")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aiperf", required=True, help="aiperf's command (its own virtualenv)")
    ap.add_argument("--rate", type=float, default=6.0)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="chat-api-peers-") as tmp:
        work = Path(tmp)
        server = start_vllm(work / "logs", max_num_seqs=16, cpus=[1])
        try:
            tokenizer = server.model_dir
            rows: dict[tuple[str, str], list[dict]] = {}
            for _ in range(args.repeats):
                for mode in ("messages", "responses"):
                    for tool, run in (("tailrace", lambda: run_tailrace(server.url, mode, args.rate, args.seconds,
                                                                          tokenizer / "tokenizer.json", work)),
                                      ("aiperf", lambda: run_aiperf(args.aiperf, server.url, mode, args.rate,
                                                                    args.seconds, tokenizer, work))):
                        rows.setdefault((tool, mode), []).append(measured(tool, run, mode,
                                                                          lambda: server_ttft(server.url)))
        finally:
            server.stop()
    table = peer_table(rows, "TTFT mean ms | TTFT p50 | TTFT p99 | server TTFT mean ms (vLLM's histogram)")
    command = (f"python bench/chat_api_peers.py --aiperf PATH --rate {args.rate:g} --seconds {args.seconds:g} "
               f"--repeats {args.repeats}")
    print(table)
    if args.write:
        write_section("Anthropic Messages and OpenAI Responses beside aiperf", f"""The same vLLM (the tiny Llama, CPU 1) \
serving /v1/messages and /v1/responses, each tool at {args.rate:g} requests/s Poisson for {args.seconds:g} s per run, \
alternating, {args.repeats} repeats (median and range): {INPUT} tokens in, up to {OUTPUT} out, streamed. Each tool's \
TTFT from its own output, beside vLLM's own time-to-first-token histogram over the same run (from its engine's \
receipt of the request).

Command: `{command}`

{table}
""")


if __name__ == "__main__":
    main()
