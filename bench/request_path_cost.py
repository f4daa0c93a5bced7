"""Benchmark: the CPU one request costs on a worker's loop, layer by layer, and Locust's beside it.

Each layer runs closed loop (`--concurrency` greenlets back to back) in this process on CPU 0 against nginx on
CPU 1, so process CPU time over requests is what one request costs the generator's core:

- `exchange`: the HTTP/1.1 pool alone, one pre-built request (harness/client/http1.py);
- `sender`: the KServe sender — headers, the request, the response parsed and decoded (harness/client/senders.py);
- `path`: the worker's whole request path — trace ids, the sender, the answer check, the typed record, metrics and
  the saturation monitor (harness/worker/requester.py);
- `path+chunk`: the same, plus the records turned into an Arrow table as the spool does at each chunk;
- `inline`: the whole request path as the open loop runs it by default (harness/worker/inline_sends.py): sent and
  read by the issue loop itself, no greenlet a request, the record written after the answer; plus the chunk;
- `locust`: Locust's FastHttpUser in its own process on CPU 0 (its closed-loop maximum, stats included).

    .venv/bin/python bench/request_path_cost.py [--requests 20000] [--concurrency 32] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gevent import monkey  # noqa: E402

monkey.patch_all()  # as in a Locust worker

import gevent  # noqa: E402

from bench.common import write_section  # noqa: E402
from bench.generator_open_loop import closed_loop_max, start_nginx  # noqa: E402
from tailrace.contract.layout import WorkerLayout  # noqa: E402
from tailrace.contract.plan import unresolved_plan  # noqa: E402
from tailrace.contract.profile import parse_profile  # noqa: E402
from tailrace.endpoints.models.model_build import build_repository  # noqa: E402
from tailrace.harness.client.outcome import Send  # noqa: E402
from tailrace.harness.client.payloads import AnswerCheck  # noqa: E402
from tailrace.harness.orchestration.endpoint_check import resolve_requests  # noqa: E402
from tailrace.harness.services.processes import free_port  # noqa: E402
from tailrace.harness.spool.recorder import request_writer  # noqa: E402
from tailrace.harness.worker.clock import ClockSampler, WorkerClock  # noqa: E402
from tailrace.harness.worker.endpoint_senders import EndpointSenders  # noqa: E402
from tailrace.harness.worker.identity import WorkerIdentity  # noqa: E402
from tailrace.harness.worker.inline_sends import InlineSends  # noqa: E402
from tailrace.harness.worker.metrics import WorkerMetrics  # noqa: E402
from tailrace.harness.worker.requester import RequestPath  # noqa: E402
from tailrace.harness.worker.saturation import SaturationMonitor  # noqa: E402
from tailrace.harness.worker.scenarios import Arrival  # noqa: E402

COMMAND = ".venv/bin/python bench/request_path_cost.py"
LAYERS = ("exchange", "sender", "path", "path+chunk", "inline")


def build_path(work: Path, url: str, models: Path) -> RequestPath:
    """The worker's request path for one KServe HTTP endpoint at `url`, built as a worker builds it."""
    profile = parse_profile({
        "name": "cost", "endpoints": [{"name": "nginx", "url": url, "protocol": "kserve-http",
                                       "model": "digits_mlp_fp32",
                                       "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]}],
        "regions": [{"name": "bench", "share": 1.0}], "load": {"rate": 1000, "duration_s": 10}}, "bench profile")
    plan = unresolved_plan(profile, "cost", str(work / "run"), str(models))
    plan = plan.model_copy(update={"requests": resolve_requests(plan).requests})
    identity = WorkerIdentity("bench", 0)
    (sender,) = EndpointSenders(plan, identity, "bench", models, None).all()
    sender.warm_up()
    check = AnswerCheck(profile.endpoints[0].check, sender.payloads.samples, sender.payloads.request.batched)
    clock = WorkerClock(0)
    clocks = ClockSampler(clock, [], 1, identity.name, "bench", lambda row: None, lambda msg: None)
    recorder = request_writer(WorkerLayout(work / "spool"), max_rows=10**7, max_seconds=1e9)
    recorder.warm_up()
    return RequestPath(plan, identity, [sender], [check], clock, clocks, recorder,
                       SaturationMonitor("bench-w0", 2_000_000, 100_000), WorkerMetrics(None))


def inline_closed_loop(inline: InlineSends, path: RequestPath, requests: int, concurrency: int) -> None:
    """`requests` through the inline path, `concurrency` of them in flight at a time, each record written at once."""
    n_samples = len(path.senders[0].payloads.samples)
    started, target = 0, path.sent + requests
    while path.sent < target:
        while inline.busy < concurrency and started < requests:
            inline.start(Arrival(time.perf_counter_ns(), 0, 1, started % n_samples))
            started += 1
        inline.pump(time.perf_counter_ns() + 10**9)
        if inline.busy >= concurrency or started >= requests:
            inline.wait(0.01)
    inline.pump(time.perf_counter_ns() + 10**9)


def one_layer(path: RequestPath, layer: str, requests: int, concurrency: int,
              inline: InlineSends | None = None) -> float:
    """CPU µs per request of `layer`, closed loop with `concurrency` greenlets (inline: requests in flight)."""
    sender = path.senders[0]
    n_samples = len(sender.payloads.samples)
    raw_body, _ = sender.payloads.encoded[0]
    raw = (sender._head + f"Content-Length: {len(raw_body)}\r\n\r\n".encode() + raw_body)
    headers = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", **path.static_headers}
    each = requests // concurrency

    def loop(k: int) -> None:
        for i in range(each):
            if layer == "exchange":
                sender.client.request(raw)
            elif layer == "sender":
                sender.send(Send(i % n_samples, headers))
            else:
                path.send(Arrival(time.perf_counter_ns(), 0, 1, (k * each + i) % n_samples))

    path.recorder.rows.clear()
    start = time.process_time()
    if layer == "inline":
        inline_closed_loop(inline, path, each * concurrency, concurrency)
    else:
        gevent.joinall([gevent.spawn(loop, k) for k in range(concurrency)])
    if layer in ("path+chunk", "inline"):
        path.recorder.to_table(path.recorder.rows)
    return (time.process_time() - start) / (each * concurrency) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tailrace-costbench-"))
    models = work / "models"
    build_repository(models)
    port = free_port()
    nginx = start_nginx(work, port)
    body = work / "body.json"
    body.write_text(json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                                            "data": [0.0] * 64}]}))
    costs: dict[str, list[float]] = {name: [] for name in (*LAYERS, "locust")}
    try:
        time.sleep(0.5)
        url = f"http://127.0.0.1:{port}"
        os.sched_setaffinity(0, {0})
        path = build_path(work, url, models)
        inline = InlineSends(path)  # the greenlet layers keep the sender's own pool
        one_layer(path, "path", 2000, args.concurrency)  # warm: first connections, first conversions
        one_layer(path, "inline", 2000, args.concurrency, inline)
        for _ in range(args.repeats):  # layers interleaved, so a slow spell of the VM hits each alike
            for layer in LAYERS:
                costs[layer].append(one_layer(path, layer, args.requests, args.concurrency, inline))
            costs["locust"].append(1e6 / closed_loop_max(work, url, body, 6, 64))
            print("  ".join(f"{k} {v[-1]:.1f}" for k, v in costs.items()), flush=True)
    finally:
        nginx.stop()
    rows = "".join(f"| {name} | {statistics.median(v):.1f} | {min(v):.1f}–{max(v):.1f} | "
                   f"{1e6 / statistics.median(v):,.0f} |\n" for name, v in costs.items())
    body_md = (f"Command: `{COMMAND} --requests {args.requests} --concurrency {args.concurrency} "
               f"--repeats {args.repeats}`\n\n"
               "CPU per request on the generator's core (CPU 0; nginx on CPU 1), closed loop. Locust's figure is the "
               "inverse of its FastHttpUser closed-loop maximum (64 users, its own process, 6 s): that process is CPU-bound "
               "(checked with /usr/bin/time: 8.6 CPU-s over an 8.8 s run, 0.96 s of it imports), so the inverse is its "
               "CPU a request, within ~10% (low).\n\n"
               "| layer | CPU µs per request (median) | spread | requests/s that is |\n|---|---|---|---|\n" + rows +
               "\nRead: what one request costs the worker's core, with everything it records, against what Locust's own "
               "client costs for a bare request. `inline` is what the open loop pays today; `path+chunk` what it paid "
               "with a greenlet a request (still the path of gRPC, TLS, streams and sessions).\n")
    print(body_md)
    if not args.no_write:
        write_section("Generator: CPU per request, layer by layer", body_md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
