"""`make demo`: the main job on embedded defaults — build the models, run profiles/demo.toml, analyse it. A first
look, not a gate: it exits 0 whenever the run completed and its report was written, whatever the verdict, and
ends with one line — the verdict, the report's path and, for anything not PASS, the SLO, what was measured and
why (`tailrace run` keeps its exit codes for CI gates)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tailrace.contract.exit_codes import FAIL, INCONCLUSIVE, INVALID, PASS
from tailrace.contract.layout import ReportLayout
from tailrace.contract.profile import Profile
from tailrace.contract.summary import SummaryError
from tailrace.run_command import run_and_report_dir

DEMO_PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "demo.toml"
VERDICT_CODES = (PASS, FAIL, INCONCLUSIVE, INVALID)
MAX_REASONS = 3


def closing_line(summary_path: Path, page: Path) -> str:
    """The demo's last line: 'demo: PASS — report: PATH', or the verdict with each SLO that is not PASS (the
    first MAX_REASONS; how many more) or what made the run INVALID."""
    from tailrace.analysis.report.verdict_grid import not_passing, why_words
    from tailrace.contract.summary import RunSummary

    summary = RunSummary.of(json.loads(summary_path.read_text()), str(summary_path))
    line = f"demo: {summary.verdict} — report: {page}"
    if summary.verdict == "INVALID":
        return f"{line} — {'; '.join(summary.invalid_reasons[:MAX_REASONS])}"
    bad = not_passing(summary.slos)
    if not bad:
        return line
    more = f"; and {len(bad) - MAX_REASONS} more in the report" if len(bad) > MAX_REASONS else ""
    return f"{line} — " + "; ".join(why_words(v) for v in bad[:MAX_REASONS]) + more


def run_demo(profile: Profile, args: argparse.Namespace) -> int:
    """Run the demo's `profile` (profiles/demo.toml: 3 regions; KServe endpoints, an LLM and a RAG pipeline; ~60 s),
    checked already, print its closing line; 0 when the run completed and its report was written, else tailrace's
    own exit code."""
    run_dir, code = run_and_report_dir(profile, args.workdir / "runs", ui=args.ui_bind)
    report = ReportLayout.of_run(run_dir) if run_dir is not None else None
    if code not in VERDICT_CODES or report is None or not report.page.exists() or not report.summary.exists():
        return code if code != PASS else 1
    try:
        print(closing_line(report.summary, report.page), flush=True)
    except (SummaryError, ValueError, OSError) as exc:  # the report stands; only its closing words are lost
        print(f"demo: the run completed — report: {report.page} (its summary could not be read back: {exc})",
              flush=True)
    return PASS
