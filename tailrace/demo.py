"""`make demo`: the main job on embedded defaults — build the models, run profiles/demo.toml, analyse it."""
from __future__ import annotations

import argparse
from pathlib import Path

from tailrace.contract.profile import load_profile
from tailrace.run_command import run_and_report

DEMO_PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "demo.toml"


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo profile (3 regions; KServe endpoints, an LLM and a RAG pipeline; ~60 s) and print where the
    report is."""
    profile = load_profile(args.profile)
    return run_and_report(profile, args.workdir / "runs", ui=args.ui_bind)
