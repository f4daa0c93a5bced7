"""Sessions for real: two emulated regions start multi-turn sessions against the embedded synthetic_lm, with its
prefix cache on and off. Turn k+1 is never sent before turn k's end (+ its think time); each later prompt carries the
earlier turns and the server's replies; the server's counters, the requests' usage and the ideal of the prompts
sent agree; later turns' prefill falls by exactly what the cache skipped (synthetic_lm charges prefill per uncached
token); `tailrace compare` pairs the two runs' sessions turn by turn. Then the Mooncake trace's blocks, a server
that dies mid-session, and bad session files."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tailrace.analysis.analyze import analyze_run
from tailrace.analysis.decide.compare import compare_runs
from tests import ROOT
from tests.integration.endpoints.test_embedded_generative import PREFILL_MS_PER_TOKEN, render_in_chromium
from tests.support import assert_valid, make_profile, run_with

FIRST, USER, OUTPUT = 300, 40, 16


def session_profile(model_repo, caching: bool, **extra):
    sessions = {"turns": {"mean": 4}, "think_s": {"distribution": "exponential", "mean": 0.3},
                "user_tokens": {"mean": USER}}
    endpoints = [{"name": "chat", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm",
                  "prompts": {"input_tokens": {"mean": FIRST}, "output_tokens": {"mean": OUTPUT}},
                  "sessions": sessions}]
    return make_profile(model_repo, endpoints=endpoints,
                        regions=[{"name": "near", "share": 0.5, "delay_ms": 2},
                                 {"name": "far", "share": 0.5, "delay_ms": 10}],
                        load={"rate": 3, "duration_s": 10, "warmup_s": 1, "seed": 21},
                        embedded={"models_dir": str(model_repo), "prefix_caching": {"synthetic_lm": caching}},
                        slos=[{"metric": "ttft", "percentile": 90, "threshold_ms": 500}], **extra)


@pytest.fixture(scope="module")
def cached_and_not(model_repo, tmp_path_factory):
    on, manifest_on = run_with(session_profile(model_repo, True), tmp_path_factory.mktemp("on"))
    off, manifest_off = run_with(session_profile(model_repo, False), tmp_path_factory.mktemp("off"))
    assert manifest_on["valid"] and manifest_off["valid"], (manifest_on["invalid_reasons"],
                                                            manifest_off["invalid_reasons"])
    return on, off


def test_turns_follow_their_replies_carry_the_conversation_and_the_cache_hits_what_it_should(cached_and_not,
                                                                                          tmp_path):
    on, _ = cached_and_not
    a = analyze_run(on.run_dir)
    df = a.requests.sort_values(["session_id", "turn"])
    assert (df["turn"] > 0).all() and (df["status"] == "ok").all()
    assert df["turn"].max() == 4 and (df.groupby("session_id")["worker"].nunique() == 1).all()
    for _, turns in df.groupby("session_id"):
        turns = turns.sort_values("turn")
        assert list(turns["turn"]) == list(range(1, len(turns) + 1))
        # on the worker's one clock: turn k+1 intended at or after turn k's end, and sent at or after that
        assert (turns["t_intended"].to_numpy()[1:] >= turns["t_done"].to_numpy()[:-1]).all()
        # each prompt: the one before, the server's reply, the new user text (the server's own count)
        inputs = turns["input_tokens"].to_numpy()
        assert (np.diff(inputs) == OUTPUT + USER).all() and inputs[0] == FIRST
        assert turns["session_end"].iloc[-1] in ("done", "run_end") and (turns["session_end"].iloc[:-1] == "").all()
    later = df[df["turn"] > 1]
    # what an unbounded cache holds of each later prompt: the turn before's prompt and reply, whole 16-token blocks
    assert ((later["ideal_cached_tokens"] == (later["input_tokens"] - USER) // 16 * 16)).all()
    assert (later["cached_tokens"] == later["ideal_cached_tokens"]).all()
    cache = a.summary.to_dict()["sessions"]["prefix_cache"][0]
    assert abs(cache["usage_hit_ratio"] - cache["ideal_hit_ratio"]) < 0.02
    assert abs(cache["server_hit_ratio"] - cache["ideal_hit_ratio"]) < 0.02  # the engine's own counters
    turns = {r["turn"]: r for r in a.summary.to_dict()["sessions"]["turns"]}
    assert turns["1"]["cached_tokens_mean"] == 0 and turns["3"]["hit_ratio"] > 0.8
    sessions = a.summary.to_dict()["sessions"]["sessions"][0]
    assert sessions["sessions"] == df[(df["turn"] == 1) & (df["phase"] > 0)]["session_id"].nunique()
    assert sessions["good_sessions"] == sessions["sessions"] and sessions["session_goodput_rps"] > 0
    assert sum(r["count"] for r in a.summary.to_dict()["arrivals"] if r["source"] == "merged") == \
        int(((df["turn"] == 1) & (df["phase"] > 0)).sum())  # the process started sessions, not turns
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "analyze", str(on.run_dir), "--quiet"], cwd=ROOT,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == a.summary.to_dict()["exit_code"], r.stdout + r.stderr
    page = Path(on.run_dir) / "report" / "index.html"
    assert "id='sessions'" in page.read_text() and "Prefix cache" in page.read_text()
    render_in_chromium(page, tmp_path)


def test_later_turns_prefill_only_what_the_cache_did_not_hold_and_compare_pairs_turns(cached_and_not):
    on, off = cached_and_not
    a, b = analyze_run(on.run_dir).requests, analyze_run(off.run_dir).requests
    assert (b["cached_tokens"] == 0).all() and analyze_run(off.run_dir).summary.to_dict()["sessions"]["prefix_cache"][0][
        "server_hit_ratio"] in (None, 0.0)
    for turn in (2, 3):
        mine_a, mine_b = a[a["turn"] == turn], b[b["turn"] == turn]
        skipped_ms = PREFILL_MS_PER_TOKEN * mine_a["cached_tokens"].median()
        prefill_a, prefill_b = (np.median(m["server_compute_ns"]) / 1e6 for m in (mine_a, mine_b))
        assert prefill_b - prefill_a == pytest.approx(skipped_ms, abs=1.0), (turn, prefill_a, prefill_b)
    rows = {(r.endpoint, r.region, r.metric): r for r in compare_runs(on.run_dir, off.run_dir)}
    ttft = rows[("chat", "near", "ttft")]
    assert ttft.paired and (ttft.p50_diff_ms or 0) > 2  # the same sessions, turn by turn: B (no cache) slower


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_server_that_dies_mid_session_cuts_the_turn_and_ends_the_session(model_repo, tmp_path):
    from tests.support import sleep_until_measuring

    profile = session_profile(model_repo, True)

    def kill_server(run):
        sleep_until_measuring(run, 3.0)
        os.kill(run.servers.instances[0].process.pid, signal.SIGKILL)

    run, manifest = run_with(profile, tmp_path, kill_server)
    df = analyze_run(run.run_dir).requests
    failed = df[df["status"] != "ok"]
    assert len(failed) and set(failed["session_end"].astype(str)) == {"error"}  # each ended its session
    assert "cut" in set(failed["stream_outcome"].astype(str))  # a turn in flight at the kill: cut
    assert set(df.loc[(df["status"] == "ok") & (df["turn"] > 0), "stream_outcome"].astype(str)) == {"complete"}
    # every turn completed before the server died is kept, and no session went on after its failed turn
    for _, turns in df.groupby("session_id"):
        bad = turns[turns["status"] != "ok"]
        if len(bad):
            assert turns["turn"].max() == bad["turn"].min()


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_bad_session_files_are_one_line_naming_the_file_and_line(model_repo, tmp_path):
    cases = {"no-human.json": (json.dumps([{"conversations": [{"from": "gpt", "value": "hi"}]}]),
                               "no-human.json: item 0: a conversation with no human turn"),
             # (a negative delay and an interleaved session: the same path, read in tests/unit/harness/workload/test_sessions.py)
             "long.jsonl": (json.dumps({"session_id": "a", "input_tokens": 90, "output_tokens": 20}),
                            "long.jsonl: line 1: one turn asks 90 + 20 tokens, over sessions.context_tokens 100")}
    for name, (text, words) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        toml = tmp_path / "p.toml"
        toml.write_text(f'''name = "bad"
output_dir = "{tmp_path / 'runs'}"
[[endpoints]]
name = "chat"
url = "embedded"
protocol = "openai-chat"
model = "synthetic_lm"
prompts = {{ file = "{path}" }}
sessions = {{ context_tokens = 100 }}
[[regions]]
name = "r"
share = 1.0
[load]
rate = 1
duration_s = 1
[embedded]
models_dir = "{model_repo}"
''')
        r = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(toml)], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 2, (name, r.stdout, r.stderr)
        assert words in r.stderr and "Traceback" not in r.stderr, (name, r.stderr)
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("*/regions/*/*/requests-*"))


def test_a_mooncake_slice_reuses_exactly_the_prefixes_its_hash_ids_share(model_repo, tmp_path):
    """20 s of the public Mooncake conversation trace (profiles/traces/NOTICE.md; from 28 min in, 67 rows of 0.9k–85k
    tokens): every row's prompt built from its 512-token blocks, at its own length; the hit ratio the server
    reports within 5 points of the trace's ideal under an unbounded cache."""
    endpoints = [{"name": "llm", "url": "embedded", "protocol": "openai-chat", "model": "synthetic_lm",
                  "ttft_timeout_ms": 60000}]
    trace = {"file": str(ROOT / "profiles" / "traces" / "mooncake-conversation.jsonl.gz"), "start_s": 1680,
             "window_s": 20}
    profile = make_profile(model_repo, endpoints=endpoints,
                           load={"duration_s": 20, "warmup_s": 0, "seed": 7,
                                 "arrivals": {"process": "trace", "trace": trace}},
                           embedded={"models_dir": str(model_repo), "max_num_seqs": {"synthetic_lm": 256},
                                     "max_model_len": {"synthetic_lm": 131072},
                                     "kv_cache_tokens": {"synthetic_lm": 4194304}})
    run, manifest = run_with(profile, tmp_path)
    assert_valid(manifest)
    a = analyze_run(run.run_dir)
    df = a.requests
    assert len(df) == 67 and (df["status"] == "ok").all(), df["error"].unique()
    assert (df["input_tokens"] == df["prompt_tokens_sent"]).all()  # every row at its own input_length
    # on time: every row built before its instant, the descriptor table grown before the start (a growth mid-run
    # slept 5-15 ms in the kernel: docs/DECISIONS.md), so no row of a burst of long prompts waits
    for worker in manifest["workers"].values():
        assert worker["summary"]["scenario"]["built_ahead"]["built_when_due"] == 0, worker["summary"]
    logs = "".join(p.read_text() for p in (run.run_dir / "logs").glob("worker-*.log"))
    assert logs.count("descriptor table: ") == 2, logs
    # the send-lag target itself (p99 ≤ 2 ms over a burst of long prompts) is bench/trace_bursts.py's: a timed bound
    # here failed on a noisy day with the code before it too (10-15 ms, every row of a burst alike, the first as late
    # as the last — the VM, not the builds); what stays is built_when_due above and a gross bound, far past what a
    # loaded machine's scheduling reaches, which a row built when due on a burst of long prompts would break
    assert df["send_lag_ns"].max() / 1e6 < 250.0
    cache = a.summary.to_dict()["sessions"]["prefix_cache"][0]
    assert 0.10 < cache["ideal_hit_ratio"] < 0.20
    assert abs(cache["usage_hit_ratio"] - cache["ideal_hit_ratio"]) < 0.05
    assert abs(cache["server_hit_ratio"] - cache["ideal_hit_ratio"]) < 0.05
