"""`tailrace deploy kubernetes` (tailrace/kubernetes.py): every rendered manifest validates offline against the
Kubernetes schemas, single- and multi-cluster; the commands are the ones the multi-host test runs; no secret
value is ever written."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tailrace.cli import build_parser
from tailrace.command_lines import master_args, worker_args
from tailrace.contract.profile import load_profile
from tailrace.kubernetes import DeployError, render, secret_commands, write
from tests import ROOT

KUBERNETES = "1.34"  # a recent release; the schemas ship with kubernetes-validate
IMAGE = "registry.example/tailrace:0.1.0"
EXAMPLE = ROOT / "profiles" / "kubernetes-example.toml"


def _docs(out: Path) -> list[tuple[Path, dict]]:
    return [(path, doc) for path in sorted(out.rglob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())]


def _validate_all(out: Path) -> list[dict]:
    docs = _docs(out)
    assert docs
    for path, doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises, naming the field, on any error
    return [d for _, d in docs]


def test_the_validator_has_teeth():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "argz": []}],
                                          "restartPolicy": "Never"}}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES, strict=True)


def test_one_cluster_renders_valid_manifests_from_the_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("TAILRACE_STAGING_TOKEN", "s3cr3t-value-never-written")
    monkeypatch.chdir(ROOT)
    profile_path = EXAMPLE
    profile = load_profile(profile_path)
    write(render(profile, profile_path, IMAGE), tmp_path)
    docs = _validate_all(tmp_path)
    kinds = [d["kind"] for d in docs]
    assert kinds.count("Job") == 1 + len(profile.regions) and {"Namespace", "ConfigMap", "Service",
                                                              "NetworkPolicy", "PersistentVolumeClaim", "Pod"} <= set(kinds)
    workers = {d["metadata"]["labels"]["tailrace-region"]: d for d in docs
               if d["kind"] == "Job" and d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"}
    for region in profile.regions:  # regions, workers and placement from the profile
        job = workers[region.name]["spec"]
        assert job["completions"] == job["parallelism"] == region.workers and job["completionMode"] == "Indexed"
        pod = job["template"]["spec"]
        assert pod["nodeSelector"] == (region.node_selector or {"topology.kubernetes.io/region": region.name})
        container = pod["containers"][0]
        # the exact command the multi-host test runs (tailrace/command_lines.py), and the CLI accepts it
        assert container["args"] == worker_args(master="tailrace-master.tailrace.svc.cluster.local:5557",
                                                region=region.name, index="$(TAILRACE_WORKER_INDEX)", spool="/spool")
        build_parser().parse_args([a.replace("$(TAILRACE_WORKER_INDEX)", "0") for a in container["args"]])
        assert container["resources"]["requests"] == container["resources"]["limits"]  # Guaranteed QoS
        assert container["resources"]["limits"]["cpu"] == "1"
    master = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "tailrace-master")
    args = master["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == master_args("/etc/tailrace/profile.toml", bind="0.0.0.0", out="/results", wait_s=600, quiet=True)
    build_parser().parse_args(args)
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"] == [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "tailrace", "app.kubernetes.io/component": "worker"}}}]
    text = "".join(p.read_text() for p in tmp_path.rglob("*.yaml"))
    assert "s3cr3t-value-never-written" not in text and "secretKeyRef" in text
    assert "digits_test.npz" in text  # the profile's data file travels in a ConfigMap


def test_regions_in_their_own_clusters_get_a_directory_each(tmp_path):
    profile = load_profile(EXAMPLE)
    rendered = render(profile, EXAMPLE, IMAGE, per_cluster=True,
                      master_address="203.0.113.10", worker_source_ranges=["198.51.100.0/24", "192.0.2.0/24"])
    write(rendered, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ap", "eu", "us"]
    _validate_all(tmp_path)
    master_docs = [d for _, d in _docs(tmp_path / "eu")]  # the first region's cluster
    service = next(d for d in master_docs if d["kind"] == "Service")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["loadBalancerSourceRanges"] == ["198.51.100.0/24", "192.0.2.0/24"]
    policy = next(d for d in master_docs if d["kind"] == "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "198.51.100.0/24"}},
                                                    {"ipBlock": {"cidr": "192.0.2.0/24"}}]
    assert sum(d["kind"] == "Job" and d["metadata"]["name"].startswith("tailrace-worker") for d in master_docs) == 1
    remote = [d for _, d in _docs(tmp_path / "us")]
    assert not any(d["kind"] == "Service" or d["metadata"]["name"] == "tailrace-master" for d in remote)
    worker = next(d for d in remote if d["kind"] == "Job")
    assert worker["spec"]["template"]["spec"]["containers"][0]["args"][:3] == ["worker", "--master", "203.0.113.10:5557"]


def test_a_multi_cluster_render_without_the_masters_address_is_refused(tmp_path):
    def deploy(*extra: str, profile: str = str(EXAMPLE)) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tailrace.cli", "deploy", "kubernetes", profile, "--image", IMAGE,
                               "--out", str(tmp_path / "k"), *extra], capture_output=True, text=True, cwd=ROOT)

    for r, needs in ((deploy("--per-cluster"), "--master-address"),
                     (deploy("--per-cluster", "--master-address", "203.0.113.10"), "--worker-source-range"),
                     (deploy(profile="profiles/demo.toml"), "endpoints[0].url")):
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and needs in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not (tmp_path / "k").exists()


def test_credential_and_tls_files_come_from_a_secret_mounted_whole_so_rotations_reach_them(tmp_path):
    profile_path = tmp_path / "tls.toml"
    profile_path.write_text("""
name = "tls"
[[endpoints]]
name = "https"
url = "https://staging.example:443"
protocol = "kserve-http"
model = "m"
auth_header = "Authorization"
auth_file = "/etc/tailrace/secrets/token"
tls = { ca = "/etc/tailrace/tls/ca.pem", cert = "/etc/tailrace/tls/client.crt", key = "/etc/tailrace/tls/client.key" }
[[regions]]
name = "r1"
share = 1.0
[load]
rate = 10
duration_s = 10
[clock]
servers = ["master"]
""")
    profile = load_profile(profile_path)
    write(render(profile, profile_path, IMAGE), tmp_path / "k")
    docs = _validate_all(tmp_path / "k")
    for job in (d for d in docs if d["kind"] == "Job"):
        pod = job["spec"]["template"]["spec"]
        secret_volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
        mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"] if m["name"] in secret_volumes}
        assert set(mounts) == {"/etc/tailrace/secrets", "/etc/tailrace/tls"}
        assert not any("subPath" in m for m in mounts.values())  # a subPath mount never sees a rotation
        paths = sorted(item["path"] for v in secret_volumes.values() for item in v["items"])
        assert paths == ["ca.pem", "client.crt", "client.key", "token"]
        assert {v["secretName"] for v in secret_volumes.values()} == {"tailrace-endpoint-files"}
    commands = secret_commands(profile)
    assert any("tailrace-endpoint-files" in c and "_etc_tailrace_secrets_token=" in c for c in commands), commands
    relative = profile_path.read_text().replace('"/etc/tailrace/secrets/token"', '"token"')
    profile_path.write_text(relative)
    with pytest.raises(DeployError, match=r"endpoints\[0\].auth_file: 'token' — a deployment mounts it"):
        render(load_profile(profile_path), profile_path, IMAGE)
