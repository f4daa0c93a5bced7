"""`tailrace probe` against the real embedded endpoint (every model of the zoo, its data, both protocols), and
`tailrace run` refusing an endpoint before any load."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.support import free_port, start_endpoint

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)

# model → (data file in the repository's _data, probe options, what the output shows)
ZOO = {
    "image_cnn_fp32": ("images.npz", ["--check", "label"], "input  image FP32 [1, 3, 224, 224]: 602,112 bytes"),
    "text_tfidf": ("text.jsonl", ["--check", "label", "--batch-size", "2"], "input  text BYTES [2, 1]"),
    "tokens_int64": ("tokens.json", [], "input  input_ids INT64 [1, 32]: 256 bytes"),
    "digits_mlp_fp16": ("digits_test.npz", ["--check", "label"], "input  input FP16 [1, 64]: 128 bytes"),
}


def tailrace(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailrace.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_probe_prints_metadata_the_request_and_answers_over_http_and_grpc(endpoint, model_repo):
    for url in (endpoint.http_url, f"grpc://{endpoint.grpc_addr}"):
        r = tailrace("probe", url, "--model", "digits_mlp_fp32", "--data", str(model_repo / "_data/digits_test.npz"),
                     "--check", "label", "--requests", "2")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "model digits_mlp_fp32 versions ['1'] platform onnxruntime_onnx: ready" in r.stdout
        assert "input  input FP32 [-1, 64]" in r.stdout and "input  input FP32 [1, 64]: 256 bytes" in r.stdout
        assert r.stdout.count(": ok in ") == 2 and "server queue" in r.stdout
        assert r.stdout.count("check: 1 of 1 right") == 2


@pytest.fixture(scope="module")
def roomy_endpoint(model_repo, tmp_path_factory):
    """The embedded endpoint with its default 8 MB body limit (the shared one refuses over 64 kB: 602 kB images)."""
    ep = start_endpoint(model_repo, tmp_path_factory.mktemp("roomy-endpoint"))
    yield ep
    ep.proc.stop()


@pytest.mark.parametrize("model", sorted(ZOO))
def test_probe_sends_each_models_own_data_and_checks_the_answers(roomy_endpoint, model_repo, model):
    data, options, shown = ZOO[model]
    endpoint = roomy_endpoint
    for url in (endpoint.http_url, f"grpc://{endpoint.grpc_addr}"):
        r = tailrace("probe", url, "--model", model, "--data", str(model_repo / "_data" / data), "--requests", "3",
                     *options)
        assert r.returncode == 0, r.stdout + r.stderr
        assert shown in r.stdout and r.stdout.count(": ok in ") == 3
        batch = 2 if "--batch-size" in options else 1
        assert r.stdout.count(f"check: {batch} of {batch} right") == 3, r.stdout  # labels or validation_data


def test_probe_with_random_data_needs_the_dynamic_dimensions(endpoint):
    r = tailrace("probe", endpoint.http_url, "--model", "tokens_int64", "--requests", "1")
    assert r.returncode == 1 and "input 'input_ids' has a dynamic shape [-1]; give it with shapes" in r.stdout
    r = tailrace("probe", endpoint.http_url, "--model", "tokens_int64", "--shape", "input_ids=16",
                 "--shape", "attention_mask=16", "--batch-size", "4", "--requests", "1")
    assert r.returncode == 0 and "input  input_ids INT64 [4, 16]" in r.stdout, r.stdout + r.stderr
    assert "output logits FP32 [4, 2]" in r.stdout


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


def test_run_refuses_data_that_does_not_fit_the_model_before_any_load(endpoint, model_repo, tmp_path):
    """A two-input INT64 model given the digits file: exit 2 naming the endpoint and the input; nothing sent."""
    profile = tmp_path / "p.toml"
    profile.write_text(f"""
name = "wrong-data"
[[endpoints]]
name = "tokens"
url = "grpc://{endpoint.grpc_addr}"
protocol = "kserve-grpc"
model = "tokens_int64"
data = "{model_repo / '_data' / 'digits_test.npz'}"
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
    r = tailrace("run", str(profile), "--out", str(tmp_path / "runs"), "--quiet")
    assert r.returncode == 2, r.stderr
    assert "endpoint tokens (tokens_int64 on grpc://" in r.stderr
    assert "input 'input_ids': the model needs it and the file has no such array (arrays: input)" in r.stderr
    assert not list((tmp_path / "runs").rglob("requests-*.parquet"))  # nothing was sent


def _master_profile(path, endpoint, model_repo, name: str, regions: str):
    """A profile for `tailrace master`: the started endpoint, `regions` (TOML), 50 requests/s for 60 s."""
    path.write_text(f"""
name = "{name}"
[[endpoints]]
name = "staging"
url = "{endpoint.http_url}"
protocol = "kserve-http"
model = "digits_mlp_fp32"
data = "{model_repo / '_data' / 'digits_test.npz'}"
{regions}
[load]
rate = 50
duration_s = 60
[clock]
servers = []
""")
    return path


def test_a_master_whose_workers_never_come_gives_up_naming_the_regions(endpoint, model_repo, tmp_path):
    profile = _master_profile(tmp_path / "p.toml", endpoint, model_repo, "lonely",
                              '[[regions]]\nname = "eu"\nshare = 0.5\n[[regions]]\nname = "us"\nshare = 0.5\nworkers = 2')
    started = time.monotonic()
    r = tailrace("master", str(profile), "--port", str(free_port()), "--wait-s", "3", "--out", str(tmp_path / "runs"),
                 "--quiet")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "gave up after 3 s waiting for eu (0 of 1), us (0 of 2); no load was sent" in r.stderr
    assert "no run token given; this run's token is" in r.stdout  # made and printed for the workers
    [run] = list((tmp_path / "runs").iterdir())
    manifest = json.loads((run / "manifest.json").read_text())
    assert not manifest["valid"] and manifest["invalid_reasons"][-1].startswith("gave up after 3 s")
    assert time.monotonic() - started < 60


def test_ctrl_c_to_a_master_waiting_for_its_workers_says_so_in_one_line(endpoint, model_repo, tmp_path):
    """It had gone on to analyse the empty run and said "tailrace analyze: …: no request chunks", exit 2 (a usage
    error); now as `tailrace run` says it: interrupted before any request, INVALID, the directory kept."""
    import os
    import signal

    profile = _master_profile(tmp_path / "p.toml", endpoint, model_repo, "stopped", '[[regions]]\nname = "eu"\nshare = 1.0')
    proc = subprocess.Popen([sys.executable, "-m", "tailrace.cli", "master", str(profile), "--port", str(free_port()),
                             "--out", str(tmp_path / "runs")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    for line in proc.stdout:  # once it waits for its worker
        if "waiting for 1 worker(s)" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 4, (out, err)
    assert "tailrace master: interrupted before any request was recorded: INVALID" in err and "analyze" not in err, err
    [run] = list((tmp_path / "runs").iterdir())
    assert json.loads((run / "manifest.json").read_text())["interrupted"]
