"""The run directory: the one place that spells its paths (see docs/ARCHITECTURE.md, "The run directory").

    runs/<run-id>/
      plan.json                 the resolved run plan (written once, before any process starts)
      manifest.json             plan + what happened: versions, host, start/end, workers, validity
      master-events.jsonl       workers joining, saying hello, finishing, leaving (master clock)
      logs/<process>.log
      regions/<region>/<worker>/requests-<n>.parquet, clock-<n>.parquet, worker.json
      endpoints/<endpoint>/stats-<stage>.json, metrics-<stage>.prom, stats-timeline.jsonl,
                           metrics-timeline.jsonl, cold-start.json, model.json
      report/index.html, summary.json, tables/<name>.csv

Every writer and reader takes its paths from `RunLayout` / `WorkerLayout`; a chunk file is complete or
absent (written under a temporary name, then renamed).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REQUESTS = "requests"
CLOCK = "clock"
STATS_STAGES = ("before", "after")


def chunk_name(prefix: str, index: int) -> str:
    """`requests-00012.parquet`: the name of closed chunk `index`."""
    return f"{prefix}-{index:05d}.parquet"


SHIPPED_NAME = re.compile(rf"^(?:(?:{REQUESTS}|{CLOCK})-\d{{5}}\.parquet|worker\.json)$")


def shippable(name: str) -> bool:
    """A file a worker sends its master: a closed chunk or worker.json (never a path, never a temporary)."""
    return bool(SHIPPED_NAME.match(name))


def temporary(path: Path) -> Path:
    """The name a file is written under before the rename that makes it appear whole."""
    return path.with_name("." + path.name + ".tmp")


def write_atomic(path: Path, text: str | bytes) -> Path:
    """Write `text` (or bytes) to `path` whole or not at all (temporary name + rename), making its directory; an
    OSError (a full disk) names the file and leaves no temporary file behind."""
    tmp = temporary(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            tmp.write_bytes(text)
        else:
            tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def accuracy_key(logs: Path, model: str) -> Path:
    """The answer key a scripted generative model is handed (logs/accuracy-key-<model>.json)."""
    return logs / f"accuracy-key-{model}.json"


def server_answers(logs: Path) -> Path:
    """The embedded server's own record of the graded items it answered right (logs/server-answers.jsonl)."""
    return logs / "server-answers.jsonl"


def append_line(path: Path, line: str) -> None:
    """Append one line to a log (JSON lines); an OSError names the file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            fh.write(line + "\n")
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class WorkerLayout:
    """One worker's directory: regions/<region>/<worker>/."""

    dir: Path

    def chunk(self, prefix: str, index: int) -> Path:
        return self.dir / chunk_name(prefix, index)

    @property
    def summary(self) -> Path:
        return self.dir / "worker.json"

    def shipped_files(self) -> list[Path]:
        """The files of this directory a worker sends its master (closed chunks, worker.json), by name."""
        return sorted(p for p in self.dir.iterdir() if shippable(p.name)) if self.dir.is_dir() else []

    @property
    def acked(self) -> Path:
        """The names the master acknowledged, one per line (a spool's own record)."""
        return self.dir / "acked.txt"


@dataclass(frozen=True)
class RunLayout:
    """Every path of one run directory."""

    root: Path

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def master_events(self) -> Path:
        return self.root / "master-events.jsonl"

    @property
    def live(self) -> Path:
        """The live page's feed, one line a second (contract/master_events.py's LIVE)."""
        return self.root / "live.jsonl"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, process: str) -> Path:
        return self.logs / f"{process}.log"

    def worker(self, region: str, worker: str) -> WorkerLayout:
        return WorkerLayout(self.regions / region / worker)

    @property
    def regions(self) -> Path:
        """regions/: the workers' directories (a spool holds the same tree)."""
        return self.root / "regions"

    def workers(self) -> list[tuple[str, str, WorkerLayout]]:
        """(region, worker, layout) of every worker directory present."""
        base = self.regions
        return [(w.parent.name, w.name, WorkerLayout(w)) for w in sorted(base.glob("*/*")) if w.is_dir()] \
            if base.is_dir() else []

    def request_chunks(self) -> list[Path]:
        return sorted(self.root.glob(f"regions/*/*/{REQUESTS}-*.parquet"))

    def clock_chunks(self) -> list[Path]:
        return sorted(self.root.glob(f"regions/*/*/{CLOCK}-*.parquet"))

    def endpoint(self, name: str) -> Path:
        return self.root / "endpoints" / name

    def stats_snapshot(self, endpoint: str, stage: str) -> Path:
        return self.endpoint(endpoint) / f"stats-{stage}.json"

    def metrics_scrape(self, endpoint: str, stage: str) -> Path:
        return self.endpoint(endpoint) / f"metrics-{stage}.prom"

    def stats_timeline(self, endpoint: str) -> Path:
        return self.endpoint(endpoint) / "stats-timeline.jsonl"

    def metrics_timeline(self, endpoint: str) -> Path:
        return self.endpoint(endpoint) / "metrics-timeline.jsonl"

    def monitor_timeline(self, monitor: str) -> Path:
        """A hardware source's scrapes through the run (harness/orchestration/hardware_monitors.py)."""
        return self.root / "monitors" / monitor / "timeline.jsonl"

    @property
    def server_spans(self) -> Path:
        """The servers' OpenTelemetry spans the run's OTLP receiver got (harness/services/otlp_receiver.py): one
        OTLP JSON export request a line, as an OpenTelemetry Collector's file exporter writes them."""
        return self.root / "server-spans" / "received.jsonl"

    def monitor_names(self) -> list[str]:
        base = self.root / "monitors"
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []

    def cold_start(self, endpoint: str) -> Path:
        return self.endpoint(endpoint) / "cold-start.json"

    def model_metadata(self, endpoint: str) -> Path:
        return self.endpoint(endpoint) / "model.json"

    def endpoint_names(self) -> list[str]:
        """Endpoints that have a directory (server statistics, cold start or model metadata)."""
        base = self.root / "endpoints"
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []

    @property
    def report(self) -> Path:
        return self.root / "report"


