"""A real Triton Inference Server (tritonserver 2.51 via PyTriton, CPU) as the target of tailrace runs."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.report.html import render
from tailrace.harness.services.processes import ManagedProcess
from tailrace.harness.services.triton_server import SHM_DIR, TritonOptions, TritonUnavailable, start_triton, triton_python
from tests.support import IN_CI, assert_valid, kill_triton_server, make_profile, run_with, sleep_until_measuring

pytestmark = pytest.mark.shares_machine  # functional checks at low rates: may run beside another such test

ENDPOINTS = [
    {"name": "triton-http", "url": "triton", "protocol": "kserve-http", "model": "digits_mlp_fp32"},
    {"name": "triton-grpc", "url": "triton", "protocol": "kserve-grpc", "model": "digits_mlp_fp32"},
]


@pytest.fixture(scope="module", autouse=True)
def pytriton_installed():
    try:
        triton_python()
    except TritonUnavailable as exc:
        if IN_CI:
            pytest.fail(f"PyTriton must be installed in CI (make test creates .venv-triton): {exc}")
        pytest.skip(str(exc))


def triton_profile(model_repo: Path, regions: list[dict], rate: float, duration: float, seed: int):
    return make_profile(model_repo, endpoints=ENDPOINTS, regions=regions,
                        load={"rate": rate, "duration_s": duration, "warmup_s": 1, "seed": seed},
                        triton={"models_dir": str(model_repo)}, server_stats={"interval_s": 1},
                        monitors=[{"name": "triton", "url": "triton", "interval_s": 0.5}])


def family_of(process: ManagedProcess) -> dict[int, str]:
    """PID → name of a process and all its descendants."""
    try:
        procs = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    return {p.pid: p.name() for p in procs}


def still_running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def triton_run(model_repo, tmp_path_factory):
    """2 regions (behind delay proxies) over HTTP and gRPC against Triton; remembers Triton's processes."""
    profile = triton_profile(model_repo, [{"name": "near", "share": 0.5, "delay_ms": 2},
                                          {"name": "far", "share": 0.5, "delay_ms": 10, "jitter_ms": 1}],
                             rate=100, duration=8, seed=5)
    seen: dict = {}

    def during(run):
        seen["family"] = family_of(run.triton.process)
        seen["pid"] = run.triton.process.pid

    run, manifest = run_with(profile, tmp_path_factory.mktemp("triton-runs"), during)
    return run, manifest, analyze_run(run.run_dir), seen


def test_triton_run_accuracy_and_no_errors(triton_run):
    _, manifest, a, _ = triton_run
    df = a.requests
    assert_valid(manifest)
    assert set(df["endpoint"]) == {"triton-http", "triton-grpc"} and set(df["region"]) == {"near", "far"}
    assert (df["status"] == "ok").all(), df[df.status != "ok"][["status", "code", "error"]].head()
    assert df["correct"].mean() > 0.95  # predictions checked against the labels of the samples sent


def test_triton_statistics_deltas_equal_requests_sent(triton_run):
    run, _, a, _ = triton_run
    [row] = a.summary.to_dict()["endpoint_statistics"]
    assert row["kind"] == "triton" and sorted(row["endpoints"]) == ["triton-grpc", "triton-http"]
    assert row["success"] == row["client_ok"] == len(a.requests)
    assert row["fail"] == 0 and row["execution_count"] <= row["inference_count"] == len(a.requests)
    assert row["mean_queue_ms"] is not None and row["mean_compute_infer_ms"] > 0
    # Triton's Prometheus metrics were saved and agree with the statistics extension
    def success_count(stage: str) -> float:
        text = run.layout.metrics_scrape("triton-http", stage).read_text()
        line = next(ln for ln in text.splitlines()
                    if ln.startswith('nv_inference_request_success{model="digits_mlp_fp32"'))
        return float(line.rsplit(" ", 1)[1])
    assert success_count("after") - success_count("before") == len(a.requests)
    timeline = a.summary.to_dict()["server_timeline"]["triton-http"]
    assert timeline and sum(r["success_per_s"] * r["interval_s"] for r in timeline) <= len(a.requests)


def test_tritons_own_cpu_metrics_through_the_run(triton_run):
    """url 'triton': the started Triton's /metrics scraped as a monitor; on this CPU host, Triton's CPU series
    (nv_cpu_utilization, nv_cpu_memory_used_bytes): the CPU busy while it served, its memory."""
    _, _, a, _ = triton_run
    hardware = a.summary.hardware
    [row] = hardware.rows
    assert row.scrapes >= 8 and 0 < row.cpu_busy_pct <= 100 and row.memory_max_bytes > 2**20, row
    assert not any("scrapes failed" in m for m in hardware.missing), hardware.missing


def test_trace_ids_arrive_at_triton(triton_run):
    run, _, a, _ = triton_run
    received = run.triton.trace_ids()
    sent = set(a.requests["trace_id"])
    assert sent <= received, f"{len(sent - received)} trace IDs never reached Triton"


