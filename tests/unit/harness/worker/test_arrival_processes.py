"""Arrival processes beyond Poisson: gamma, constant and on/off drawn as one global process and split across
regions (the merged regions are the process asked for; a region alone is its thinning), traces in three formats
replayed (scaled, windowed, looped) with errors naming the file and line, and the delivered-process checks — which
pass for what was asked and fail for Poisson sends judged as gamma or on/off."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tailrace.analysis.stats.arrival_process import counts_idc, expected_cv, onoff_idc, process_checks
from tailrace.contract.profile import Arrivals, Load, ProfileError, Trace, parse_profile
from tailrace.contract.rates import rate_segments
from tailrace.harness.worker.arrivals import Split, WorkerSlot, global_arrivals, worker_schedule
from tailrace.harness.workload.traces import TraceError, check_names, read_trace, replay


def plan(arrivals: Arrivals, region: int, rate: float | None = 400, duration_s: float = 300, shares=(0.3, 0.7),
         trace=None, names=("a", "b")):
    load = Load.model_construct(rate=rate, phases=[], warmup_s=0, duration_s=duration_s, seed=11, arrivals=arrivals)
    split = Split(tuple(shares), (1,) * len(shares), (1.0,), tuple(names), ("e",))
    return worker_schedule(load, split, WorkerSlot(region, 0), 10, sequential=True, trace=trace)


def cv(times_ns: np.ndarray) -> float:
    gaps = np.diff(np.sort(times_ns)).astype(float)
    return float(gaps.std() / gaps.mean())


@pytest.mark.parametrize("asked", [0.5, 2.0, 3.0])
def test_gamma_split_across_regions_keeps_the_global_cv_and_each_region_is_its_thinning(asked):
    arrivals = Arrivals(process="gamma", cv=asked)
    parts = [plan(arrivals, r).offsets_ns for r in (0, 1)]
    merged = np.concatenate(parts)
    assert cv(merged) == pytest.approx(asked, rel=0.04)
    assert len(merged) / 300 == pytest.approx(400, rel=0.05)
    for part, share in zip(parts, (0.3, 0.7)):
        assert cv(part) == pytest.approx(expected_cv(asked, share), rel=0.05)


def test_constant_gaps_are_even_and_poisson_stays_the_default_draw():
    segments = rate_segments(100, [], 0, 60)
    constant = global_arrivals(segments, 3, Arrivals(process="constant"))
    assert np.allclose(np.diff(constant), 0.01)
    assert np.array_equal(global_arrivals(segments, 3), global_arrivals(segments, 3, Arrivals()))  # same seed, same


def test_onoff_counts_are_as_bursty_as_the_model_says():
    arrivals = Arrivals(process="onoff", on_rate=300, off_rate=20, on_s=2, off_s=6)
    times = np.sort(np.concatenate([plan(arrivals, r, rate=None, duration_s=2400).offsets_ns for r in (0, 1)])) / 1e9
    assert len(times) / 2400 == pytest.approx(arrivals.mean_rate, rel=0.15)  # sojourns vary: ±6% a seed (1 sd)
    idc, windows = counts_idc(times, 8.0)
    model = onoff_idc(300, 20, 2, 6, 8.0)
    assert windows > 250 and model > 20 and idc == pytest.approx(model, rel=0.3)


def _frame(times_ns: np.ndarray, lag_ns: np.ndarray | None = None) -> pd.DataFrame:
    lag = np.zeros(len(times_ns), dtype=np.int64) if lag_ns is None else lag_ns
    return pd.DataFrame({"t_sent": times_ns + lag, "t_sent_ref": times_ns + lag, "t_intended": times_ns,
                         "t_intended_ref": times_ns, "send_lag_ns": lag, "phase": 1, "worker": "w0",
                         "region": "r"})


def _profile(arrivals: dict) -> object:
    load = {"duration_s": 60, "arrivals": arrivals} | ({"rate": 100} if arrivals["process"] in ("gamma", "constant")
                                                       else {})
    return parse_profile({"name": "t", "endpoints": [{"name": "e", "url": "embedded", "protocol": "kserve-http",
                                                      "model": "m"}],
                          "regions": [{"name": "r", "share": 1.0}], "load": load}, "test")


def test_the_checks_pass_the_asked_process_and_fail_poisson_sends_judged_as_gamma_or_onoff():
    rng = np.random.default_rng(5)
    poisson = (np.cumsum(rng.exponential(0.01, 20_000)) * 1e9).astype(np.int64)
    gamma = (np.cumsum(rng.gamma(0.25, 0.04, 20_000)) * 1e9).astype(np.int64)  # cv 2, mean 10 ms
    as_gamma = _profile({"process": "gamma", "cv": 2.0})
    passed = next(r for r in process_checks(_frame(gamma), as_gamma) if r.source == "merged")
    assert passed.ok and passed.ci_low < 2.0 < passed.ci_high and passed.ks_pvalue > 0.001
    failed = next(r for r in process_checks(_frame(poisson), as_gamma) if r.source == "merged")
    assert failed.ok is False and failed.ci_high < 1.2 and "not the asked 2" in failed.interpretation
    assert failed.ks_pvalue < 1e-6
    as_onoff = _profile({"process": "onoff", "on_rate": 300, "off_rate": 20, "on_s": 2, "off_s": 6})
    onoff = next(r for r in process_checks(_frame(poisson), as_onoff) if r.source == "merged")
    assert onoff.ok is False and onoff.measured < 3 < onoff.expected


def test_a_trace_check_reports_the_send_lag_and_the_rate_per_second():
    times = np.repeat(np.arange(5) * 10**9, [10, 20, 5, 0, 40]) + np.arange(75) * 1000
    row = next(r for r in process_checks(_frame(times, np.full(75, 300_000)), _profile(
        {"process": "trace", "trace": {"file": "t.csv"}})) if r.source == "merged")
    assert row.lag_p99_ms == pytest.approx(0.3) and row.per_second["trace"] == [10, 20, 5, 0, 40]


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_three_trace_formats_read_with_their_token_lengths(tmp_path):
    generic = read_trace(_write(tmp_path, "g.csv", "timestamp,region,input_tokens,output_tokens\n0.5,a,10,3\n"
                                                   "1.0,b,,4\n2.5,a,30,5\n"))
    assert list(generic.time_s) == [0, 0.5, 2.0] and generic.region == ["a", "b", "a"]
    assert list(generic.input_tokens) == [10, -1, 30] and list(generic.output_tokens) == [3, 4, 5]
    azure = read_trace(_write(tmp_path, "azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                                      "2023-11-16 18:15:46.6805900,374,44\n"
                                                      "2023-11-16 18:15:50.9951690,396,109\n"))
    assert azure.time_s[1] == pytest.approx(4.314579, abs=1e-6) and list(azure.output_tokens) == [44, 109]
    mooncake = read_trace(_write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 6955, "output_length": 52, '
                                                      '"hash_ids": [46, 47]}\n{"timestamp": 27482, "input_length": '
                                                      '6472, "output_length": 26, "hash_ids": [46]}\n'))
    assert list(mooncake.time_s) == [0, 27.482] and list(mooncake.input_tokens) == [6955, 6472]
    jsonl = read_trace(_write(tmp_path, "j.jsonl", '{"timestamp": 1.0, "endpoint": "e"}\n{"timestamp": 1.25}\n'))
    with pytest.raises(TraceError, match=r"j.jsonl:2: no endpoint"):
        check_names(tmp_path / "j.jsonl", jsonl, ["e"], ["a"])


@pytest.mark.parametrize("name, text, message", [
    ("unsorted.csv", "timestamp\n1\n3\n2\n", r"unsorted.csv:4: timestamp 2 is earlier than the row before it"),
    ("bad.csv", "timestamp,output_tokens\n1,4\nsoon,5\n", r"bad.csv:3: timestamp 'soon' is not a number$"),
    ("inf.csv", "timestamp\n1\ninf\n", r"inf.csv:3: timestamp 'inf' is not a number$"),
    ("word.csv", "timestamp,input_tokens\n1,many\n", r"word.csv:2: input_tokens must be a whole number ≥ 0, got 'many'"),
    ("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,twelve,3\n",
     r"azure.csv:2: ContextTokens must be a whole number ≥ 0, got 'twelve'"),
    ("when.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,12,3\n",
     r"when.csv:2: TIMESTAMP 'yesterday' is not a date and time like 2023-11-16 18:00:00.0124010"),
    ("true.jsonl", '{"timestamp": true, "input_tokens": 3}\n', r"true.jsonl:1: timestamp True is not a number"),
    ("tokens.jsonl", '{"timestamp": 1, "output_tokens": -3}\n', r"tokens.jsonl:1: output_tokens must be a whole"),
    ("nojson.jsonl", '{"timestamp": 1}\n{oops\n', r"nojson.jsonl:2: not JSON"),
    ("header.csv", "time,x\n1,2\n", r"header.csv:1: the header has no timestamp column"),
    ("blocks.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]}\n'
                     '{"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [0, "x"]}\n',
     r"blocks.jsonl:2: hash_ids must be a list of whole numbers"),
])
def test_a_bad_trace_names_its_file_and_line(tmp_path, name, text, message):
    with pytest.raises(TraceError, match=message):
        read_trace(_write(tmp_path, name, text))


def test_an_unknown_region_is_named_with_its_line(tmp_path):
    path = _write(tmp_path, "r.csv", "timestamp,region\n0,a\n1,mars\n")
    with pytest.raises(TraceError, match=r"r.csv:3: region 'mars' is not one of the profile's \(a, b\)"):
        check_names(path, read_trace(path), ["e"], ["a", "b"])


def test_replay_scales_windows_and_loops_and_regions_come_from_the_trace(tmp_path):
    path = _write(tmp_path, "t.csv", "timestamp,region\n" + "".join(f"{t},{'ab'[i % 2]}\n" for i, t in
                                                                     enumerate(range(0, 20, 2))))
    rows = read_trace(path)
    idx, at = replay(rows, Trace(file="t.csv", time_scale=2), run_s=100)
    assert list(at) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] and list(idx) == list(range(10))
    idx, at = replay(rows, Trace(file="t.csv", start_s=4, window_s=6, loop=True), run_s=20)
    assert list(at) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18] and list(idx) == [2, 3, 4] * 3 + [2]
    a = plan(Arrivals(process="trace", trace=Trace(file="t.csv", time_scale=2)), 0, rate=None, duration_s=100,
             trace=rows)
    assert list(a.offsets_ns // 10**9) == [0, 2, 4, 6, 8] and list(a.sample_index) == [0, 2, 4, 6, 8]


def test_profiles_refuse_what_a_process_does_not_take():
    with pytest.raises(ValueError, match="the gamma process needs cv"):
        Arrivals(process="gamma")
    with pytest.raises(ValueError, match="cv: not a setting of the poisson process"):
        Arrivals(cv=2)
    assert _profile({"process": "trace", "trace": {"file": "x"}}).load.rate is None  # its rate is the trace's
    with pytest.raises(ProfileError, match="rate, phases: the trace process sets its own rate"):
        parse_profile({"name": "t", "endpoints": [{"name": "e", "url": "embedded", "protocol": "kserve-http",
                                                   "model": "m"}], "regions": [{"name": "r", "share": 1.0}],
                       "load": {"duration_s": 5, "rate": 10, "arrivals": {"process": "trace",
                                                                          "trace": {"file": "x"}}}}, "test")


def test_mooncake_rows_share_exactly_the_text_of_the_blocks_they_share(tmp_path):
    """A row's prompt is its blocks' text (512 words each, the last cut to its length); the ideal cache holds a
    row's leading blocks an earlier row sent, in whole 16-token blocks, never its last token."""
    import numpy as np

    from tailrace.contract.profile import Endpoint
    from tailrace.harness.workload.trace_prompts import TracePrompts

    rows = read_trace(_write(tmp_path, "m.jsonl", "".join(
        f'{{"timestamp": {t}, "input_length": {n}, "output_length": 4, "hash_ids": {ids}}}\n'
        for t, n, ids in ((0, 1100, [0, 1, 2]), (1, 700, [0, 1]), (2, 1030, [0, 7, 8]), (3, 512, [0])))))
    ep = Endpoint(name="llm", url="http://127.0.0.1:1", protocol="openai-chat", model="m")
    prompts = TracePrompts(ep, rows.input_tokens, rows.output_tokens, rows.hash_ids, np.arange(4), seed=3)
    words = [prompts.prompt(i).split() for i in range(4)]
    assert [len(w) for w in words] == [1100, 700, 1030, 512]
    assert words[1] == words[0][:700]  # blocks 0, 1 then cut: the first row's first 700 words
    assert words[2][:512] == words[0][:512] and words[2][512:1024] != words[0][512:1024]
    assert [prompts.facts(i) for i in range(4)] == [(1100, 0), (700, 688), (1030, 512), (512, 496)]


