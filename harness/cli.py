"""`tailrace` command line: one CLI with subcommands. Usage errors exit 2."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _model_int(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected MODEL=N with N >= 1, got {text!r}")
    return name, int(value)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a TCP port 1-65535, got {text!r}")
    return int(text)


def _cmd_models_build(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from endpoints.model_build import build_repository

    built = build_repository(args.out, args.mm1_mean_ms)
    table = Table(title=f"model repository {args.out}")
    for col in ("model", "held-out accuracy", "size", "parameters", "sha256"):
        table.add_column(col)
    for m in built:
        table.add_row(m.name, f"{m.accuracy:.4f}", f"{m.size_bytes:,} B", f"{m.parameters:,}", m.sha256[:16])
    Console().print(table)
    return 0


def _cmd_serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from endpoints.server import is_loopback, serve
    from endpoints.server_core import ServerOptions

    if not is_loopback(args.host) and not args.expose:
        parser.error(f"--host {args.host} is not a loopback address; pass --expose to bind it deliberately")
    options = ServerOptions(repository=args.models, slots=dict(args.slots), queue_depth=dict(args.queue_depth),
                            max_body_bytes=args.max_body_bytes, service_time_mean_ms=args.mm1_mean_ms,
                            fault_injection=args.enable_fault_injection, models=tuple(args.model or ()),
                            max_batch=dict(args.max_batch))
    try:
        return serve(options, args.host, args.http_port, args.grpc_port)
    except (ValueError, OSError) as exc:
        print(f"tailrace serve: {exc}", file=sys.stderr)
        return 2


def _cmd_demo(args: argparse.Namespace) -> int:
    from harness.demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="tailrace", description=(
        "Distributed open-loop load testing for model-serving endpoints (KServe v2 over HTTP and gRPC)."))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    models = sub.add_parser("models", help="build the model repository", description="Model repository tools.")
    models_sub = models.add_subparsers(dest="models_command", metavar="SUBCOMMAND", required=True)
    build = models_sub.add_parser("build", help="build the digits and synthetic models (deterministic)",
                                  description="Build a Triton-layout model repository: digits_logreg_fp32, "
                                              "digits_mlp_fp32, digits_mlp_int8, synthetic_mm1, and _data/.")
    build.add_argument("--out", type=Path, default=Path("build/models"), help="repository directory")
    build.add_argument("--mm1-mean-ms", type=_positive_float, default=2.0,
                       help="mean exponential service time of synthetic_mm1 (default 2 ms)")
    build.set_defaults(func=lambda a, p: _cmd_models_build(a))

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
    serve.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024, help="request size limit")
    serve.add_argument("--mm1-mean-ms", type=_positive_float, default=None,
                       help="override synthetic_mm1's mean service time")
    serve.add_argument("--enable-fault-injection", action="store_true",
                       help="expose POST /v2/debug/stall {seconds, model} (tests and demos only)")
    serve.set_defaults(func=_cmd_serve)

    demo = sub.add_parser("demo", help="build models, start the embedded endpoint and run the demo",
                          description="The main job on embedded defaults (what `make demo` runs).")
    demo.add_argument("--workdir", type=Path, default=Path("build"), help="where models and runs go")
    demo.set_defaults(func=lambda a, p: _cmd_demo(a))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tailrace` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    sub = next((a for a in parser._subparsers._group_actions[0].choices.values()  # noqa: SLF001
                if a.prog.split()[-1] == args.command), parser)
    return int(args.func(args, sub) or 0)


if __name__ == "__main__":
    sys.exit(main())
