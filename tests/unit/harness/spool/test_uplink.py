"""Results from a remote worker: the uplink sends each closed file until acknowledged; the master admits only
workers with the run's token; `collect` adds a spool's files once."""
from __future__ import annotations

import json

import pytest

from tailrace.contract import messages
from tailrace.contract.layout import RunLayout, shippable
from tailrace.contract.plan import unresolved_plan
from tailrace.contract.profile import parse_profile
from tailrace.harness.control.admission import Admission, token_proof
from tailrace.harness.orchestration.collect import CollectError, collect
from tailrace.harness.spool.uplink import ChunkUplink

PROFILE = {"name": "u", "endpoints": [{"name": "a", "url": "http://127.0.0.1:1", "protocol": "kserve-http", "model": "m"}],
           "regions": [{"name": "eu", "share": 0.5, "workers": 2}, {"name": "us", "share": 0.5}],
           "load": {"rate": 10, "duration_s": 1}}


def test_only_closed_chunks_and_worker_json_are_shipped():
    assert all(shippable(n) for n in ("requests-00000.parquet", "clock-00012.parquet", "worker.json"))
    assert not any(shippable(n) for n in ("../x.parquet", ".requests-00001.parquet.tmp", "acked.txt", "requests-1.parquet",
                                          "regions/eu/requests-00000.parquet"))


def test_the_uplink_sends_each_file_until_acknowledged_and_remembers_acks(tmp_path):
    layout = RunLayout(tmp_path / "run").worker("eu", "eu-w0")
    layout.dir.mkdir(parents=True)
    (layout.dir / "requests-00000.parquet").write_bytes(b"a" * 10)
    (layout.dir / ".requests-00001.parquet.tmp").write_bytes(b"half-written")
    sent = []
    uplink = ChunkUplink(layout, lambda name, data: sent.append((name, data)), resend_s=0.05)
    assert uplink.poll() == 1 and sent == [("requests-00000.parquet", b"a" * 10)]
    assert uplink.poll() == 0  # not again before resend_s
    (layout.dir / "requests-00001.parquet").write_bytes(b"b")
    (layout.dir / "worker.json").write_text("{}")
    uplink.ack("requests-00000.parquet")
    import time
    time.sleep(0.06)
    uplink.poll()
    assert [n for n, _ in sent] == ["requests-00000.parquet", "requests-00001.parquet", "worker.json"]
    assert layout.acked.read_text().split() == ["requests-00000.parquet"]
    again = ChunkUplink(layout, lambda name, data: None)  # a restarted worker does not re-send what was acked
    assert [p.name for p in again.pending()] == ["requests-00001.parquet", "worker.json"]
    assert uplink.drain(0.2, sleep=lambda s: None) == ["requests-00001.parquet", "worker.json"]  # never acked


def join(client: str, worker: str, region: str, index: int, token: str) -> messages.Join:
    return messages.Join(client, worker, region, index, token_proof(token, client), messages.PROTOCOL_VERSION)


def test_the_master_admits_only_workers_with_the_token_for_a_slot_of_the_profile():
    admission = Admission(unresolved_plan(parse_profile(PROFILE, "u"), "r", "/tmp/r"), "s3cret")
    ok = join("c1", "eu-w0", "eu", 0, "s3cret")
    assert admission.refusal(ok) is None
    admission.admit(ok)
    assert admission.refusal(join("c2", "eu-w0", "eu", 0, "s3cret")) == "a worker eu-w0 has already joined"
    assert admission.refusal(join("c3", "eu-w1", "eu", 1, "wrong")).startswith("wrong run token")
    stolen = messages.Join("c4", "eu-w1", "eu", 1, ok.proof, messages.PROTOCOL_VERSION)  # bound to its client id
    assert admission.refusal(stolen).startswith("wrong run token")
    assert admission.refusal(join("c5", "ap-w0", "ap", 0, "s3cret")) == "region 'ap' is not in the profile (regions: eu, us)"
    assert admission.refusal(join("c6", "us-w1", "us", 1, "s3cret")).startswith("region us has 1 worker(s)")
    tokenless = Admission(unresolved_plan(parse_profile(PROFILE, "u"), "r", "/tmp/r"), "")
    assert tokenless.refusal(ok).startswith("wrong run token")  # a master without a token admits nobody


def test_collect_adds_a_spools_files_once(tmp_path):
    run = tmp_path / "runs" / "run-1"
    run.mkdir(parents=True)
    (run / "plan.json").write_text(json.dumps({}))
    have = RunLayout(run).worker("us", "us-w0")
    have.dir.mkdir(parents=True)
    (have.dir / "requests-00000.parquet").write_bytes(b"at the master")
    spool = RunLayout(tmp_path / "spool" / "run-1").worker("us", "us-w0")
    spool.dir.mkdir(parents=True)
    for name in ("requests-00000.parquet", "requests-00001.parquet", "worker.json", "acked.txt"):
        (spool.dir / name).write_bytes(b"from the spool")
    first = collect(tmp_path / "spool", run)
    assert first.added == ["us/us-w0/requests-00001.parquet", "us/us-w0/worker.json"] and first.present == 1
    assert (have.dir / "requests-00000.parquet").read_bytes() == b"at the master"  # never overwritten
    assert collect(tmp_path / "spool", run).added == []
    with pytest.raises(CollectError, match="no spool of run run-1"):
        collect(tmp_path, run)
    with pytest.raises(CollectError, match="not a run directory"):
        collect(tmp_path / "spool", tmp_path)
