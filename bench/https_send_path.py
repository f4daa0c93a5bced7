"""Benchmark: the generator's HTTPS send path against plain HTTP, side by side in one run.

One nginx (CPU 1) answers a constant KServe v2 response on two ports, plain HTTP and HTTPS (a certificate from a CA
made here). The bench process (CPU 0) runs the generator's own sender (harness/client/senders.py's HttpSender, on
gevent as in a worker) in a closed loop of `--concurrency` greenlets for `--seconds`, alternating HTTP and HTTPS
round by round: requests/s on one core and the process CPU time per request. No schedule, so no timer spin: the
numbers are the send path's own cost. Keep-alive connections, as in a run; the TLS handshakes happen in warm-up.

    .venv/bin/python bench/https_send_path.py [--seconds 5] [--rounds 5] [--concurrency 32]
"""
from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import require, write_section  # noqa: E402
from bench.generator_open_loop import start_nginx  # noqa: E402
from tailrace.contract.plan import PoolLimits, unresolved_plan  # noqa: E402
from tailrace.contract.profile import parse_profile  # noqa: E402
from tailrace.contract.requests import declared_request  # noqa: E402
from tailrace.harness.client.outcome import Send  # noqa: E402
from tailrace.harness.client.request_data import samples_for  # noqa: E402
from tailrace.harness.services.processes import free_port  # noqa: E402
from tailrace.harness.workload.senders import kserve_sender  # noqa: E402

COMMAND = ".venv/bin/python bench/https_send_path.py"


def sender_for(url: str, ca: Path | None, concurrency: int):
    """The worker's sender for digits_mlp_fp32-shaped requests (64 FP32 inputs, JSON) to `url`."""
    endpoint = {"name": "nginx", "url": url, "protocol": "kserve-http", "model": "digits_mlp_fp32",
                "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}], **({"tls": {"ca": str(ca)}} if ca else {})}
    profile = parse_profile({"name": "bench", "endpoints": [endpoint], "regions": [{"name": "r", "share": 1.0}],
                             "load": {"rate": 1, "duration_s": 1}}, "bench")
    ep = profile.endpoints[0]
    request = declared_request(ep, 1)
    samples = samples_for(unresolved_plan(profile, "bench", ""), ep, request)
    sender = kserve_sender(ep, url, samples, request, stride=1, pool=PoolLimits.sized(concurrency), models_dir=Path("."))
    sender.warm_up()
    return sender


def closed_loop(sender, seconds: float, concurrency: int) -> dict:
    """`concurrency` greenlets sending back to back for `seconds`: requests/s, CPU µs per request, failures."""
    done, failed = [0], [0]
    stop_at = time.monotonic() + seconds

    def loop(k: int) -> None:
        i = k
        while time.monotonic() < stop_at:
            out = sender.send(Send(i % len(sender.payloads.encoded),
                                   {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}))
            done[0] += 1
            failed[0] += out.status != "ok"
            i += concurrency

    cpu0, wall0 = time.process_time(), time.monotonic()
    gevent.joinall([gevent.spawn(loop, k) for k in range(concurrency)])
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    return {"rps": done[0] / wall, "cpu_us": cpu / max(1, done[0]) * 1e6, "failed": failed[0], "requests": done[0]}


def _p99s(rows: list[dict]) -> str:
    return ", ".join(f"{r['lag_p99']:.2f}" for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    require("taskset")
    import os
    import signal

    import trustme

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))  # clean up on kill
    os.sched_setaffinity(0, {0})
    work = Path(tempfile.mkdtemp(prefix="tailrace-httpsbench-"))
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca.cert_pem.write_to_path(work / "ca.pem")
    cert.cert_chain_pems[0].write_to_path(work / "server.crt")
    cert.private_key_pem.write_to_path(work / "server.key")
    http_port, https_port = free_port(), free_port()
    nginx = start_nginx(work, http_port, (https_port, work / "server.crt", work / "server.key"))
    time.sleep(1.0)
    rounds: dict[str, list[dict]] = {"http": [], "https": []}
    try:
        senders = {"http": sender_for(f"http://127.0.0.1:{http_port}", None, args.concurrency),
                   "https": sender_for(f"https://127.0.0.1:{https_port}", work / "ca.pem", args.concurrency)}
        for scheme, sender in senders.items():  # warm both: connections open, TLS sessions set up
            closed_loop(sender, 1.0, args.concurrency)
        for k in range(args.rounds):
            for scheme in (("http", "https") if k % 2 == 0 else ("https", "http")):
                r = closed_loop(senders[scheme], args.seconds, args.concurrency)
                rounds[scheme].append(r)
                print(f"round {k + 1} {scheme:5}: {r['rps']:,.0f} req/s, {r['cpu_us']:.1f} µs CPU/request, "
                      f"{r['failed']} failed", flush=True)
        for sender in senders.values():
            sender.close()
    finally:
        nginx.stop()
    rps_ratio = [b["rps"] / a["rps"] for a, b in zip(rounds["http"], rounds["https"])]
    cpu_ratio = [b["cpu_us"] / a["cpu_us"] for a, b in zip(rounds["http"], rounds["https"])]
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    table = ("| send path | requests/s on one core (median) | CPU µs/request (median) | failed |\n|---|---|---|---|\n"
             + "".join(f"| {s} | {med(rounds[s], 'rps'):,.0f} | {med(rounds[s], 'cpu_us'):.1f} | "
                       f"{sum(r['failed'] for r in rounds[s])} |\n" for s in ("http", "https")))
    body = (f"Command: `{COMMAND} --seconds {args.seconds:g} --rounds {args.rounds} --concurrency {args.concurrency}`"
            "\n\nTarget: nginx (CPU 1) answering a constant KServe v2 response on a plain and a TLS port. The "
            "generator's HttpSender (CPU 0, gevent) in a closed loop of "
            f"{args.concurrency} greenlets, JSON requests of 64 FP32 values on keep-alive connections; HTTP and "
            "HTTPS rounds alternate.\n\n" + table +
            f"\n**HTTPS / HTTP throughput: {statistics.median(rps_ratio):.2f}** (range {min(rps_ratio):.2f}–"
            f"{max(rps_ratio):.2f} over {args.rounds} paired rounds); CPU per request "
            f"{statistics.median(cpu_ratio):.2f}× (range {min(cpu_ratio):.2f}–{max(cpu_ratio):.2f}).\n")
    print(body)
    if not args.no_write:
        write_section("HTTPS send path vs plain HTTP", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
