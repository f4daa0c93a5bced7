"""`tailrace export otlp RUN --endpoint URL`: a run's requests (all, or a sample) sent as OpenTelemetry spans to any
OTLP receiver — a Collector, Jaeger, Tempo, Phoenix — over HTTP/protobuf or gRPC, with the OpenTelemetry SDK's own
OTLP exporters, in batches (memory bounded by one batch of spans). An endpoint that refuses or cannot be reached
stops the export at the first batch it loses: one line says how many spans were not exported, exit 1; the run
directory is only read.
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tailrace.analysis.otel.spans import SPAN_COLUMNS, run_resource, sample_rows, spans_of
from tailrace.analysis.read.clock_correction import add_reference_times, fit_all
from tailrace.analysis.read.rundir import RunDirError, load_run
from tailrace.contract import exit_codes
from tailrace.contract.trace_context import Sample, SampleError

PROTOCOLS = ("http/protobuf", "grpc")
READ = tuple(dict.fromkeys((*(c for c in SPAN_COLUMNS if not c.endswith("_ref")), "t_intended", "t_sent", "t_done")))


@dataclass(frozen=True)
class OtlpTarget:
    """Where the spans go and how: the receiver's URL, its protocol, headers, TLS files, the time one batch may
    take (the exporters retry within it)."""

    endpoint: str
    protocol: str = "http/protobuf"
    headers: dict[str, str] = field(default_factory=dict)
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    timeout_s: float = 10.0

    def exporter(self):
        """The SDK's OTLP span exporter for this target."""
        if self.protocol == "grpc":
            import grpc
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            parts = urlsplit(self.endpoint if "://" in self.endpoint else f"http://{self.endpoint}")
            secure = parts.scheme == "https"
            credentials = grpc.ssl_channel_credentials(
                self.ca.read_bytes() if self.ca else None, self.key.read_bytes() if self.key else None,
                self.cert.read_bytes() if self.cert else None) if secure else None
            return OTLPSpanExporter(endpoint=parts.netloc, insecure=not secure, credentials=credentials,
                                    headers=self.headers or None, timeout=self.timeout_s)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        url = self.endpoint.rstrip("/")
        url = url if urlsplit(url).path else f"{url}/v1/traces"
        session = None
        if self.ca is not None:  # requests lets $REQUESTS_CA_BUNDLE override a session's CA (requests #3829)
            import requests

            session = requests.Session()
            session.trust_env = False
        return OTLPSpanExporter(endpoint=url, certificate_file=str(self.ca) if self.ca else None,
                                client_certificate_file=str(self.cert) if self.cert else None,
                                client_key_file=str(self.key) if self.key else None, headers=self.headers or None,
                                timeout=self.timeout_s, session=session)


@dataclass
class ExportOutcome:
    """What an export sent: spans exported, spans that were not (and why), requests chosen, seconds."""

    exported: int = 0
    not_exported: int = 0
    requests: int = 0
    seconds: float = 0.0
    error: str = ""


def export_run(run_dir: Path, target: OtlpTarget, sample: Sample, batch: int = 2048) -> ExportOutcome:
    """Send the run's chosen requests (and their sessions' spans) to `target` (RunDirError: not a run directory)."""
    started = time.monotonic()
    data = load_run(run_dir, READ)
    df = add_reference_times(data.requests, fit_all(data.clock))
    return export_frame(df, data.plan.run_id, data.plan.profile.name, target, sample, batch, started)


def export_frame(df, run_id: str, profile_name: str, target: OtlpTarget, sample: Sample, batch: int = 2048,
                 started: float | None = None) -> ExportOutcome:
    """Send the chosen requests of `df` — a run's requests on the reference clock (the READ columns and their *_ref
    times), as an analysis read and corrected them — to `target`."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    started = time.monotonic() if started is None else started
    rows = sample_rows(sample, df)
    outcome = ExportOutcome(requests=len(rows))
    exporter = target.exporter()
    try:
        for spans in spans_of(df, rows, run_resource(run_id, profile_name), batch):
            if outcome.error:
                outcome.not_exported += len(spans)
                continue
            if exporter.export(spans) == SpanExportResult.SUCCESS:
                outcome.exported += len(spans)
            else:
                outcome.not_exported += len(spans)
                outcome.error = f"{target.endpoint} did not accept a batch of {len(spans)} spans ({target.protocol})"
    finally:
        exporter.shutdown()
    outcome.seconds = time.monotonic() - started
    return outcome


def export_command(run_dir: Path, target: OtlpTarget, sample_text: str) -> int:
    """Print what was exported; exit 0, 1 (spans not exported: the endpoint refused or was unreachable), 2 (a bad
    run directory or flag)."""
    try:
        try:
            sample = Sample.parse(sample_text)
        except SampleError as exc:
            raise SampleError(f"--sample: {exc}") from None
        if target.protocol not in PROTOCOLS:
            raise SampleError(f"--protocol: {target.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        for flag, path in (("--tls-ca", target.ca), ("--tls-cert", target.cert), ("--tls-key", target.key)):
            if path is not None and not path.is_file():
                raise SampleError(f"{flag}: {path} is not a readable file")
        logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)  # its retries' lines: ours says what failed
        outcome = export_run(run_dir, target, sample)
    except (RunDirError, SampleError) as exc:
        print(f"tailrace export: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    print(f"tailrace export: {outcome.exported:,} spans of {outcome.requests:,} requests (and their sessions) sent to "
          f"{target.endpoint} ({target.protocol}) in {outcome.seconds:.1f} s")
    if outcome.not_exported:
        print(f"tailrace export: {outcome.not_exported:,} spans not exported: {outcome.error}", file=sys.stderr)
        return exit_codes.FAIL
    return exit_codes.PASS


def export_after_run(run_dir: Path, declared, command: str, analysis=None) -> None:
    """The profile's `[otel.export]` (`declared`; None: nothing to do) once the run ended: one line of what was sent,
    one of what was not — the run and its report are unharmed either way. `analysis`: the run as its analysis read
    and corrected it (with the READ columns: `tailrace run` and `tailrace master` read the run once); None: read
    here."""
    if declared is None:
        return
    target = OtlpTarget(declared.endpoint, declared.protocol, dict(declared.headers))
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    try:
        sample = Sample.parse(declared.sample)
        if analysis is None:
            outcome = export_run(run_dir, target, sample)
        else:
            plan = analysis.data.plan
            outcome = export_frame(analysis.requests, plan.run_id, plan.profile.name, target, sample)
    except (RunDirError, SampleError, OSError) as exc:
        print(f"{command}: otel.export: nothing exported ({exc})", file=sys.stderr)
        return
    print(f"{command}: otel.export: {outcome.exported:,} spans sent to {target.endpoint} ({target.protocol})")
    if outcome.not_exported:
        print(f"{command}: otel.export: {outcome.not_exported:,} spans not exported: {outcome.error}", file=sys.stderr)
