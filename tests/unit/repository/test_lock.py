"""The lock files (`make lock`) agree with pyproject.toml: every requirement of the installs they lock is pinned to
a version its specifier allows, and every pin carries hashes (`pip install --require-hashes`)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s\\]+)")


def pins(lock: Path) -> dict[str, tuple[str, int]]:
    """name → (version, number of hashes)."""
    out: dict[str, tuple[str, int]] = {}
    current = None
    for line in lock.read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match.group(1))
            out[current] = (match.group(2), 0)
        elif current and "--hash=sha256:" in line:
            version, hashes = out[current]
            out[current] = (version, hashes + 1)
    return out


def requirements(extras: list[str]) -> list[Requirement]:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in PROJECT["optional-dependencies"][extra] if not r.startswith("tailrace[")]
    return reqs


@pytest.mark.parametrize(("lock", "extras"), [
    ("deploy/container/requirements.lock", ["analysis"]),
    ("deploy/requirements-all.lock", ["analysis", "server", "models", "test"])])
def test_the_lock_pins_every_requirement_within_its_specifier_with_hashes(lock, extras):
    pinned = pins(ROOT / lock)
    assert pinned and all(hashes > 0 for _, hashes in pinned.values())
    for req in requirements(extras):
        name = canonicalize_name(req.name)
        assert name in pinned, f"{lock}: {req.name} is not pinned (run `make lock`)"
        assert pinned[name][0] in req.specifier, f"{lock}: {req.name}=={pinned[name][0]} outside {req.specifier}"


def test_the_image_lock_leaves_out_what_a_generator_does_not_need():
    pinned = pins(ROOT / "deploy/container/requirements.lock")
    assert not {"onnxruntime", "scikit-learn", "skl2onnx", "uvicorn", "starlette"} & set(pinned)
