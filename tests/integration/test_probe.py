"""`tailrace probe` against the real embedded endpoint, and `tailrace run` refusing an endpoint before any load."""
from __future__ import annotations

import subprocess
import sys
import time

from tests.support import free_port


def tailrace(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailrace.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_probe_prints_metadata_the_request_and_answers_over_http_and_grpc(endpoint, model_repo):
    for url in (endpoint.http_url, f"grpc://{endpoint.grpc_addr}"):
        r = tailrace("probe", url, "--model", "digits_mlp_fp32", "--models", str(model_repo), "--requests", "2")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "model digits_mlp_fp32 versions ['1'] platform onnxruntime_onnx: ready" in r.stdout
        assert "input  input FP32 [-1, 64]" in r.stdout and "tailrace sends input FP32 [1, 64]" in r.stdout
        assert r.stdout.count(": ok in ") == 2 and "server queue" in r.stdout


def test_probe_of_a_missing_model_or_server_exits_2_with_the_reason(endpoint):
    r = tailrace("probe", endpoint.http_url, "--model", "resnet50")
    assert r.returncode == 2 and "model 'resnet50' is not on" in r.stderr and "digits_mlp_fp32" in r.stderr
    r = tailrace("probe", f"grpc://127.0.0.1:{free_port()}", "--model", "m", "--timeout-ms", "2000")
    assert r.returncode == 2 and "cannot reach" in r.stderr


def test_run_refuses_an_endpoint_without_the_model_before_any_load(endpoint, model_repo, tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text(f"""
name = "wrong-model"
[[endpoints]]
name = "staging"
url = "{endpoint.http_url}"
protocol = "kserve-http"
model = "resnet50"
[[regions]]
name = "a"
share = 1.0
[load]
rate = 50
duration_s = 60
[clock]
servers = []
[embedded]
models_dir = "{model_repo}"
""")
    started = time.monotonic()
    r = tailrace("run", str(profile), "--out", str(tmp_path / "runs"), "--quiet")
    assert r.returncode == 2, r.stderr
    assert "no load was sent" in r.stderr and "endpoint staging: model 'resnet50' is not on" in r.stderr
    assert time.monotonic() - started < 30  # refused at once, not after a 60 s run of 404s
