"""One import name: the repository's rooms (contract/, endpoints/, harness/, analysis/) install as sub-packages of
`tailrace` (tailrace.harness, …), beside the CLI's own modules in tailrace/. Everything else is in pyproject.toml."""
from setuptools import find_packages, setup

ROOMS = ("contract", "endpoints", "harness", "analysis")

setup(
    packages=["tailrace", *(f"tailrace.{p}" for p in find_packages(include=[f"{r}{s}" for r in ROOMS for s in ("", ".*")]))],
    package_dir={"tailrace": "tailrace", **{f"tailrace.{room}": room for room in ROOMS}},
    package_data={"tailrace.harness.orchestration": ["live_static/*"]},  # the live page and its vendored uPlot
)
