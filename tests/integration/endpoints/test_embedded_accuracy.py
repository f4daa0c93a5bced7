"""Accuracy under load, for real: graded items in the open-loop stream to the embedded synthetic_lm, whose scripted
answers are right with a probability that falls as its batch fills and which keeps its own record of each one it got
right (logs/server-answers.jsonl). tailrace's grade must equal the server's, request by request; accuracy falls from
the light phase to the heavy one; an answer cut by max_tokens is truncated, never wrong; a grader that raises costs
one request its grade, not the run; bad graded files and graders are one line, exit 2, before any load."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests import ROOT
from tests.support import why_it_exited

# Alone (no shares_machine mark, but for the bad-input test): every run here must be VALID, and beside the real vLLM
# sweep's backlog these runs' workers and masters stalled 3–22 s (CI, four times: the sweep, the compare, the decision).

ITEMS = [{"question": f"Ana has {i} apples and buys {i % 7 + 2} more. How many apples does she have?",
          "answer": f"{i} + {i % 7 + 2} = {2 * i % 50}\n#### {i + i % 7 + 2}"} for i in range(60)]


def profile_text(models: Path, items: Path, extra_endpoint: str = "", grader: str = "") -> str:
    # the accuracy SLO's bound lies below the server's floor (0.2) with room for the interval: on a CI machine running
    # other tests beside, the heavy phase's batches fill further, its accuracy nears the floor and an interval from
    # 0.195 to 0.52 straddled a bound of 0.2 (INCONCLUSIVE, exit 3: 2026-12-07)
    return f'''name = "graded"
[[endpoints]]
name = "math"
url = "embedded"
protocol = "openai-chat"
model = "synthetic_lm"
prompts = {{ output_tokens = {{ mean = 64 }}, graded = {{ file = "{items}"{grader} }} }}
ttft_timeout_ms = 20000
{extra_endpoint}
[[regions]]
name = "near"
share = 1.0
delay_ms = 1
[generator]
stall_max_ms = 2000  # functional: a host stall beside other tests is not what is tested here
[load]
rate = 5
duration_s = 13
warmup_s = 1
seed = 9
phases = [{{ at_s = 8, rate = 40 }}]
[embedded]
models_dir = "{models}"
accuracy = {{ synthetic_lm = {{ correct = 0.97, fall_per_seq = 0.06, floor = 0.2, answer_after_tokens = 40 }} }}
[[slos]]
metric = "accuracy"
min = 0.1
'''


SHORT = '''[[endpoints]]
name = "short"
url = "embedded"
protocol = "openai-completions"
model = "synthetic_lm"
weight = 0.3
prompts = { graded = { file = "ITEMS", max_tokens = 7 } }
'''


def run(profile: Path, out: Path, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(profile), "--out", str(out), "--quiet"],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)


def requests_of(run_dir: Path) -> pd.DataFrame:
    return pd.concat(pq.read_table(f).to_pandas() for f in sorted(run_dir.glob("regions/*/*/requests-*.parquet")))


def test_each_grade_is_the_servers_and_accuracy_falls_as_the_batch_fills(model_repo, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(d) for d in ITEMS) + "\n")
    profile = tmp_path / "graded.toml"
    profile.write_text(profile_text(model_repo, items, SHORT.replace("ITEMS", str(items))))
    r = run(profile, tmp_path / "runs")
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    df = requests_of(run_dir)
    server = {d["trace_id"]: d for d in map(json.loads, (run_dir / "logs" / "server-answers.jsonl").open())}
    math = df[df["endpoint"] == "math"]
    assert len(math) > 150 and set(math["grade"]) <= {"correct", "wrong"}
    # request by request: tailrace's grade is the server's own decision
    assert [server[t]["correct"] for t in math["trace_id"]] == (math["grade"] == "correct").tolist()
    assert (math["correct"] == (math["grade"] == "correct")).all()
    assert math["item"].between(0, len(ITEMS) - 1).all() and math["item"].nunique() > len(ITEMS) / 2  # drawn
    short = df[df["endpoint"] == "short"]  # 40 tokens of reasoning, then the answer: cut by max_tokens 7
    assert len(short) > 20 and set(short["grade"]) == {"truncated"} and set(short["finish_reason"]) == {"length"}
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    rows = {(a["endpoint"], a["region"], a["phase"]): a for a in summary["accuracy"]}
    light, heavy = rows[("math", "*", 1)], rows[("math", "*", 2)]
    assert (light["offered_rps"], heavy["offered_rps"]) == (5.0, 40.0)
    assert light["accuracy"] > heavy["accuracy"] and light["judged"] + heavy["judged"] == len(math[math["phase"] > 0])
    assert rows[("short", "*", 0)]["judged"] == 0 and rows[("short", "*", 0)]["truncated"] == len(short[short["phase"] > 0])
    (trend,) = [t for t in summary["accuracy_trends"] if t["endpoint"] == "math"]
    assert trend["verdict"] == "falls" and trend["slope_ci_high"] < 0, trend
    (slo,) = [v for v in summary["slos"] if v["metric"] == "accuracy" and v["endpoint"] == "math"]
    assert slo["verdict"] == "PASS" and slo["n"] == light["judged"] + heavy["judged"]
    page = (run_dir / "report" / "index.html").read_text()
    assert "id='accuracy'" in page and "falls</b> as load rises" in page
    assert (run_dir / "report" / "tables" / "accuracy.csv").exists()


def test_a_grader_that_raises_costs_one_request_its_grade_not_the_run(model_repo, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(d) for d in ITEMS[:10]) + "\n")
    (tmp_path / "fussy_grader.py").write_text(
        "def grade(reply, reference):\n"
        "    if reference == '9':\n"
        "        raise ValueError('cannot judge nine')\n"
        "    return reference in reply\n")
    profile = tmp_path / "graded.toml"
    profile.write_text(profile_text(model_repo, items, grader=', grader = "fussy_grader:grade"').replace(
        "phases = [{ at_s = 8, rate = 40 }]", "").replace("duration_s = 13", "duration_s = 6").replace(
        'metric = "accuracy"\nmin = 0.1', 'metric = "e2e"\npercentile = 50\nthreshold_ms = 60000'))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = run(profile, tmp_path / "runs", env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    df = requests_of(next((tmp_path / "runs").iterdir()))
    raised = df[df["grade"] == "grader_error"]
    refs = {i: int(d["answer"].split("#### ")[1]) for i, d in enumerate(ITEMS[:10])}  # item 7's is 9
    assert set(raised["item"]) == {i for i, ref in refs.items() if ref == 9} and len(raised) > 0
    assert set(df.loc[~df["item"].isin(raised["item"]), "grade"]) <= {"correct", "wrong"}


@pytest.mark.shares_machine  # functional: refused before any load
@pytest.mark.parametrize("case, words", [
    ("no_answer", ":2: a gsm8k line needs answer ending '#### N'"),
    ("grader", "grader no_such_module:grade: cannot import no_such_module"),
    ("unknown", "grader 'nope'"),
])
def test_bad_graded_input_is_one_line_before_any_load(model_repo, tmp_path, case, words):
    items = tmp_path / "items.jsonl"
    lines = [ITEMS[0], {"question": "q", "answer": "no marker"}] if case == "no_answer" else ITEMS[:2]
    items.write_text("\n".join(json.dumps(d) for d in lines) + "\n")
    grader = {"grader": ', grader = "no_such_module:grade"', "unknown": ', grader = "nope"'}.get(case, "")
    profile = tmp_path / "bad.toml"
    profile.write_text(profile_text(model_repo, items, grader=grader))
    r = run(profile, tmp_path / "runs", timeout=120)
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert words in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not list((tmp_path / "runs").glob("*/regions/*/*/requests-*.parquet"))


def test_a_sweep_over_load_shows_accuracy_falling_with_its_trend(model_repo, tmp_path):
    """`tailrace sweep` over the offered rate: each point's accuracy with its interval, the trend across the points,
    the recommendation saying it, the page's figure."""
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(d) for d in ITEMS) + "\n")
    profile = tmp_path / "sweep.toml"
    text = profile_text(model_repo, items).replace("phases = [{ at_s = 8, rate = 40 }]\n", "").replace(
        "duration_s = 13", "duration_s = 7")
    profile.write_text(text + '[sweep]\n[[sweep.axes]]\nfield = "load.rate"\nvalues = [4, 40]\n')
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "sweep", str(profile), "--out", str(tmp_path / "sw"),
                        "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=400)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (sweep_dir,) = (tmp_path / "sw").iterdir()
    result = json.loads((sweep_dir / "sweep.json").read_text())
    light, heavy = sorted(result["points"], key=lambda p: p["load"])
    assert light["graded_judged"] > 15 and heavy["graded_judged"] > 150
    assert light["accuracy"] > heavy["accuracy"] and heavy["accuracy_ci_low"] < heavy["accuracy"] < heavy["accuracy_ci_high"]
    (trend,) = result["accuracy_trends"]
    assert trend["loads"] == [4.0, 40.0] and trend["verdict"] == "falls", trend
    assert any(line.startswith("accuracy falls as load rises") for line in result["recommendation"])
    assert (sweep_dir / "accuracy_vs_load.svg").stat().st_size > 0 and "Accuracy against load" in (
        sweep_dir / "index.html").read_text()


