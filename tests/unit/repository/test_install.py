"""The dependency bounds tell the truth: the installed Locust and grpcio satisfy pyproject.toml's bounds, and the
internals tailrace relies on (harness/control/locust_adaptations.py names them) exist in them — a release
that renames one fails here, before a run does. `requires-python` matches the code (tomllib)."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version

from packaging.requirements import Requirement

from tests import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirement(name: str) -> Requirement:
    return next(r for r in map(Requirement, PROJECT["dependencies"]) if r.name == name)


def test_locust_and_grpcio_are_bounded_above_and_the_installed_ones_fit():
    for name in ("locust", "grpcio"):
        requirement = _requirement(name)
        assert any(spec.operator in ("<", "<=") for spec in requirement.specifier), f"{name} has no upper bound"
        assert version(name) in requirement.specifier, (name, version(name), str(requirement.specifier))


LOCUST_INTERNALS = """
from locust import User, events
from locust.exception import StopUser

from tailrace.harness.control.locust_adaptations import missing_internals

assert User and StopUser
for hook in ("init", "quitting", "test_start", "test_stopping", "worker_connect"):
    assert hasattr(events, hook), hook
assert missing_internals() == [], missing_internals()
print("ok")
"""


def test_the_locust_internals_tailrace_uses_exist():
    """In a child process: importing Locust monkey-patches the interpreter with gevent."""
    r = subprocess.run([sys.executable, "-c", LOCUST_INTERNALS], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_grpc_gevent_support_exists():
    from grpc.experimental import gevent as grpc_gevent

    assert callable(grpc_gevent.init_gevent)


def test_requires_python_tells_the_truth():
    assert PROJECT["requires-python"] == ">=3.11"  # contract/profile/ reads profiles with tomllib (3.11+)