def test_with_the_models_tokenizer_a_trace_rows_prompt_is_exactly_its_input_length_in_its_tokens(tmp_path):
    """Blocks of the tokenizer's word tokens: each row's prompt encodes to exactly its input_length, and rows that
    share a leading block share its tokens."""
    import itertools

    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from tailrace.contract.profile import Endpoint
    from tailrace.harness.client.tokenizer import PromptTokenizer
    from tailrace.harness.workload.trace_prompts import TracePrompts

    words = ["".join(letters) for letters in itertools.product("abcdefg", repeat=3)][:300]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(words)] * 3, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    tokenizer = PromptTokenizer(tmp_path / "tokenizer.json")
    rows = read_trace(_write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 700, "output_length": 4, '
                                                  '"hash_ids": [0, 1]}\n{"timestamp": 1, "input_length": 600, '
                                                  '"output_length": 4, "hash_ids": [0, 9]}\n'))
    ep = Endpoint(name="llm", url="http://127.0.0.1:1", protocol="openai-chat", model="m")
    prompts = TracePrompts(ep, rows.input_tokens, rows.output_tokens, rows.hash_ids, np.arange(2), 3,
                           tokenizer=tokenizer)
    first, second = (tokenizer.tokenizer.encode(prompts.prompt(i), add_special_tokens=False).ids for i in (0, 1))
    assert (len(first), len(second)) == (700, 600) and first[:512] == second[:512] and first[512:] != second[512:600]