def test_compare_gives_the_change_in_accuracy_paired_on_the_items(model_repo, tmp_path):
    """Two runs of one seed, the server right 97% then 60% of the time at batch 1: `tailrace compare` pairs the
    items both runs judged and says B is less accurate, its interval below 0."""
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(d) for d in ITEMS) + "\n")
    runs = []
    for correct in (0.97, 0.6):
        profile = tmp_path / f"p{correct}.toml"
        profile.write_text(profile_text(model_repo, items).replace("phases = [{ at_s = 8, rate = 40 }]\n", "").replace(
            "rate = 5\n", "rate = 12\n").replace("duration_s = 13", "duration_s = 8").replace(
            "correct = 0.97, fall_per_seq = 0.06, floor = 0.2", f"correct = {correct}, fall_per_seq = 0.0").replace(
            'metric = "accuracy"\nmin = 0.1', 'metric = "e2e"\npercentile = 50\nthreshold_ms = 60000'))
        out = tmp_path / f"runs{correct}"
        r = run(profile, out)
        assert r.returncode == 0, why_it_exited(r, out)
        runs.append(next(out.iterdir()))
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "compare", str(runs[0]), str(runs[1]), "--out",
                        str(tmp_path / "cmp")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode in (0, 1, 3), r.stdout[-2000:] + r.stderr[-2000:]
    assert "accuracy: B =" in r.stdout
    (row,) = json.loads((tmp_path / "cmp" / "compare_accuracy.json").read_text())
    assert row["endpoint"] == "math" and row["paired"] and row["items"] > 30
    assert row["ci_high"] < 0 and row["verdict"] == "B less accurate", row


CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Chile", "Santiago"),
            ("Egypt", "Cairo"), ("Norway", "Oslo"), ("Cuba", "Havana"), ("Ghana", "Accra"), ("Nepal", "Kathmandu")]


def test_a_pipelines_and_a_sessions_answers_are_graded_against_their_lines_references(model_repo, tmp_path):
    """A RAG file's line and a sessionized file's turn may carry a reference: the pipeline's answer and the turn's
    reply are graded against it (contains), each as the server decided; the pipeline's accuracy is its own row."""
    rag = tmp_path / "rag.jsonl"
    rag.write_text("\n".join(json.dumps({"query": f"what is the capital of {c}", "passages": [f"{c} is a country"],
                                         "reference": city}) for c, city in CAPITALS) + "\n")
    turns = tmp_path / "sessions.jsonl"
    turns.write_text("\n".join(json.dumps({"session_id": f"s{i}", "text": f"Name the capital of {c}, please.",
                                           "reference": city, "output_tokens": 24})
                               for i, (c, city) in enumerate(CAPITALS)) + "\n")
    profile = tmp_path / "chains.toml"
    profile.write_text(f'''name = "chains"
[[endpoints]]
name = "chat"
url = "embedded"
protocol = "openai-chat"
model = "synthetic_lm"
weight = 1
prompts = {{ file = "{turns}", output_tokens = {{ mean = 24 }}, ignore_eos = false }}
sessions = {{ turns = {{ mean = 1 }} }}
[[endpoints]]
name = "answer"
url = "embedded"
protocol = "openai-chat"
model = "synthetic_lm"
weight = 0
prompts = {{ ignore_eos = false }}
[[pipelines]]
name = "rag"
weight = 1
file = "{rag}"
max_tokens = 24
stages = [{{ endpoint = "answer" }}]
[[regions]]
name = "near"
share = 1.0
delay_ms = 1
[load]
rate = 8
duration_s = 8
warmup_s = 1
seed = 4
[embedded]
models_dir = "{model_repo}"
accuracy = {{ synthetic_lm = {{ correct = 0.7, answer_after_tokens = 4 }} }}
[[slos]]
metric = "e2e"
percentile = 50
threshold_ms = 60000
''')
    r = run(profile, tmp_path / "runs")
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    df = requests_of(run_dir).sort_values("t_intended")
    server: dict[str, list[bool]] = {}
    for d in map(json.loads, (run_dir / "logs" / "server-answers.jsonl").open()):
        server.setdefault(d["trace_id"], []).append(d["correct"])
    piped, sessions = df[df["pipeline"] == "rag"], df[(df["session_id"] >= 0) & (df["pipeline"] == "")]
    assert len(piped) > 15 and len(sessions) > 15
    for part in (piped, sessions):
        assert set(part["grade"]) <= {"correct", "wrong"} and part["grade"].nunique() == 2
        assert [server[t].pop(0) for t in part["trace_id"]] == (part["grade"] == "correct").tolist()
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    endpoints = {a["endpoint"] for a in summary["accuracy"]}
    assert {"pipeline rag", "chat"} <= endpoints and "answer" not in endpoints  # the pipeline's answers: its own row


