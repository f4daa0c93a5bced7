"""The layers of docs/ARCHITECTURE.md hold: each room imports only the rooms below it, no two files import each
other (directly or round a loop), no folder grows past what a reader takes in, and only contract/layout.py
spells the run directory's and the report's paths."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tests import ROOT

# The repository's rooms; each installs as a sub-package of the one import name (harness/ is tailrace.harness), and
# tailrace/ itself is the top room: the CLI and the Python API.
ROOMS = ("contract", "endpoints", "harness", "analysis")
PRODUCT = (*ROOMS, "tailrace")
# room → rooms it may import (besides itself)
ALLOWED = {
    "contract": set(),
    "endpoints": {"contract"},
    "harness": {"contract"},
    "analysis": {"contract"},
    "tailrace": {"contract", "endpoints", "harness", "analysis"},
}
# Inside a room, its sub-rooms in layers, lowest first: a module imports only its own layer and those below.
# A name is a sub-package (`tailrace.analysis.read`) or a module at the room's top (`tailrace.analysis.result`).
SUBLAYERS = {room: [{f"tailrace.{room}.{name}" for name in layer} for layer in layers] for room, layers in {
    "analysis": [{"read"}, {"stats"}, {"decide", "otel", "history"}, {"result"}, {"report"},
                 {"analyze", "analyze_command", "warm_report", "query"}],
    "endpoints": [{"models"}, {"serving"}, {"kserve", "generation"}, {"auth", "http_guard", "server"}],
    "harness": [{"client", "spool", "services"}, {"workload"}, {"worker"}, {"control"}, {"orchestration"}],
}.items()}
MAX_MODULES_PER_FOLDER = 15
# a run-directory or report path, spelled as a string: "regions/…", "summary.json", or a path join `/ "report"`
SPELLED = re.compile(r"""(?<!["'])["'](regions/|endpoints/|manifest\.json|plan\.json|requests-|clock-|worker\.json"""
                     r"""|master-events|stats-|cold-start\.json|index\.html|summary\.json|junit\.xml|tables/"""
                     r"""|capacity\.json|trials\.csv|latency_vs_load\.svg)"""
                     r"""|/\s*["'](regions|endpoints|report|tables|trials)["']""")


def _module_name(path: Path, root: Path = ROOT) -> str:
    """The installed name of a product file: harness/worker/run.py is tailrace.harness.worker.run."""
    parts = path.relative_to(root).with_suffix("").parts
    dotted = ".".join(parts if parts[0] == "tailrace" else ("tailrace", *parts))
    return dotted.removesuffix(".__init__")


def room_of(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "tailrace"


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The product modules `path` imports, anywhere in it: `from a.b import c` is a.b.c when that is a module.
    A room imported by its bare folder name (`import harness`) is kept as is, to be reported."""
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in known else node.module)
    return {n for n in out if n.split(".")[0] in PRODUCT}


def product_modules(root: Path = ROOT) -> dict[str, Path]:
    return {_module_name(p, root): p for room in PRODUCT for p in sorted((root / room).rglob("*.py"))}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = product_modules(root)
    known = set(modules)
    return {mod: {n for n in imported_modules(path, known) if n in known and n != mod}
            for mod, path in modules.items()}


def test_every_import_spells_the_one_installed_name():
    """An installed tailrace has one import name: `import harness` works in a checkout only (by accident of the
    working directory) and breaks every installed copy."""
    every = [*product_modules().values(), *ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/*.py"), *ROOT.glob("deploy/**/*.py")]
    modules = set(product_modules())
    bare = [f"{p.relative_to(ROOT)}: {n}" for p in every for n in imported_modules(p, modules) if n.split(".")[0] in ROOMS]
    assert bare == []


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle between files (a package's __init__ counts as a file), or None."""
    state: dict[str, int] = {}

    def visit(mod: str, stack: list[str]) -> list[str] | None:
        state[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [mod, dep] if dep in stack else stack + [mod, dep]
            if state.get(dep) is None and (cycle := visit(dep, stack + [mod])):
                return cycle
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if state.get(mod) is None and (cycle := visit(mod, [])):
            return cycle
    return None


def _layer_of(mod: str, layers: list[set[str]]) -> int | None:
    for i, names in enumerate(layers):
        if any(mod == n or mod.startswith(n + ".") for n in names):
            return i
    return None


def test_each_room_imports_only_the_rooms_below_it():
    wrong = []
    for mod, deps in import_graph().items():
        room = room_of(mod)
        for dep in deps:
            top = room_of(dep)
            if top != room and top not in ALLOWED[room]:
                wrong.append(f"{mod} imports {dep}")
    assert wrong == []


def test_each_sub_room_imports_only_its_layer_and_those_below():
    wrong = []
    for mod, deps in import_graph().items():
        layers = SUBLAYERS.get(room_of(mod))
        if not layers or mod.count(".") == 1:
            continue
        mine = _layer_of(mod, layers)
        assert mine is not None, f"{mod}: in no layer of SUBLAYERS — give it one (and docs/ARCHITECTURE.md a line)"
        for dep in deps:
            theirs = _layer_of(dep, layers)
            if theirs is not None and theirs > mine:
                wrong.append(f"{mod} imports {dep} (a layer above it)")
    assert wrong == []


def test_the_worker_does_not_import_the_orchestration_around_it():
    """harness/worker runs inside Locust processes: it never imports the orchestration around it."""
    wrong = [f"{m} imports {d}" for m, deps in import_graph().items() if m.startswith("tailrace.harness.worker")
             for d in deps if d.startswith("tailrace.harness.orchestration")]
    assert wrong == []


def test_no_import_cycle_between_files():
    assert find_cycle(import_graph()) is None


def test_a_cycle_through_from_package_import_module_is_found(tmp_path):
    """`from pkg import mod` imports the file pkg/mod.py: two files that import each other that way are a cycle
    (the figures ↔ plots cycle the first version of this test missed)."""
    pkg = tmp_path / "analysis"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "figures.py").write_text("def draw():\n    from tailrace.analysis import plots\n")
    (pkg / "plots.py").write_text("from tailrace.analysis.figures import LIMIT\n")
    for room in PRODUCT:
        (tmp_path / room).mkdir(exist_ok=True)
    figures, plots = "tailrace.analysis.figures", "tailrace.analysis.plots"
    assert find_cycle(import_graph(tmp_path)) in ([figures, plots, figures], [plots, figures, plots])


def test_no_folder_of_product_code_holds_more_than_fifteen_modules():
    crowded = {}
    for room in PRODUCT:
        for folder in [ROOT / room, *[p for p in (ROOT / room).rglob("*") if p.is_dir()]]:
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            if len(modules) > MAX_MODULES_PER_FOLDER:
                crowded[str(folder.relative_to(ROOT))] = len(modules)
    assert crowded == {}


def test_only_the_layout_spells_run_directory_and_report_paths():
    wrong = [f"{p.relative_to(ROOT)}:{n}" for p in product_modules().values()
             if p != ROOT / "contract" / "layout.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if SPELLED.search(line)]
    assert wrong == []


MAX_CLASS_LINES, MAX_FUNCTION_LINES = 250, 80


def long_units(root: Path = ROOT) -> list[str]:
    """Classes over MAX_CLASS_LINES and functions over MAX_FUNCTION_LINES lines: none is exempt."""
    out = []
    for mod, path in product_modules(root).items():
        for node in ast.walk(ast.parse(path.read_text())):
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES if isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            lines = node.end_lineno - node.lineno + 1 if limit else 0
            if limit and lines > limit:
                out.append(f"{mod}.{node.name}: {lines} lines (at most {limit})")
    return out


def test_no_class_or_function_outgrows_what_a_reader_takes_in(tmp_path):
    assert long_units() == []
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "big.py").write_text("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    for room in PRODUCT:
        (tmp_path / room).mkdir(exist_ok=True)
    assert long_units(tmp_path) == [f"tailrace.harness.big.f: {MAX_FUNCTION_LINES + 1} lines (at most 80)"]
