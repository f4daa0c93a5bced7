"""The live page of a real `tailrace run` in headless Chromium (Playwright driving Debian's chromium): a 2-region run
with a spike phase — the page loads without a script error, its numbers move, the spike shows on the rate chart —
then its stop control ends the run INVALID with every row kept and the report written, which the page links.
(A region cut from the master showing as a gap, and the token on a non-loopback bind: test_separate_hosts.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tailrace.contract.layout import RunLayout
from tailrace.harness.services.processes import free_port
from tests import ROOT
from tests.support import DIGITS_DATA, browser_page, chromium, open_live_page

pytestmark = pytest.mark.integration  # alone: its stop must land before the schedule ends (a busy machine delays it)
# the README's screenshot is made here; written into docs/images only when asked (TAILRACE_SCREENSHOTS=1), so that
# `make test` leaves the checkout as it found it
SCREENSHOT = ROOT / "docs" / "images" / "live-page.jpg"


def endpoints_text(page) -> str:
    return page.inner_text("#endpoints tbody")


def spike_profile(model_repo: Path, path: Path) -> Path:
    path.write_text(f"""
name = "live"
[[endpoints]]
name = "mlp-http"
url = "embedded"
protocol = "kserve-http"
model = "digits_mlp_fp32"
data = "{model_repo / DIGITS_DATA}"
[[regions]]
name = "eu"
share = 0.5
delay_ms = 2
[[regions]]
name = "us"
share = 0.5
delay_ms = 10
[load]
rate = 40
duration_s = 40
warmup_s = 1
seed = 3
phases = [{{ at_s = 5, kind = "spike", factor = 4, duration_s = 3 }}]
[clock]
servers = ["embedded"]
interval_s = 2
[embedded]
models_dir = "{model_repo}"
[[slos]]
metric = "latency"
percentile = 99
threshold_ms = 200
""")
    return path


def test_the_live_page_shows_the_run_and_its_stop_control_ends_it_invalid_with_its_rows(model_repo, tmp_path):
    executable = chromium()
    port = free_port()
    out = tmp_path / "runs"
    run = subprocess.Popen([sys.executable, "-m", "tailrace.cli", "run", str(spike_profile(model_repo, tmp_path / "p.toml")),
                            "--out", str(out), "--ui-bind", f"127.0.0.1:{port}"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with browser_page(executable) as page:
            open_live_page(page, port, run)  # served from the start; its numbers once the workers send
            page.wait_for_function("window.tailraceLive.latest && window.tailraceLive.latest.totals.length === 2",
                                   timeout=60_000)
            first = endpoints_text(page)
            time.sleep(3)
            second = endpoints_text(page)
            assert first != second, first
            assert "eu" in second and "us" in second
            # past the spike (seconds 6–9 of the run): the asked and answered rates show it, per region
            page.wait_for_function("window.tailraceLive.latest.elapsed_s > 11", timeout=60_000)
            time.sleep(1.2)
            data = page.evaluate("window.tailraceLive.chartData('rate')")
            seconds, series = data[0], data[1:]
            for asked, answered in (series[0:2], series[2:4]):
                during = [a for t, a in zip(seconds, answered) if 7 <= t <= 9 and a is not None]
                before = [a for t, a in zip(seconds, answered) if 2 <= t <= 5 and a is not None]
                assert during and before and min(during) > 2 * max(before), (before, during)
                assert max(x for x in asked if x is not None) >= 40  # 4 × 20/s per region, Poisson
            phases = page.evaluate("window.tailraceLive.shape.phases.map(p => p.name)")
            assert any(name.startswith("spike") for name in phases), phases
            assert page.inner_text("#slos tbody").count("(provisional)") == 2
            shot = SCREENSHOT if os.environ.get("TAILRACE_SCREENSHOTS") == "1" else tmp_path / SCREENSHOT.name
            page.screenshot(path=str(shot), type="jpeg", quality=70, full_page=False)
            assert shot.stat().st_size > 20_000
            # the stop control: two clicks (the first arms it), then the run ends as interrupted
            page.click("#stop")
            page.click("#stop")
            page.wait_for_function("window.tailraceLive.ended !== null", timeout=90_000)
            ended = page.evaluate("window.tailraceLive.ended")
            assert ended["verdict"] == "INVALID" and ended["exit_code"] == 4, ended
            assert "The run is over: INVALID" in page.inner_text("#ended")
            page.wait_for_selector("#ended a[data-ready]", timeout=10_000)
            code = run.wait(timeout=120)  # the command is gone; the page's copy of the report stays
            assert page.errors == [], page.errors
            page.click("#ended a")
            page.wait_for_selector("#verdict", timeout=10_000)
            assert "INVALID" in page.inner_text("#verdict")
    finally:
        if run.poll() is None:
            run.kill()
    output = run.stdout.read()
    assert code == 4, output[-3000:]
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["interrupted"] and not manifest["valid"], manifest
    layout = RunLayout(run_dir)
    summaries = [json.loads(p.read_text()) for p in run_dir.glob("regions/*/*/worker.json")]
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in layout.request_chunks())
    assert rows > 0 and rows == sum(s["sent"] for s in summaries)  # every row measured before the stop is kept
    assert sum(s["sent"] for s in summaries) < sum(s["planned"] for s in summaries)  # it did end early
    events = [json.loads(line) for line in (run_dir / "master-events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events if e["event"] in ("stop_requested", "run_ended")] == ["stop_requested",
                                                                                            "run_ended"]
    assert (run_dir / "report" / "index.html").exists()


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_beyond_loopback_every_request_needs_the_token_and_the_feed_follows_the_event_catalogue(tmp_path):
    """The page's server alone (no run): bound to every address, a request without the run's token is refused (401)
    and the stop control it asks for starts nothing; with the token, the feed replays master-events.jsonl and
    live.jsonl as events of the catalogue's names, and ends with run_ended."""
    import httpx

    from tailrace.contract import master_events
    from tailrace.harness.orchestration.live_page import LivePage

    layout = RunLayout(tmp_path)
    master_events.MasterEventLog(layout).write(master_events.WORKER_JOINED, client_id="c1")
    (tmp_path / "live.jsonl").write_text(json.dumps({"event": "live", "t_ns": 1, "elapsed_s": 1.0}) + "\n"
                                         + '{"event": "not_in_the_catalogue"}\n{"torn')
    page = LivePage("0.0.0.0", 0, "s3cret")
    page.attach(layout)
    base = f"http://127.0.0.1:{page.port}"
    try:
        assert page.url.endswith("?token=s3cret")
        for path in ("/", "/events", "/static/uPlot.min.css"):
            assert httpx.get(base + path).status_code == 401
        assert httpx.get(base + "/?token=wrong").status_code == 401
        assert httpx.post(base + "/stop", json={}).status_code == 401
        assert not page.stop_requested.is_set()
        assert httpx.post(base + "/stop?token=s3cret", content="{}").status_code == 415  # not JSON: not a page's
        assert not page.stop_requested.is_set()
        assert "uPlot" in httpx.get(base + "/static/uPlot.iife.min.js", headers={"Authorization": "Bearer s3cret"}).text
        opened = httpx.get(base + "/?token=s3cret")  # the page, opened with the token, sets it for its own files
        assert opened.status_code == 200 and "HttpOnly" in opened.headers["set-cookie"]
        assert httpx.get(base + "/static/uPlot.min.css", cookies=dict(opened.cookies)).status_code == 200
        assert httpx.post(base + "/stop?token=s3cret", json={}).status_code == 202 and page.stop_requested.is_set()
        threading.Timer(0.5, page.finish, ("INVALID", 4, None)).start()
        with httpx.stream("GET", base + "/events?token=s3cret", timeout=10) as r:
            names = [line[len("event: "):] for line in r.iter_lines() if line.startswith("event: ")]
        assert names == ["worker_joined", "stop_requested", "live", "run_ended"]
        assert httpx.post(base + "/stop?token=s3cret", json={}).status_code == 409  # over
    finally:
        page.close()


@pytest.mark.shares_machine  # functional: nothing it asserts needs a quiet machine
def test_a_bad_or_busy_ui_bind_is_one_line_exit_2_and_starts_nothing(tmp_path):
    import socket

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        for flag, says in ((f"127.0.0.1:{port}", f"--ui-bind 127.0.0.1:{port}: Address already in use"),
                           ("8089", "--ui-bind: expected HOST:PORT")):
            r = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(ROOT / "profiles" / "smoke.toml"),
                                "--out", str(tmp_path / "runs"), "--ui-bind", flag],
                               cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
            assert not (tmp_path / "runs").exists()
    finally:
        busy.close()
