"""The container image (deploy/container/Dockerfile), built for real with Debian's podman from a base made of
Debian's packages (no registry is reachable here), offline from the lock file's wheels; then a worker runs from
the image against a master and an endpoint on this machine, end to end."""
from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import time

import pytest

from deploy.container.build_image import engine_argv
from tailrace.command_lines import master_args, worker_args
from tailrace.harness.services.processes import free_port, start_process
from tests import ROOT
from tests.prebuilt import ensure_image, image_tools_missing
from tests.support import IN_CI, remote_profile_toml, start_endpoint

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)

PODMAN = engine_argv("podman")
RUN = [*PODMAN, "run", "--rm", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]


@pytest.fixture(scope="module")
def image() -> str:
    """The image built from this checkout (tests/prebuilt.py: `make test` builds it beside the installs)."""
    missing = image_tools_missing()
    if missing is not None:
        if IN_CI:
            pytest.fail(f"{missing}: .ci/run installs podman and mmdebstrap in CI")
        pytest.skip(missing)
    return ensure_image()


@pytest.mark.timeout(1500)
def test_the_image_runs_as_a_non_root_worker_of_a_real_run(image, model_repo, tmp_path):
    who = subprocess.run([*RUN, "--network", "none", "--entrypoint", "id", image], capture_output=True, text=True)
    assert who.returncode == 0 and "uid=10001" in who.stdout, who.stderr
    usage = subprocess.run([*RUN, "--network", "none", image, "worker", "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and "--master HOST:PORT" in usage.stdout, usage.stderr
    inspect = json.loads(subprocess.run([*PODMAN, "image", "inspect", image], capture_output=True, text=True,
                                        check=True).stdout)[0]["Config"]
    assert inspect["Entrypoint"] == ["tailrace"] and inspect["User"].startswith("10001")

    endpoint = start_endpoint(model_repo, tmp_path / "logs")
    profile = tmp_path / "image.toml"
    data = tmp_path / "data"  # readable by the image's user (pytest's directories are the owner's only)
    data.mkdir()
    shutil.copy(model_repo / "_data" / "digits_test.npz", data / "digits_test.npz")
    data.chmod(0o755)
    (data / "digits_test.npz").chmod(0o644)
    profile.write_text(remote_profile_toml(
        "from-the-image", [("mlp-grpc", f"grpc://127.0.0.1:{endpoint.grpc_port}", "kserve-grpc", "digits_mlp_int8",
                            data / "digits_test.npz")], {"eu": 1.0}, rate=40, duration_s=5, seed=9))
    token = secrets.token_urlsafe(16)
    port, sntp = free_port(), free_port()
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o777)
    spool.chmod(0o777)  # the image's user (10001) writes here
    master = start_process("master", [sys.executable, "-m", "tailrace.cli", *master_args(
        str(profile), bind="127.0.0.1", port=port, sntp_port=sntp, out=str(tmp_path / "runs"), wait_s=120,
        quiet=True)], tmp_path / "logs" / "master.log", env={"TAILRACE_RUN_TOKEN": token}, cwd=ROOT)
    worker = None
    try:
        time.sleep(2)
        # the host's loopback (master, endpoint) from the container; the data file at the path the profile names
        worker = start_process("worker (image)", [*RUN, "--network", "host", "-e", "TAILRACE_RUN_TOKEN",
                                                  "-v", f"{data}:{data}:ro", "-v", f"{spool}:/spool",
                                                  image, *worker_args(master=f"127.0.0.1:{port}", region="eu",
                                                                      spool="/spool")],
                               tmp_path / "logs" / "worker.log", env={"TAILRACE_RUN_TOKEN": token})
        code = master.popen.wait(timeout=240)
    finally:
        for p in (worker, master, endpoint.proc):
            if p is not None:
                p.stop(timeout=20)
    log = (tmp_path / "logs" / "master.log").read_text() + (tmp_path / "logs" / "worker.log").read_text()
    assert code == 0, log[-4000:]
    [run_dir] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    assert summary["verdict"] == "PASS" and summary["input"]["rows_read"] >= 150
    assert {w for w in summary["manifest"]["workers"]} == {"eu-w0"}
