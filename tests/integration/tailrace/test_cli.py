"""The CLI as a user meets it: --help everywhere, usage errors exit 2, bad profiles exit 2 and start nothing."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ROOT
from tests.support import remote_profile_toml

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)

COMMANDS = [[], ["models"], ["models", "build"], ["serve"], ["run"], ["master"], ["worker"], ["proxy"], ["sntp"],
            ["demo"], ["analyze"], ["compare"], ["capacity"]]


def tailrace(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailrace.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "tailrace")
def test_help_on_every_level(cmd):
    r = tailrace(*cmd, "--help")
    assert r.returncode == 0 and "usage: tailrace" in r.stdout


@pytest.mark.parametrize("args", [["nonsense"], ["serve"], ["serve", "--models", "x", "--http-port", "0"],
                                  ["serve", "--models", "x", "--slots", "m=zero"], ["run"],
                                  ["worker", "--region", "a"], ["master", "p.toml", "--bind", "10.1.2.3"]])
def test_usage_errors_exit_2(args):
    r = tailrace(*args)
    assert r.returncode == 2, r.stderr
    assert "error" in r.stderr


BAD_TOML = [
    ("syntax", "name = \n", "not valid TOML"),
    ("unknown-key", 'name = "x"\nfoo = 1\n', "foo: unknown key"),
    ("missing-endpoints", 'name = "x"\n[load]\nrate = 1\nduration_s = 1\n[[regions]]\nname="a"\nshare=1\n',
     "endpoints: required field is missing"),
    ("bad-region-share", 'name="x"\n[[endpoints]]\nname="e"\nurl="embedded"\nprotocol="kserve-http"\nmodel="m"\n'
     '[[regions]]\nname="a"\nshare=0.7\n[load]\nrate=1\nduration_s=1\n', "shares must add up to 1"),
    ("bad-type", 'name="x"\n[[endpoints]]\nname="e"\nurl="embedded"\nprotocol="kserve-http"\nmodel="m"\n'
     '[[regions]]\nname="a"\nshare=1\n[load]\nrate="lots"\nduration_s=1\n', "load.rate"),
    ("cpu-not-here", 'name="x"\n[[endpoints]]\nname="e"\nurl="embedded"\nprotocol="kserve-http"\nmodel="m"\n'
     '[[regions]]\nname="a"\nshare=1\n[load]\nrate=1\nduration_s=1\n[embedded]\ncpus=[4096]\n',
     "embedded.cpus: CPU 4096 not available here"),
    ("models-dir-missing", 'name="x"\n[[endpoints]]\nname="e"\nurl="embedded"\nprotocol="kserve-http"\nmodel="m"\n'
     '[[regions]]\nname="a"\nshare=1\n[load]\nrate=1\nduration_s=1\n[embedded]\nmodels_dir="/nonexistent/models"\n',
     "embedded.models_dir: /nonexistent/models does not exist (build it with `tailrace models build"),
    ("url-with-blanks", 'name="x"\n[[endpoints]]\nname="e"\nurl="http://127.0.0.1: 80 00/ x"\nprotocol="kserve-http"\n'
     'model="m"\n[[regions]]\nname="a"\nshare=1\n[load]\nrate=1\nduration_s=1\n', "contains blanks"),
    ("huge-seed", 'name="x"\n[[endpoints]]\nname="e"\nurl="embedded"\nprotocol="kserve-http"\nmodel="m"\n'
     '[[regions]]\nname="a"\nshare=1\n[load]\nrate=1\nduration_s=1\nseed=100000000000000000000\n', "load.seed"),
]


def test_a_model_missing_from_the_repository_exits_2_before_any_server_starts(model_repo, tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(f'name="x"\n[[endpoints]]\nname="e"\nurl="embedded"\nprotocol="kserve-http"\nmodel="nope"\n'
                    f'[[regions]]\nname="a"\nshare=1\n[load]\nrate=1\nduration_s=1\n[embedded]\n'
                    f'models_dir="{model_repo}"\n')
    r = tailrace("run", str(path), "--out", str(tmp_path / "runs"))
    assert r.returncode == 2, r.stderr
    assert f"endpoints[0].model: no model 'nope' in {model_repo} (models: " in r.stderr, r.stderr
    assert "digits_mlp_fp32" in r.stderr and not (tmp_path / "runs").exists()


def test_a_missing_data_file_exits_2_naming_the_field_before_anything_starts(model_repo, tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(f'name="x"\n[[endpoints]]\nname="e"\nurl="embedded"\nprotocol="kserve-http"\n'
                    f'model="digits_mlp_fp32"\ndata="{tmp_path / "nope.npz"}"\n'
                    f'[[regions]]\nname="a"\nshare=1\n[load]\nrate=1\nduration_s=1\n[embedded]\n'
                    f'models_dir="{model_repo}"\n')
    r = tailrace("run", str(path), "--out", str(tmp_path / "runs"))
    assert r.returncode == 2, r.stderr
    assert f"endpoints[0].data: {tmp_path / 'nope.npz'} not found" in r.stderr and not (tmp_path / "runs").exists()


def test_an_output_directory_that_is_a_file_exits_2(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('name="x"\n[[endpoints]]\nname="e"\nurl="http://127.0.0.1:9"\nprotocol="kserve-http"\n'
                    'model="m"\n[[regions]]\nname="a"\nshare=1\n[load]\nrate=1\nduration_s=1\n')
    runs = tmp_path / "runs"
    runs.write_text("a file")
    r = tailrace("run", str(path), "--out", str(runs))
    assert r.returncode == 2 and f"--out: {runs} is a file, not a directory" in r.stderr, r.stderr
    assert runs.read_text() == "a file"
    path.write_text(f'output_dir = "{runs}"\n' + path.read_text())  # the profile's own field, named as such
    r = tailrace("run", str(path))
    assert r.returncode == 2 and f"output_dir: {runs} is a file, not a directory" in r.stderr, r.stderr


SAVED_DEMO = ROOT / "tests" / "data" / "saved_runs" / "demo"


@pytest.mark.parametrize("command", ["run", "capacity", "sweep", "analyze", "compare"])
def test_an_output_directory_that_cannot_be_written_is_one_line_exit_2_before_anything_starts(command, tmp_path):
    """`--out` under a file, or where no directory can be made: one line naming the flag, exit 2 — before a run's
    servers start or an analysis reads a row (it had ended a 100 M-row analysis after minutes, or a capacity
    search with a traceback: exit 5)."""
    profile = tmp_path / "p.toml"
    profile.write_text('name="x"\n[[endpoints]]\nname="e"\nurl="http://127.0.0.1:9"\nprotocol="kserve-http"\n'
                       'model="m"\n[[regions]]\nname="a"\nshare=1\n[load]\nrate=1\nduration_s=1\n'
                       '[[slos]]\nmetric="latency"\npercentile=99\nthreshold_ms=100\n'
                       '[sweep]\n[[sweep.axes]]\nfield="load.rate"\nvalues=[1, 2]\n')
    afile = tmp_path / "afile"
    afile.write_text("x")
    target = {"run": [str(profile)], "capacity": [str(profile)], "sweep": [str(profile)],
              "analyze": [str(SAVED_DEMO)], "compare": [str(SAVED_DEMO), str(SAVED_DEMO)]}[command]
    for out, why in ((afile / "runs", f"cannot be made: {afile} is a file"),
                     (Path("/proc/tailrace-out"), "cannot be written: No such file or directory")):
        r = tailrace(command, *target, "--out", str(out))
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and f"tailrace {command}: --out: {out} {why}" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "p.toml"] and afile.read_text() == "x"


def test_a_run_whose_report_directory_cannot_be_written_is_told_to_use_out_before_its_analysis(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(SAVED_DEMO, run_dir)
    (run_dir / "report").write_text("not a directory")
    r = tailrace("analyze", str(run_dir))
    assert r.returncode == 2, r.stderr
    assert (f"tailrace analyze: {run_dir / 'report'} (the run's report directory) is a file, not a directory — "
            f"tailrace analyze {run_dir} --out DIR writes it elsewhere; nothing was analysed") in r.stderr, r.stderr


@pytest.mark.parametrize("command", ["run", "capacity"])
@pytest.mark.parametrize("case", BAD_TOML, ids=[c[0] for c in BAD_TOML])
def test_bad_profile_exits_2_names_file_and_field_and_starts_nothing(case, command, tmp_path):
    _, text, expected = case
    path = tmp_path / "bad.toml"
    path.write_text(text)
    runs = tmp_path / "runs"
    r = tailrace(command, str(path), "--out", str(runs))
    assert r.returncode == 2
    assert str(path) in r.stderr and expected in r.stderr, r.stderr
    assert not runs.exists()


def test_capacity_refuses_a_profile_without_latency_slo(tmp_path, model_repo):
    path = tmp_path / "noslo.toml"
    path.write_text('name="x"\n[[endpoints]]\nname="e"\nurl="embedded"\nprotocol="kserve-http"\n'
                    'model="digits_mlp_fp32"\n[[regions]]\nname="a"\nshare=1\n[load]\nrate=1\nduration_s=1\n'
                    f'[embedded]\nmodels_dir="{model_repo}"\n')
    runs = tmp_path / "runs"
    r = tailrace("capacity", str(path), "--out", str(runs))
    assert r.returncode == 2 and "slos: capacity search needs at least one latency SLO" in r.stderr, r.stderr
    assert not runs.exists()


def test_missing_profile_file(tmp_path):
    r = tailrace("run", str(tmp_path / "nope.toml"))
    assert r.returncode == 2 and "no such profile" in r.stderr


@pytest.mark.parametrize("profile", sorted((ROOT / "profiles").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_profiles_are_valid(profile):
    from tailrace.contract.profile import load_profile

    assert load_profile(profile).name


@pytest.mark.parametrize("command", ["serve-http", "serve-grpc", "proxy", "sntp"])
def test_a_port_in_use_is_one_line_exit_2(command, model_repo):
    """A server command told to listen where it cannot: one line naming the address and the system's reason, exit 2
    (it had been exit 5 with a traceback file, or uvicorn's own line and exit 3 — INCONCLUSIVE's code)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM if command == "sntp" else socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        if command != "sntp":
            held.listen()
        port = held.getsockname()[1]
        with socket.socket() as spare:  # the server's other port: one free now
            spare.bind(("127.0.0.1", 0))
            free = str(spare.getsockname()[1])
        args = {"serve-http": ["serve", "--models", str(model_repo), "--http-port", str(port), "--grpc-port", free],
                "serve-grpc": ["serve", "--models", str(model_repo), "--http-port", free, "--grpc-port", str(port)],
                "proxy": ["proxy", "--route", f"127.0.0.1:{port}=127.0.0.1:9"],
                "sntp": ["sntp", "--port", str(port)]}[command]
        r = tailrace(*args)
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"tailrace {args[0]}: cannot listen on 127.0.0.1:{port} (Address already in use)\n", r.stderr


