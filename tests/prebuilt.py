"""What the two slowest fixtures build, built once per checkout and reused: the container image
(tests/integration/tailrace/test_container.py) and the generator-only virtualenv (test_install.py).

`make test` builds both beside the three virtualenvs' installs (`python -m tests.prebuilt`), so no test waits for
them; a fixture builds whatever is missing, or was built from other sources (each records the hash of the sources
it was built from: the image as a label, the virtualenv in a file).

    .venv/bin/python -m tests.prebuilt [--image-only | --venv-only]
    python3 -m tests.prebuilt --base-only    # the image's base: no virtualenv needed, so it starts first
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.container.build_image import SOURCES, build, engine_argv
from tests import ROOT

IMAGE_TAG, IMAGE_BASE = "localhost/tailrace:test", "localhost/tailrace-base:bookworm"
IMAGE_LABEL = "tailrace.source"
IMAGE_INPUTS = (*SOURCES, "deploy/container/Dockerfile", "deploy/container/requirements.lock",
                "deploy/container/build_image.py")
GENERATOR_VENV = ROOT / "build" / "test-generator-venv"
PODMAN = engine_argv("podman")


def source_hash(parts: tuple[str, ...]) -> str:
    """sha256 of the files under `parts` (paths relative to the checkout), names and contents, in order."""
    digest = hashlib.sha256()
    for part in parts:
        path = ROOT / part
        files = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts) \
            if path.is_dir() else [path]
        for f in files:
            digest.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def image_tools_missing() -> str | None:
    """Why the image cannot be built here (podman or mmdebstrap absent), else None."""
    missing = [tool for tool in ("podman", "mmdebstrap") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not installed" if missing else None


def _image_label(tag: str) -> str | None:
    r = subprocess.run([*PODMAN, "image", "inspect", "--format", f'{{{{ index .Config.Labels "{IMAGE_LABEL}" }}}}',
                        tag], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def ensure_image() -> str:
    """localhost/tailrace:test built from this checkout (on a python3 base made from Debian's packages, since no
    registry is reachable here); built only when missing or built from other sources."""
    wanted = source_hash(IMAGE_INPUTS)
    if _image_label(IMAGE_TAG) == wanted:
        return IMAGE_TAG
    build(IMAGE_TAG, ensure_base(), labels={IMAGE_LABEL: wanted})
    return IMAGE_TAG


def ensure_base() -> str:
    """localhost/tailrace-base:bookworm (Debian's python3, from mmdebstrap), made when missing. It needs neither
    the checkout's sources nor a virtualenv: `make test` makes it first, beside the installs."""
    if subprocess.run([*PODMAN, "image", "exists", IMAGE_BASE]).returncode != 0:
        debootstrap = subprocess.Popen(["mmdebstrap", "--variant=minbase", "--quiet",
                                        "--include=python3,python3-venv,ca-certificates", "bookworm", "-"],
                                       stdout=subprocess.PIPE)
        subprocess.run([*PODMAN, "import", "-", IMAGE_BASE], stdin=debootstrap.stdout, check=True,
                       capture_output=True, timeout=900)
        if debootstrap.wait(timeout=60) != 0:
            raise RuntimeError("mmdebstrap could not make the base image")
    return IMAGE_BASE


def ensure_generator_venv() -> Path:
    """build/test-generator-venv: a fresh virtualenv with tailrace's base install only (`pip install tailrace`
    from a copy of this checkout, dependencies from PyPI); rebuilt when the sources changed."""
    wanted = source_hash(SOURCES)
    stamp = GENERATOR_VENV / ".tailrace-source"
    if stamp.exists() and stamp.read_text() == wanted:
        return GENERATOR_VENV
    shutil.rmtree(GENERATOR_VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(GENERATOR_VENV)], check=True, timeout=120)
    with tempfile.TemporaryDirectory(prefix="tailrace-source-") as tmp:
        source = Path(tmp) / "tailrace"  # a copy: setuptools builds in the source tree
        shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv*", "build", "runs", "__pycache__"))
        r = subprocess.run([str(GENERATOR_VENV / "bin" / "pip"), "install", "--quiet", "--no-compile", str(source)],
                           capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"pip install of the checkout failed:\n{r.stderr[-3000:]}")
    stamp.write_text(wanted)
    return GENERATOR_VENV


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--image-only", action="store_true")
    only.add_argument("--venv-only", action="store_true")
    only.add_argument("--base-only", action="store_true", help="the image's base only (any python3: stdlib only)")
    args = ap.parse_args()
    try:
        if args.base_only:
            missing = image_tools_missing()
            print(f"tests.prebuilt: base image {ensure_base()}" if missing is None else
                  f"tests.prebuilt: no base image ({missing})", flush=True)
            return 0
        if not args.image_only:
            print(f"tests.prebuilt: generator virtualenv {ensure_generator_venv()}", flush=True)
        if not args.venv_only:
            missing = image_tools_missing()
            print(f"tests.prebuilt: image {ensure_image()}" if missing is None else
                  f"tests.prebuilt: no image ({missing}; the container test builds or skips it)", flush=True)
    except (RuntimeError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        print(f"tests.prebuilt: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
