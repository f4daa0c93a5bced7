"""Streams abandoned by their clients, for real: `tailrace run` against the embedded server from two regions with
each kind of declared cancellation — after the first token (OpenAI chat), after N tokens (Anthropic Messages), after
a drawn time from the intended send (Responses) — each closed where declared, recorded as cancelled (never ok,
never an error), counted by the server as aborted; and the batch slot a cancelled stream held, given back at once."""
from __future__ import annotations

import numpy as np
import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.analyze_command import write_outputs
from tests.support import assert_valid, make_profile, run_with

pytestmark = pytest.mark.shares_machine

OUTPUT = 30  # tokens asked of every stream (synthetic_lm: ~8 ms a token)


def test_each_kind_of_cancellation_closes_its_streams_where_declared(model_repo, tmp_path):
    prompts = {"input_tokens": 16, "output_tokens": OUTPUT, "count": 8}
    kinds = {"first": ("openai-chat", {"share": 0.5, "after": "first_token"}),
             "tokens": ("anthropic-messages", {"share": 0.5, "after": "tokens", "after_tokens": 5}),
             "time": ("openai-responses", {"share": 0.5, "after": "time",
                                           "after_ms": {"mean": 80, "distribution": "uniform", "min": 40, "max": 120}})}
    endpoints = [{"name": name, "url": "embedded", "protocol": protocol, "model": "synthetic_lm", "prompts": prompts,
                  "cancel": cancel} for name, (protocol, cancel) in kinds.items()]
    profile = make_profile(model_repo, endpoints=endpoints, load={"rate": 30, "duration_s": 5, "warmup_s": 1,
                                                                  "seed": 11})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    analysis = analyze_run(run.run_dir)
    df = analysis.requests
    assert set(df["status"].astype(str)) == {"ok", "cancelled"}, df["error"].unique()
    by = {name: g for name, g in df.groupby("endpoint", observed=True)}
    for name, rows in by.items():
        gone = rows[rows["status"] == "cancelled"]
        assert 0.25 < len(gone) / len(rows) < 0.75, (name, len(gone), len(rows))
        assert set(gone["code"].astype(str)) == {kinds[name][1]["after"]} and \
            set(gone["stream_outcome"].astype(str)) == {"cancelled"}
        done = rows[rows["status"] == "ok"]
        assert (done["output_tokens"] == OUTPUT).all() and set(done["stream_outcome"].astype(str)) == {"complete"}
    first = by["first"][by["first"]["status"] == "cancelled"]
    assert (first["ttft_ns"] > 0).all() and (first["output_tokens"] == 1).all()
    # closed at the read that carried the first token: that one read, no later token read (no wall-clock bound: a
    # loaded machine takes longer to close a socket, never reads another event), closed after it
    assert all(len(np.frombuffer(c, dtype="<u2")) == 1 for c in first["token_event_counts"])
    assert (first["t_last_token"] == first["t_first_token"]).all() and (first["t_done"] >= first["t_first_token"]).all()
    tokens = by["tokens"][by["tokens"]["status"] == "cancelled"]
    assert (tokens["output_tokens"] >= 5).all() and (tokens["output_tokens"] < 8).all()
    timed = by["time"][by["time"]["status"] == "cancelled"]
    closed_ms = timed["latency_ns"].to_numpy() / 1e6  # from the intended send
    # never before its drawn instant (40-120 ms), and cut there: fewer tokens than a whole stream (~8 ms a token); the
    # upper bound is only far past what a loaded machine's timer reaches (a cancel that never fired reads them all)
    assert closed_ms.min() >= 40 and closed_ms.max() < 120 + 500, closed_ms
    assert (timed["output_tokens"] < OUTPUT).all()
    assert np.ptp(closed_ms) > 30  # drawn, not fixed
    summary = analysis.summary
    for row in summary.latency:
        assert row.errors == 0 and row.error_rate == 0.0, row
    lat = {r.endpoint: r for r in summary.latency if r.region == "*"}
    rows = {(r.endpoint, r.region): r for r in summary.cancellations}
    for name in kinds:
        whole = rows[(name, "*")]
        measured = by[name][(by[name]["phase"] > 0) & (by[name]["status"] == "cancelled")]
        assert whole.cancelled == len(measured) == lat[name].cancelled
        assert whole.cancel_rate_ci_low < 0.5 < whole.cancel_rate_ci_high
        assert whole.tokens_received == int(measured["output_tokens"].clip(lower=0).sum())
        # the server's own count of aborted requests of the model: every stream a client closed before its end
        assert whole.server_aborted == whole.cancelled_server_scope == int((df["status"] == "cancelled").sum())
    assert rows[("first", "*")].before_first_token == 0
    write_outputs(analysis, run.run_dir / "report")
    page = (run.run_dir / "report" / "index.html").read_text()
    assert "id='cancellations'" in page and (run.run_dir / "report" / "tables" / "cancellations.csv").exists()


def test_a_cancelled_stream_gives_its_batch_slot_back_at_once(model_repo, tmp_path):
    """Two batch slots, streams of 60 tokens (~0.5 s each) at 12/s: read to their end they would need 6 slots and
    queue without bound. Closed at their first token, each holds a slot one step: nothing queues."""
    endpoints = [{"name": "chat", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm",
                  "prompts": {"input_tokens": 8, "output_tokens": 60, "count": 4},
                  "cancel": {"share": 1.0, "after": "first_token"}}]
    profile = make_profile(model_repo, endpoints=endpoints, load={"rate": 12, "duration_s": 5, "warmup_s": 1,
                                                                  "seed": 2},
                           embedded={"models_dir": str(model_repo), "max_num_seqs": {"synthetic_lm": 2}})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    df = analyze_run(run.run_dir).requests
    assert (df["status"] == "cancelled").all(), df["error"].unique()
    ttft_ms = df["ttft_ns"].to_numpy() / 1e6
    # a slot held to the stream's end would put the last requests seconds behind; freed, TTFT stays near a step (the
    # bound is far from both: a loaded machine's steps run late, never seconds)
    assert np.percentile(ttft_ms, 90) < 1000, np.percentile(ttft_ms, [50, 90, 100])
