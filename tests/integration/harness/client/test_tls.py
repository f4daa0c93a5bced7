"""TLS and credentials end to end, with a CA made here (trustme): the embedded endpoint serving HTTPS and gRPC over
TLS, one-way and mutual, behind a credential check; real runs through a region's delay proxy; a wrong CA refused
before the start instant; a rotated auth_file picked up at send time; the secrets never written anywhere."""
from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import trustme

from tailrace.command_lines import tailrace_argv
from tailrace.contract.profile import parse_profile
from tailrace.harness.services.processes import free_port, start_process, wait_http_ok
from tests.support import DIGITS_DATA, assert_valid, run_with, sleep_until_measuring

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)

TOKEN_ENV = "TAILRACE_TEST_TLS_TOKEN"


class TlsServer:
    def __init__(self, proc, http_port: int, grpc_port: int) -> None:
        self.proc, self.http_port, self.grpc_port = proc, http_port, grpc_port

    @property
    def https(self) -> str:
        return f"https://127.0.0.1:{self.http_port}"

    @property
    def grpcs(self) -> str:
        return f"grpcs://127.0.0.1:{self.grpc_port}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA, the server's certificate (for 127.0.0.1 and staging.tailrace.test), a client certificate, and
    another CA that signed none of them."""
    root = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "staging.tailrace.test")
    client = ca.issue_cert("generator@tailrace.test")
    files = {"ca": root / "ca.pem", "other_ca": root / "other-ca.pem", "server_cert": root / "server.crt",
             "server_key": root / "server.key", "client_cert": root / "client.crt", "client_key": root / "client.key"}
    ca.cert_pem.write_to_path(files["ca"])
    other.cert_pem.write_to_path(files["other_ca"])
    server.cert_chain_pems[0].write_to_path(files["server_cert"])
    server.private_key_pem.write_to_path(files["server_key"])
    client.cert_chain_pems[0].write_to_path(files["client_cert"])
    client.private_key_pem.write_to_path(files["client_key"])
    return files


def _start(model_repo: Path, log_dir: Path, extra: list[str], pki: dict[str, Path]) -> TlsServer:
    http_port, grpc_port = free_port(), free_port()
    argv = tailrace_argv("serve", "--models", str(model_repo), "--http-port", str(http_port), "--grpc-port",
                         str(grpc_port), "--model", "digits_mlp_fp32", *extra)
    proc = start_process(f"tls endpoint {http_port}", argv, log_dir / f"tls-{http_port}.log")
    server = TlsServer(proc, http_port, grpc_port)
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    context.load_cert_chain(pki["client_cert"], pki["client_key"])  # the mutual server asks for it
    try:
        wait_http_ok(f"{server.https}/v2/health/ready", proc, timeout=60, verify=context)
    except RuntimeError:
        proc.stop()
        raise
    return server


@pytest.fixture(scope="module")
def servers(model_repo, pki, tmp_path_factory):
    """One server with one-way TLS and one with mutual TLS, both requiring a credential from a file."""
    logs = tmp_path_factory.mktemp("tls-logs")
    secrets_dir = tmp_path_factory.mktemp("tls-secrets")
    one_way_token, mutual_token = secrets_dir / "one-way-token", secrets_dir / "mutual-token"
    one_way_token.write_text("env-secret-7f3a91c2\n")
    mutual_token.write_text("file-secret-A-5d2e8b\n")
    common = ["--tls-cert", str(pki["server_cert"]), "--tls-key", str(pki["server_key"]),
              "--auth-header", "Authorization"]
    one_way = _start(model_repo, logs, [*common, "--auth-file", str(one_way_token)], pki)
    mutual = _start(model_repo, logs, [*common, "--auth-file", str(mutual_token), "--tls-client-ca", str(pki["ca"])],
                    pki)
    yield {"one_way": one_way, "mutual": mutual, "mutual_token": mutual_token}
    one_way.proc.stop()
    mutual.proc.stop()


def _profile(model_repo: Path, http_url: str, grpc_url: str, tls: dict, auth: dict, rate: float = 60,
             duration_s: float = 6, regions=None):
    ep = {"model": "digits_mlp_fp32", "data": str(model_repo / DIGITS_DATA), "check": {"output": "label"},
          "auth_header": "Authorization", **auth, "tls": tls}
    return parse_profile({
        "name": "tls",
        "endpoints": [{"name": "https", "url": http_url, "protocol": "kserve-http", **ep},
                      {"name": "grpcs", "url": grpc_url, "protocol": "kserve-grpc", **ep}],
        "regions": regions or [{"name": "near", "share": 0.5},
                               {"name": "far", "share": 0.5, "delay_ms": 5}],  # through a delay proxy
        "load": {"rate": rate, "duration_s": duration_s, "warmup_s": 1, "seed": 5},
        "server_stats": {"interval_s": 1},
    }, "tls test profile")


def _requests(run_dir: Path) -> pd.DataFrame:
    from tailrace.api import load_requests

    return load_requests(run_dir)


def _secret_places(root: Path, secrets: list[str]) -> list[str]:
    """Every file under `root` (and every string cell of its Parquet files) that holds one of `secrets`."""
    found = []
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        found += [f"{path}: {s}" for s in secrets if s.encode() in data]
        if path.suffix == ".parquet":
            table = pq.read_table(path).to_pandas()
            for column in table.columns:
                if table[column].dtype == object:
                    text = "\n".join(map(str, table[column].tolist()))
                    found += [f"{path}:{column}: {s}" for s in secrets if s in text]
    return found


def test_one_way_tls_over_http_and_grpc_with_a_credential_from_the_environment(model_repo, pki, servers, tmp_path,
                                                                                   monkeypatch):
    """https:// and grpcs:// through a region's delay proxy (the certificate is checked against the server's
    name, not the proxy's address), auth_env: every request answered right; the secret is nowhere."""
    secret = "env-secret-7f3a91c2"
    monkeypatch.setenv(TOKEN_ENV, secret)
    server = servers["one_way"]
    profile = _profile(model_repo, server.https, server.grpcs, {"ca": str(pki["ca"])}, {"auth_env": TOKEN_ENV})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    df = _requests(run.run_dir)
    assert len(df) > 250 and set(df["endpoint"]) == {"https", "grpcs"} and set(df["region"]) == {"near", "far"}
    assert (df["status"] == "ok").all(), df.loc[df["status"] != "ok", ["endpoint", "code", "error"]].head()
    assert (df["correct"] == df["batch_size"]).mean() > 0.9  # the answers are right, not just returned
    assert (run.run_dir / "endpoints" / "https" / "stats-after.json").exists()  # statistics over HTTPS, with auth
    assert _secret_places(run.run_dir, [secret]) == []


