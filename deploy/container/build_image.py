"""Build the tailrace image (deploy/container/Dockerfile) from the lock file, offline.

1. A build context in a temporary directory: the Dockerfile, the lock (deploy/container/requirements.lock: the
   generator install + [analysis], with hashes) and a wheelhouse — every locked wheel (pip download, hashes
   checked) and tailrace's own wheel built from a copy of this checkout.
2. `podman build --network none` (or docker) with the base image given by --base.

    .venv/bin/python deploy/container/build_image.py --tag localhost/tailrace:0.1.0 \
        [--base docker.io/library/python:3.11-slim-bookworm] [--engine podman|docker]

Without a registry (this project's CI machine), make a base from Debian's packages first:
    mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm - \
        | podman import - localhost/tailrace-base:bookworm
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
LOCK = HERE / "requirements.lock"
SOURCES = ("contract", "harness", "endpoints", "analysis", "tailrace", "pyproject.toml", "setup.py", "README.md")
DEFAULT_BASE = "docker.io/library/python:3.11-slim-bookworm"


def engine_argv(engine: str) -> list[str]:
    """The container engine's command; podman with the settings this kind of VM needs (runc, cgroupfs)."""
    if engine == "podman":
        return ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
    return [engine]


def ulimits(engine: str) -> list[str]:
    return ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"] if engine == "podman" else []


def make_context(context: Path) -> None:
    """The Dockerfile, the lock and a wheelhouse of every locked wheel plus tailrace's own."""
    wheelhouse = context / "wheelhouse"
    wheelhouse.mkdir(parents=True)
    shutil.copy(HERE / "Dockerfile", context / "Dockerfile")
    shutil.copy(LOCK, context / "requirements.lock")
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--require-hashes", "--no-deps",
                    "--only-binary=:all:", "-r", str(LOCK), "-d", str(wheelhouse)], check=True)
    source = context / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(source), "-w", str(wheelhouse)],
                   check=True)
    shutil.rmtree(source)


def build(tag: str, base: str = DEFAULT_BASE, engine: str = "podman", labels: dict[str, str] | None = None) -> None:
    """Build `tag` from `base`, offline, with the lock's wheels; `labels` are added to the image."""
    with tempfile.TemporaryDirectory(prefix="tailrace-image-") as tmp:
        context = Path(tmp)
        make_context(context)
        label_args = [arg for key, value in (labels or {}).items() for arg in ("--label", f"{key}={value}")]
        subprocess.run([*engine_argv(engine), "build", "--network", "none", *ulimits(engine), *label_args,
                        "--build-arg", f"BASE={base}", "-t", tag, str(context)], check=True)
    # the build stage's image (labelled in the Dockerfile) is not needed once the final stage has its venv
    subprocess.run([*engine_argv(engine), "image", "prune", "--force", "--filter", "label=tailrace-stage=build"],
                   check=False, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", default="localhost/tailrace:0.1.0")
    ap.add_argument("--base", default=DEFAULT_BASE)
    ap.add_argument("--engine", default="podman", choices=("podman", "docker"))
    args = ap.parse_args()
    try:
        build(args.tag, args.base, args.engine)
    except subprocess.CalledProcessError as exc:
        print(f"build_image: {' '.join(map(str, exc.cmd[:4]))} … failed with exit {exc.returncode}", file=sys.stderr)
        return 1
    print(args.tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