def test_a_decision_between_graded_llm_variants_ranks_their_accuracy_with_mcnemar(model_repo, tmp_path):
    """Two synthetic LLMs serving the same graded items, one right 95% of the time and one 35%: the [decision] ranks
    the accurate one first and tests the difference with McNemar's exact test on the items both answered."""
    import shutil

    repo = tmp_path / "models"
    for name in ("synthetic_lm", "synthetic_lm_b"):
        shutil.copytree(model_repo / "synthetic_lm", repo / name)
        config = repo / name / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "synthetic_lm"', f'name: "{name}"'))
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps(d) for d in ITEMS) + "\n")
    endpoints = "".join(f'''[[endpoints]]
name = "{name}"
url = "embedded"
protocol = "openai-chat"
model = "{model}"
prompts = {{ output_tokens = {{ mean = 32 }}, graded = {{ file = "{items}" }} }}
''' for name, model in (("accurate", "synthetic_lm"), ("sloppy", "synthetic_lm_b")))
    profile = tmp_path / "variants.toml"
    profile.write_text(f'''name = "graded-variants"
{endpoints}[[regions]]
name = "near"
share = 1.0
[load]
rate = 24
duration_s = 10
warmup_s = 1
seed = 6
[embedded]
models_dir = "{repo}"
accuracy = {{ synthetic_lm = {{ correct = 0.95 }}, synthetic_lm_b = {{ correct = 0.35 }} }}
[decision]
weights = {{ accuracy = 3.0, p95_ms = 1.0 }}
[[slos]]
metric = "e2e"
percentile = 50
threshold_ms = 60000
''')
    r = run(profile, tmp_path / "runs")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = json.loads((next((tmp_path / "runs").iterdir()) / "report" / "summary.json").read_text())
    decision = summary["decision"]
    variants = {v["name"]: v for v in decision["variants"]}
    assert variants["accurate"]["accuracy"] > variants["sloppy"]["accuracy"] + 0.2
    assert variants["accurate"]["samples"] > 80 and variants["accurate"]["distinct_samples"] > 35
    (pair,) = decision["pairwise"]
    assert pair["a"] == "accurate" and pair["accuracy_test"].startswith("McNemar") and pair["accuracy_p"] < 0.01, pair
