"""The type check (`make typecheck`, run by `make test-fast` and `make test`): mypy over contract/, analysis/,
harness/client/ and tailrace/, which must stay clean.

The repository's rooms install as sub-packages of one import name (setup.py: harness/ is tailrace.harness), which a
static checker cannot follow from the source tree. build/typecheck/tailrace is that package as links into the
checkout — made fresh on each run — and `mypy_path` (pyproject.toml's [tool.mypy]; an editor's extraPaths, as
[tool.pyright] has it) points there.

    python -m tests.type_check [MODULE ...]     (default: CHECKED)
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("contract", "endpoints", "harness", "analysis")
LINKS = ROOT / "build" / "typecheck" / "tailrace"
# Clean, and kept so: the shared contract, the analysis, the protocol clients and every module of the CLI
# (tailrace/*.py). A module of another room joins once it is clean.
CHECKED = ("tailrace.contract", "tailrace.analysis", "tailrace.harness.client",
           *sorted(f"tailrace.{m.stem}" for m in (ROOT / "tailrace").glob("*.py") if m.stem != "__init__"),
           "tailrace.harness.control.worker_gate", "tailrace.harness.control.admission")


def link_package() -> Path:
    """build/typecheck/tailrace: tailrace/'s modules and each room, linked (a new file is seen at the next run)."""
    if LINKS.exists():
        shutil.rmtree(LINKS)
    LINKS.mkdir(parents=True)
    for room in ROOMS:
        (LINKS / room).symlink_to(ROOT / room, target_is_directory=True)
    for module in (ROOT / "tailrace").iterdir():
        if module.suffix == ".py" or (module.is_dir() and (module / "__init__.py").exists()):
            (LINKS / module.name).symlink_to(module, target_is_directory=module.is_dir())
    return LINKS.parent


def main(argv: list[str]) -> int:
    link_package()
    targets = argv or list(CHECKED)
    args = [a for t in targets for a in (("-p", t) if (LINKS.parent / t.replace(".", "/")).is_dir() else ("-m", t))]
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
