"""Stream fidelity and cost of the generator: tailrace's token stamps against a sink's write instants.

The sink (bench/stream_sink.py, pinned to one core) streams 20 tokens a request — the first `--first-ms` after the
request arrives, then an event every gap, every third event carrying two tokens — and records when it writes each
event (CLOCK_MONOTONIC, the clock the client stamps with on this host). The client, pinned to the other core, is
tailrace's StreamSender (the worker's request path for streams), holding N streams open at once for `--seconds`
(each finished stream replaced at once). Per request: first-token error = the client's stamp − the sink's write of
the first token event; ITL error = each gap between events as stamped − as written. Reported per N: error p50 / p99,
the tokens/s the client core sustained, and its CPU (user + system over wall time).

A peer (guidellm, in its own virtualenv: `--guidellm PATH/bin/guidellm`) runs against the same sink at the same
concurrency; its per-request first-token time (epoch) is matched to the sink's first write by the request's
arrival (the sink also records wall-clock instants).

    python bench/stream_fidelity.py [--concurrency 100 1000 2000] [--seconds 20] [--guidellm PATH] [--write]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKENS, FIRST_MS = 20, 50.0
GAP_MS = {100: 20.0, 500: 30.0, 1000: 60.0, 2000: 120.0}  # the sink's gap: ~6k, ~21k, ~22k, ~23k tokens/s offered


def gap_for(n: int) -> float:
    return GAP_MS.get(n, 20.0 * max(1, n // 250))


# -- the client (a child process, pinned) ----------------------------------------------------------------------
def client(url: str, concurrency: int, seconds: float, warmup_s: float, out: Path, sessions: bool = False) -> None:
    """`sessions`: every stream a session's turn instead — 4 turns a session, each built at its send from the
    conversation so far (the sink's actual reply and 24 new words), as the worker's session runner builds them."""
    import gevent
    import numpy as np

    from tailrace.contract.plan import EndpointTimeouts, PoolLimits
    from tailrace.contract.profile import Prompts, Sessions
    from tailrace.contract.trace_context import format_traceparent, new_ids
    from tailrace.harness.client.generative import COMPLETIONS, StreamSender, request_body
    from tailrace.harness.client.outcome import Send
    from tailrace.harness.workload.conversations import Conversation, TurnScript, words_of

    # the worker's defaults for a generative endpoint: a stall timeout on every read once a response has begun
    sender = StreamSender(url, COMPLETIONS, [request_body(COMPLETIONS, "sink", "one two three", TOKENS)],
                          EndpointTimeouts(30, stall_s=float(os.environ.get("TAILRACE_BENCH_STALL_S", "30")) or None),
                          credential=None, pool=PoolLimits.sized(concurrency))
    sender.warm_up()
    records: list[tuple] = []
    start = time.monotonic()
    end = start + warmup_s + seconds

    rng = np.random.default_rng(1)

    def turns():
        """Endless session turns: (a function sending the next turn, a function taking its outcome)."""
        while True:
            conversation = Conversation(COMPLETIONS, "sink", Prompts(), Sessions(), lambda t: len(t.split()),
                                        lambda: "")
            for k in range(4):
                script = TurnScript(words_of(24, rng), TOKENS)
                built = conversation.next_request(script)
                yield built.body, lambda o, script=script: conversation.add_reply(
                    script, o.stream.text if o.status == "ok" else "", [], o.status == "ok")

    def stream() -> None:
        session = turns() if sessions else None
        while time.monotonic() < end:
            trace_id, span_id = new_ids()
            began = time.monotonic()
            headers = {"traceparent": format_traceparent(trace_id, span_id)}
            if session is None:
                outcome = sender.send(Send(0, headers))
            else:
                body, replied = next(session)
                outcome = sender.send(Send(0, headers, body=body))
                replied(outcome)
            if began >= start + warmup_s and outcome.status == "ok":
                s = outcome.stream
                records.append((trace_id, s.first_token_ns, bytes(s.event_ns), bytes(s.event_tokens)))

    gevent.sleep(0)
    usage0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    gevent.joinall([gevent.spawn(stream) for _ in range(concurrency)])
    usage1, wall1 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    cpu = (usage1.ru_utime - usage0.ru_utime + usage1.ru_stime - usage0.ru_stime) / (wall1 - wall0)
    tokens = sum(int(np.frombuffer(c, dtype=np.uint16).sum()) for *_, c in records)
    out.write_text(json.dumps({"cpu": cpu, "tokens": tokens, "seconds": seconds, "records": [
        (t, f, np.frombuffer(e, dtype=np.int64).tolist(), np.frombuffer(c, dtype=np.uint16).tolist())
        for t, f, e, c in records]}))
    sender.close()


# -- the parent ------------------------------------------------------------------------------------------------
def _start_sink(port: int, log: Path, gap_ms: float, cpu: str) -> subprocess.Popen:
    proc = subprocess.Popen(["taskset", "-c", cpu, sys.executable, str(ROOT / "bench" / "stream_sink.py"), "--port",
                             str(port), "--log", str(log), "--first-ms", str(FIRST_MS), "--gap-ms", str(gap_ms),
                             "--tokens", str(TOKENS)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import httpx

    for _ in range(100):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the sink did not start")


def _sink_writes(log: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for line in log.read_text().splitlines():
        e = json.loads(line)
        out.setdefault(e["trace_id"], []).append(e)
    return out


def errors_against_sink(records: list, writes: dict[str, list[dict]]) -> tuple[np.ndarray, np.ndarray]:
    """(first-token errors ms, |ITL errors| ms) of the client's records against the sink's writes."""
    first, gaps = [], []
    for trace, first_ns, event_ns, _ in records:
        written = [e["t_ns"] for e in sorted(writes.get(trace, []), key=lambda e: e["event"])]
        if len(written) != len(event_ns) or not written:
            continue
        first.append((first_ns - written[0]) / 1e6)
        gaps.extend(np.abs(np.diff(event_ns) - np.diff(written)) / 1e6)
    return np.asarray(first), np.asarray(gaps)


def run_tailrace(n: int, seconds: float, warmup_s: float, work: Path, port: int, sessions: bool = False) -> dict:
    log = work / f"sink-{n}-{sessions}.jsonl"
    sink = _start_sink(port, log, gap_for(n), "1")
    try:
        out = work / f"client-{n}-{sessions}.json"
        subprocess.run(["taskset", "-c", "0", sys.executable, __file__, "--client", f"http://127.0.0.1:{port}",
                        "--concurrency", str(n), "--seconds", str(seconds), "--warmup", str(warmup_s),
                        "--out", str(out), *(["--sessions"] if sessions else [])], check=True)
    finally:
        sink.terminate()
        sink.wait(10)
    result = json.loads(out.read_text())
    first, gaps = errors_against_sink(result["records"], _sink_writes(log))
    return {"tool": "tailrace (sessions)" if sessions else "tailrace", "streams": n, "gap_ms": gap_for(n),
            "requests": len(first),
            "tokens_per_s": result["tokens"] / seconds, "cpu": result["cpu"],
            "first_p50_ms": float(np.median(first)), "first_p99_ms": float(np.percentile(first, 99)),
            "itl_p50_ms": float(np.median(gaps)), "itl_p99_ms": float(np.percentile(gaps, 99))}


def run_guidellm(guidellm: str, n: int, seconds: float, work: Path, port: int) -> dict:
    """guidellm (0.8.1's CLI) against the same sink at concurrency n, its prompts each carrying a key ("req-<i>")
    the sink logs: its first-token instants (epoch s, `first_token_iteration`) against the sink's writes (epoch ns),
    and the client CPU it used (its process tree's, from /proc, over the run)."""
    log = work / f"sink-guidellm-{n}.jsonl"
    prompts = work / "prompts.jsonl"
    if not prompts.exists():
        prompts.write_text("".join(json.dumps({"prompt": f"req-{i} one two three four five",
                                               "output_tokens_count": TOKENS, "prompt_tokens_count": 8}) + "\n"
                                   for i in range(200_000)))
    sink = _start_sink(port, log, gap_for(n), "1")
    out = work / f"guidellm-{n}.json"
    try:
        cmd = ["taskset", "-c", "0", guidellm, "run", "--backend",
               f"kind=openai_http,target=http://127.0.0.1:{port},model=sink", "--profile",
               f"kind=concurrent,streams={n}", "--constraint", f"kind=max_duration,seconds={seconds:g}",
               "--data", f"kind=json_file,path={prompts}", "--output", f"kind=json,path={out}",
               "--disable-console-interactive"]
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 4 + 600)
        children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0 or not out.exists():
            return {"tool": "guidellm 0.8.1", "streams": n, "error": (proc.stderr or proc.stdout)[-800:]}
    finally:
        sink.terminate()
        sink.wait(10)
    cpu_s = (children1.ru_utime - children0.ru_utime + children1.ru_stime - children0.ru_stime)
    return guidellm_errors(out, _sink_writes(log), n, seconds) | {
        "cpu_whole_run": cpu_s / (time.monotonic() - began)}


def guidellm_errors(report: Path, writes: dict[str, list[dict]], n: int, seconds: float) -> dict:
    """guidellm's first-token instants against the sink's first writes, request by request (by the prompt's key)."""
    bench = json.loads(report.read_text())["benchmarks"][0]
    requests = bench["requests"]["successful"]
    errors, tokens = [], 0
    for r in requests:
        key = re.search(r"req-\d+", r.get("request_args") or "")
        first = ((r.get("info") or {}).get("timings") or {}).get("first_token_iteration")
        tokens += (r.get("output_metrics") or {}).get("text_tokens") or 0
        written = writes.get(key.group(0)) if key else None
        if first is None or not written:
            continue
        errors.append((first * 1e9 - min(written, key=lambda e: e["event"])["wall_ns"]) / 1e6)
    errors = np.asarray(errors)
    duration = bench.get("duration") or seconds
    return {"tool": "guidellm 0.8.1", "streams": n, "gap_ms": gap_for(n), "requests": len(errors),
            "tokens_per_s": tokens / duration, "cpu": None,
            "first_p50_ms": float(np.median(errors)) if len(errors) else None,
            "first_p99_ms": float(np.percentile(errors, 99)) if len(errors) else None,
            "itl_p50_ms": None, "itl_p99_ms": None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[100, 1000, 2000])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--guidellm", default=None, help="guidellm executable (its own virtualenv) to run beside")
    ap.add_argument("--sessions", action="store_true", help="also as sessions' turns, built at each send, beside")
    ap.add_argument("--repeats", type=int, default=1, help="run each cell this many times (the table: each run)")
    ap.add_argument("--write", action="store_true", help="write the table into docs/BENCHMARKS.md")
    args = ap.parse_args()
    if args.client:
        client(args.client, args.concurrency[0], args.seconds, args.warmup, args.out, args.sessions)
        return 0
    from tailrace.harness.services.processes import free_port

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for n in args.concurrency:
            for _ in range(args.repeats):  # side by side, alternating: the VM's drift falls on both alike
                for sessions in ((False, True) if args.sessions else (False,)):
                    rows.append(run_tailrace(n, args.seconds, args.warmup, work, free_port(), sessions))
                    print(json.dumps(rows[-1]), flush=True)
            if args.guidellm:
                rows.append(run_guidellm(args.guidellm, n, args.seconds, work, free_port()))
                print(json.dumps(rows[-1]), flush=True)
    if args.write:
        from bench.common import shown_command, write_section

        lines = ["| tool | streams | sink gap (ms) | requests | tokens/s | client CPU | first-token error p50 / p99 (ms) "
                 "| ITL error p50 / p99 (ms) |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if "error" in r:
                lines.append(f"| {r['tool']} | {r['streams']} | — | failed: {r['error'][:120]} | | | | |")
                continue
            cpu = f"{r['cpu']:.0%}" if r["cpu"] is not None else "—"
            itl = f"{r['itl_p50_ms']:.3f} / {r['itl_p99_ms']:.3f}" if r["itl_p50_ms"] is not None else "—"
            lines.append(f"| {r['tool']} | {r['streams']:,} | {r['gap_ms']:g} | {r['requests']:,} | "
                         f"{r['tokens_per_s']:,.0f} | {cpu} | {r['first_p50_ms']:.3f} / {r['first_p99_ms']:.3f} | "
                         f"{itl} |")
        command = shown_command("bench/stream_fidelity.py", sys.argv[1:])
        notes = ("\n\nCommand: `" + command + "`" + (" (guidellm 0.8.1 in its own virtualenv)" if args.guidellm else "")
                 + ". The sink on CPU 1, the client "
                 "on CPU 0; error = the client's stamp − the sink's write of the same event (first token), and "
                 "|stamped gap − written gap| between consecutive events (ITL); tokens/s and CPU are the client's "
                 "over the measured seconds. tailrace stamps a streamed body with the kernel's receive instant "
                 "(SO_TIMESTAMPNS; plain TCP on Linux), so a busy client loop does not move its stamps. guidellm "
                 "stamps `first_token_iteration` with time.time() once its asyncio loop has parsed the event; it "
                 "records no per-token instants, so it has no ITL error to show.")
        if args.sessions:
            notes += (" With --sessions each cell runs twice side by side, alternating: as independent requests (one "
                      "body built before the run) and as sessions' turns (4 a session, each built at its send from "
                      "the conversation so far — the sink's actual reply and 24 new words — as the worker's session "
                      "runner builds them).")
        title = "Stream fidelity with sessions" if args.sessions else "Stream fidelity: token stamps against the sink's writes"
        write_section(title, "\n".join(lines) + notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
