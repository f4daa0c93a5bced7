"""`tailrace run`: run locally, then analyse and exit with the verdict's code."""
from __future__ import annotations

import secrets
import sys
from pathlib import Path

from tailrace.analysis.warm_report import WarmReport, start_warm_report
from tailrace.contract.exit_codes import FAIL, INCONCLUSIVE, INTERNAL, INTERRUPTED, INVALID, PASS, USAGE
from tailrace.contract.layout import ReportLayout, RunLayout
from tailrace.contract.profile import Profile
from tailrace.harness.orchestration.disk_space import LowDiskError, min_free_bytes
from tailrace.harness.orchestration.endpoint_check import EndpointCheckError
from tailrace.harness.orchestration.lifecycle import interrupted_before_requests
from tailrace.harness.orchestration.live_page import LivePage
from tailrace.harness.orchestration.local_run import run_local
from tailrace.harness.services.otlp_receiver import ReceiverBindError

VERDICTS = {PASS: "PASS", FAIL: "FAIL", INCONCLUSIVE: "INCONCLUSIVE", INVALID: "INVALID", INTERRUPTED: "STOPPED"}


def open_live_page(ui: tuple[str, int] | None, token: str, command: str, quiet: bool) -> LivePage | None:
    """The run's live page on `ui` (host, port), its address printed; None when off. OSError: it cannot bind."""
    if ui is None:
        return None
    try:
        page = LivePage(ui[0], ui[1], token)
    except OSError as exc:
        raise OSError(f"--ui-bind {ui[0]}:{ui[1]}: {exc.strerror or exc}") from None
    if not quiet:
        print(f"{command}: live page at {page.url}", flush=True)
    return page


def close_live_page(page: LivePage | None, code: int, run_dir: Path | None) -> None:
    """Tell the page the verdict and where the report is, then stop serving it."""
    if page is None:
        return
    report = ReportLayout.of_run(run_dir).page if run_dir is not None else None
    page.finish(VERDICTS.get(code, "ERROR"), code, report if report is not None and report.exists() else None)
    page.close()


def run_and_report(profile: Profile, out: Path, quiet: bool = False, ui: tuple[str, int] | None = None) -> int:
    """Run (shown on a live page at `ui`), analyse, print; exit code per README (0 pass, 1 fail, 3 inconclusive,
    4 invalid, 5 tailrace failed)."""
    return run_and_report_dir(profile, out, quiet, ui)[1]


def run_and_report_dir(profile: Profile, out: Path, quiet: bool = False, ui: tuple[str, int] | None = None
                       ) -> tuple[Path | None, int]:
    """run_and_report, with the run directory (None where no run started)."""
    try:
        min_free_bytes()  # a malformed $TAILRACE_MIN_FREE_MB: one line, before anything starts
    except ValueError as exc:
        print(f"tailrace run: {exc}", file=sys.stderr)
        return None, USAGE
    token = secrets.token_urlsafe(16)
    try:
        page = open_live_page(ui, token, "tailrace run", quiet)
    except OSError as exc:
        print(f"tailrace run: {exc}", file=sys.stderr)
        return None, USAGE
    run_dir, code = None, INTERNAL
    try:
        run_dir, code = _run_and_report(profile, out, quiet, page, token)
    except KeyboardInterrupt:  # before the load began, or while the report was written: the CLI says so
        code = INTERRUPTED
        raise
    finally:
        close_live_page(page, code, run_dir)
    return run_dir, code


def _run_and_report(profile: Profile, out: Path, quiet: bool, page: LivePage | None,
                    token: str) -> tuple[Path | None, int]:
    warm = start_warm_report()  # the report's imports, done while the endpoints start
    try:
        return _run_then_report(profile, out, quiet, page, token, warm)
    finally:
        if warm is not None:
            warm.close()


def report_run(run_dir: Path, quiet: bool, export, command: str, warm: WarmReport | None) -> int:
    """Analyse a run this process drove and write its report: in `warm` (its imports done during the run) where
    there is one that answers, else here; analyze_and_report's exit code."""
    if warm is not None:
        code = warm.report(run_dir, quiet, export, command)
        if code is not None:
            return code
    from tailrace.analysis.analyze_command import analyze_and_report

    return analyze_and_report(run_dir, None, quiet=quiet, exits=True, export=export, command=command)


def _run_then_report(profile: Profile, out: Path, quiet: bool, page: LivePage | None, token: str,
                     warm: WarmReport | None) -> tuple[Path | None, int]:
    try:
        run_dir, manifest = run_local(profile, out, quiet=quiet, live=page, token=token,
                                      before_load=warm.wait_ready if warm is not None else None)
    except EndpointCheckError as exc:
        print(f"tailrace run: {exc.headline}; no load was sent:\n{exc}", file=sys.stderr)
        return None, USAGE
    except (LowDiskError, ReceiverBindError) as exc:
        print(f"tailrace run: {exc}", file=sys.stderr)
        return None, USAGE
    except (RuntimeError, OSError) as exc:  # the run could not be carried out: tailrace (or this machine) failed
        print(f"tailrace run: {exc}", file=sys.stderr)
        return None, INTERNAL
    if interrupted_before_requests("tailrace run", RunLayout(run_dir), bool(manifest.get("interrupted"))):
        return run_dir, INVALID
    # the run is over: analysed, then its spans exported from the rows the analysis read and corrected (read once)
    return run_dir, report_run(run_dir, quiet, profile.otel.export, "tailrace run", warm)
