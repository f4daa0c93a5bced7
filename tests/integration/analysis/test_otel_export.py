"""A run's requests exported as OpenTelemetry spans to a real tracing backend — Arize Phoenix, an OTLP trace server
(.venv-phoenix) — with `tailrace export otlp`, and queried back through Phoenix's own client: every request's span
with its traceparent's IDs and its attributes, each session's turns under their session's span; and the run's own
`[otel.export]`, which sends the same once the run ends."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.contract.trace_context import session_span_id
from tests import ROOT
from tests.support import PHOENIX_PYTHON, assert_valid, make_profile, phoenix_server, run_with

pytestmark = pytest.mark.shares_machine  # a low rate, a functional check

QUERY = """
import json, sys
from phoenix.client import Client
frame = Client(base_url=sys.argv[1]).spans.get_spans_dataframe(project_identifier="default", limit=100000)
rows = [{"span_id": r["context.span_id"], "trace_id": r["context.trace_id"],
         "parent_id": r["parent_id"] if isinstance(r["parent_id"], str) else None,
         "name": r["name"], "start": r["start_time"].value, "tailrace": r.get("attributes.tailrace")}
        for _, r in frame.iterrows()]
print(json.dumps(rows, default=str))
"""


def phoenix_spans(url: str, wanted: set[str], among: set[str] | None = None, timeout: float = 60.0) -> list[dict]:
    """Phoenix's spans among `among` (span IDs; default `wanted`), asked through its client until every one of
    `wanted` is in (it stores them asynchronously) or `timeout`."""
    among = among or wanted
    deadline, rows = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        out = subprocess.run([str(PHOENIX_PYTHON), "-c", QUERY, url], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        rows = [r for r in json.loads(out.stdout.strip().splitlines()[-1]) if r["span_id"] in among]
        if wanted <= {r["span_id"] for r in rows}:
            return rows
        time.sleep(1.0)
    return rows


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    """One Phoenix for the module's tests: (its HTTP URL, its OTLP gRPC URL)."""
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as urls:
        yield urls


@pytest.fixture(scope="module")
def sessions_run(model_repo, tmp_path_factory):
    """Chat sessions (2 turns) and one-shot requests on the embedded server, from one region."""
    work = tmp_path_factory.mktemp("otel-run")
    chat = {"name": "chat", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm",
            "prompts": {"input_tokens": {"mean": 40}, "output_tokens": {"mean": 6}},
            "sessions": {"turns": 2, "think_s": 0.05, "user_tokens": 8}}
    digits = {"name": "mlp", "url": "embedded", "protocol": "kserve-http", "model": "digits_mlp_fp32"}
    profile = make_profile(model_repo, endpoints=[chat, digits], regions=[{"name": "eu", "share": 1.0}],
                           load={"rate": 10, "duration_s": 3, "warmup_s": 0.5, "seed": 21})
    run, manifest = run_with(profile, work)
    assert_valid(manifest)
    return run.run_dir, analyze_run(run.run_dir).requests


def test_every_request_is_in_phoenix_with_its_ids_and_its_sessions_parent(sessions_run, phoenix):
    run_dir, df = sessions_run
    session_traces = df.loc[df["session_id"] >= 0, "trace_id"].unique()
    assert len(session_traces) >= 3 and (df["session_id"] < 0).sum() >= 5
    url = phoenix[0]
    out = subprocess.run([sys.executable, "-m", "tailrace.cli", "export", "otlp", str(run_dir), "--endpoint", url],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(df) + len(session_traces):,} spans of {len(df):,} requests" in out.stdout
    spans = phoenix_spans(url, set(df["span_id"]) | {session_span_id(t) for t in session_traces})
    assert len(spans) == len(df) + len(session_traces)
    by_id = {s["span_id"]: s for s in spans}
    for r in df.itertuples():
        span = by_id[r.span_id]  # the request's traceparent: its trace and span IDs
        assert span["trace_id"] == r.trace_id and span["tailrace"]["endpoint"] == r.endpoint
        assert span["tailrace"]["status"] == r.status and span["tailrace"]["region"] == "eu"
        assert abs(span["start"] - r.t_intended_ref) < 1000  # the intended send, reference clock (Phoenix keeps µs)
        if r.session_id >= 0:  # a turn: under its session's span, in its session's trace
            assert span["parent_id"] == session_span_id(r.trace_id) and by_id[span["parent_id"]]["name"] == "session"
        else:
            assert span["parent_id"] is None


def test_the_runs_own_export_sends_the_errors_and_the_slowest_once_it_ends(model_repo, tmp_path, phoenix):
    url, grpc_url = phoenix
    digits = {"name": "mlp", "url": "embedded", "protocol": "kserve-http", "model": "digits_mlp_fp32"}
    profile = make_profile(model_repo, endpoints=[digits], regions=[{"name": "eu", "share": 1.0}],
                           load={"rate": 20, "duration_s": 2, "warmup_s": 0.5, "seed": 5},
                           otel={"export": {"endpoint": grpc_url, "protocol": "grpc", "sample": "slowest:7"}})
    run, manifest = run_with(profile, tmp_path / "run")
    from tailrace.analysis.analyze_command import analyze_and_report

    # as `tailrace run` does once it ended: analysed, then exported from the rows the analysis read
    analyze_and_report(run.run_dir, None, quiet=True, export=run.profile.otel.export, command="test")
    df = analyze_run(run.run_dir).requests
    slowest = set(df.sort_values("latency_ns", ascending=False)["span_id"].head(7))
    spans = phoenix_spans(url, slowest, among=set(df["span_id"]))  # of the run's spans, Phoenix has the 7 only
    assert {s["span_id"] for s in spans} == slowest and all(s["name"] == "kserve-http mlp" for s in spans)