@pytest.mark.parametrize("case", ["master-port", "spool", "out-dir", "metrics-port"])
def test_a_workers_own_flags_that_cannot_work_are_one_line_before_it_waits_for_its_master(case, tmp_path):
    """A worker whose spool cannot be written, whose metrics port is taken or whose master's port cannot exist
    exits 2 at once, naming the flag — it had waited for its master (5 min where none answers) and failed later."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        flags, said = {
            "master-port": (["--master", "127.0.0.1:99999"], "--master must be HOST:PORT (a port 1-65535), got "
                                                           "'127.0.0.1:99999'"),
            "spool": (["--spool", str(afile / "spool")], f"--spool: {afile / 'spool'} cannot be made: {afile} is a file"),
            "out-dir": (["--out-dir", str(afile)], f"--out-dir: {afile} is a file, not a directory"),
            "metrics-port": (["--metrics-port", str(port)],
                             f"--metrics-port: cannot listen on 127.0.0.1:{port} (Address already in use)")}[case]
        argv = [sys.executable, "-m", "tailrace.cli", "worker", "--master", "127.0.0.1:9", "--region", "a", *flags]
        r = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=60,
                           env={**os.environ, "TAILRACE_RUN_TOKEN": "t"})
    assert r.returncode == 2 and r.stderr == f"tailrace worker: {said}\n", r.stderr


@pytest.mark.parametrize("flag", ["--port", "--sntp-port"])
def test_a_masters_port_in_use_is_one_line_exit_2_and_no_run_directory(flag, endpoint, model_repo, tmp_path):
    """The workers' port or the SNTP port taken: one line naming the flag, exit 2, no run directory — it had made
    one, said it was waiting, and ended INVALID once the Locust master died of it (the SNTP port: silently, the
    workers left without their clock reference)."""
    profile = tmp_path / "remote.toml"
    profile.write_text(remote_profile_toml(
        "ports", [("e", f"http://127.0.0.1:{endpoint.http_port}", "kserve-http", "digits_mlp_fp32",
                   model_repo / "_data" / "digits_test.npz")], {"a": 1.0}, rate=1, duration_s=1, seed=1))
    udp = flag == "--sntp-port"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        if not udp:
            held.listen()
        port = held.getsockname()[1]
        r = tailrace("master", str(profile), flag, str(port), "--out", str(tmp_path / "runs"), "--wait-s", "5",
                     "--quiet")
    assert r.returncode == 2, r.stderr
    assert f"tailrace master: {flag}: cannot listen on 127.0.0.1:{port} (Address already in use); no load was sent" \
        in r.stderr.splitlines(), r.stderr
    assert not (tmp_path / "runs").exists()


def test_the_demo_with_a_missing_profile_or_an_unwritable_workdir_is_one_line_exit_2(tmp_path):
    r = tailrace("demo", "--profile", str(tmp_path / "nope.toml"), "--workdir", str(tmp_path / "work"))
    assert r.returncode == 2 and r.stderr == f"{tmp_path / 'nope.toml'}: no such profile\n", r.stderr  # had been exit 5
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = tailrace("demo", "--workdir", str(afile))
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"tailrace demo: --workdir: {afile / 'runs'} cannot be made: {afile} is a file\n", r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