def test_a_wrong_ca_is_refused_before_the_start_instant(model_repo, pki, servers, tmp_path):
    """Both protocols, one line each naming the setting to look at; exit 2; no request sent."""
    server = servers["one_way"]
    profile = tmp_path / "wrong-ca.toml"
    profile.write_text(f"""
name = "wrong-ca"
[[endpoints]]
name = "https"
url = "{server.https}"
protocol = "kserve-http"
model = "digits_mlp_fp32"
tls = {{ ca = "{pki['other_ca']}" }}
[[endpoints]]
name = "grpcs"
url = "{server.grpcs}"
protocol = "kserve-grpc"
model = "digits_mlp_fp32"
tls = {{ ca = "{pki['other_ca']}" }}
[[regions]]
name = "solo"
share = 1.0
[load]
rate = 50
duration_s = 5
""")
    proc = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(tmp_path / "runs"),
                           "--quiet"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "no load was sent" in proc.stderr, proc.stderr
    assert "ssl_transport_security" not in proc.stderr, proc.stderr  # gRPC's own handshake log lines are quiet
    lines = [line for line in proc.stderr.splitlines() if line.startswith("endpoint ")]
    https = next(line for line in lines if line.startswith("endpoint https:"))
    grpcs = next(line for line in lines if line.startswith("endpoint grpcs:"))
    assert "certificate was refused" in https and "tls.ca" in https, https
    assert "TLS handshake failed" in grpcs and "tls.ca" in grpcs, grpcs
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert not list(run_dir.glob("regions/*/*/requests-*.parquet"))


def test_mutual_tls_without_a_client_certificate_is_refused_with_a_hint(pki, servers):
    proc = subprocess.run([sys.executable, "-m", "tailrace.cli", "probe", servers["mutual"].https, "--model",
                           "digits_mlp_fp32", "--tls-ca", str(pki["ca"]), "--auth-header", "Authorization",
                           "--auth-file", str(servers["mutual_token"])], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "set tls.cert and tls.key" in proc.stderr, proc.stderr


@pytest.mark.timeout(240)
def test_mutual_tls_run_picks_up_a_rotated_credential_file_at_send_time(model_repo, pki, servers, tmp_path):
    """Mutual TLS on both protocols. Four seconds into the measured window the credential rotates (the server's
    file and the generator's mounted file both change, as a Kubernetes Secret does): requests keep succeeding once
    the generator has re-read its file (within a second), and neither secret is written anywhere."""
    server, server_token = servers["mutual"], servers["mutual_token"]
    old, new = "file-secret-A-5d2e8b", "file-secret-B-93c0aa"
    client_token = tmp_path / "mounted" / "token"
    client_token.parent.mkdir()
    client_token.write_text(old)
    tls = {"ca": str(pki["ca"]), "cert": str(pki["client_cert"]), "key": str(pki["client_key"])}
    profile = _profile(model_repo, server.https, server.grpcs, tls, {"auth_file": str(client_token)}, rate=80,
                       duration_s=9)
    rotated_at: list[float] = []

    def rotate(run) -> None:
        sleep_until_measuring(run, 4.0)
        server_token.write_text(new + "\n")
        staged = client_token.with_name("token.new")  # replaced atomically, as the kubelet swaps a Secret's files
        staged.write_text(new)
        os.replace(staged, client_token)
        rotated_at.append(time.time())

    try:
        run, manifest = run_with(profile, tmp_path / "runs", during=rotate)
    finally:
        server_token.write_text(old + "\n")
    assert rotated_at, "the credential was never rotated"
    df = _requests(run.run_dir)
    sent_s = df["t_sent_ref"] / 1e9 - rotated_at[0]
    before, settling, after = df[sent_s < -0.2], df[(sent_s >= -0.2) & (sent_s < 1.5)], df[sent_s >= 1.5]
    assert len(before) > 200 and len(after) > 200, (len(before), len(after))
    assert (before["status"] == "ok").all(), before["code"].value_counts()
    # without a re-read every request after the rotation would be refused (401 / UNAUTHENTICATED)
    assert (after["status"] == "ok").all(), after.loc[after["status"] != "ok", ["endpoint", "code"]].value_counts()
    refused = settling[settling["status"] != "ok"]
    assert set(refused["code"]) <= {"401", "UNAUTHENTICATED"}, refused["code"].value_counts()
    assert set(df["endpoint"]) == {"https", "grpcs"}
    assert _secret_places(run.run_dir, [old, new]) == []
