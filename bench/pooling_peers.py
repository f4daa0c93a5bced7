"""Embeddings and rerank beside aiperf, on one real vLLM: the tiny Llama of deploy/vllm/tiny_model.py run by vLLM's
pooling runner as an embedding model (CPU 1; its /v1/rerank scores by the vectors' cosine). Each tool sends the same
work at the same Poisson rate for the same time — embeddings: one text of INPUT tokens a request; rerank: a query of
QUERY tokens and PASSAGES passages of PASSAGE tokens — and each tool's client latency (mean, p50, p99, from its own
output) is set beside the server's own: vLLM's per-route HTTP histogram (`http_request_duration_seconds`, the API
server's time for the request, scraped before and after each tool's run). The gap, client mean − server mean, is what
the client adds to what the server did: the way there and back and the client's own delays.

    python bench/pooling_peers.py --aiperf PATH/bin/aiperf [--rate 10] [--seconds 20] [--repeats 2] [--write]

With --repeats N each tool's runs repeat N times, alternating (the server stays up); the table gives the median of the
repeats and their range.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import write_section  # noqa: E402
from tailrace.command_lines import tailrace_argv  # noqa: E402
from tailrace.harness.services.vllm_server import SERVED_NAME, start_vllm  # noqa: E402

INPUT, QUERY, PASSAGES, PASSAGE = 64, 16, 8, 48
ROUTES = {"embeddings": "/v1/embeddings", "rerank": "/v1/rerank"}


def server_http(url: str, route: str) -> tuple[float, float]:
    """(sum, count) of the server's own HTTP request-duration histogram for `route`."""
    from prometheus_client.parser import text_string_to_metric_families

    total = count = 0.0
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for s in family.samples:
            if s.labels.get("handler") != route:
                continue
            if s.name == "http_request_duration_seconds_sum":
                total += s.value
            elif s.name == "http_request_duration_seconds_count":
                count += s.value
    return total, count


def tailrace_summary(url: str, mode: str, endpoint: str, rate: float, seconds: float, work: Path) -> dict:
    """`tailrace run` of one endpoint (`endpoint`: its protocol and fields, TOML lines) at `rate` for `seconds` on
    CPU 0: its summary.json."""
    profile = work / f"tailrace-{mode}.toml"
    profile.write_text(f"""name = "peers"
[[endpoints]]
name = "{mode}"
url = "{url}"
model = "{SERVED_NAME}"
timeout_ms = 30000
{endpoint}[[regions]]
name = "here"
share = 1.0
[load]
rate = {rate}
duration_s = {seconds}
warmup_s = 0
seed = 7
[generator]
cpus = [0]
""")
    out = Path(tempfile.mkdtemp(prefix=f"runs-{mode}-", dir=work))  # a directory of its own: one summary in it
    subprocess.run(tailrace_argv("run", str(profile), "--out", str(out), "--quiet"), cwd=work, capture_output=True,
                   timeout=seconds * 4 + 180)
    return json.loads(next(out.glob("*/report/summary.json")).read_text())


def run_tailrace(url: str, mode: str, rate: float, seconds: float, tokenizer: Path, work: Path) -> dict:
    endpoint = (f'protocol = "openai-embeddings"\nprompts = {{ input_tokens = {INPUT}, count = 512, '
                f'tokenizer = "{tokenizer}" }}\n') if mode == "embeddings" else \
        (f'protocol = "rerank"\nprompts = {{ input_tokens = {QUERY}, count = 512, tokenizer = "{tokenizer}" }}\n'
         f'rerank = {{ documents = {PASSAGES}, document_tokens = {PASSAGE} }}\n')
    summary = tailrace_summary(url, mode, endpoint, rate, seconds, work)
    row = next(r for r in summary["latency"] if r["endpoint"] == mode and r["region"] == "*") if any(
        r["endpoint"] == mode and r["region"] == "*" for r in summary["latency"]) else \
        next(r for r in summary["latency"] if r["endpoint"] == mode)
    p = row["percentiles"]
    return {"requests": row["count"], "errors": row["errors"], "mean": row["mean_ms"], "p50": p["p50"]["value"],
            "p99": p["p99"]["value"]}


