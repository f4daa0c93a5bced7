"""Installs that fit their job: a generator-only install (`pip install tailrace`, no extras) claims one import
name (`tailrace`: a user's own `analysis` or `contract` package beside it is untouched) and runs a real worker and a
real master end to end; the master, lacking tailrace[analysis], leaves a complete run directory and says how
to analyse it (exit 3); the full install analyses it."""
from __future__ import annotations

import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tailrace.command_lines import master_args, worker_args
from tailrace.harness.services.processes import free_port, start_process
from tests import ROOT
from tests.prebuilt import ensure_generator_venv
from tests.support import remote_profile_toml, start_endpoint

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)

THEIR_PACKAGES = ("analysis", "contract", "harness", "endpoints")
NOT_IN_THE_GENERATOR = ("pandas", "scipy", "matplotlib", "duckdb", "onnxruntime", "sklearn", "uvicorn", "starlette",
                        "onnx", "opentelemetry.sdk", "opentelemetry.exporter")


@pytest.fixture(scope="module")
def generator_venv(tmp_path_factory) -> Path:
    """A fresh venv with tailrace's base install only (tests/prebuilt.py: from this checkout, dependencies from
    PyPI; `make test` builds it beside the installs), with someone else's packages beside it."""
    venv = ensure_generator_venv()
    theirs = tmp_path_factory.mktemp("theirs")  # someone else's packages, named like tailrace's folders
    for name in THEIR_PACKAGES:
        (theirs / name).mkdir()
        (theirs / name / "__init__.py").write_text(f"OWNER = 'not tailrace: {name}'\n")
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "their-packages.pth").write_text(f"{theirs}\n")
    return venv


def _installed_top_level_names(venv: Path) -> set[str]:
    """Every import name the tailrace distribution put in site-packages (its RECORD, the installer's own list)."""
    r = subprocess.run([str(venv / "bin" / "python"), "-c",
                        "import importlib.metadata as m; print('\\n'.join(str(f) for f in m.files('tailrace')))"],
                       capture_output=True, text=True, check=True, cwd=venv)  # not this checkout's tailrace
    tops = {Path(f).parts[0] for f in r.stdout.split()}
    return {t for t in tops if not t.endswith(".dist-info") and t not in ("..", "__pycache__")}


def test_an_install_claims_only_the_tailrace_import_name(generator_venv):
    assert _installed_top_level_names(generator_venv) == {"tailrace"}
    python = generator_venv / "bin" / "python"
    check = "; ".join(f"import {n}; assert {n}.OWNER == 'not tailrace: {n}', {n}.__file__" for n in THEIR_PACKAGES)
    r = subprocess.run([str(python), "-c", f"import tailrace.cli, tailrace.harness.worker.run; {check}"],
                       capture_output=True, text=True, cwd=generator_venv)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run([str(generator_venv / "bin" / "tailrace"), "--help"], capture_output=True, text=True, timeout=60,
                       cwd=generator_venv)
    assert r.returncode == 0 and "worker" in r.stdout and "analyze" in r.stdout, r.stderr[-2000:]


@pytest.mark.timeout(1200)
def test_a_generator_only_install_runs_a_worker_and_a_master_end_to_end(generator_venv, model_repo, tmp_path):
    python, tailrace = generator_venv / "bin" / "python", generator_venv / "bin" / "tailrace"
    for module in NOT_IN_THE_GENERATOR:  # the worker below runs without any of these
        r = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, text=True)
        assert r.returncode != 0, f"{module} is in the generator-only install"
    endpoint = start_endpoint(model_repo, tmp_path / "logs")
    profile = tmp_path / "generator-only.toml"
    profile.write_text(remote_profile_toml(
        "generator-only", [("mlp-http", endpoint.http_url, "kserve-http", "digits_mlp_fp32",
                            model_repo / "_data" / "digits_test.npz")], {"eu": 1.0}, rate=40, duration_s=6, seed=5))
    token = tmp_path / "token"
    token.write_text(secrets.token_urlsafe(16))
    port, sntp = free_port(), free_port()
    out = tmp_path / "runs"
    master = start_process("master (generator-only)", [str(tailrace), *master_args(
        str(profile), bind="127.0.0.1", port=port, sntp_port=sntp, out=str(out), wait_s=60, token_file=str(token),
        quiet=True)], tmp_path / "logs" / "master.log", cwd=tmp_path)
    worker = None
    try:
        time.sleep(2)
        worker = start_process("worker (generator-only)", [str(tailrace), *worker_args(
            master=f"127.0.0.1:{port}", region="eu", spool=str(tmp_path / "spool"), token_file=str(token))],
            tmp_path / "logs" / "worker.log", cwd=tmp_path)
        code = master.popen.wait(timeout=180)
    finally:
        for p in (worker, master, endpoint.proc):
            if p is not None:
                p.stop(timeout=15)
    log = (tmp_path / "logs" / "master.log").read_text()
    assert code == 3, log[-3000:]
    assert "needs tailrace[analysis]" in log and "Traceback" not in log, log[-3000:]
    assert "Traceback" not in (tmp_path / "logs" / "worker.log").read_text()
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    analysed = subprocess.run([sys.executable, "-m", "tailrace.cli", "analyze", str(run_dir), "--quiet"],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    summary = (run_dir / "report" / "summary.json").read_text()
    assert '"verdict": "PASS"' in summary and '"rows_read": 0' not in summary
