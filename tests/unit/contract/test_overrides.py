"""Profile overrides from the command line and the environment (contract/overrides.py): validated like the file,
errors naming the field, recorded in the profile and the manifest."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tailrace.contract.overrides import from_environment
from tailrace.contract.profile import ProfileError, load_profile
from tailrace.harness.orchestration.run_record import started_manifest
from tests import ROOT

SMOKE = ROOT / "profiles" / "smoke.toml"


def test_set_changes_the_field_and_is_recorded():
    profile = load_profile(SMOKE, ["load.rate=500", "load.duration_s=30", "regions.0.delay_ms=7.5"])
    assert profile.load.rate == 500 and profile.load.duration_s == 30 and profile.regions[0].delay_ms == 7.5
    assert profile.overrides == ["load.rate=500", "load.duration_s=30", "regions.0.delay_ms=7.5"]
    assert started_manifest(profile, "r")["overrides"] == profile.overrides
    assert load_profile(SMOKE).overrides == []


@pytest.mark.parametrize(("override", "message"), [
    ("load.rat=5", "load.rat: unknown key"),
    ("load.rate=fast", "load.rate: Input should be a valid number"),
    ("load.rate=-3", "load.rate: Input should be greater than 0"),
    ("regions.9.share=0.5", "regions.9: the profile has"),
    ("load.rate", "expected FIELD=VALUE"),
])
def test_a_bad_override_names_the_field(override, message):
    with pytest.raises(ProfileError) as err:
        load_profile(SMOKE, [override])
    assert message in str(err.value) and str(SMOKE) in str(err.value)


def test_environment_overrides_use_double_underscores_for_the_path():
    env = {"TAILRACE_SET_LOAD__RATE": "250", "TAILRACE_SET_REGIONS__0__SHARE": "1.0", "HOME": "/root"}
    assert from_environment(env) == ["load.rate=250", "regions.0.share=1.0"]


def test_the_cli_refuses_a_bad_override_before_anything_starts(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(SMOKE), "--set", "load.rat=5", "--out",
                        str(tmp_path / "runs")], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "load.rat: unknown key" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()
    r = subprocess.run([sys.executable, "-m", "tailrace.cli", "run", str(SMOKE), "--rate", "0", "--out",
                        str(tmp_path / "runs")], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "--rate" in r.stderr
