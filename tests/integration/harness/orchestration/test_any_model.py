"""Any model, any data, end to end: the model zoo (a 602 kB FP32 image, a BYTES text input, two INT64 inputs
with a dynamic sequence length, FP16) load-tested over HTTP and gRPC against the embedded endpoint and a real
Triton (PyTriton) in one run, each with its data file (npz, jsonl, perf_analyzer JSON) or random data, every
answer checked."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.harness.services.triton_server import TritonUnavailable, triton_python
from tests.support import IN_CI, assert_valid, make_profile, run_with

pytestmark = pytest.mark.shares_machine  # functional checks at low rates: may run beside another such test

# model → (data file under _data, check) — each model × {HTTP, gRPC} × {embedded, Triton}
ZOO = {
    "image_cnn_fp32": ("images.npz", {"output": "label"}),
    "text_tfidf": ("text.jsonl", {"output": "label"}),
    "tokens_int64": ("tokens.json", {"kind": "validation", "rtol": 1e-3, "atol": 1e-4}),
    "digits_mlp_fp16": ("digits_test.npz", {"output": "label"}),
}
SHORT = {"image_cnn_fp32": "image", "text_tfidf": "text", "tokens_int64": "tokens", "digits_mlp_fp16": "fp16"}


@pytest.fixture(scope="module")
def zoo_run(model_repo, tmp_path_factory):
    try:
        triton_python()
        servers = ("embedded", "triton")
    except TritonUnavailable as exc:
        if IN_CI:
            pytest.fail(f"PyTriton must be installed in CI (make test creates .venv-triton): {exc}")
        servers = ("embedded",)
    endpoints = []
    for model, (data, check) in ZOO.items():
        for server in servers:
            for protocol in ("kserve-http", "kserve-grpc"):
                endpoints.append({"name": f"{SHORT[model]}-{server}-{protocol[7:]}", "url": server,
                                  "protocol": protocol, "model": model, "check": check,
                                  "data": str(model_repo / "_data" / data)})
    endpoints.append({"name": "image-random", "url": "embedded", "protocol": "kserve-grpc",
                      "model": "image_cnn_fp32", "data": "random"})
    endpoints.append({"name": "tokens-random", "url": servers[-1], "protocol": "kserve-http",
                      "model": "tokens_int64", "data": "random", "batch_size": 4,
                      "shapes": {"input_ids": [24], "attention_mask": [24]},
                      "ranges": {"input_ids": [0, 1000], "attention_mask": [0, 2]}})
    profile = make_profile(model_repo, endpoints=endpoints, regions=[{"name": "here", "share": 1.0, "delay_ms": 1}],
                           load={"rate": 120, "duration_s": 8, "warmup_s": 1, "seed": 3},
                           triton={"models_dir": str(model_repo)},
                           # what this checks is every answer, beside another test: a fresh-clone run saw the
                           # backlog grow from 8 to 21 ms (600 kB images, probes mid-run) and call it saturated at
                           # the 5 ms default. 50 ms still catches a generator that cannot keep up.
                           generator={"send_lag_p99_ms": 50})
    probes = {}

    def during(run):  # `tailrace probe` against each started server while it serves the run: all at once, since
        # the run stops its servers when it ends (one at a time, four probes took longer than the run on a loaded
        # machine, and the last one met a Triton unloading its models: "no available versions")
        started = {url: subprocess.Popen(
            [sys.executable, "-m", "tailrace.cli", "probe", url, "--model", "text_tfidf", "--data",
             str(model_repo / "_data" / "text.jsonl"), "--check", "label", "--batch-size", "2", "--requests", "3"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for server in run.servers.instances for url in (server.http_url, server.grpc_url)}
        for url, proc in started.items():
            out, err = proc.communicate(timeout=60)
            probes[url] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    run, manifest = run_with(profile, tmp_path_factory.mktemp("zoo-runs"), during)
    return run, manifest, analyze_run(run.run_dir), servers, probes


def test_every_model_answers_every_request_over_both_protocols_on_both_servers(zoo_run):
    run, manifest, a, servers, _ = zoo_run
    df = a.requests
    assert_valid(manifest)
    names = {e.name for e in run.plan.profile.endpoints}
    assert set(df["endpoint"]) == names and len(names) == 4 * 2 * len(servers) + 2
    bad = df[df.status != "ok"]
    assert bad.empty, bad[["endpoint", "status", "code", "error"]].head(10).to_string()


def test_answers_are_checked_against_labels_and_validation_data(zoo_run):
    _, _, a, _, _ = zoo_run
    df = a.requests
    checked = df[df["correct_count"] >= 0]
    accuracy = checked.groupby("endpoint")["correct_count"].sum() / checked.groupby("endpoint")["batch_size"].sum()
    for endpoint, value in accuracy.items():
        floor = 0.95 if endpoint.startswith("fp16") else 1.0  # the others' labels are exact by construction
        assert value >= floor, f"{endpoint}: accuracy {value}"
    assert set(df.loc[df["correct_count"] < 0, "endpoint"]) == {"image-random", "tokens-random"}  # no labels
    reported = {r["endpoint"]: r["accuracy"] for r in a.summary.to_dict()["latency"] if r["region"] == "here"}
    assert reported["image-random"] is None and reported["tokens-random"] is None  # not checked: no accuracy
    assert reported["text-embedded-grpc"] == pytest.approx(accuracy["text-embedded-grpc"])


def test_the_request_was_resolved_from_the_servers_and_large_tensors_went_binary(zoo_run):
    run, _, a, servers, _ = zoo_run
    requests = run.plan.requests
    image = requests["image-embedded-http"]
    assert image.batched and [(i.name, i.datatype, i.shape) for i in image.inputs] == [("image", "FP32", [3, 224, 224])]
    assert requests["tokens-random"].batch_size == 4 and [i.shape for i in requests["tokens-random"].inputs] == [[24], [24]]
    text = requests[f"text-{servers[-1]}-grpc"]
    assert [(i.name, i.datatype) for i in text.inputs] == [("text", "BYTES")]
    df = a.requests
    image_http = df[df.endpoint == "image-embedded-http"]
    # the binary extension: ~602 kB of tensor bytes plus a short JSON header, not ~1.5 MB of JSON numbers
    assert image_http["bytes_out"].between(602_112, 604_000).all(), image_http["bytes_out"].describe()
    assert (df.loc[df.endpoint == "tokens-random", "batch_size"] == 4).all()


def test_probe_against_each_server_sends_the_data_and_checks_the_answers(zoo_run):
    run, _, _, servers, probes = zoo_run
    assert len(probes) == 2 * len(servers)
    for url, r in probes.items():
        assert r.returncode == 0, f"{url}: {r.stdout}{r.stderr}"
        assert "input  text BYTES [2, 1]" in r.stdout and r.stdout.count("check: 2 of 2 right") == 3, r.stdout
    on_triton = [r for r in probes.values() if r.stdout.startswith("server triton")]
    assert len(on_triton) == (2 if "triton" in servers else 0)  # HTTP and gRPC against the real Triton
