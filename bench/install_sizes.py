"""How big is each install? A fresh venv per extra (`pip install tailrace[EXTRA]` from a copy of this checkout,
dependencies from the package index), measured on disk: the whole venv and its site-packages without pip and
setuptools (what an image that drops them ships). Target: generator-only ≤ 450 MB of packages (it was 400 until
workers learnt images, tokenizers and structured outputs; the OpenTelemetry SDK belongs to the analysis).

    .venv/bin/python bench/install_sizes.py
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ".venv/bin/python bench/install_sizes.py"
INSTALLS = (("generator (base)", ""), ("+ analysis", "[analysis]"), ("+ server", "[server]"), ("+ models", "[models]"),
            ("all", "[all]"))
TOOLS = ("pip", "setuptools", "_distutils_hack")


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def measure(source: Path, extra: str, work: Path) -> tuple[float, float, list[tuple[str, float]]]:
    venv = work / f"venv{extra.strip('[]') or '-base'}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", f"{source}{extra}"], check=True)
    [site] = list((venv / "lib").glob("python*/site-packages"))
    tools = sum(size_mb(p) for p in site.iterdir() if p.name.split("-")[0] in TOOLS)
    biggest = sorted(((p.name, size_mb(p)) for p in site.iterdir() if p.is_dir()), key=lambda t: -t[1])[:4]
    return size_mb(venv), size_mb(site) - tools, biggest


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="tailrace-sizes-") as tmp:
        source = Path(tmp) / "tailrace"
        shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv*", "build", "runs", "__pycache__"))
        for name, extra in INSTALLS:
            whole, packages, biggest = measure(source, extra, Path(tmp))
            rows.append((name, extra, whole, packages, biggest))
            print(rows[-1], flush=True)
    lines = [f"Command: `{COMMAND}` (a fresh venv each, Python {sys.version.split()[0]}, x86_64 Linux wheels).", "",
             "| install | pip install | venv MB | packages MB (without pip, setuptools) | largest |", "|---|---|---|---|---|"]
    for name, extra, whole, packages, biggest in rows:
        largest = ", ".join(f"{n} {mb:.0f}" for n, mb in biggest)
        lines.append(f"| {name} | `tailrace{extra}` | {whole:.0f} | {packages:.0f} | {largest} |")
    generator = rows[0][3]
    lines += ["", f"Target: generator-only ≤ 450 MB — {'met' if generator <= 450 else 'not met'} ({generator:.0f} MB "
                  "of packages; the image drops pip)."]
    write_section("Install sizes", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
