"""`tailrace` command line: one CLI with subcommands. Usage errors exit 2."""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from tailrace.contract.apis import APIS
from tailrace.contract.exit_codes import INTERRUPTED, internal_error
from tailrace.query_command import add_query_command
from tailrace.runs_command import add_runs_command

# gRPC's C core logs each failed TLS handshake on stderr (INFO, three lines per retry); tailrace says what failed
# in one line of its own (harness/client/tls.py). Set before any process of a run imports grpc; a user's value wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
# OpenBLAS starts a thread per core that spins after each call: it competes with a generator's send loop, and in
# the analysis (no large linear algebra) it took 3.5% of a 10 M-row run's CPU (perf). Set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from tailrace.commands import (
    cmd_analyze,
    cmd_capacity,
    cmd_collect,
    cmd_compare,
    cmd_demo,
    cmd_deploy_kubernetes,
    cmd_export_otlp,
    cmd_master,
    cmd_models_build,
    cmd_probe,
    cmd_proxy,
    cmd_run,
    cmd_serve,
    cmd_sntp,
    cmd_sweep,
    cmd_worker,
)


def _model_int(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected MODEL=N with N >= 1, got {text!r}")
    return name, int(value)


def _model_switch(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or value not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected MODEL=on or MODEL=off, got {text!r}")
    return name, int(value == "on")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


# a Kubernetes quantity of bytes: a number and a binary or decimal suffix, or an exponent (apimachinery's resource
# quantities, without the milli- and micro- suffixes no size takes)
_BYTES_QUANTITY = re.compile(r"(?P<number>\d+(?:\.\d*)?|\.\d+)(?:[KMGTPE]i|[kMGTPE]|[eE]\+?\d+)?")


def _bytes_quantity(text: str) -> str:
    """An argparse type: a size as Kubernetes writes it (512Mi, 2Gi, 1G, 1e9), refused in one line otherwise — a
    manifest with another is refused by the cluster only when it is applied."""
    size = _BYTES_QUANTITY.fullmatch(text)
    if size is None or float(size["number"]) == 0:
        raise argparse.ArgumentTypeError(f"expected a size such as 512Mi, 2Gi or 1G, got {text!r}")
    return text


def _at_least(minimum: int):
    """An argparse type: a whole number ≥ `minimum` (a count, a size), refused in one line otherwise."""
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number ≥ {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number ≥ {minimum}, got {text!r}")
        return value

    return whole


def _metrics_port(text: str) -> int:
    """A TCP port, or 0: one the kernel chooses (said in the worker's HELLO)."""
    if not text.isdigit() or not 0 <= int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a TCP port 1-65535, or 0 for a free one, got {text!r}")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a TCP port 1-65535, got {text!r}")
    return int(text)


def _add_overrides(parser: argparse.ArgumentParser, shorthands: bool = True) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a profile field, validated like the file (repeatable; e.g. load.rate=500, "
                             "regions.0.share=0.5); TAILRACE_SET_LOAD__RATE=500 in the environment does the same")
    if shorthands:
        parser.add_argument("--rate", type=_positive_float, default=None, help="shorthand for --set load.rate=…")
        parser.add_argument("--duration", type=_positive_float, default=None,
                            help="shorthand for --set load.duration_s=… (seconds)")


def _ui_bind(text: str) -> tuple[str, int] | None:
    from tailrace.harness.orchestration.live_page import parse_bind

    try:
        return parse_bind(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[1]) from None


def _add_ui_bind(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ui-bind", type=_ui_bind, default=("127.0.0.1", 0), metavar="HOST:PORT",
                        help="serve the run's live page here (default 127.0.0.1 on a free port, printed at the start; "
                             "a non-loopback address requires the run's token in the page's address; 'off': none)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="tailrace", description=(
        "Distributed open-loop load testing for model-serving endpoints: KServe v2 over HTTP and gRPC, and LLM "
        "streams (OpenAI-compatible, Triton generate, gRPC) with sessions, from several regions."))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_models_command(sub)
    _add_serve_command(sub)
    _add_run_command(sub)
    _add_capacity_command(sub)
    _add_sweep_command(sub)
    _add_master_command(sub)
    _add_worker_command(sub)
    _add_collect_command(sub)
    _add_proxy_command(sub)
    _add_sntp_command(sub)
    _add_analyze_command(sub)
    _add_compare_command(sub)
    add_runs_command(sub)
    add_query_command(sub)
    _add_export_command(sub)
    _add_deploy_command(sub)
    _add_probe_command(sub)
    _add_demo_command(sub)
    return parser


def _add_models_command(sub) -> None:
    """`tailrace models`."""
    models = sub.add_parser("models", help="build the model repository", description="Model repository tools.")
    models_sub = models.add_subparsers(dest="models_command", metavar="SUBCOMMAND", required=True)
    build = models_sub.add_parser("build", help="build the digits and synthetic models (deterministic)",
                                  description="Build a Triton-layout model repository: digits_logreg_fp32, "
                                              "digits_mlp_fp32, digits_mlp_int8, synthetic_mm1, and _data/.")
    build.add_argument("--out", type=Path, default=Path("build/models"), help="repository directory")
    build.add_argument("--mm1-mean-ms", type=_positive_float, default=2.0,
                       help="mean exponential service time of synthetic_mm1 (default 2 ms)")
    build.set_defaults(func=lambda a, p: cmd_models_build(a))


def _add_serve_command(sub) -> None:
    """`tailrace serve`."""
    serve = sub.add_parser("serve", help="run the embedded KServe v2 endpoint (HTTP + gRPC)",
                           description="Serve a model repository over KServe v2 HTTP and gRPC with onnxruntime.")
    serve.add_argument("--models", type=Path, required=True, help="model repository directory")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--expose", action="store_true", help="allow binding a non-loopback --host")
    serve.add_argument("--http-port", type=_port, default=8000)
    serve.add_argument("--grpc-port", type=_port, default=8001)
    serve.add_argument("--model", action="append", metavar="NAME", help="serve only this model (repeatable)")
    serve.add_argument("--slots", type=_model_int, action="append", default=[], metavar="MODEL=N",
                       help="execution slots for a model (default: config.pbtxt instance_group count)")
    serve.add_argument("--queue-depth", type=_model_int, action="append", default=[], metavar="MODEL=N",
                       help="bounded queue length for a model; beyond it requests get 503 / UNAVAILABLE")
    serve.add_argument("--max-batch", type=_model_int, action="append", default=[], metavar="MODEL=N",
                       help="dynamic batching over HTTP: run up to N waiting rows as one batch (default 1: off)")
    for flag, text in (("--max-num-seqs", "generative model: most sequences in the running batch"),
                       ("--max-num-batched-tokens", "generative model: token budget of one step"),
                       ("--max-waiting", "generative model: waiting requests before new ones are refused (429)"),
                       ("--max-model-len", "generative model: the longest prompt + max_tokens it takes (default 4096)"),
                       ("--kv-cache-tokens", "generative model: the prefix cache's budget in tokens (default 262144)")):
        serve.add_argument(flag, type=_model_int, action="append", default=[], metavar="MODEL=N", help=text)
    serve.add_argument("--prefix-caching", type=_model_switch, action="append", default=[], metavar="MODEL=on|off",
                       help="generative model: automatic prefix caching (default on, as vLLM's)")
    serve.add_argument("--max-body-bytes", type=_at_least(1), default=8 * 1024 * 1024, help="request size limit")
    serve.add_argument("--mm1-mean-ms", type=_positive_float, default=None,
                       help="override synthetic_mm1's mean service time")
    serve.add_argument("--header-timeout-s", type=_positive_float, default=10.0,
                       help="close a connection that sends no complete request header within this time (slowloris)")
    serve.add_argument("--idle-timeout-s", type=_positive_float, default=30.0,
                       help="close an idle keep-alive connection after this time")
    serve.add_argument("--tls-cert", type=Path, default=None, metavar="PEM",
                       help="serve HTTPS and gRPC over TLS with this certificate (chain) ...")
    serve.add_argument("--tls-key", type=Path, default=None, metavar="PEM", help="... and its private key")
    serve.add_argument("--tls-client-ca", type=Path, default=None, metavar="PEM",
                       help="mutual TLS: require client certificates signed by this CA")
    serve.add_argument("--auth-header", default=None, help="require this header (gRPC: metadata key) on every "
                                                           "request, like a staging gateway ...")
    serve.add_argument("--auth-file", type=Path, default=None, metavar="FILE",
                       help="... with this file's content (re-read when it changes); else 401 / UNAUTHENTICATED")
    serve.add_argument("--enable-fault-injection", action="store_true",
                       help="expose POST /v2/debug/stall {seconds, model} (tests and demos only)")
    serve.set_defaults(func=cmd_serve)


def _add_run_command(sub) -> None:
    """`tailrace run`."""
    run = sub.add_parser("run", help="run a profile locally: endpoints, region proxies, Locust master+workers",
                         description="Run a scenario profile end to end on this machine and analyse it. Exit code: "
                                     "0 all SLOs pass, 1 any SLO fails, 2 bad profile/usage, 3 inconclusive, "
                                     "4 run INVALID (generator saturated or a worker lost).")
    run.add_argument("profile", type=Path, help="profiles/*.toml")
    run.add_argument("--out", type=Path, default=None, help="runs directory (default: the profile's output_dir)")
    run.add_argument("--quiet", action="store_true", help="no live progress table")
    _add_ui_bind(run)
    _add_overrides(run)
    run.set_defaults(func=lambda a, p: cmd_run(a))


def _add_capacity_command(sub) -> None:
    """`tailrace capacity`."""
    capacity = sub.add_parser(
        "capacity", help="find the highest Poisson rate at which every latency SLO passes",
        description="Capacity search: exponential growth then bisection over short trials (each a full run, "
                    "long enough for the SLO percentile to be decidable), until the bracket is within the profile's "
                    "capacity.tolerance or capacity.budget_s is spent. Exit code: 0 found, 1 no rate passed, "
                    "2 bad profile/usage, 3 budget spent before the bracket closed, 4 generator-limited "
                    "(the answer is 'at least').")
    capacity.add_argument("profile", type=Path, help="profiles/*.toml with at least one latency SLO")
    capacity.add_argument("--out", type=Path, default=None, help="runs directory (default: the profile's output_dir)")
    capacity.add_argument("--budget-s", type=_positive_float, default=None, help="override capacity.budget_s")
    capacity.add_argument("--quiet", action="store_true", help="no per-trial lines")
    _add_overrides(capacity, shorthands=False)  # each trial sets its own rate and length
    capacity.set_defaults(func=lambda a, p: cmd_capacity(a))


def _add_sweep_command(sub) -> None:
    """`tailrace sweep`."""
    sweep = sub.add_parser(
        "sweep", help="run a profile at every point of its [sweep]: loads × configurations, SLO tiers, the frontier",
        description="A sweep: the profile run at each point of its [sweep] section (the axes' grid or its declared "
                    "points, with repeats), each a full run; load points added at each SLO tier's edge; the "
                    "throughput–interactivity frontier, the highest load per tier and configuration, the knees. "
                    "Exit code: 0 complete, 1 a point failed (a server never ready), 2 bad profile/usage, 3 budget "
                    "spent before the end (resume it).")
    sweep.add_argument("profile", type=Path, nargs="?", help="profiles/*.toml with a [sweep] section")
    sweep.add_argument("--resume", type=Path, default=None, metavar="DIR",
                       help="go on with the sweep in DIR (its finished points kept, the one cut short run again)")
    sweep.add_argument("--out", type=Path, default=None, help="runs directory (default: the profile's output_dir)")
    sweep.add_argument("--budget-s", type=_positive_float, default=None, help="override sweep.budget_s")
    sweep.add_argument("--quiet", action="store_true", help="no per-point lines")
    _add_overrides(sweep, shorthands=False)  # on every point, before its axes' levels; --resume applies them again
    _add_ui_bind(sweep)
    sweep.set_defaults(func=lambda a, p: cmd_sweep(a, p))


def _add_master_command(sub) -> None:
    """`tailrace master`."""
    master = sub.add_parser("master", help="run a Locust master for workers on other machines",
                            description="Coordinate workers in other regions (they connect with `tailrace worker`).")
    master.add_argument("profile", type=Path)
    master.add_argument("--bind", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    master.add_argument("--expose", action="store_true", help="allow a non-loopback --bind")
    master.add_argument("--port", type=_port, default=5557)
    master.add_argument("--out", type=Path, default=None)
    master.add_argument("--models", type=Path, default=None, help="models dir with the held-out data")
    master.add_argument("--token-file", type=Path, default=None,
                        help="the run token (default $TAILRACE_RUN_TOKEN; without either, one is made and printed)")
    master.add_argument("--sntp-port", type=_port, default=12300,
                        help="where the master answers SNTP when clock.servers names \"master\" (default 12300)")
    master.add_argument("--wait-s", type=_positive_float, default=600.0,
                        help="how long to wait for the profile's workers (default 600)")
    master.add_argument("--quiet", action="store_true", help="no live table, no terminal summary")
    _add_ui_bind(master)
    _add_overrides(master)
    master.set_defaults(func=cmd_master)


def _add_worker_command(sub) -> None:
    """`tailrace worker`."""
    worker = sub.add_parser("worker", help="run a Locust worker for one region",
                            description="Join a master as one region's worker. Settings travel by environment "
                                        "variables, since Locust overwrites a worker's arguments with the master's.")
    worker.add_argument("--master", required=True, metavar="HOST:PORT")
    worker.add_argument("--region", required=True)
    worker.add_argument("--index", type=_at_least(0), default=0, help="worker index within the region")
    worker.add_argument("--clock-skew-ms", type=float, default=0.0, help="emulate a skewed clock (tests)")
    worker.add_argument("--endpoint-url", action="append", default=[], metavar="NAME=URL",
                        help="reach an endpoint at another address from this region")
    worker.add_argument("--spool", default=None, help="this worker's own directory for its results until the master "
                                                      "has them (default ./tailrace-spool)")
    worker.add_argument("--token-file", type=Path, default=None, help="the run token (default $TAILRACE_RUN_TOKEN)")
    worker.add_argument("--out-dir", default=None, help="older setups: write chunks into this shared directory "
                                                        "instead of sending them to the master")
    worker.add_argument("--models", default=None, help="models dir holding the held-out data")
    worker.add_argument("--metrics-port", type=_metrics_port, default=None, help="serve Prometheus metrics on this port")
    worker.add_argument("--metrics-bind", default="127.0.0.1", help="address the metrics port binds (default "
                                                                     "127.0.0.1; 0.0.0.0 for a Prometheus elsewhere)")
    worker.add_argument("--master-timeout-s", type=_positive_float, default=None,
                        help="keep sending through a silent master this long, then stop and keep the spool "
                             "(default: the profile's generator.master_timeout_s, 30 s; shorter: orphaned load ends "
                             "sooner)")
    worker.set_defaults(func=lambda a, p: cmd_worker(a))


def _add_collect_command(sub) -> None:
    """`tailrace collect`."""
    collect_cmd = sub.add_parser("collect", help="add a worker's spooled results to a run directory",
                                 description="Copy the closed chunks a worker kept in its spool (never acknowledged "
                                             "by the master) into the run directory; idempotent.")
    collect_cmd.add_argument("spool", type=Path, help="the worker's spool directory (tailrace worker --spool)")
    collect_cmd.add_argument("run_dir", type=Path)
    collect_cmd.set_defaults(func=lambda a, p: cmd_collect(a))


def _add_proxy_command(sub) -> None:
    """`tailrace proxy`."""
    proxy = sub.add_parser("proxy", help="userspace TCP delay proxy (region emulation)",
                           description="Forward TCP adding one-way delay and jitter in each direction.")
    proxy.add_argument("--route", action="append", required=True, metavar="LHOST:LPORT=THOST:TPORT")
    proxy.add_argument("--delay-ms", type=float, default=0.0)
    proxy.add_argument("--jitter-ms", type=float, default=0.0)
    proxy.add_argument("--seed", type=int, default=0)
    proxy.set_defaults(func=lambda a, p: cmd_proxy(a, p))


def _add_sntp_command(sub) -> None:
    """`tailrace sntp`."""
    sntp = sub.add_parser("sntp", help="minimal SNTP time reference on loopback",
                          description="Answer SNTP queries with this machine's clock (when no NTP server is at hand).")
    sntp.add_argument("--host", default="127.0.0.1")
    sntp.add_argument("--port", type=_port, default=12300)
    sntp.set_defaults(func=lambda a, p: cmd_sntp(a))


def _add_analyze_command(sub) -> None:
    """`tailrace analyze`."""
    analyze = sub.add_parser("analyze", help="analyse a run directory: report, summary.json, tables, verdict",
                             description="Merge a run's regional logs into the report. Exit code: 0 all SLOs pass, "
                                         "1 any SLO fails, 2 unreadable run dir, 3 inconclusive, 4 run INVALID.")
    analyze.add_argument("run_dir", type=Path)
    analyze.add_argument("--out", type=Path, default=None, help="report directory (default RUN_DIR/report)")
    analyze.add_argument("--quiet", action="store_true", help="no terminal summary")
    analyze.add_argument("--server-spans", action="append", type=Path, default=[], metavar="FILE",
                         help="the servers' OpenTelemetry spans as OTLP JSON lines (an OpenTelemetry Collector's file "
                              "exporter), joined to the requests by trace ID (repeatable)")
    analyze.set_defaults(func=lambda a, p: cmd_analyze(a))


def _add_compare_command(sub) -> None:
    """`tailrace compare`."""
    compare = sub.add_parser("compare", help="compare two runs per endpoint × region",
                             description="Differences of p50/p95/p99 (B − A) with bootstrap CIs, Mann–Whitney U "
                                         "p-value, Cohen's d and a verdict per endpoint × region.")
    compare.add_argument("run_a", type=Path)
    compare.add_argument("run_b", type=Path)
    compare.add_argument("--out", type=Path, default=None, help="also write compare.json / compare.csv here")
    compare.add_argument("--pairing", choices=("auto", "paired", "unpaired"), default="auto",
                         help="pair requests by schedule position (runs with one seed and load: common random "
                              "numbers); auto pairs when the runs share a schedule (default: %(default)s)")
    compare.add_argument("--fail-if-slower", action="append", default=[], metavar="PERCENTILE:MARGIN",
                         help="exit 1 when B is significantly slower than A at this percentile by more than the "
                              "margin (the whole interval above it), e.g. p99:5%% — a CI regression gate (repeatable)")
    compare.set_defaults(func=lambda a, p: cmd_compare(a))


def _add_export_command(sub) -> None:
    """`tailrace export otlp`."""
    export = sub.add_parser("export", help="send a run's requests elsewhere (OpenTelemetry spans)",
                            description="Send a run's requests to another system.")
    export_sub = export.add_subparsers(dest="export_command", metavar="FORMAT", required=True)
    otlp = export_sub.add_parser(
        "otlp", help="each request as an OpenTelemetry span, to an OTLP receiver (a Collector, Jaeger, Tempo, Phoenix)",
        description="Each request as a span whose IDs are its traceparent's (the server's span is its child), from "
                    "the intended send to the last byte on the reference clock. Exit 0 all sent, 1 spans not "
                    "exported (the receiver refused or was unreachable), 2 bad run directory or flags.")
    otlp.add_argument("run_dir", type=Path)
    otlp.add_argument("--endpoint", required=True, help="the receiver, e.g. http://collector:4318 (HTTP: /v1/traces "
                                                        "added when no path) or http://collector:4317 (gRPC)")
    otlp.add_argument("--protocol", default="http/protobuf", help="http/protobuf (default) or grpc")
    otlp.add_argument("--sample", default="all", help="all (default), or any of slowest:N, errors, share:F joined by "
                                                      "commas, e.g. slowest:100,errors")
    otlp.add_argument("--header", action="append", default=[], metavar="NAME=VALUE", help="a header (repeatable)")
    otlp.add_argument("--auth-header", default=None, help="a header whose value is read from --auth-file")
    otlp.add_argument("--auth-file", type=Path, default=None, help="its value (a token), never printed")
    otlp.add_argument("--tls-ca", type=Path, default=None, help="CA bundle for https:// receivers")
    otlp.add_argument("--tls-cert", type=Path, default=None, help="client certificate (mutual TLS)")
    otlp.add_argument("--tls-key", type=Path, default=None, help="client key (mutual TLS)")
    otlp.add_argument("--timeout-s", type=float, default=10.0, help="per batch, retries included (default 10)")
    otlp.set_defaults(func=lambda a, p: cmd_export_otlp(a, p))


def _add_deploy_command(sub) -> None:
    """`tailrace deploy`."""
    deploy = sub.add_parser("deploy", help="render deployments of a profile's master and regional workers",
                            description="Render what runs a profile on a platform.")
    deploy_sub = deploy.add_subparsers(dest="deploy_command", metavar="PLATFORM", required=True)
    k8s = deploy_sub.add_parser(
        "kubernetes", help="Kubernetes manifests from the profile: master Job + Service, a worker Job per region",
        description="Render Kubernetes manifests from a profile (namespace, profile ConfigMap, master Job and "
                    "Service, NetworkPolicy, a worker Job per region, a reader Pod for the results). Secrets are "
                    "referenced, never written: create tailrace-run-token (key token) and, when endpoints have "
                    "auth_env, tailrace-endpoint-credentials (one key per variable).")
    k8s.add_argument("profile", type=Path)
    k8s.add_argument("--image", required=True, help="the tailrace image (deploy/container/Dockerfile)")
    k8s.add_argument("--out", type=Path, required=True, help="directory for the manifests")
    k8s.add_argument("--namespace", default="tailrace")
    k8s.add_argument("--per-cluster", action="store_true", help="one directory per cluster (regions' `cluster`)")
    k8s.add_argument("--master-cluster", default=None, help="the cluster the master runs in (default: the first "
                                                              "region's)")
    k8s.add_argument("--master-address", default=None, metavar="HOST[:PORT]",
                     help="--per-cluster: the master's LoadBalancer address the other clusters' workers dial")
    k8s.add_argument("--worker-source-range", action="append", default=[], metavar="CIDR",
                     help="--per-cluster: the workers' egress addresses the master's LoadBalancer admits (repeatable)")
    k8s.add_argument("--worker-cpus", type=_at_least(1), default=1, help="whole CPUs per worker pod (requests = limits)")
    k8s.add_argument("--worker-memory", type=_bytes_quantity, default="1Gi")
    k8s.add_argument("--master-cpus", type=_at_least(1), default=1)
    k8s.add_argument("--master-memory", type=_bytes_quantity, default="2Gi")
    k8s.add_argument("--results-storage", type=_bytes_quantity, default="5Gi", help="size of the master's results volume")
    k8s.add_argument("--wait-s", type=_positive_float, default=600.0, help="how long the master waits for workers")
    _add_overrides(k8s)
    k8s.set_defaults(func=lambda a, p: cmd_deploy_kubernetes(a))


def _add_probe_command(sub) -> None:
    """`tailrace probe`."""
    probe = sub.add_parser("probe", help="check one endpoint and model before a run: metadata, the request "
                                         "tailrace sends, a few requests",
                           description="Prints the server's and the model's metadata, the request tailrace would "
                                       "send and whether the model takes it, then sends a few requests. Exit 0 when "
                                       "all worked, 1 on a mismatch or a failed request, 2 when unreachable.")
    probe.add_argument("url", help="http(s)://host:port or grpc(s)://host:port")
    probe.add_argument("--model", required=True)
    probe.add_argument("--protocol", choices=[a.name for a in APIS if a.schemes],
                       default=None,
                       help="default: from the URL scheme")
    probe.add_argument("--model-version", default="", help="model version (default: the server's choice)")
    probe.add_argument("--data", default="random", help="'random' (default), 'zero', or a data file as in a profile's "
                                                        "`data`: perf_analyzer JSON, .npz, .jsonl, a directory")
    probe.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2",
                       help="an input's shape without the batch dimension (repeat per input), like a profile's shapes")
    probe.add_argument("--requests", type=_at_least(0), default=3, help="requests to send (default 3)")
    probe.add_argument("--input-tokens", type=_at_least(1), default=32, help="openai-*, rerank: words a prompt, text or "
                                                                    "query (default 32)")
    probe.add_argument("--inputs", type=_at_least(1), default=1, help="openai-embeddings: texts a request (default 1)")
    probe.add_argument("--documents", type=_at_least(1), default=8, help="rerank: documents a request (default 8)")
    probe.add_argument("--rerank-api", choices=["cohere", "tei", "score"], default="cohere",
                       help="rerank: the API's shape (default cohere: /v1/rerank)")
    probe.add_argument("--output-tokens", type=_at_least(1), default=32, help="openai-*: max_tokens (default 32)")
    probe.add_argument("--token-count-output", default=None, metavar="OUTPUT",
                       help="triton-generate / kserve-grpc-stream: the output saying how many tokens a response "
                            "carries")
    probe.add_argument("--batch-size", type=_at_least(1), default=1)
    probe.add_argument("--binary", choices=["auto", "true", "false"], default="auto",
                       help="HTTP binary tensor extension (default auto: tensors over 1 kB)")
    probe.add_argument("--check", default=None, metavar="OUTPUT", help="compare this output with the data's labels")
    probe.add_argument("--check-kind", choices=["label", "argmax"], default="label")
    probe.add_argument("--timeout-ms", type=_positive_float, default=5000)
    probe.add_argument("--tls-ca", default=None, metavar="PEM", help="https/grpcs: the CA bundle (like tls.ca)")
    probe.add_argument("--tls-cert", default=None, metavar="PEM", help="client certificate for mutual TLS")
    probe.add_argument("--tls-key", default=None, metavar="PEM", help="its private key")
    probe.add_argument("--tls-server-name", default=None, help="the name checked in the server's certificate")
    probe.add_argument("--auth-header", default=None, help="header to send a credential in, e.g. Authorization")
    probe.add_argument("--auth-env", default=None, metavar="VAR", help="environment variable holding its value")
    probe.add_argument("--auth-file", default=None, metavar="FILE", help="file holding its value")
    probe.set_defaults(func=lambda a, p: cmd_probe(a, probe))


def _add_demo_command(sub) -> None:
    """`tailrace demo`."""
    demo = sub.add_parser("demo", help="build models, start the embedded endpoint and run the demo",
                          description="The main job on embedded defaults (what `make demo` runs).")
    demo.add_argument("--workdir", type=Path, default=Path("build"), help="runs go to WORKDIR/runs")
    demo.add_argument("--profile", type=Path, default=None, help="profile to run (default profiles/demo.toml)")
    _add_ui_bind(demo)
    demo.set_defaults(func=lambda a, p: cmd_demo(a))


def _subcommand_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of `command` (its usage is the one an error names), else `parser`."""
    for action in parser._actions:  # noqa: SLF001 — argparse keeps its subcommands' parsers in their action
        if isinstance(action.choices, dict) and isinstance(action.choices.get(command), argparse.ArgumentParser):
            return action.choices[command]
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tailrace` console script."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extras = parser.parse_known_args(argv)
    if extras and getattr(args, "intermixed", False):  # its positionals also after its options (argparse's own
        # parse does not give a positional list a second stretch: `runs trend P --metric p99 DIR`)
        at = argv.index(args.command)
        args = _subcommand_parser(parser, args.command).parse_intermixed_args(
            argv[at + 1:], argparse.Namespace(command=args.command))
    elif extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    sub = _subcommand_parser(parser, args.command)
    try:
        return int(args.func(args, sub) or 0)
    except KeyboardInterrupt:  # Ctrl-C where the command has nothing to keep (run, sweep, capacity keep theirs)
        print(f"tailrace {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as exc:  # noqa: BLE001 — tailrace itself failed: say so with its own exit code, keep the trace
        return internal_error(args.command, exc)


if __name__ == "__main__":
    sys.exit(main())
