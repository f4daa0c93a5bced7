"""Credentials read at send time (contract/credentials.py) and the generator's TLS settings (harness/client/tls.py),
on files made here."""
from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
import trustme

from tailrace.contract.credentials import Credential, CredentialError
from tailrace.contract.profile import Tls, parse_profile
from tailrace.harness.client.outcome import Send
from tailrace.harness.client.tls import TlsError, describe_tls_failure, grpc_tls_options, sender_tls, ssl_context


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_credential_file_is_re_read_when_it_changes_and_looked_at_once_a_second(tmp_path):
    path, clock = tmp_path / "token", Clock()
    path.write_text("first\n")
    cred = Credential("Authorization", file=str(path), clock=clock)
    assert cred.headers() == {"Authorization": "first"} and cred.reads == 1
    staged = tmp_path / "token.new"
    staged.write_text("second")
    os.replace(staged, path)  # how the kubelet swaps a mounted Secret's files
    clock.now = 0.5
    assert cred.value() == "first"  # not looked at yet: no stat on every request
    clock.now = 1.0
    assert cred.value() == "second" and cred.reads == 2
    clock.now = 2.5
    assert cred.value() == "second" and cred.reads == 2  # unchanged: not read again


def test_a_credential_file_missing_for_a_moment_keeps_the_last_value(tmp_path):
    path, clock = tmp_path / "token", Clock()
    path.write_text("kept")
    cred = Credential("X-Token", file=str(path), clock=clock)
    assert cred.value() == "kept"
    path.unlink()
    clock.now = 5
    assert cred.value() == "kept"


def test_credential_errors_name_the_source_never_a_value(tmp_path, monkeypatch):
    with pytest.raises(CredentialError, match=r"auth_file .*missing: cannot read \(No such file"):
        Credential("A", file=str(tmp_path / "missing")).value()
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(CredentialError, match="auth_file .*empty is empty"):
        Credential("A", file=str(tmp_path / "empty")).value()
    monkeypatch.delenv("TAILRACE_NOT_SET", raising=False)
    with pytest.raises(CredentialError, match="auth_env TAILRACE_NOT_SET is not set"):
        Credential("A", env="TAILRACE_NOT_SET").value()
    monkeypatch.setenv("TAILRACE_SET", "s3cr3t")
    assert Credential("A", env="TAILRACE_SET").headers() == {"A": "s3cr3t"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    client = ca.issue_cert("client@tailrace.test")
    ca.cert_pem.write_to_path(root / "ca.pem")
    client.cert_chain_pems[0].write_to_path(root / "client.crt")
    client.private_key_pem.write_to_path(root / "client.key")
    (root / "junk.pem").write_text("not a certificate")
    return root


def test_ssl_context_verifies_and_presents_the_client_certificate(pki):
    context = ssl_context(Tls(ca=str(pki / "ca.pem"), cert=str(pki / "client.crt"), key=str(pki / "client.key")))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert len(context.get_ca_certs()) == 1
    assert len(ssl_context(None).get_ca_certs()) > 0  # the system's trust store


@pytest.mark.parametrize("tls,message", [
    (lambda p: Tls(ca=str(p / "nope.pem")), r"tls.ca .*nope.pem: cannot read \(No such file"),
    (lambda p: Tls(ca=str(p / "junk.pem")), r"tls.ca .*junk.pem: not a PEM file"),
    (lambda p: Tls(ca=str(p / "ca.pem"), cert=str(p / "client.crt"), key=str(p / "ca.pem")),
     r"tls.cert .*client.crt / tls.key .*ca.pem: not a certificate and its key"),
])
def test_tls_files_that_cannot_be_used_name_the_field(pki, tls, message):
    with pytest.raises(TlsError, match=message):
        ssl_context(tls(pki))


def _endpoint(url: str, protocol: str, tls: dict | None = None):
    entry = {"name": "e", "url": url, "protocol": protocol, "model": "m", **({"tls": tls} if tls else {})}
    return parse_profile({"name": "t", "endpoints": [entry], "regions": [{"name": "r", "share": 1.0}],
                          "load": {"rate": 1, "duration_s": 1}}, "t.toml").endpoints[0]


def test_the_server_name_defaults_to_the_endpoints_own_host_so_a_proxied_region_checks_the_right_name():
    assert sender_tls(_endpoint("http://10.0.0.1:80", "kserve-http")) is None
    assert sender_tls(_endpoint("https://staging.example:443", "kserve-http")).server_name == "staging.example"
    given = sender_tls(_endpoint("grpcs://10.0.0.1:8001", "kserve-grpc", {"server_name": "triton.internal"}))
    assert given.server_name == "triton.internal"
    assert ("grpc.ssl_target_name_override", "triton.internal") in grpc_tls_options(given)


def test_handshake_failures_are_described_with_the_setting_to_check():
    refused = ssl.SSLCertVerificationError(1, "certificate verify failed")
    refused.verify_message = "self-signed certificate in certificate chain"
    assert "check tls.ca" in describe_tls_failure(refused) and "self-signed" in describe_tls_failure(refused)
    assert "tls.cert / tls.key" in describe_tls_failure(ssl.SSLError(1, "tlsv13 alert certificate required"))
    assert describe_tls_failure(ConnectionRefusedError()) is None


@pytest.mark.parametrize("url,protocol", [("http://127.0.0.1:9", "kserve-http"), ("grpc://127.0.0.1:9", "kserve-grpc")])
def test_a_worker_that_cannot_read_its_credential_records_client_error_and_sends_nothing(url, protocol, monkeypatch):
    from tailrace.contract.plan import PoolLimits, unresolved_plan
    from tailrace.contract.records import STATUSES
    from tailrace.contract.requests import declared_request
    from tailrace.harness.client.request_data import samples_for
    from tailrace.harness.workload.senders import kserve_sender

    monkeypatch.delenv("TAILRACE_ABSENT_TOKEN", raising=False)
    profile = parse_profile({"name": "t", "endpoints": [{
        "name": "e", "url": url, "protocol": protocol, "model": "m", "auth_header": "Authorization",
        "auth_env": "TAILRACE_ABSENT_TOKEN", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]}],
        "regions": [{"name": "r", "share": 1.0}], "load": {"rate": 1, "duration_s": 1}}, "t.toml")
    ep = profile.endpoints[0]
    request = declared_request(ep, 1)
    sender = kserve_sender(ep, url, samples_for(unresolved_plan(profile, "t", ""), ep, request), request, stride=1,
                          pool=PoolLimits.sized(1), models_dir=Path("."))
    sent = []
    out = sender.send(Send(0, on_sent=lambda: sent.append(1)))
    sender.close()
    assert (out.status, out.code, sent) == ("client_error", "credential", [])
    assert out.status in STATUSES and "auth_env TAILRACE_ABSENT_TOKEN is not set" in out.error
