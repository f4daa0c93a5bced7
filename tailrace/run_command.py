"""`tailrace run`: run locally, then analyse and exit with the verdict's code."""
from __future__ import annotations

import sys
from pathlib import Path

from tailrace.contract.exit_codes import INTERNAL, USAGE
from tailrace.contract.profile import Profile
from tailrace.harness.orchestration.disk_space import LowDiskError, min_free_bytes
from tailrace.harness.orchestration.endpoint_check import EndpointCheckError
from tailrace.harness.orchestration.local_run import run_local


def run_and_report(profile: Profile, out: Path, quiet: bool = False) -> int:
    """Run, analyse, print; exit code per README (0 pass, 1 fail, 3 inconclusive, 4 invalid, 5 tailrace failed)."""
    try:
        min_free_bytes()  # a malformed $TAILRACE_MIN_FREE_MB: one line, before anything starts
    except ValueError as exc:
        print(f"tailrace run: {exc}", file=sys.stderr)
        return USAGE
    try:
        run_dir, manifest = run_local(profile, out, quiet=quiet)
    except EndpointCheckError as exc:
        print(f"tailrace run: {exc.headline}; no load was sent:\n{exc}", file=sys.stderr)
        return USAGE
    except LowDiskError as exc:
        print(f"tailrace run: {exc}", file=sys.stderr)
        return USAGE
    except (RuntimeError, OSError) as exc:  # the run could not be carried out: tailrace (or this machine) failed
        print(f"tailrace run: {exc}", file=sys.stderr)
        return INTERNAL
    from tailrace.analysis.analyze_command import analyze_and_report

    return analyze_and_report(run_dir, None, quiet=quiet, exits=True)  # the run is over: analysed, then exit
