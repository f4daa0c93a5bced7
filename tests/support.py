"""Test support, in one module: fixtures (registered by tests/conftest.py), profiles written on the fly, runs
driven through LocalRun, run directories with known truth, real endpoint and chronyd processes, a fake sender."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from tailrace.command_lines import tailrace_argv
from tailrace.contract.layout import RunLayout
from tailrace.contract.master_events import PLAN_SENT, START_SENT, read_master_events
from tailrace.contract.profile import Profile, parse_profile
from tailrace.contract.records import ClockRow, RequestRow
from tailrace.contract.requests import InputSpec, RequestSpec
from tailrace.endpoints.models.model_build import DATA_FILE as DIGITS_DATA
from tailrace.endpoints.models.model_build import build_repository
from tailrace.harness.client.outcome import Outcome, Send
from tailrace.harness.client.payloads import Payloads
from tailrace.harness.client.request_data import SampleSet
from tailrace.harness.orchestration.local_run import LocalRun
from tailrace.harness.orchestration.run_record import write_manifest
from tailrace.harness.services.processes import ManagedProcess, free_port, start_process, wait_http_ok
from tailrace.harness.spool.recorder import clock_writer, request_writer
from tailrace.harness.worker.clock import WorkerClock, measure_offset
from tests import ROOT

IN_CI = os.environ.get("CI") == "true"


# -- fixtures: one model repository and one endpoint per session ------------------------------------


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory) -> Path:
    """The model zoo, built once per session: under pytest-xdist, once for all its workers (tests only read it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    out = root / "models"
    with open(root / "models.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "models.built").exists():
            shutil.rmtree(out, ignore_errors=True)
            build_repository(out)
            (root / "models.built").touch()
    return out


class Endpoint:
    def __init__(self, proc, host: str, http_port: int, grpc_port: int) -> None:
        self.proc, self.host, self.http_port, self.grpc_port = proc, host, http_port, grpc_port

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def http_addr(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_addr(self) -> str:
        return f"{self.host}:{self.grpc_port}"


def start_endpoint(repo: Path, log_dir: Path, extra: list[str] | None = None, host: str = "127.0.0.1") -> Endpoint:
    """`tailrace serve` (the user's command, with its flags `extra`), ready."""
    http_port, grpc_port = free_port(host), free_port(host)
    proc = start_process(f"endpoint {host}:{http_port}", tailrace_argv(
        "serve", "--models", str(repo), "--host", host, "--http-port", str(http_port), "--grpc-port", str(grpc_port),
        *(extra or [])), log_dir / f"endpoint-{http_port}.log")
    try:
        wait_http_ok(f"http://{host}:{http_port}/v2/health/ready", proc, 60.0)
    except RuntimeError:
        proc.stop()
        raise
    return Endpoint(proc, host, http_port, grpc_port)


@pytest.fixture(scope="session")
def endpoint(model_repo, tmp_path_factory):
    ep = start_endpoint(model_repo, tmp_path_factory.mktemp("endpoint-logs"),
                        ["--max-body-bytes", "65536", "--enable-fault-injection"])
    yield ep
    ep.proc.stop()


# -- profiles and runs ------------------------------------------------------------------------------
def split_cpus() -> tuple[list[int] | None, list[int] | None]:
    """(endpoint CPUs, generator CPUs): the last CPU for the endpoint, the first for the generators, so that
    they do not delay each other on a small machine; (None, None) on a single CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[-1:], cpus[:1]) if len(cpus) >= 2 else (None, None)


def why_it_exited(completed, out_dir: Path) -> str:
    """For an assertion's message: a `tailrace run`'s output tails and, for each run under `out_dir`, its verdict,
    why it is INVALID and the SLOs that did not pass (`--quiet` prints none of them)."""
    lines = [completed.stdout[-2000:], completed.stderr[-2000:]]
    for summary in sorted(Path(out_dir).glob("*/report/summary.json")):
        s = json.loads(summary.read_text())
        lines.append(f"{summary.parent.parent.name}: {s['verdict']}; invalid: {s['invalid_reasons']}; not PASS: "
                     f"{[(v.get('slo'), v.get('verdict')) for v in s.get('slos', []) if v.get('verdict') != 'PASS']}")
    return "\n".join(lines)


def make_profile(models_dir: Path, **overrides) -> Profile:
    """A two-region profile on the embedded endpoint; `a__b=v` overrides nested keys. Endpoints of the digits
    models get their held-out data and a label check unless they set `data`."""
    data = {
        "name": "test",
        "endpoints": [
            {"name": "mlp-http", "url": "embedded", "protocol": "kserve-http", "model": "digits_mlp_fp32"},
            {"name": "mlp-grpc", "url": "embedded", "protocol": "kserve-grpc", "model": "digits_mlp_fp32"},
        ],
        "regions": [{"name": "near", "share": 0.5, "delay_ms": 2},
                    {"name": "far", "share": 0.5, "delay_ms": 10, "jitter_ms": 1}],
        "load": {"rate": 150, "duration_s": 10, "warmup_s": 1, "seed": 42},
        "clock": {"servers": ["embedded"], "interval_s": 2},
        "embedded": {"models_dir": str(models_dir)},
    }
    for key, value in overrides.items():
        node = data
        parts = key.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    for ep in data["endpoints"]:  # the digits models' held-out set, checked against their labels
        if str(ep["model"]).startswith(("digits_", "synthetic_mm1")) and "data" not in ep:
            ep.setdefault("check", {"output": "label"})
            ep["data"] = str(Path(models_dir) / DIGITS_DATA)
    return parse_profile(data, "test profile")


def run_with(profile: Profile, out: Path, during=None) -> tuple[LocalRun, dict]:
    """Run a profile; `during(run)` is called in a thread once the processes are up."""
    run = LocalRun(profile, out, quiet=True)
    thread = None
    try:
        run.start()
        if during is not None:
            thread = threading.Thread(target=during, args=(run,), daemon=True)
            thread.start()
        run.wait(lambda _r: None)
    finally:
        run.stop()
        if thread is not None:
            thread.join(timeout=30)
    manifest = run.manifest(interrupted=False)
    write_manifest(run.layout, manifest)
    return run, manifest


def assert_valid(manifest: dict) -> None:
    """The run is VALID. In a test that shares the machine (`shares_machine`), the generator's own timing is let off
    (contract/generator_limits.py: is_generator_timing): the other worker's test can starve this one's generator
    of its core (CI saw sends 0.25 and 6.8 s late beside it), which a shared machine cannot promise and none of its
    functional checks needs. Every other reason fails it; a test alone on the machine holds the timing too."""
    reasons = manifest["invalid_reasons"]
    if _turn is not None and _turn.shared:
        from tailrace.contract.generator_limits import is_generator_timing
        let_off = [r for r in reasons if is_generator_timing(r)]
        if let_off:
            print(f"shared machine: the generator's timing let off ({'; '.join(let_off)})")
        reasons = [r for r in reasons if not is_generator_timing(r)]
    assert not reasons, reasons


def sleep_until_measuring(run: LocalRun, seconds_into_measured: float, timeout: float = 90.0) -> None:
    """Sleep until `seconds_into_measured` s after warm-up ends, using the start instant the run used: the
    master's START once every worker was ready, else (none sent by then) the plan's."""
    deadline = time.time() + timeout
    start_ref_ns = None
    while start_ref_ns is None and time.time() < deadline:
        events = read_master_events(run.layout)
        plan = next((e for e in events if PLAN_SENT.matches(e)), None)
        start = next((e for e in events if START_SENT.matches(e)), None)
        if start is not None:
            start_ref_ns = start["start_ref_ns"]
        elif plan is not None and time.time_ns() >= plan["start_ref_ns"]:
            start_ref_ns = plan["start_ref_ns"]
        else:
            time.sleep(0.05)
    if start_ref_ns is None:
        raise RuntimeError("the master never announced a start instant")
    target = start_ref_ns / 1e9 + run.profile.load.warmup_s + seconds_into_measured
    time.sleep(max(0.0, target - time.time()))


def remote_profile_toml(name: str, endpoints: list[tuple[str, str, str, str, Path]], regions: dict[str, float], *,
                        rate: float, duration_s: float, seed: int, warmup_s: float = 1,
                        master_timeout_s: float | None = None, file_seconds: float | None = None) -> str:
    """A profile for a master and workers started by hand (tailrace master / worker): the master is the clock
    reference, one error-rate SLO; `endpoints` are (name, url, protocol, model, data file), each label-checked.
    `file_seconds`: how often the workers' chunk writers write a file (generator.file_seconds; default 5 s)."""
    text = f'name = "{name}"\n'
    for endpoint, url, protocol, model, data in endpoints:
        text += (f'[[endpoints]]\nname = "{endpoint}"\nurl = "{url}"\nprotocol = "{protocol}"\nmodel = "{model}"\n'
                 f'data = "{data}"\ncheck = {{ output = "label" }}\n')
    for region, share in regions.items():
        text += f'[[regions]]\nname = "{region}"\nshare = {share}\n'
    return text + (f"[load]\nrate = {rate}\nduration_s = {duration_s}\nwarmup_s = {warmup_s}\nseed = {seed}\n"
                   '[clock]\nservers = ["master"]\ninterval_s = 2\n'
                   '[[slos]]\nmetric = "error_rate"\nthreshold = 0.05\n'
                   + _generator_table(master_timeout_s=master_timeout_s or None, file_seconds=file_seconds))


def _generator_table(**settings: float | None) -> str:
    """A profile's [generator] table of the `settings` given (None: left out), or nothing."""
    lines = [f"{key} = {value}\n" for key, value in settings.items() if value is not None]
    return "[generator]\n" + "".join(lines) if lines else ""


# -- run directories with known truth (analysis tests) ----------------------------------------------
BASE_NS = 1_790_000_000_000_000_000


def profile_dict(rate: float, duration_s: float, regions=("r1", "r2"), endpoints=("e1",), slos=None) -> dict:
    return {"name": "synthetic", "load": {"rate": rate, "duration_s": duration_s, "warmup_s": 0, "seed": 0,
                                          "phases": []},
            "regions": [{"name": r, "share": 1 / len(regions)} for r in regions],
            "endpoints": [{"name": e, "url": "http://127.0.0.1:1", "protocol": "kserve-http", "model": "m",
                           "weight": 1.0} for e in endpoints],
            "slos": slos or [], "embedded": {"slots": {}}}


def write_run(run_dir: Path, *, workers: dict[str, dict], profile: dict, valid: bool = True, seed: int = 0,
              chunk_rows: int = 500, warnings: list[str] | None = None) -> dict:
    """workers: name → {region, offset_ms (reference − local), latency_ms (array-like or callable(n, rng)),
    rate, duration_s, errors (fraction)}. Returns the truth (true reference send times per trace)."""
    rng = np.random.default_rng(seed)
    truth = {}
    for name, w in workers.items():
        d = RunLayout(run_dir).worker(w["region"], name)
        n = int(w["rate"] * w["duration_s"])
        t_ref = BASE_NS + np.sort(rng.uniform(0, w["duration_s"], n) * 1e9).astype(np.int64)
        offset_ns = int(w.get("offset_ms", 0) * 1e6)
        local = t_ref - offset_ns
        lat = w["latency_ms"](n, rng) if callable(w["latency_ms"]) else np.full(n, float(w["latency_ms"]))
        lat_ns = (np.asarray(lat) * 1e6).astype(np.int64)
        errors = rng.random(n) < w.get("errors", 0.0)
        writer = request_writer(d, chunk_rows, 1e9)
        for i in range(n):
            trace = f"{rng.integers(0, 2**63):016x}{i:016x}"
            truth[trace] = int(t_ref[i])
            writer.add(RequestRow(
                run_id="syn", trace_id=trace, span_id=f"{i:016x}", region=w["region"], worker=name,
                endpoint=w.get("endpoint", "e1"), model="m", protocol="kserve-http", phase=1, sample_index=i,
                t_intended=int(local[i]), t_sent=int(local[i]) + 100_000, t_done=int(local[i] + lat_ns[i]),
                latency_ns=int(lat_ns[i]), service_ns=int(lat_ns[i]) - 100_000, send_lag_ns=100_000,
                status="connection" if errors[i] else "ok", code="refused" if errors[i] else "200",
                error="ConnectionRefusedError" if errors[i] else "", server_queue_ns=-1, server_compute_ns=-1,
                server_receive_ns=-1, server_send_ns=-1, echoed_trace_id=trace, label=1, prediction=1,
                correct=not errors[i], batch_size=1, correct_count=int(not errors[i]), bytes_out=100, bytes_in=100,
                in_flight=1, clock_offset_ns=offset_ns, clock_uncertainty_ns=50_000))
        writer.flush()
        clock = clock_writer(d)
        for k, t in enumerate(np.linspace(0, w["duration_s"], 8)):
            delay = int(rng.uniform(60_000, 120_000))
            # one sample in three took a slow path: larger delay, offset biased by the asymmetry
            bias = int(rng.uniform(2e6, 8e6)) if k % 3 == 1 else 0
            clock.add(ClockRow(worker=name, region=w["region"], server="ref:123",
                               local_ns=int(BASE_NS + t * 1e9 - offset_ns),
                               offset_ns=offset_ns + bias + int(rng.normal(0, 20_000)), delay_ns=delay + 2 * bias,
                               packets=4, stage="during"))
        clock.flush()
    manifest = {"run_id": run_dir.name, "profile": profile, "valid": valid,
                "invalid_reasons": [] if valid else ["w1: send lag p99 9.0 ms > 5 ms (generator saturated)"],
                "warnings": warnings or [],
                "versions": {"python": "3"}, "host": {}, "seed": seed, "workers": {}}
    RunLayout(run_dir).manifest.write_text(json.dumps(manifest))
    return truth


# -- chronyd as a loopback NTP reference (always -x: never touches the system clock) ----------------
@contextmanager
def stream_sink(work: Path, first_ms: float, gap_ms: float, tokens: int) -> Iterator[tuple[str, Path]]:
    """bench/stream_sink.py started on a free port, its event log in `work`; (its URL, the log), stopped after."""
    import sys

    port, log = free_port(), work / "events.jsonl"
    proc = start_process("stream sink", [sys.executable, str(ROOT / "bench" / "stream_sink.py"), "--port", str(port),
                                         "--log", str(log), "--first-ms", str(first_ms), "--gap-ms", str(gap_ms),
                                         "--tokens", str(tokens)], work / "sink.log")
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/v1/models", proc, timeout=30)
        yield f"http://127.0.0.1:{port}", log
    finally:
        proc.stop()


def chronyd_path() -> str | None:
    return shutil.which("chronyd") or (str(Path("/usr/sbin/chronyd")) if Path("/usr/sbin/chronyd").exists() else None)


def start_chronyd(port: int, workdir: Path, timeout: float = 20.0) -> ManagedProcess:
    """chronyd -x -d serving the local clock (stratum 10) on 127.0.0.1:port; waits until it answers."""
    binary = chronyd_path()
    if binary is None:
        raise FileNotFoundError("chronyd is not installed (Debian: apt-get install chrony)")
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "chrony.conf"
    conf.write_text("\n".join([
        f"port {port}", "bindaddress 127.0.0.1", "allow 127.0.0.1", "local stratum 10", "cmdport 0",
        f"pidfile {workdir / 'chronyd.pid'}", f"driftfile {workdir / 'chrony.drift'}", "user root", ""]))
    proc = start_process("chronyd", [binary, "-x", "-d", "-f", str(conf)], workdir / "chronyd.log")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"chronyd exited with {proc.popen.returncode}:\n{proc.log_tail()}")
        try:
            measure_offset(f"127.0.0.1:{port}", WorkerClock(0), packets=1, timeout=0.5)
            return proc
        except OSError:
            time.sleep(0.2)
    proc.stop()
    raise RuntimeError(f"chronyd did not answer on 127.0.0.1:{port} within {timeout} s:\n{proc.log_tail()}")


# -- a fake sender for worker unit tests ------------------------------------------------------------------
class FakeSender:
    """A Sender (harness/client/senders.py) that answers at once with `label_of(sample)`, or fails with
    `status` for the samples in `failing`; records what it was asked to send."""

    def __init__(self, label_of=lambda sample: 0, failing: frozenset[int] = frozenset(), status: str = "timeout",
                 raise_on: frozenset[int] = frozenset(), labels: np.ndarray | None = None, batch: int = 1) -> None:
        self.label_of, self.failing, self.status, self.raise_on = label_of, failing, status, raise_on
        labels = np.arange(10) % 3 if labels is None else labels
        samples = SampleSet({"input": [np.zeros(1, np.float32)] * len(labels)}, "fake", labels)
        request = RequestSpec(inputs=[InputSpec(name="input", datatype="FP32", shape=[1])], outputs=["label"],
                              output_datatypes={"label": "INT64"}, batched=True, batch_size=batch, source="fake")
        self.payloads = Payloads(samples, request, 1, [None] * len(labels))
        self.sent: list[tuple[int, dict[str, str]]] = []
        self.warmed = self.closed = False

    def send(self, request: Send) -> Outcome:
        sample, on_sent = request.sample, request.on_sent
        self.sent.append((sample, dict(request.headers)))
        if sample in self.raise_on:
            raise RuntimeError("sender bug")
        on_sent()
        if sample in self.failing:
            return Outcome(status=self.status, code="deadline", error="fake failure")
        return Outcome(code="200", outputs={"label": np.array([self.label_of(sample)])}, server_queue_ns=1_000,
                       server_compute_ns=2_000, bytes_out=10, bytes_in=20)

    def warm_up(self) -> None:
        self.warmed = True

    def close(self) -> None:
        self.closed = True


def kill_triton_server(triton) -> list[int]:
    """SIGKILL a local Triton's tritonserver child (an outage as a crash would cause); returns the PIDs killed."""
    pids = triton.server_pids()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


def chromium() -> str:
    """Debian's chromium (CI installs it; elsewhere the test is skipped without it)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if IN_CI:
            pytest.fail("chromium must be installed in CI (.ci/run installs Debian's chromium)")
        pytest.skip("chromium not installed")
    return path


@contextmanager
def browser_page(executable: str):
    """A headless Chromium page driven by Playwright; every uncaught script error and console error is collected in
    `page.errors`. `executable` may be a wrapper (e.g. one that starts chromium in a network namespace)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.errors = []
            page.on("pageerror", lambda exc: page.errors.append(str(exc)))
            page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
            yield page
        finally:
            browser.close()


def open_live_page(page, port: int, process, timeout_s: float = 60) -> None:
    """Open the live page a `tailrace run` or `sweep` (`process`, a Popen with stdout piped) serves on `port`, once
    it listens; fails with the command's output if it exits first or never listens."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            page.goto(f"http://127.0.0.1:{port}/")
            return
        except Exception:  # noqa: BLE001 - not listening yet
            assert time.monotonic() < deadline and process.poll() is None, process.stdout.read()
            time.sleep(0.3)


# -- the machine, under pytest-xdist (tests/conftest.py) ---------------------------------------------
class MachineTurn:
    """One test's hold on the machine (`machine_turn`): shared, or alone with a window for others (`shared_while`)."""

    def __init__(self, turnstile, machine, shared: bool) -> None:
        self.turnstile, self.machine, self.shared = turnstile, machine, shared

    def take(self, shared: bool) -> None:
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.machine, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)

    @contextmanager
    def shared_while(self) -> Iterator[None]:
        """A test that runs alone lets shared tests in while it waits on what it does not measure (a server that
        boots for a minute), and has the machine to itself again after."""
        if self.shared:
            yield
            return
        fcntl.flock(self.machine, fcntl.LOCK_UN)  # (flock converts by unlocking first anyway: say so)
        self.take(shared=True)
        try:
            yield
        finally:
            fcntl.flock(self.machine, fcntl.LOCK_UN)
            self.take(shared=False)


_turn: MachineTurn | None = None  # the running test's, under xdist
_kept: MachineTurn | None = None  # a lone test's turn, kept for this worker's next test, lone too


def _release(turn: MachineTurn) -> None:
    fcntl.flock(turn.machine, fcntl.LOCK_UN)
    turn.machine.close()
    turn.turnstile.close()


@contextmanager
def machine_turn(lock_dir: Path, shared: bool, keep: bool = False) -> Iterator[MachineTurn]:
    """Hold the machine for one test: shared with other `shares_machine` tests, or alone. A waiting test that
    needs the machine alone holds the turnstile, so a stream of shared tests cannot keep it waiting. `keep`: this
    test is alone and so is this worker's next one — the machine stays this worker's in between, so that a shared
    test of the other worker does not start in the gap and hold up the next one (a lone module's tests run as one)."""
    global _turn, _kept
    turn, _kept = _kept, None
    if turn is not None and shared:  # (never kept for a shared test: released here all the same)
        _release(turn)
        turn = None
    if turn is None:
        turn = MachineTurn(open(lock_dir / "tailrace-turnstile.lock", "w"), open(lock_dir / "tailrace-machine.lock", "w"),
                           shared)
        turn.take(shared)
    _turn = turn
    try:
        yield turn
    finally:
        _turn = None
        if keep and not shared:
            _kept = turn
        else:
            _release(turn)


def prerequisites_status(status_file: Path, wait_s: float = 1800.0, poll_s: float = 0.5) -> str:
    """Wait for `make test`'s background installs to write their exit status to `status_file`: "" when they
    succeeded, else one line saying why not, with their log's last lines (the log: `status_file` with .log)."""
    deadline = time.monotonic() + wait_s

    def written() -> str:  # the status once its writer is done: a file just created is empty until then
        return status_file.read_text().strip() if status_file.exists() else ""

    while not (code := written()) and time.monotonic() < deadline:
        time.sleep(poll_s)
    log = status_file.with_suffix(".log")
    if not code:
        return f"the installs beside the unit tier did not finish within {wait_s:.0f} s (see {log})"
    if code == "0":
        return ""
    tail = " | ".join(log.read_text(errors="replace").splitlines()[-5:]) if log.exists() else "(no log)"
    return f"the installs beside the unit tier failed (exit {code}; {log}): {tail}"


@contextmanager
def shared_while_booting() -> Iterator[None]:
    """Within a test (or its fixture) that runs alone: let shared tests run while a server boots (nothing is
    measured then). Without xdist, nothing to do."""
    if _turn is None:
        yield
        return
    with _turn.shared_while():
        yield


@contextmanager
def vllm_server(log_dir: Path, **options) -> Iterator:
    """A real vLLM (harness/services/vllm_server.py's `start_vllm` with `options`, on the endpoint's CPUs), stopped
    after; its ~50 s load lets shared tests run. Without .venv-vllm: a failure in CI, else the test is skipped."""
    from tailrace.harness.services.vllm_server import VllmUnavailable, start_vllm, vllm_python

    try:
        vllm_python()
    except VllmUnavailable as exc:
        if IN_CI:
            pytest.fail(f"vLLM must be installed in CI (make test creates .venv-vllm): {exc}")
        pytest.skip(str(exc))
    with shared_while_booting():  # loading measures nothing: the other test worker may run shared tests
        server = start_vllm(log_dir, cpus=split_cpus()[0], **options)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def vision_server(log_dir: Path) -> Iterator:
    """A real vision-language model server (harness/services/vision_server.py: `transformers serve` with a tiny
    LLaVA), stopped after; shared tests run while it loads. Without .venv-vllm: a failure in CI, else a skip."""
    from tailrace.harness.services.vision_server import start_vision_server
    from tailrace.harness.services.vllm_server import VllmUnavailable, vllm_python

    try:
        vllm_python()
    except VllmUnavailable as exc:
        if IN_CI:
            pytest.fail(f"the vLLM virtualenv must be installed in CI (make test creates .venv-vllm): {exc}")
        pytest.skip(str(exc))
    with shared_while_booting():
        server = start_vision_server(log_dir, cpus=split_cpus()[0])
    try:
        yield server
    finally:
        server.stop()


PHOENIX_PYTHON = ROOT / ".venv-phoenix" / "bin" / "python"


@contextmanager
def phoenix_server(work: Path) -> Iterator[tuple[str, str]]:
    """A real Arize Phoenix (its own .venv-phoenix, `make phoenix`) on loopback: (its HTTP base URL — OTLP at
    /v1/traces, its API — and its OTLP gRPC address); its database under `work`; stopped by PID after. Without the
    virtualenv: a failure in CI, else a skip."""
    from tailrace.harness.services.processes import free_port, start_process, wait_http_ok

    if not PHOENIX_PYTHON.exists():
        if IN_CI:
            pytest.fail("Arize Phoenix must be installed in CI (make test creates .venv-phoenix)")
        pytest.skip("Arize Phoenix is not installed (make phoenix)")
    http_port, grpc_port = free_port(), free_port()
    env = {"PHOENIX_WORKING_DIR": str(work), "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(http_port),
           "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_TELEMETRY_ENABLED": "false", "DO_NOT_TRACK": "1"}
    process = start_process("phoenix", [str(PHOENIX_PYTHON), "-m", "phoenix.server.main", "serve"],
                            work / "phoenix.log", env=env)
    try:
        wait_http_ok(f"http://127.0.0.1:{http_port}/healthz", process, timeout=90)
        yield f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{grpc_port}"
    finally:
        process.stop(timeout=15)