def test_triton_processes_and_shared_memory_cleaned_up(triton_run):
    _, _, _, seen = triton_run
    assert "tritonserver" in seen["family"].values()  # it did spawn a real tritonserver
    alive = {pid: name for pid, name in seen["family"].items() if still_running(pid)}
    assert not alive, alive
    assert not list(SHM_DIR.glob(f"pytrtion{seen['pid']}-*"))


def test_report_shows_triton_queue_vs_compute(triton_run):
    _, _, a, _ = triton_run
    page = render(a)
    assert "server-statistics" in page and "triton-grpc + triton-http" in page


@pytest.fixture(scope="module")
def outage_run(model_repo, tmp_path_factory):
    """Triton's server process is SIGKILLed mid-run, then started again on the same ports."""
    profile = triton_profile(model_repo, [{"name": "near", "share": 0.5},  # direct: connection refused
                                          {"name": "far", "share": 0.5, "delay_ms": 5}],  # via proxy: closed
                             rate=100, duration=14, seed=6)
    marks: dict = {}
    restarted: list = []

    def during(run):
        sleep_until_measuring(run, 3.0)
        t = run.triton
        marks["killed_pids"] = kill_triton_server(t)
        marks["killed_ns"] = time.time_ns()
        time.sleep(2.0)
        restarted.append(start_triton(Path(run.profile.triton.models_dir), run.layout.logs,
                                      options=TritonOptions(models=("digits_mlp_fp32",)),
                                      ports=(t.http_port, t.grpc_port, t.metrics_port)))
        marks["ready_ns"] = time.time_ns()

    try:
        run, manifest = run_with(profile, tmp_path_factory.mktemp("triton-outage"), during)
    finally:
        for server in restarted:
            server.stop()
    return run, manifest, analyze_run(run.run_dir), marks


def test_outage_errors_are_classified_and_the_generator_keeps_going(outage_run):
    _, _, a, marks = outage_run
    assert marks["killed_pids"], "no tritonserver process was found to kill"
    df = a.requests
    errors = df[df.status != "ok"]
    assert len(errors) > 50
    http, grpc_ = errors[errors.endpoint == "triton-http"], errors[errors.endpoint == "triton-grpc"]
    # while down: refused (direct region) or closed (in flight, or via the region's proxy); while the restarted
    # server loads the model: 404 / NOT_FOUND. Nothing unclassified, and nothing outside the outage.
    http_classes = set(zip(http["status"], http["code"]))
    assert {("connection", "refused"), ("connection", "ConnectionClosed")} <= http_classes, http_classes
    assert http_classes <= {("connection", "refused"), ("connection", "ConnectionClosed"), ("connection", "reset"),
                            ("connection", "closed"), ("timeout", "timeout"), ("http_error", "404")}, http_classes
    assert "UNAVAILABLE" in set(grpc_["code"])
    assert set(grpc_["code"]) <= {"UNAVAILABLE", "DEADLINE_EXCEEDED", "NOT_FOUND"}, set(grpc_["code"])
    assert errors["t_intended"].min() > marks["killed_ns"] - 0.5e9
    assert errors["t_intended"].max() < marks["ready_ns"] + 1e9
    # the generator never stopped: requests were sent through the outage and succeeded after it
    after = df[df["t_intended"] > marks["ready_ns"] + 1e9]
    assert len(after) > 100 and (after["status"] == "ok").mean() > 0.99
    measured = df[df.phase > 0]
    assert abs(len(measured) - 100 * 14) < 0.1 * 100 * 14


def test_report_shows_the_outage_window(outage_run):
    _, _, a, marks = outage_run
    windows = {w["endpoint"]: w for w in a.summary.to_dict()["outages"]}
    assert set(windows) == {"triton-http", "triton-grpc"}, a.summary.to_dict()["outages"]
    for w in windows.values():
        assert w["recovered"]
        assert abs(w["start_ref_ns"] - marks["killed_ns"]) < 0.5e9  # the reference here is this host's clock
        assert marks["ready_ns"] - 1e9 < w["end_ref_ns"] < marks["ready_ns"] + 3e9
    page = render(a)
    assert "id='outages'" in page and "not recovered" not in page


def test_pytriton_rejects_a_bad_model_repository(tmp_path):
    with pytest.raises(TritonUnavailable, match="not a tailrace model repository"):
        start_triton(tmp_path, tmp_path / "logs", timeout=60)
    assert os.listdir(tmp_path / "logs")


FAKE_TRITON = """#!{python}
# stands in for .venv-triton/bin/python running serve_pytriton.py: its first {races} start(s) fail as PyTriton's
# handshake race does (in {failure}: {error}), the next serves /v2/health/ready and writes the ready file
import http.server, json, pathlib, sys
args = sys.argv[2:]
opt = lambda name: args[args.index(name) + 1]
count = pathlib.Path(__file__).with_suffix(".starts")
starts = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(starts))
if starts <= {races}:
    print('  File "/tmp/folder/1/communication.py", line 550, in {failure}')
    print("{error}", flush=True)
    sys.exit(1)
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
server = http.server.HTTPServer((opt("--host"), int(opt("--http-port"))), Ready)
pathlib.Path(opt("--ready-file")).write_text(json.dumps({{"http_port": int(opt("--http-port"))}}))
server.serve_forever()
"""


