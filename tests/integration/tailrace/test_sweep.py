"""`tailrace sweep` for real: synthetic_lm (the embedded server's LLM whose step takes 8 ms + 0.1 ms per sequence
in the batch) at two loads × two max_num_seqs, an SLO tier's edge searched, the report written — and the measured
throughput–interactivity points on the curve its step time implies; a configuration whose server never becomes
ready fails its points and the sweep goes on; a sweep SIGKILLed mid-point resumes with nothing lost."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests import ROOT

STEP_MS, PER_SEQ_MS = 8.0, 0.1  # synthetic_lm (generative_build.SYNTHETIC_TIMES)
OUTPUT = 48


def profile_text(models: Path, sweep: str, duration_s: float = 5) -> str:
    return f'''name = "frontier"
[[endpoints]]
name = "chat"
url = "embedded"
protocol = "openai-chat"
model = "synthetic_lm"
prompts = {{ input_tokens = {{ mean = 8 }}, output_tokens = {{ mean = {OUTPUT} }} }}
ttft_timeout_ms = 20000
[[regions]]
name = "near"
share = 1.0
delay_ms = 1
[load]
rate = 3
duration_s = {duration_s}
warmup_s = 1
seed = 5
[embedded]
models_dir = "{models}"
[[slos]]
metric = "e2e"
percentile = 90
threshold_ms = 60000
{sweep}'''


SWEEP = '''[sweep]
refine = 1
[[sweep.axes]]
field = "load.rate"
values = [5, 14]
[[sweep.axes]]
field = "embedded.max_num_seqs.synthetic_lm"
name = "max_num_seqs"
values = [4, 16]
[sweep.tiers]
interactive = [{ metric = "ttft", percentile = 90, threshold_ms = 300 }]
'''


def sweep_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailrace.cli", "sweep", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def the_sweep(out: Path) -> tuple[Path, dict]:
    (sweep_dir,) = out.iterdir()
    return sweep_dir, json.loads((sweep_dir / "sweep.json").read_text())


def test_a_sweep_over_load_and_max_num_seqs_finds_the_known_frontier_and_each_tiers_edge(model_repo, tmp_path):
    profile = tmp_path / "frontier.toml"
    profile.write_text(profile_text(model_repo, SWEEP, duration_s=6))
    r = sweep_cli(str(profile), "--out", str(tmp_path / "runs"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sweep_dir, result = the_sweep(tmp_path / "runs")
    points = result["points"]
    declared = [p for p in points if not p["added"]]
    assert len(declared) == 4 and all(p["status"] == "done" for p in points) and result["complete"]
    by = {(p["levels"]["max_num_seqs"], p["load"]): p for p in declared}
    # four sequences at most cannot keep up with 14 streams a second of 48 tokens (672 tokens/s > 4 × 1000 / 8.4):
    # the server emits what it can while the load lasts, and the point did not hold its load
    assert by[(4, 14.0)]["backlog"] and by[(4, 14.0)]["tiers"]["interactive"] == "fail"
    assert not by[(16, 14.0)]["backlog"] and by[(16, 14.0)]["tiers"]["interactive"] == "pass"
    assert by[(4, 5.0)]["tiers"]["interactive"] == "pass" and by[(16, 5.0)]["tiers"]["interactive"] == "pass"
    # goodput under the tier: nearly every request of a point that holds; few of one that fell behind
    assert by[(16, 14.0)]["goodput_rps"]["interactive"] > 0.9 * by[(16, 14.0)]["achieved_rate"]
    assert by[(4, 14.0)]["goodput_rps"]["interactive"] < 0.5 * by[(16, 14.0)]["goodput_rps"]["interactive"]
    edges = {e["config"]: e for e in result["edges"]}
    assert edges["max_num_seqs=16"]["highest_pass"] == 14 and edges["max_num_seqs=16"]["lowest_fail"] is None
    four = edges["max_num_seqs=4"]
    assert [p["load"] for p in points if p["added"]] == [9.5]  # the middle of its bracket, searched
    assert (four["highest_pass"], four["lowest_fail"]) in ((5, 9.5), (9.5, 14)), four
    # every point off a backlog on the known curve: a step of b sequences takes c + 0.1·b ms (c: 8 ms and the
    # server's own overhead per step), so a stream's TPOT = 1000 / u and the time-averaged batch b = X / u (the
    # server's tokens/s over one stream's) satisfy TPOT − 0.1·b = c (b + 1 where the batch is not full: a request sees
    # itself beside the time-averaged batch). Each point's interval of c, from its intervals of X and u, must meet
    # the others' (one c for the server), and c lie within the known-times test's 1.5 ms of 8 ms
    frontier = result["frontier"]
    assert len(frontier) >= 3 and all(f["config"] for f in frontier)
    lows, highs = [], []
    for f in frontier:
        u, x = f["tokens_per_s_per_user"], f["tokens_per_s"]
        tpot_low, tpot_high = 1000 / u["ci_high"], 1000 / u["ci_low"]
        batch_low, batch_high = x["ci_low"] / u["value"], x["ci_high"] / u["value"]
        lows.append(tpot_low - PER_SEQ_MS * (batch_high + 1))
        highs.append(tpot_high - PER_SEQ_MS * batch_low)
    assert max(lows) <= min(highs) + PER_SEQ_MS / 2, list(zip(lows, highs))  # one step-time curve for every point
    assert STEP_MS - 0.2 <= max(lows) and min(highs) <= STEP_MS + 1.5, list(zip(lows, highs))
    assert any(f["pareto"] for f in frontier)
    for name in ("index.html", "points.csv", "edges.csv", "frontier.csv", "frontier.svg", "latency_vs_load.svg"):
        assert (sweep_dir / name).stat().st_size > 0, name
    assert "interactive: max_num_seqs=16 holds 14" in r.stdout
    for p in points:  # each point is a run with its own report
        assert (sweep_dir / p["run_dir"] / "report" / "summary.json").exists()


EXTEND = '''[sweep]
refine = 0
extend_s = 30
[[sweep.axes]]
field = "load.rate"
values = [3]
[sweep.tiers]
loose = [{ metric = "ttft", percentile = 90, threshold_ms = 5000 }]
'''


@pytest.mark.shares_machine  # functional: a TTFT p90 bound of 5 s, far above a light load's, once enough requests
def test_a_point_too_short_to_decide_runs_again_long_enough_and_is_decided(model_repo, tmp_path):
    """2 s at 3 streams/s is ~6 requests, too few for a p90 (undecided); extend_s runs the point again for as long as
    deciding takes (capacity search's rule), and the longer run, decided, is the point; the short one stays on disk."""
    profile = tmp_path / "short.toml"
    profile.write_text(profile_text(model_repo, EXTEND, duration_s=2))
    r = sweep_cli(str(profile), "--out", str(tmp_path / "runs"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sweep_dir, result = the_sweep(tmp_path / "runs")
    [point] = result["points"]
    # (twice where the first longer run's requests were still too correlated to decide: the ladder capacity climbs)
    assert point["extended_from_s"][0] == 2.0 and point["duration_s"] >= 4.0, point
    assert point["tiers"] == {"loose": "pass"} and point["to_decide_s"] is None
    assert "loose undecided (too few requests in 2 s); again for" in r.stdout
    # the short runs kept beside the one that decided
    assert len(list((sweep_dir / "points").iterdir())) == 1 + len(point["extended_from_s"]) + point["generator_rerun"]
    longer = json.loads((sweep_dir / point["run_dir"] / "report" / "summary.json").read_text())
    assert f"load.duration_s={point['duration_s']:g}" in longer["manifest"]["overrides"]


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_server_that_never_becomes_ready_fails_its_points_and_the_sweep_goes_on(model_repo, tmp_path):
    """A serve command per configuration (the embedded server, started as a server tailrace does not own): one
    configuration's command line is refused at once — its points fail with the log's tail, the other runs."""
    from tailrace.harness.services.processes import free_port

    port, grpc = free_port(), free_port()
    serve = (f'[sweep.serve]\ncommand = "{sys.executable} -m tailrace.cli serve --models {model_repo} --model '
             f'synthetic_lm --http-port {port} --grpc-port {grpc} --max-num-seqs synthetic_lm={{seqs}} {{extra}}"\n'
             f'health_url = "http://127.0.0.1:{port}/v2/health/ready"\nready_timeout_s = 60\n')
    sweep = ('[sweep]\n[[sweep.axes]]\nname = "seqs"\nvalues = [4]\n[[sweep.axes]]\nname = "extra"\n'
             'values = ["", "--no-such-flag"]\n' + serve)
    profile = tmp_path / "serve.toml"
    profile.write_text(profile_text(model_repo, sweep, duration_s=3).replace('url = "embedded"',
                                                                             f'url = "http://127.0.0.1:{port}"'))
    r = sweep_cli(str(profile), "--out", str(tmp_path / "runs"), timeout=300)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    sweep_dir, result = the_sweep(tmp_path / "runs")
    status = {p["levels"]["extra"]: p for p in result["points"]}
    assert status[""]["status"] == "done" and status["--no-such-flag"]["status"] == "failed"
    assert "never became ready" in status["--no-such-flag"]["why"] and "no-such-flag" in status["--no-such-flag"]["why"]
    assert len([f for f in (sweep_dir / "logs").iterdir() if f.name.startswith("serve-")]) == 2


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_sweep_killed_mid_point_resumes_keeping_what_it_measured(model_repo, tmp_path):
    profile = tmp_path / "frontier.toml"
    profile.write_text(profile_text(model_repo, SWEEP.replace("refine = 1", "refine = 0"), duration_s=4))
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "tailrace.cli", "sweep", str(profile), "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:  # until the second point's run has begun
            for child in _descendants(proc.pid):
                seen[child.pid] = child
            runs = list(out.glob("*/points/*")) if out.exists() else []
            if len(runs) >= 2 and any("--worker" in " ".join(c.cmdline()) for c in _descendants(proc.pid)):
                break
            time.sleep(0.2)
        for child in _descendants(proc.pid):
            seen[child.pid] = child
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        for child in seen.values():  # what the killed sweep had started, by PID
            try:
                child.kill()
            except psutil.Error:
                pass
    sweep_dir, before = the_sweep(out)
    assert [p["status"] for p in before["points"]] == ["done", "interrupted"] or len(before["points"]) == 2
    r = sweep_cli("--resume", str(sweep_dir))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    _, after = the_sweep(out)
    assert after["complete"] and len(after["points"]) == 4 and all(p["status"] == "done" for p in after["points"])
    assert after["points"][0] == before["points"][0]  # the finished point kept, not run again
    assert len(after["interrupted_runs"]) == 1 and (sweep_dir / after["interrupted_runs"][0]).is_dir()
    reruns = sum(p["generator_rerun"] for p in after["points"])  # a point whose generator fell behind: run twice
    assert len(list((sweep_dir / "points").iterdir())) == 5 + reruns  # four points' runs and the one cut short, kept


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_bad_input_is_one_line_and_starts_nothing(model_repo, tmp_path):
    profile = tmp_path / "bad.toml"
    profile.write_text(profile_text(model_repo, '[sweep]\n[[sweep.axes]]\nfield = "embedded.max_num_seqz.x"\n'
                                                'values = [1]\n'))
    r = sweep_cli(str(profile), "--out", str(tmp_path / "runs"), timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "max_num_seqz" in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()


pytestmark = pytest.mark.timeout(600)


def _point(page) -> dict | None:
    """The point the sweep's live page shows (None while it loads or reloads for the next one)."""
    try:
        return page.evaluate("window.tailraceLive && window.tailraceLive.point")
    except Exception:  # noqa: BLE001 - the page is reloading for the next point: its context is gone for a moment
        return None


@pytest.mark.shares_machine  # functional: the stop lands within a point of 60 s, which it ends
def test_one_live_page_follows_the_sweep_point_by_point_and_its_stop_ends_the_sweep_resumably(model_repo, tmp_path):
    """`tailrace sweep --ui-bind`: one page through the points — it says which point runs, with the points done and
    left and the time left, reloads for the next point's run; its stop control ends that point (kept as interrupted,
    run again by --resume) and the sweep, whose report the page links."""
    from tailrace.harness.services.processes import free_port
    from tests.support import browser_page, chromium, open_live_page

    executable, port = chromium(), free_port()
    sweep = '[sweep]\n[[sweep.axes]]\nfield = "load.duration_s"\nname = "seconds"\nvalues = [3, 60]\n'
    profile = tmp_path / "paged.toml"
    profile.write_text(profile_text(model_repo, sweep))
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "tailrace.cli", "sweep", str(profile), "--out", str(out),
                             "--ui-bind", f"127.0.0.1:{port}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        with browser_page(executable) as page:
            open_live_page(page, port, proc)  # served from the sweep's start
            points = []
            deadline = time.monotonic() + 180
            while not (points and points[-1]["index"] == 2):  # point 1, then the page reloads for point 2
                assert time.monotonic() < deadline and proc.poll() is None, (points, proc.stdout.read())
                if (shown := _point(page)) is not None and (not points or shown["index"] != points[-1]["index"]):
                    points.append(shown)
                time.sleep(0.2)
            first, second = points[0], points[-1]
            assert first["label"] == "seconds=3" and first["declared"] == 2 and first["done"] == 0, points
            assert second["label"] == "seconds=60" and (second["done"], second["left"]) == (1, 1), points
            assert second["eta_s"] is not None and second["eta_s"] > 0
            assert "point 2 — seconds=60" in page.inner_text("#sweep") and "1 done, 1 left" in page.inner_text("#sweep")
            page.wait_for_function("window.tailraceLive.latest && window.tailraceLive.latest.elapsed_s > 1",
                                   timeout=90_000)  # point 2's own run on the page
            assert page.inner_text("#stop") == "Stop the sweep"
            page.click("#stop")
            page.click("#stop")
            page.wait_for_function("window.tailraceLive.ended !== null", timeout=120_000)
            ended = page.evaluate("window.tailraceLive.ended")
            assert (ended["verdict"], ended["exit_code"]) == ("STOPPED", 3), ended
            assert "The sweep is over: STOPPED" in page.inner_text("#ended")
            page.wait_for_selector("#ended a[data-ready]", timeout=10_000)  # the sweep's report, fetched
            code = proc.wait(timeout=120)
            assert page.errors == [], page.errors
    finally:
        if proc.poll() is None:
            proc.kill()
    output = proc.stdout.read()
    assert code == 3 and "stopped from the live page" in output and "--resume" in output, output[-3000:]
    sweep_dir, result = the_sweep(out)
    assert not result["complete"] and [(p["levels"]["seconds"], p["status"]) for p in result["points"]] == [(3, "done")]
    (cut,) = result["interrupted_runs"]
    assert json.loads((sweep_dir / cut / "manifest.json").read_text())["interrupted"]  # kept, run again by --resume
    assert (sweep_dir / "index.html").exists()


@pytest.mark.shares_machine  # functional: eight sequences hold ~3× the tokens one does; no timing is compared closely
def test_a_real_vllm_started_per_max_num_seqs_gives_two_distinct_points_and_is_stopped(tmp_path):
    """A server tailrace does not own, as `vllm bench sweep serve` runs it: the sweep's serve command starts the real
    vLLM (CPU) once per max_num_seqs, waits for its health URL, runs the point, stops it by PID and keeps its log.
    One sequence at a time cannot hold 16 streams a second of 128 tokens (2,048 tokens/s); eight hold far more (alone
    at 8 streams/s: 287 tokens/s [207, 388] against 1,028 [741, 1,389]; beside other tests 478 [345, 646] against
    896 [645, 1,210] — too close at that rate, so it asks for twice as much). vLLM's compute is bound to the
    endpoint's core, as the tests' own vLLM is: unbound, its OpenMP threads spun on both cores and a run beside it
    stalled 250 ms and was INVALID (twice in CI). Bound, alone: 255 tokens/s [202, 318] against 1,713 [1,358, 2,132]."""
    import socket

    from bench.vllm_sweep import profile_text as vllm_profile
    from tailrace.harness.services.processes import free_port
    from tailrace.harness.services.vllm_server import VllmUnavailable, tiny_model, vllm_python
    from tests.support import IN_CI, split_cpus

    try:
        python = vllm_python()
    except VllmUnavailable as exc:
        if IN_CI:
            pytest.fail(f"vLLM must be installed in CI (make test creates .venv-vllm): {exc}")
        pytest.skip(str(exc))
    port = free_port()
    profile = tmp_path / "vllm.toml"
    profile.write_text(vllm_profile(python, tiny_model(python), port, rates=(16,), seqs=(1, 8), duration_s=5,
                                    cpus=split_cpus()[0]))  # the endpoint's core: a shared test beside it keeps one
    r = sweep_cli(str(profile), "--out", str(tmp_path / "runs"), "--quiet")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sweep_dir, result = the_sweep(tmp_path / "runs")
    by = {p["levels"]["max_num_seqs"]: p for p in result["points"]}
    assert set(by) == {1, 8} and all(p["status"] == "done" for p in by.values()) and result["complete"]
    one, eight = by[1]["output_tokens_per_s"], by[8]["output_tokens_per_s"]
    assert one["ci_high"] < eight["ci_low"], (one, eight)  # two configurations, apart beyond their intervals
    assert by[1]["backlog"] and eight["value"] > 1.5 * one["value"], (by[1], by[8])
    logs = sorted(f.name for f in (sweep_dir / "logs").iterdir() if f.name.startswith("serve-"))
    assert len(logs) == 2, logs
    assert all("Application startup complete" in (sweep_dir / "logs" / f).read_text() for f in logs)
    with socket.socket() as s:  # the last server stopped: nothing listens on its port
        assert s.connect_ex(("127.0.0.1", port)) != 0
