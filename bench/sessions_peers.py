"""Multi-turn sessions side by side with aiperf (0.13, its own virtualenv) on one server: the embedded synthetic_lm
(8 ms steps, 0.02 ms of prefill per uncached prompt token, automatic prefix caching), each tool sending the same shape
of sessions — 4 turns, 200 new words a turn, 16 tokens out, a fixed 0.5 s pause between a reply and the next turn,
the server's actual replies carried — at about the same request rate.

Per tool: TTFT p50 of turn 1 and of later turns (each tool's own numbers, from its own per-request records), the
server's own mean TTFT over the tool's run (its histogram's sum / count), and the prefix-cache hit ratio the server's
counters give over the tool's run. What each measures from: tailrace, a turn's intended instant (turn k's end + the
pause); aiperf, when its worker starts the request (`request_start_ns`; its own issue lag before it is not counted).

    python bench/sessions_peers.py --aiperf PATH/bin/aiperf [--sessions 30] [--repeats 2] [--write]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tailrace.command_lines import tailrace_argv  # noqa: E402
from tailrace.harness.services.processes import free_port, start_process, wait_http_ok  # noqa: E402

TURNS, WORDS, OUTPUT, THINK_S, SESSION_RATE = 4, 200, 16, 0.5, 0.5


def server_counters(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for s in family.samples:
            if s.name in ("tailrace:prefix_cache_queries_total", "tailrace:prefix_cache_hits_total",
                          "tailrace:time_to_first_token_seconds_sum", "tailrace:time_to_first_token_seconds_count"):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def server_delta(url: str, before: dict) -> dict:
    after = server_counters(url)
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    return {"server_hit_ratio": d["tailrace:prefix_cache_hits_total"] / d["tailrace:prefix_cache_queries_total"],
            "server_ttft_ms": d["tailrace:time_to_first_token_seconds_sum"]
            / d["tailrace:time_to_first_token_seconds_count"] * 1e3}


def run_tailrace(url: str, sessions: int, work: Path) -> dict:
    seconds = sessions / SESSION_RATE
    profile = work / "sessions.toml"
    profile.write_text(f"""name = "sessions-peer"
[[endpoints]]
name = "chat"
url = "{url}"
protocol = "openai-chat"
model = "synthetic_lm"
prompts = {{ input_tokens = {{ mean = {WORDS} }}, output_tokens = {{ mean = {OUTPUT} }} }}
sessions = {{ turns = {{ mean = {TURNS} }}, think_s = {{ mean = {THINK_S} }}, user_tokens = {{ mean = {WORDS} }} }}
[[regions]]
name = "local"
share = 1.0
[load]
rate = {SESSION_RATE}
duration_s = {seconds:g}
warmup_s = 0
seed = 5
arrivals = {{ process = "constant" }}
""")
    before = server_counters(url)
    out = work / "runs"
    subprocess.run(tailrace_argv("run", str(profile), "--out", str(out), "--quiet"), cwd=work, check=False,
                   capture_output=True)
    server = server_delta(url, before)
    from tailrace.analysis.analyze import analyze_run

    df = analyze_run(max(out.glob("sessions-peer-*"))).requests
    df = df[df["status"] == "ok"]
    ttft = df["ttft_ns"].to_numpy() / 1e6
    turn = df["turn"].to_numpy()
    return {"tool": "tailrace", "requests": len(df), "ttft_turn1_ms": float(np.median(ttft[turn == 1])),
            "ttft_later_ms": float(np.median(ttft[turn > 1])), **server}


def run_aiperf(aiperf: str, url: str, sessions: int, work: Path) -> dict:
    out = work / "aiperf"
    before = server_counters(url)
    cmd = [aiperf, "profile", "--model-names", "synthetic_lm", "--url", url, "--endpoint-type", "chat", "--streaming",
           "--tokenizer", str(ROOT / "build" / "vllm-model"), "--conversation-num", str(sessions),
           "--conversation-turn-mean", str(TURNS), "--conversation-turn-stddev", "0",
           "--conversation-turn-delay-mean", str(int(THINK_S * 1000)), "--conversation-turn-delay-stddev", "0",
           "--request-rate", str(SESSION_RATE * TURNS), "--prompt-input-tokens-mean", str(WORDS),
           "--prompt-input-tokens-stddev", "0", "--prompt-output-tokens-mean", str(OUTPUT),
           "--prompt-output-tokens-stddev", "0", "--request-count", str(sessions * TURNS),
           "--output-artifact-dir", str(out), "--export-level", "raw", "--random-seed", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=900)
    if proc.returncode != 0:
        return {"tool": "aiperf 0.13", "error": (proc.stderr or proc.stdout)[-600:]}
    server = server_delta(url, before)
    ttft, turns = [], []
    for line in (out / "profile_export_raw.jsonl").read_text().splitlines():
        r = json.loads(line)
        content = [resp["perf_ns"] for resp in r["responses"] for p in resp["packets"]
                   if '"content":"' in p.get("value", "") and '"content":""' not in p.get("value", "")]
        if r["status"] == 200 and content:
            ttft.append((content[0] - r["start_perf_ns"]) / 1e6)
            turns.append(r["metadata"]["turn_index"] + 1)
    ttft, turns = np.asarray(ttft), np.asarray(turns)
    return {"tool": "aiperf 0.13", "requests": len(ttft), "ttft_turn1_ms": float(np.median(ttft[turns == 1])),
            "ttft_later_ms": float(np.median(ttft[turns > 1])), **server}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aiperf", required=True, help="the aiperf executable (its own virtualenv)")
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port = free_port()
        server = start_process("embedded", tailrace_argv("serve", "--models", str(ROOT / "build" / "models"), "--model",
                                                         "synthetic_lm", "--http-port", str(port), "--grpc-port",
                                                         str(free_port())), work / "serve.log", cpus=[1])
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http_ok(f"{url}/v1/models", server, timeout=60)
            for k in range(args.repeats):
                for name, run in (("tailrace", lambda d: run_tailrace(url, args.sessions, d)),
                                  ("aiperf", lambda d: run_aiperf(args.aiperf, url, args.sessions, d))):
                    d = work / f"{name}-{k}"
                    d.mkdir()
                    rows.append(run(d))
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()
    lines = ["| tool | requests | TTFT p50 turn 1 (ms) | TTFT p50 later turns (ms) | server's mean TTFT (ms) | "
             "server's hit ratio |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['tool']} | failed: {r['error'][:100]} | | | | |")
            continue
        lines.append(f"| {r['tool']} | {r['requests']} | {r['ttft_turn1_ms']:.1f} | {r['ttft_later_ms']:.1f} | "
                     f"{r['server_ttft_ms']:.1f} | {r['server_hit_ratio']:.1%} |")
    body = ("Command: `python bench/sessions_peers.py " + " ".join(a for a in sys.argv[1:] if not a.startswith("/"))
            + "` (aiperf 0.13 in its own virtualenv). " + __doc__.split("\n\n")[0].replace("\n", " ") + " Each row is one "
            "run, the tools alternating.\n\n" + "\n".join(lines))
    print(body)
    if args.write:
        from bench.common import write_section

        write_section("Sessions beside aiperf's multi-turn", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
