"""What `tailrace export otlp` costs: a 10-minute run at 1,000 requests/s (600,000 requests, a synthetic run directory
written by bench/synthetic_run.py, rate 1,000/s) exported whole to an OTLP/HTTP receiver that reads each batch and
answers at once (so the figure is tailrace's: reading the run, building the spans, encoding them), and to the same
over gRPC. Per repeat: wall seconds and the command's peak RSS (getrusage of the child), spans per second.

    python bench/otel_export.py [--rows 600000] [--repeats 3] [--write]
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc  # noqa: E402

from bench.common import write_section  # noqa: E402
from bench.pooling_peers import spread  # noqa: E402
from bench.synthetic_run import Shape, write_synthetic_run  # noqa: E402


class _Sink(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _GrpcSink(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):  # noqa: N802
        return trace_service_pb2.ExportTraceServiceResponse()


def sinks() -> tuple[str, str, callable]:
    """(HTTP URL, gRPC URL, stop) of receivers that take every batch and keep nothing."""
    http = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=[("grpc.max_receive_message_length",
                                                                              64 * 2**20)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_GrpcSink(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()

    def stop() -> None:
        http.shutdown()
        server.stop(None)

    return f"http://127.0.0.1:{http.server_address[1]}", f"http://127.0.0.1:{port}", stop


def export_once(run_dir: Path, url: str, protocol: str) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB of the command, its output line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "tailrace.cli", "export", "otlp", str(run_dir), "--endpoint", url,
                          "--protocol", protocol], capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"export failed: {out.stdout}{out.stderr}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, max(peak, before) / 1024, out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=600_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        write_synthetic_run(run_dir, Shape(a.rows, rate=1000.0, chunks=120))
        http_url, grpc_url, stop = sinks()
        results: dict[str, list[tuple[float, float]]] = {"http/protobuf": [], "grpc": []}
        line = ""
        try:
            for _ in range(a.repeats):
                for protocol, url in (("http/protobuf", http_url), ("grpc", grpc_url)):
                    seconds, rss, line = export_once(run_dir, url, protocol)
                    results[protocol].append((seconds, rss))
                    print(f"{protocol}: {seconds:.1f} s, peak RSS {rss:,.0f} MiB — {line}", flush=True)
        finally:
            stop()
    rows = [f"| {p} | {spread([s for s, _ in r])} | {spread([a.rows / s for s, _ in r])} | "
            f"{spread([m for _, m in r])} |" for p, r in results.items()]
    body = (f"`python bench/otel_export.py --rows {a.rows} --repeats {a.repeats} --write`: a synthetic 10-minute run at "
            f"1,000 requests/s ({a.rows:,} requests) exported whole by `tailrace export otlp` to a receiver that "
            "takes each batch and keeps nothing; median (min–max) over the repeats.\n\n"
            "| protocol | seconds | spans/s | peak RSS MiB (the command's) |\n|---|---|---|---|\n" + "\n".join(rows)
            + f"\n\nLast output: `{line}`. Memory grows with the run's requests held for the sample (the columns a "
              "span needs) and one batch of 2,048 spans at a time; live export during the run is not built — the "
              "master exports once the run ends (`[otel.export]`), so the workers never do.")
    print(body)
    if a.write:
        write_section("OpenTelemetry export: a 10-minute run at 1,000 requests/s", body)


if __name__ == "__main__":
    main()
