"""What each `tailrace` subcommand does once its arguments are parsed (tailrace/cli.py builds the parser):
one function a command, returning its exit code."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tailrace.contract.exit_codes import INCONCLUSIVE, INTERNAL, OK, USAGE


def cmd_models_build(args: argparse.Namespace) -> int:
    from rich.table import Table

    from tailrace.contract.terminal import console
    from tailrace.endpoints.models.model_build import build_repository

    try:
        built = build_repository(args.out, args.mm1_mean_ms)
    except OSError as exc:  # the repository's directory cannot be made or written: the user's path, not a bug
        return _cannot_write("tailrace models", "the model repository", args.out, exc)
    table = Table(title=f"model repository {args.out}")
    for col in ("model", "held-out accuracy", "size", "parameters", "sha256"):
        table.add_column(col)
    for m in built:
        accuracy = "—" if m.accuracy is None else f"{m.accuracy:.4f}"
        table.add_row(m.name, accuracy, f"{m.size_bytes:,} B", f"{m.parameters:,}", m.sha256[:16])
    console().print(table)
    return OK


def _cannot_write(command: str, what: str, out: Path, exc: OSError) -> int:
    """One line for an output path the user gave that cannot be made or written (exit 2: not tailrace's failure)."""
    print(f"{command}: cannot write {what} to {out} ({exc.strerror}: {exc.filename or out})", file=sys.stderr)
    return USAGE


def _batching(args: argparse.Namespace) -> dict[str, dict[str, int]]:
    """--max-num-seqs / --max-num-batched-tokens / --max-waiting MODEL=N → model → BatchingLimits overrides."""
    out: dict[str, dict[str, int]] = {}
    for field_name in ("max_num_seqs", "max_num_batched_tokens", "max_waiting", "max_model_len", "kv_cache_tokens"):
        for model, n in getattr(args, field_name):
            out.setdefault(model, {})[field_name] = n
    for model, on in args.prefix_caching:
        out.setdefault(model, {})["enable_prefix_caching"] = on
    return out


def cmd_serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tailrace.contract.credentials import Credential
    from tailrace.contract.internal_processes import ServerOptions
    from tailrace.endpoints.server import ServerTls, serve
    from tailrace.harness.services.processes import is_loopback

    if not is_loopback(args.host) and not args.expose:
        parser.error(f"--host {args.host} is not a loopback address; pass --expose to bind it deliberately")
    options = ServerOptions(repository=args.models, slots=dict(args.slots), queue_depth=dict(args.queue_depth),
                            max_body_bytes=args.max_body_bytes, service_time_mean_ms=args.mm1_mean_ms,
                            fault_injection=args.enable_fault_injection, models=tuple(args.model or ()),
                            max_batch=dict(args.max_batch), header_timeout_s=args.header_timeout_s,
                            idle_timeout_s=args.idle_timeout_s, batching=_batching(args))
    if (args.tls_cert is None) != (args.tls_key is None) or (args.tls_client_ca and not args.tls_cert):
        parser.error("--tls-cert and --tls-key go together (and --tls-client-ca needs them)")
    tls = ServerTls(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    if (args.auth_header is None) != (args.auth_file is None):
        parser.error("--auth-header and --auth-file go together")
    # the server looks at its file on every request (a stat; re-read when it changed): a rotation applies at once
    credential = Credential(args.auth_header, file=str(args.auth_file), recheck_s=0) if args.auth_file else None
    try:
        return serve(options, args.host, args.http_port, args.grpc_port, tls, credential)
    except (ValueError, OSError) as exc:
        print(f"tailrace serve: {exc}", file=sys.stderr)
        return USAGE


def overrides_of(args: argparse.Namespace) -> list[str]:
    """The profile overrides of a command: TAILRACE_SET_* first, then --set in order, then --rate / --duration."""
    from tailrace.contract.overrides import from_environment

    out = from_environment() + list(getattr(args, "set", None) or [])
    if getattr(args, "rate", None) is not None:
        out.append(f"load.rate={args.rate!r}")
    if getattr(args, "duration", None) is not None:
        out.append(f"load.duration_s={args.duration!r}")
    return out


def _profile_or_none(path: Path, out: Path | None = None, local: bool = True, check=None,
                     overrides: Sequence[str] = (), command: str = "tailrace run", out_flag: str = "--out"):
    """The validated profile (with `overrides`), or None after printing why not (the caller exits 2: nothing
    starts). `out` (given by `out_flag`, which `command`'s line names) is checked first; a local run is checked
    against this machine (CPUs, output directory, model repositories), a master for CPUs and its output directory."""
    from tailrace.contract.profile import ProfileError, load_profile
    from tailrace.harness.orchestration.preflight import check_local, check_output, check_placement

    try:
        if out is not None:  # the flag before the profile: its line names it, not a field of the file
            check_output(out, out_flag)
    except ValueError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None
    try:
        profile = load_profile(path, overrides)
        if local:
            check_local(profile, out or Path(profile.output_dir))
        else:
            check_placement(profile)
            check_output(out or Path(profile.output_dir))
        if check is not None:  # what the command itself needs of the profile
            check(profile)
        return profile
    except ProfileError as exc:
        print(exc, file=sys.stderr)
    except ValueError as exc:
        print(f"profile {path}: {exc}", file=sys.stderr)
    return None


def cmd_run(args: argparse.Namespace) -> int:
    from tailrace.run_command import run_and_report

    profile = _profile_or_none(args.profile, args.out, overrides=overrides_of(args))
    if profile is None:
        return USAGE
    if profile.overrides and not args.quiet:
        print(f"profile {profile.name}: overridden {', '.join(profile.overrides)}")
    return run_and_report(profile, args.out or Path(profile.output_dir), quiet=args.quiet, ui=args.ui_bind)


def cmd_capacity(args: argparse.Namespace) -> int:
    from tailrace.capacity import capacity_command, check_profile

    profile = _profile_or_none(args.profile, args.out, check=check_profile, overrides=overrides_of(args),
                               command="tailrace capacity")
    if profile is None:
        return USAGE
    return capacity_command(profile, args.out or Path(profile.output_dir), args.quiet, args.budget_s)


def cmd_sweep(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tailrace.contract.layout import SweepLayout
    from tailrace.harness.orchestration.endpoint_check import EndpointCheckError
    from tailrace.harness.orchestration.preflight import check_output
    from tailrace.harness.services.processes import sigterm_as_interrupt
    from tailrace.sweep import SweepError, run_sweep, sweep_exit_code

    if (args.profile is None) == (args.resume is None):
        parser.error("give a PROFILE, or --resume DIR (not both)")
    out = args.out or Path("runs")
    if args.profile is not None and args.out is None:
        import tomllib

        try:
            out = Path(tomllib.loads(args.profile.read_text()).get("output_dir", "runs"))
        except (OSError, tomllib.TOMLDecodeError):
            pass  # run_sweep names the file and what is wrong with it
    try:
        if args.profile is not None:  # (a resumed sweep writes where it was)
            check_output(out, "--out" if args.out is not None else "output_dir")
    except ValueError as exc:
        print(f"tailrace sweep: {exc}", file=sys.stderr)
        return USAGE
    try:
        with sigterm_as_interrupt():  # a `kill PID` ends it as Ctrl-C does: resumable, its processes stopped
            sweep_dir, result = run_sweep(args.profile, out, args.resume, args.quiet, args.budget_s, args.ui_bind,
                                          overrides_of(args))
    except (SweepError, EndpointCheckError) as exc:
        print(f"tailrace sweep: {exc}", file=sys.stderr)
        return USAGE
    except OSError as exc:  # the live page's address (nothing started)
        print(f"tailrace sweep: {exc}", file=sys.stderr)
        return USAGE
    for line in result.recommendation:
        print(line)
    print(f"sweep report: {SweepLayout(sweep_dir).page}")
    return sweep_exit_code(result)


def cmd_proxy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from pydantic import ValidationError

    from tailrace.contract.internal_processes import ListenError, ProxyOptions, ProxyRoute
    from tailrace.harness.services.delay_proxy import main_proxy

    try:
        options = ProxyOptions(routes=tuple(ProxyRoute.parse(r) for r in args.route), delay_ms=args.delay_ms,
                               jitter_ms=args.jitter_ms, seed=args.seed)
    except (ValueError, ValidationError) as exc:
        parser.error(str(exc).splitlines()[0] if not isinstance(exc, ValidationError) else
                     f"{'.'.join(map(str, exc.errors()[0]['loc']))}: {exc.errors()[0]['msg']}")
    try:
        return main_proxy(options)
    except ListenError as exc:  # a route's port in use, or an address not this machine's
        print(f"tailrace proxy: {exc}", file=sys.stderr)
        return USAGE


def cmd_sntp(args: argparse.Namespace) -> int:
    from tailrace.contract.internal_processes import ListenError, SntpOptions
    from tailrace.harness.services.sntp_server import serve_sntp

    options = SntpOptions(host=args.host, port=args.port)
    try:
        serve_sntp(options.host, options.port)
    except ListenError as exc:
        print(f"tailrace sntp: {exc}", file=sys.stderr)
        return USAGE
    return OK


def cmd_master(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tailrace.harness.orchestration.remote import read_token
    from tailrace.harness.services.processes import is_loopback

    if not is_loopback(args.bind) and not args.expose:
        parser.error(f"--bind {args.bind} is not a loopback address; Locust's channel is unauthenticated — "
                     "use an SSH tunnel, or pass --expose on a private network")
    profile = _profile_or_none(args.profile, args.out, local=False, overrides=overrides_of(args),
                               command="tailrace master")
    if profile is None:
        return USAGE
    try:
        token = read_token(args.token_file)
    except ValueError as exc:
        print(f"tailrace master: {exc}", file=sys.stderr)
        return USAGE
    from tailrace.harness.orchestration.remote import new_token
    from tailrace.run_command import close_live_page, open_live_page

    token = token or new_token()  # the live page beyond loopback takes the same token as the workers
    try:
        page = open_live_page(args.ui_bind, token, "tailrace master", args.quiet)
    except OSError as exc:
        print(f"tailrace master: {exc}", file=sys.stderr)
        return USAGE
    run_dir, code = None, INTERNAL
    try:
        run_dir, code = _master_run(args, profile, token, page)
    finally:
        close_live_page(page, code, run_dir)
    return code


def _master_run(args: argparse.Namespace, profile, token: str | None, page) -> tuple[Path | None, int]:
    from tailrace.analysis.warm_report import start_warm_report
    from tailrace.harness.orchestration.remote import run_master
    from tailrace.harness.services.processes import sigterm_as_interrupt
    from tailrace.run_command import report_run

    warm = start_warm_report()  # the report's imports, done before the master starts: never beside a load
    try:
        if warm is not None:
            warm.wait_ready()
        with sigterm_as_interrupt():  # a `kill PID` (a pod deleted) stops the run as Ctrl-C does: what it has kept
            run_dir, code = run_master(profile, args.out or Path(profile.output_dir), args.bind, args.port,
                                       args.models, token, args.sntp_port, args.wait_s, args.quiet, live=page)
        if run_dir is None:
            return None, code
        try:
            import tailrace.analysis.analyze  # noqa: F401 — the analysis' dependencies (report_cli imports them)
        except ImportError as exc:  # a generator-only install: the run directory is complete, the report needs more
            print(f"tailrace master: run directory {run_dir} is complete; analysing it needs tailrace[analysis] "
                  f"({exc.name} is not installed): pip install 'tailrace[analysis]', then tailrace analyze {run_dir}",
                  file=sys.stderr)
            return run_dir, INCONCLUSIVE  # no verdict was computed
        # the run is over: analysed, then exported from the rows the analysis read (the master exports what it has)
        return run_dir, report_run(run_dir, args.quiet, profile.otel.export, "tailrace master", warm)
    finally:
        if warm is not None:
            warm.close()


def cmd_worker(args: argparse.Namespace) -> int:
    from tailrace.harness.orchestration.remote import read_token, run_worker

    try:
        token = read_token(args.token_file)
    except ValueError as exc:
        print(f"tailrace worker: {exc}", file=sys.stderr)
        return USAGE
    return run_worker(args.master, args.region, args.index, args.clock_skew_ms, args.endpoint_url, args.out_dir,
                      args.models, args.metrics_port, args.spool, token, args.metrics_bind, args.master_timeout_s)


def cmd_collect(args: argparse.Namespace) -> int:
    from tailrace.harness.orchestration.collect import CollectError, collect

    try:
        done = collect(args.spool, args.run_dir)
    except (CollectError, OSError) as exc:
        print(f"tailrace collect: {exc}", file=sys.stderr)
        return USAGE
    print(f"tailrace collect: {done.describe()} → {args.run_dir}; analyse again with `tailrace analyze {args.run_dir}`")
    return OK


def cmd_demo(args: argparse.Namespace) -> int:
    from tailrace.demo import DEMO_PROFILE, run_demo

    profile = _profile_or_none(args.profile or DEMO_PROFILE, args.workdir / "runs", command="tailrace demo",
                               out_flag="--workdir")
    if profile is None:
        return USAGE
    return run_demo(profile, args)


def cmd_probe(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tailrace.contract.profile import ProfileError, check_url
    from tailrace.probe import parse_shapes, probe_endpoint, protocol_of, run_probe

    try:
        check_url(args.url, ("http", "https", "grpc", "grpcs"))
    except ValueError as exc:
        parser.error(f"URL: {exc}")
    binaries: dict[str, bool | str] = {"auto": "auto", "true": True, "false": False}
    binary = binaries[args.binary]
    check = {"kind": args.check_kind, "output": args.check} if args.check else None
    tls = {k: v for k, v in (("ca", args.tls_ca), ("cert", args.tls_cert), ("key", args.tls_key),
                             ("server_name", args.tls_server_name)) if v is not None}
    auth = {k: v for k, v in (("auth_header", args.auth_header), ("auth_env", args.auth_env),
                              ("auth_file", args.auth_file)) if v is not None}
    prompts = {"input_tokens": {"mean": args.input_tokens}, "output_tokens": {"mean": args.output_tokens}}
    extra = {"token_count_output": args.token_count_output} if args.token_count_output else {}
    if args.protocol == "openai-embeddings":
        extra["embeddings"] = {"inputs": args.inputs}
    elif args.protocol == "rerank":
        extra["rerank"] = {"documents": args.documents, "api": args.rerank_api}
    try:
        endpoint = probe_endpoint(args.url, args.model, protocol_of(args.url, args.protocol), args.model_version,
                                  args.data, parse_shapes(args.shape), args.batch_size, args.timeout_ms, binary, check,
                                  tls, auth, prompts, extra or None)
    except ProfileError as exc:
        print(f"tailrace probe: {str(exc).replace('tailrace probe: endpoints[0].', '--')}", file=sys.stderr)
        return USAGE
    return run_probe(args.url, endpoint, args.requests)


def _report_dir_unwritable(command: str, out: Path | None, run_dir: Path | None = None) -> bool:
    """Whether the report directory an analysis would write (`out`, the --out flag; else `run_dir`'s report/) cannot
    be written — said in one line before any row is read (a day's run would have been analysed for minutes first)."""
    from tailrace.contract.layout import ReportLayout
    from tailrace.harness.orchestration.preflight import unwritable

    if out is not None:
        where = out
    elif run_dir is not None and run_dir.is_dir():
        where = ReportLayout.of_run(run_dir).dir
    else:  # not a run: the analysis names what is wrong
        return False
    if (why := unwritable(where)) is None:
        return False
    said = f"--out: {out} {why}" if out is not None else (
        f"{where} (the run's report directory) {why} — {command} {run_dir} --out DIR writes it elsewhere")
    print(f"{command}: {said}; nothing was analysed", file=sys.stderr)
    return True


def cmd_compare(args: argparse.Namespace) -> int:
    from tailrace.analysis.decide.compare import compare_command

    if _report_dir_unwritable("tailrace compare", args.out):
        return USAGE
    return compare_command(args.run_a, args.run_b, args.out, {"auto": None, "paired": True, "unpaired": False}[args.pairing],
                           args.fail_if_slower, exits=True)


def cmd_deploy_kubernetes(args: argparse.Namespace) -> int:
    from tailrace.contract.profile import ProfileError, load_profile
    from tailrace.kubernetes import DeployError, Resources, render, secret_commands, warnings, write

    try:
        profile = load_profile(args.profile, overrides_of(args))
        rendered = render(profile, args.profile, args.image, namespace=args.namespace, per_cluster=args.per_cluster,
                          master_cluster=args.master_cluster, master_address=args.master_address,
                          worker_source_ranges=args.worker_source_range, wait_s=args.wait_s,
                          resources=Resources(args.worker_cpus, args.worker_memory, args.master_cpus,
                                              args.master_memory, args.results_storage))
    except ProfileError as exc:
        print(exc, file=sys.stderr)
        return USAGE
    except DeployError as exc:
        print(f"tailrace deploy kubernetes: {exc}", file=sys.stderr)
        return USAGE
    try:
        written = write(rendered, args.out)
    except OSError as exc:  # the user's --out cannot be made or written
        return _cannot_write("tailrace deploy kubernetes", "the manifests", args.out, exc)
    for path in written:
        print(path)
    print("create the Secrets the manifests reference (in every cluster), before applying them:")
    for command in secret_commands(profile, args.namespace):
        print(f"  {command}")
    for warning in warnings(profile):
        print(f"tailrace deploy kubernetes: warning: {warning}", file=sys.stderr)
    return OK


def cmd_analyze(args: argparse.Namespace) -> int:
    import gc

    from tailrace.analysis.analyze_command import analyze_and_report

    if _report_dir_unwritable("tailrace analyze", args.out, args.run_dir):
        return USAGE
    code = analyze_and_report(args.run_dir, args.out, quiet=args.quiet, exits=True, span_files=tuple(args.server_spans))
    gc.freeze()  # the process exits next: its teardown collects nothing (0.15 of 0.18 s after a 1 M-row analysis)
    return code


def cmd_export_otlp(args: argparse.Namespace, parser) -> int:
    try:
        from tailrace.analysis.otel.export import OtlpTarget, export_command
    except ImportError as exc:  # a generator-only install: the SDK and its exporters come with the analysis
        print(f"tailrace export: exporting spans needs tailrace[analysis] ({exc.name} is not installed): "
              "pip install 'tailrace[analysis]'", file=sys.stderr)
        return USAGE

    from tailrace.contract.profile import check_url

    try:
        check_url(args.endpoint, ("http", "https"))
    except ValueError as exc:
        parser.error(f"--endpoint: {exc}")
    headers = {}
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            parser.error(f"--header: {item!r} is not NAME=VALUE")
        headers[name.strip()] = value.strip()
    if (args.auth_header is None) != (args.auth_file is None):
        parser.error("--auth-header and --auth-file go together")
    if args.auth_file is not None:
        try:
            headers[args.auth_header] = args.auth_file.read_text().strip()
        except OSError as exc:
            parser.error(f"--auth-file: {args.auth_file} cannot be read ({exc.strerror})")
    target = OtlpTarget(args.endpoint, args.protocol, headers, args.tls_ca, args.tls_cert, args.tls_key, args.timeout_s)
    return export_command(args.run_dir, target, args.sample)