def run_aiperf(aiperf: str, url: str, mode: str, rate: float, seconds: float, tokenizer: Path, work: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"aiperf-{mode}-", dir=work))
    argv = ["taskset", "-c", "0", aiperf, "profile", "--model", SERVED_NAME, "--tokenizer", str(tokenizer), "--url", url,
            "--request-rate", str(rate), "--arrival-pattern", "poisson", "--request-count", str(int(rate * seconds)),
            "--random-seed", "7", "--artifact-dir", str(out), "--ui-type", "none"]
    if mode == "embeddings":
        argv += ["--endpoint-type", "embeddings", "--isl", str(INPUT), "--isl-stddev", "0"]
    else:
        argv += ["--endpoint-type", "cohere-rankings", "--endpoint", ROUTES["rerank"],
                 "--rankings-passages-mean", str(PASSAGES), "--rankings-passages-stddev", "0",
                 "--rankings-passages-prompt-token-mean", str(PASSAGE),
                 "--rankings-query-prompt-token-mean", str(QUERY)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 4 + 300)
    found = sorted(out.rglob("profile_export_aiperf.json"))
    if not found:
        return {"error": (done.stderr or done.stdout)[-400:]}
    doc = json.loads(found[-1].read_text())
    latency = doc.get("request_latency") or next(m for m in doc.get("records", []) if m.get("tag") == "request_latency")
    count = doc.get("request_count", {})
    errors = doc.get("error_request_count", {})
    return {"requests": int(count.get("avg", 0)) if isinstance(count, dict) else count,
            "errors": int(errors.get("avg", 0)) if isinstance(errors, dict) else (errors or 0),
            "mean": latency.get("avg"), "p50": latency.get("p50"), "p99": latency.get("p99")}


def measured(tool: str, run, mode: str, server) -> dict:
    """One tool's run (`run()`: its row) between two readings of the server's (sum, count) histogram (`server()`):
    the row with the server's mean over the run, its count and the gap, client mean − server mean."""
    before = server()
    row = run()
    after = server()
    n = after[1] - before[1]
    row["server_mean"] = (after[0] - before[0]) / n * 1e3 if n else None
    row["server_requests"] = int(n)
    row["gap"] = row["mean"] - row["server_mean"] if row.get("mean") is not None and row["server_mean"] else None
    print(tool, mode, row, flush=True)
    return row


def spread(values: list) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "–"
    med = statistics.median(vals)
    return f"{med:.2f} ({min(vals):.2f}–{max(vals):.2f})" if len(vals) > 1 else f"{med:.2f}"


def peer_table(rows: dict[tuple[str, str], list[dict]], columns: str) -> str:
    """The markdown table of each tool × API's runs: requests (the server's count), the four `columns` (mean, p50,
    p99, the server's mean: median and range over the repeats) and the gap."""
    lines = [f"| tool | API | requests (server's count) | {columns} | client − server, mean ms |",
             "|---|---|---|---|---|---|---|---|"]
    for (tool, mode), runs in rows.items():
        if any("error" in r for r in runs):
            lines.append(f"| {tool} | {mode} | failed: {next(r['error'] for r in runs if 'error' in r)!r} |||||")
            continue
        lines.append(f"| {tool} | {mode} | {', '.join(str(r['requests']) for r in runs)} "
                     f"({', '.join(str(r['server_requests']) for r in runs)}) | {spread([r['mean'] for r in runs])} | "
                     f"{spread([r['p50'] for r in runs])} | {spread([r['p99'] for r in runs])} | "
                     f"{spread([r['server_mean'] for r in runs])} | {spread([r['gap'] for r in runs])} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aiperf", required=True, help="aiperf's command (its own virtualenv)")
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pooling-peers-") as tmp:
        work = Path(tmp)
        server = start_vllm(work / "logs", max_num_seqs=16, cpus=[1], embed=True)
        try:
            tokenizer = server.model_dir
            rows: dict[tuple[str, str], list[dict]] = {}
            for _ in range(args.repeats):
                for mode in ("embeddings", "rerank"):
                    for tool, run in (("tailrace", lambda: run_tailrace(server.url, mode, args.rate, args.seconds,
                                                                          tokenizer / "tokenizer.json", work)),
                                      ("aiperf", lambda: run_aiperf(args.aiperf, server.url, mode, args.rate,
                                                                    args.seconds, tokenizer, work))):
                        rows.setdefault((tool, mode), []).append(measured(
                            tool, run, mode, lambda: server_http(server.url, ROUTES[mode])))
        finally:
            server.stop()
    table = peer_table(rows, "client mean ms | client p50 | client p99 | server mean ms (vLLM's HTTP histogram)")
    command = (f"python bench/pooling_peers.py --aiperf PATH --rate {args.rate:g} --seconds {args.seconds:g} "
               f"--repeats {args.repeats}")
    print(table)
    if args.write:
        write_section("Embeddings and rerank beside aiperf", f"""The same vLLM (the tiny Llama run by its pooling runner \
as an embedding model, CPU 1), each tool at {args.rate:g} requests/s Poisson for {args.seconds:g} s per run, \
alternating, {args.repeats} repeats (median and range): embeddings of one {INPUT}-token text a request; rerank of a \
{QUERY}-token query against {PASSAGES} passages of {PASSAGE} tokens (/v1/rerank). Each tool's latency from its own \
output, beside vLLM's own HTTP request-duration histogram for the route over the same run.

Command: `{command}`

{table}
""")


if __name__ == "__main__":
    main()
