"""Request cancellation beside aiperf, on one real vLLM (the tiny Llama of deploy/vllm/tiny_model.py, CPU 1, logging
every request it aborts). Each tool sends the same chat streams at the same Poisson rate for the same time — INPUT
tokens in, OUTPUT out — and abandons SHARE of them DELAY_MS after sending (tailrace: `cancel = { after = "time" }`
from the intended send; aiperf: `--request-cancellation-rate`/`-delay`, from when the request was sent). Per run:
the cancellations the tool reports, vLLM's own count of the requests it aborted (its log's "Aborted request" lines),
and the TTFT of the streams read to their end beside vLLM's own TTFT histogram over the run.

    python bench/cancel_peers.py --aiperf PATH/bin/aiperf [--rate 8] [--seconds 15] [--repeats 2] [--write]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chat_api_peers import server_ttft  # noqa: E402
from bench.common import write_section  # noqa: E402
from bench.pooling_peers import spread, tailrace_summary  # noqa: E402
from tailrace.harness.services.vllm_server import SERVED_NAME, start_vllm  # noqa: E402

INPUT, OUTPUT, SHARE, DELAY_MS = 32, 64, 0.3, 100


def run_tailrace(url: str, rate: float, seconds: float, tokenizer: Path, work: Path) -> dict:
    endpoint = (f'protocol = "openai-chat"\nprompts = {{ input_tokens = {INPUT}, output_tokens = {OUTPUT}, count = 512, '
                f'tokenizer = "{tokenizer}" }}\ncancel = {{ share = {SHARE}, after = "time", after_ms = {DELAY_MS} }}\n')
    summary = tailrace_summary(url, "chat", endpoint, rate, seconds, work)
    tokens = next(r for r in summary["tokens"] if r["endpoint"] == "chat" and r["region"] == "*")
    gone = next(r for r in summary["cancellations"] if r["region"] == "*")
    return {"requests": tokens["requests"], "cancelled": gone["cancelled"], "completed": tokens["ok"],
            "ttft_mean": tokens["ttft_ms"]["mean"], "closed_p50": gone["closed_after_p50_ms"]}


def run_aiperf(aiperf: str, url: str, rate: float, seconds: float, tokenizer: Path, work: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix="aiperf-cancel-", dir=work))
    argv = ["taskset", "-c", "0", aiperf, "profile", "--model", SERVED_NAME, "--tokenizer", str(tokenizer), "--url", url,
            "--request-rate", str(rate), "--arrival-pattern", "poisson", "--request-count", str(int(rate * seconds)),
            "--random-seed", "7", "--artifact-dir", str(out), "--ui-type", "none", "--endpoint-type", "chat",
            "--streaming", "--isl", str(INPUT), "--isl-stddev", "0", "--osl", str(OUTPUT), "--osl-stddev", "0",
            "--extra-inputs", "ignore_eos:true", "--request-cancellation-rate", str(SHARE * 100),
            "--request-cancellation-delay", str(DELAY_MS / 1000)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 4 + 300)
    found = sorted(out.rglob("profile_export_aiperf.json"))
    if not found:
        return {"error": (done.stderr or done.stdout)[-400:]}
    doc = json.loads(found[-1].read_text())
    ttft = doc.get("time_to_first_token") or {}
    count = doc.get("request_count", {})
    errors = doc.get("error_request_count", {})
    cancelled = sum(int(e.get("count", 0)) for e in doc.get("error_summary", [])
                    if "cancel" in json.dumps(e).lower())
    return {"requests": int(count.get("avg", 0)) if isinstance(count, dict) else count,
            "cancelled": cancelled, "errors": int(errors.get("avg", 0)) if isinstance(errors, dict) else errors,
            "ttft_mean": ttft.get("avg"), "closed_p50": None,
            "raw_errors": doc.get("error_summary", [])[:3]}


def measured(tool: str, run, log: Path, url: str) -> dict:
    """One tool's run between two readings of vLLM's log (aborted requests) and its TTFT histogram."""
    before_log, before_ttft = log.read_text(errors="replace").count("Aborted request"), server_ttft(url)
    row = run()
    after_ttft = server_ttft(url)
    row["server_aborted"] = log.read_text(errors="replace").count("Aborted request") - before_log
    n = after_ttft[1] - before_ttft[1]
    row["server_ttft_mean"] = (after_ttft[0] - before_ttft[0]) / n * 1e3 if n else None
    print(tool, row, flush=True)
    return row


def table(rows: dict[str, list[dict]]) -> str:
    lines = ["| tool | requests | cancelled, the tool's count | vLLM's aborted (its log) | TTFT mean of the "
             "completed, ms | vLLM TTFT mean, ms (every first token) | closed after p50, ms from the intended send |",
             "|---|---|---|---|---|---|---|"]
    for tool, runs in rows.items():
        if any("error" in r for r in runs):
            lines.append(f"| {tool} | failed: {next(r['error'] for r in runs if 'error' in r)!r} ||||||")
            continue
        lines.append(f"| {tool} | {', '.join(str(r['requests']) for r in runs)} | "
                     f"{', '.join(str(r['cancelled']) for r in runs)} | "
                     f"{', '.join(str(r['server_aborted']) for r in runs)} | {spread([r['ttft_mean'] for r in runs])} | "
                     f"{spread([r['server_ttft_mean'] for r in runs])} | {spread([r['closed_p50'] for r in runs])} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aiperf", required=True, help="aiperf's command (its own virtualenv)")
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="cancel-peers-") as tmp:
        work = Path(tmp)
        server = start_vllm(work / "logs", max_num_seqs=16, cpus=[1], log_requests=True)
        try:
            tokenizer = server.model_dir
            for _ in range(args.repeats):
                for tool, run in (("tailrace", lambda: run_tailrace(server.url, args.rate, args.seconds,
                                                                      tokenizer / "tokenizer.json", work)),
                                  ("aiperf", lambda: run_aiperf(args.aiperf, server.url, args.rate, args.seconds,
                                                                tokenizer, work))):
                    rows.setdefault(tool, []).append(measured(tool, run, server.process.log_path, server.url))
        finally:
            server.stop()
    text = table(rows)
    command = (f"python bench/cancel_peers.py --aiperf PATH --rate {args.rate:g} --seconds {args.seconds:g} "
               f"--repeats {args.repeats}")
    print(text)
    if args.write:
        write_section("Request cancellation beside aiperf", f"""The same vLLM (the tiny Llama, CPU 1, \
`--enable-log-requests`) serving chat streams, each tool at {args.rate:g} requests/s Poisson for {args.seconds:g} s \
per run, alternating, {args.repeats} repeats (each run's counts; median and range of the means): {INPUT} tokens in, \
{OUTPUT} out, {SHARE:.0%} of the requests abandoned {DELAY_MS} ms after their send. vLLM's aborted requests are the \
"Aborted request" lines its log gained over the run; its TTFT histogram counts every first token it made (the \
abandoned streams' too).

Command: `{command}`

{text}
""")


if __name__ == "__main__":
    main()
