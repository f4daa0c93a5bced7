"""`tailrace collect SPOOL RUN_DIR`: add what a worker kept in its spool (closed chunks and worker.json the
master never acknowledged — a worker cut off, a master gone) to the run directory on the master's host.
Idempotent: a file already there is left as it is."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tailrace.contract.layout import RunLayout, write_atomic


class CollectError(ValueError):
    """A spool or run directory that cannot be used; the message names it."""


@dataclass
class Collected:
    added: list[str]
    present: int

    def describe(self) -> str:
        return f"{len(self.added)} file(s) added, {self.present} already there"


def spool_run(spool: Path, run_dir: Path) -> RunLayout:
    """The spool's directory for the run: SPOOL/<run-id>, or SPOOL itself when it is one run's."""
    for candidate in (spool / run_dir.name, spool):
        if RunLayout(candidate).regions.is_dir():
            return RunLayout(candidate)
    raise CollectError(f"{spool}: no spool of run {run_dir.name} (expected {RunLayout(spool / run_dir.name).regions}/)")


def collect(spool: Path, run_dir: Path) -> Collected:
    """Copy every closed file of the spool that the run directory lacks."""
    target = RunLayout(run_dir)
    if not target.plan.is_file() and not target.manifest.is_file():
        raise CollectError(f"{run_dir}: not a run directory (no plan.json or manifest.json)")
    if not spool.is_dir():
        raise CollectError(f"{spool}: no such spool directory")
    source = spool_run(spool, run_dir)
    added, present = [], 0
    for region, worker, layout in source.workers():
        for path in layout.shipped_files():
            destination = target.worker(region, worker).dir / path.name
            if destination.exists():
                present += 1
                continue
            write_atomic(destination, path.read_bytes())
            added.append(f"{region}/{worker}/{path.name}")
    return Collected(added, present)
