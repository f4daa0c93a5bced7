"""The layers of docs/ARCHITECTURE.md hold: each room imports only the rooms below it, and only
contract/layout.py spells the run directory's paths."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# room → rooms it may import (besides itself)
ALLOWED = {
    "contract": set(),
    "endpoints": {"contract"},
    "harness": {"contract"},
    "analysis": {"contract"},
    "tailrace": {"contract", "endpoints", "harness", "analysis"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _modules(room: str) -> list[Path]:
    return sorted((ROOT / room).rglob("*.py"))


def test_each_room_imports_only_the_rooms_below_it():
    wrong = []
    for room, allowed in ALLOWED.items():
        for path in _modules(room):
            for name in _imports(path):
                top = name.split(".")[0]
                if top in ALLOWED and top != room and top not in allowed:
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


def test_the_worker_and_the_orchestration_do_not_import_each_other_upward():
    """harness/worker runs inside Locust processes: it never imports the orchestration around it."""
    wrong = [f"{p.relative_to(ROOT)} imports {n}" for p in _modules("harness/worker") for n in _imports(p)
             if n.startswith("harness.orchestration")]
    assert wrong == []


def test_no_import_cycle_between_modules():
    graph: dict[str, set[str]] = {}
    for room in ALLOWED:
        for path in _modules(room):
            mod = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            graph[mod] = {n for n in _imports(path) if n.split(".")[0] in ALLOWED}
    state: dict[str, int] = {}

    def visit(mod: str, stack: list[str]) -> list[str] | None:
        state[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            if dep not in graph:
                continue
            if state.get(dep) == 1:
                return stack + [mod, dep]
            if state.get(dep) is None and (cycle := visit(dep, stack + [mod])):
                return cycle
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if state.get(mod) is None:
            assert visit(mod, []) is None


def test_only_the_layout_spells_run_directory_paths():
    spelled = re.compile(r"""(?<!["'])["'](regions/|endpoints/|manifest\.json|plan\.json|requests-|clock-|worker\.json"""
                         r"""|master-events|stats-|cold-start\.json)""")
    wrong = [f"{p.relative_to(ROOT)}:{n}" for room in ALLOWED for p in _modules(room)
             if p != ROOT / "contract" / "layout.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if spelled.search(line)]
    assert wrong == []
