"""Admission's refusals that are not about the token: another release's worker, a JOIN in another worker's name;
and how refusals are counted (once per address and reason, bounded)."""
from __future__ import annotations

from tailrace.contract import messages
from tailrace.contract.plan import unresolved_plan
from tailrace.contract.profile import parse_profile
from tailrace.harness.control.admission import Admission, Refusals, address_of, token_proof

PROFILE = {"name": "a", "endpoints": [{"name": "e", "url": "http://h:1", "protocol": "kserve-http", "model": "m"}],
           "regions": [{"name": "eu", "share": 1.0}], "load": {"rate": 1, "duration_s": 1}}


def admission() -> Admission:
    return Admission(unresolved_plan(parse_profile(PROFILE, "a"), "r", "/tmp/r"), "s3cret")


def test_a_worker_of_another_release_or_in_another_workers_name_is_refused():
    proof = token_proof("s3cret", "host_" + "a" * 32)
    right = messages.Join("host_" + "a" * 32, "eu-w0", "eu", 0, proof, messages.PROTOCOL_VERSION, "0.1.0")
    assert admission().refusal(right, sender=right.client_id) is None
    old = messages.Join(right.client_id, "eu-w0", "eu", 0, proof)  # a JOIN from before it carried its protocol
    assert admission().refusal(old).startswith("incompatible version: the worker speaks control protocol 1")
    newer = messages.Join(right.client_id, "eu-w0", "eu", 0, proof, messages.PROTOCOL_VERSION + 1, "9.0.0")
    assert "the worker (tailrace 9.0.0) speaks control protocol" in admission().refusal(newer)
    assert admission().refusal(right, sender="host_" + "b" * 32) == "its JOIN names another worker's client id"


def test_refusals_are_counted_once_per_address_and_reason_and_bounded():
    assert address_of("gen-eu-3_" + "0123456789abcdef" * 2) == "gen-eu-3"
    assert address_of("no-suffix") == "no-suffix"
    r = Refusals()
    assert r.add("a", "wrong token") == (("a", "wrong token"), True)
    assert r.add("a", "wrong token") == (("a", "wrong token"), False)
    assert r.add("b", "wrong token")[1] is True
    assert r.unlogged() == [(("a", "wrong token"), 2)] and r.unlogged() == []
    for i in range(Refusals.MAX_KEYS + 10):
        r.add(f"host-{i}", "wrong token")
    assert len(r.counts) == Refusals.MAX_KEYS + 1 and r.counts[Refusals.OTHERS] == 12