@dataclass(frozen=True)
class ReportLayout:
    """The analysis output: index.html, summary.json, junit.xml, tables/<name>.csv (by default run_dir/report)."""

    dir: Path

    @classmethod
    def of_run(cls, run_dir: Path) -> "ReportLayout":
        return cls(RunLayout(Path(run_dir)).report)

    @property
    def page(self) -> Path:
        return self.dir / "index.html"

    @property
    def summary(self) -> Path:
        return self.dir / "summary.json"

    @property
    def junit(self) -> Path:
        return self.dir / "junit.xml"

    @property
    def tables(self) -> Path:
        return self.dir / "tables"

    def table(self, name: str) -> Path:
        return self.tables / f"{name}.csv"


@dataclass(frozen=True)
class SweepLayout:
    """One sweep: sweep.json (written after every point: what a resumed sweep reads), points.csv, frontier.csv,
    edges.csv, index.html, its figures, logs/ (each configuration's server) and points/<run>/."""

    dir: Path

    @property
    def result(self) -> Path:
        return self.dir / "sweep.json"

    @property
    def profile(self) -> Path:  # the profile it ran, as it read it: a resumed sweep runs the same
        return self.dir / "profile.toml"

    def table(self, name: str) -> Path:
        return self.dir / f"{name}.csv"

    def figure(self, name: str) -> Path:
        return self.dir / f"{name}.svg"

    @property
    def page(self) -> Path:
        return self.dir / "index.html"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def points(self) -> Path:
        return self.dir / "points"


@dataclass(frozen=True)
class CapacityLayout:
    """One capacity search: capacity.json, trials.csv, latency_vs_load.svg, index.html, logs/ and trials/<run>/."""

    dir: Path

    @property
    def result(self) -> Path:
        return self.dir / "capacity.json"

    @property
    def trials_table(self) -> Path:
        return self.dir / "trials.csv"

    @property
    def figure(self) -> Path:
        return self.dir / "latency_vs_load.svg"

    @property
    def page(self) -> Path:
        return self.dir / "index.html"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def trials(self) -> Path:
        """Where each trial's run directory goes."""
        return self.dir / "trials"


@dataclass(frozen=True)
class HistoryLayout:
    """The runs as a history, kept apart from every run directory (so that a directory of runs holds runs only):
    catalogue.jsonl — one line per run analysed, keyed by its directory's absolute path, appended as each report is
    written — and `tailrace runs`' pages. `$TAILRACE_HISTORY_DIR`, else `$XDG_CACHE_HOME/tailrace` (~/.cache/tailrace)."""

    root: Path

    @classmethod
    def default(cls, environ: Mapping[str, str] | None = None) -> "HistoryLayout":
        env = os.environ if environ is None else environ
        if env.get("TAILRACE_HISTORY_DIR"):
            return cls(Path(env["TAILRACE_HISTORY_DIR"]))
        cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
        return cls(cache / "tailrace")

    @property
    def catalogue(self) -> Path:
        return self.root / "catalogue.jsonl"

    def list_page(self) -> Path:
        """`tailrace runs`' page of the runs listed."""
        return self.root / "runs.html"

    def trend_page(self, profile: str, metric: str) -> Path:
        """`tailrace runs trend`'s page of one profile's metric."""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{profile}-{metric}")
        return self.root / f"trend-{safe}.html"


def is_run_dir(path: Path) -> bool:
    """Whether `path` is a run directory (it holds a run's plan or manifest)."""
    layout = RunLayout(Path(path))
    return layout.manifest.is_file() or layout.plan.is_file()