def fake_triton(tmp_path: Path, races: int, failure: str = "get_config_from_handshake_server",
                error: str = "ConnectionRefusedError: [Errno 111] Connection refused") -> Path:
    script = tmp_path / "fake-python"
    script.write_text(FAKE_TRITON.format(python=sys.executable, races=races, failure=failure, error=error))
    script.chmod(0o755)
    return script


def test_a_start_that_loses_pytritons_handshake_race_is_started_again_and_said(tmp_path):
    said: list[str] = []
    server = start_triton(tmp_path, tmp_path / "logs", python=str(fake_triton(tmp_path, races=2)), timeout=30,
                          log=said.append)
    try:
        assert (tmp_path / "fake-python.starts").read_text() == "3"
        assert len(said) == 2 and "attempt 3 of 3" in said[1] and "handshake" in said[0]
    finally:
        server.stop()
    (tmp_path / "fake-python.starts").unlink()  # Triton's server gone while a model loads (once in CI): the same
    server = start_triton(tmp_path, tmp_path / "logs", python=str(fake_triton(
        tmp_path, races=1, failure="load_model", error="geventhttpclient.response.HTTPConnectionClosed: connection closed.")),
        timeout=30, log=said.append)
    try:
        assert (tmp_path / "fake-python.starts").read_text() == "2"
        assert len(said) == 3 and "closed the connection while PyTriton loaded a model" in said[2]
    finally:
        server.stop()


def test_pytritons_handshake_race_lost_every_time_or_any_other_exit_is_not_retried_forever(tmp_path):
    with pytest.raises(TritonUnavailable, match="start failed 3 times \\(a model instance connected to PyTriton's handshake"):
        start_triton(tmp_path, tmp_path / "logs", python=str(fake_triton(tmp_path, races=9)), timeout=30)
    assert (tmp_path / "fake-python.starts").read_text() == "3"
    (tmp_path / "fake-python.starts").unlink()
    with pytest.raises(TritonUnavailable, match="exited with 1") as exc:
        start_triton(tmp_path, tmp_path / "logs", python=str(fake_triton(tmp_path, races=1, failure="other")),
                     timeout=30)
    assert (tmp_path / "fake-python.starts").read_text() == "1" and "handshake race" not in str(exc.value)


def test_a_real_triton_streams_the_generative_model_over_generate_stream(model_repo, tmp_path):
    """tiny_lm and synthetic_lm bound as decoupled PyTriton models (one response per token): triton-generate
    (generate_stream) and kserve-grpc-stream (ModelStreamInfer) from two regions — every stream complete (the gRPC
    ones with Triton's empty final response), tokens from num_output_tokens, TTFT and TPOT in the report."""
    prompts = {"input_tokens": {"mean": 12}, "output_tokens": {"mean": 10}, "count": 8}
    profile = make_profile(model_repo, endpoints=[
        {"name": "tiny", "url": "triton", "protocol": "triton-generate", "model": "tiny_lm", "prompts": prompts,
         "token_count_output": "num_output_tokens"},
        {"name": "synthetic", "url": "triton", "protocol": "triton-generate", "model": "synthetic_lm",
         "prompts": prompts, "token_count_output": "num_output_tokens"},
        {"name": "grpc-stream", "url": "triton", "protocol": "kserve-grpc-stream", "model": "synthetic_lm",
         "prompts": prompts, "token_count_output": "num_output_tokens"}],
        regions=[{"name": "near", "share": 0.5, "delay_ms": 2}, {"name": "far", "share": 0.5, "delay_ms": 10}],
        load={"rate": 10, "duration_s": 6, "warmup_s": 1, "seed": 4}, triton={"models_dir": str(model_repo),
                                                                           "instances": 2})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    a = analyze_run(run.run_dir)
    measured = a.requests[a.requests["phase"] > 0]
    assert len(measured) > 45 and (measured["status"] == "ok").all(), measured["error"].unique()
    assert set(measured["stream_outcome"].astype(str)) == {"complete"} and (measured["output_tokens"] == 10).all()
    assert set(measured["token_source"].astype(str)) == {"output"}
    rows = {(r["endpoint"], r["region"]): r for r in a.summary.to_dict()["tokens"]}
    assert rows[("synthetic", "*")]["tpot_ms"]["p50"]["value"] >= 7.5  # the synthetic step (8 ms), through Triton
    assert rows[("grpc-stream", "*")]["tpot_ms"]["p50"]["value"] >= 7.5 and rows[("grpc-stream", "*")]["ok"] > 10
    assert rows[("tiny", "far")]["ttft_ms"]["p50"]["value"] > 20  # both ways through the far region
