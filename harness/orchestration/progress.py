"""Live progress of a local run: per region requests, rate, errors and p99, scraped from worker metrics."""
from __future__ import annotations

import time
from collections import defaultdict

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tailrace.contract.records import CANCELLED
from tailrace.harness.client.tls import default_verify_context


def scrape(client: httpx.Client, port: int) -> dict | None:
    """Counts by status (ok, errors, cancelled: abandoned by the client as declared, never an error) and latency
    histogram buckets of one worker's /metrics (None if unreachable)."""
    out = {"ok": 0.0, "errors": 0.0, "cancelled": 0.0, "buckets": defaultdict(float)}
    try:
        text = client.get(f"http://127.0.0.1:{port}/metrics").text
    except httpx.HTTPError:
        return None
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "tailrace_requests_total":
                status = s.labels.get("status")
                out["ok" if status == "ok" else "cancelled" if status == CANCELLED else "errors"] += s.value
            elif s.name == "tailrace_request_latency_seconds_bucket":
                out["buckets"][float(s.labels["le"])] += s.value
    return out


def bucket_quantile(buckets: dict[float, float], q: float) -> float | None:
    """Upper bound of the bucket holding quantile q (Prometheus histogram semantics)."""
    if not buckets:
        return None
    items = sorted(buckets.items())
    total = items[-1][1]
    if total <= 0:
        return None
    for le, count in items:
        if count >= q * total:
            return le
    return items[-1][0]


def _p99_text(p99_s: float | None) -> str:
    if p99_s is None:
        return "-"
    return "> 10 s" if p99_s == float("inf") else f"{p99_s * 1000:g} ms"


class LiveScreen:
    """One rich Live table on the terminal, replaced in place."""

    def __init__(self) -> None:
        self._live = None

    def show(self, table) -> None:
        from rich.live import Live

        if self._live is None:
            from tailrace.contract.terminal import console

            self._live = Live(table, refresh_per_second=2, transient=False, console=console())
            self._live.start()
        else:
            self._live.update(table)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            if not self._live.console.is_terminal:  # rich ends the last frame with a newline on a terminal only: a
                self._live.console.line()  # log or pipe had the next line (the verdict) run on after the caption
            self._live = None


class Progress:
    """A rich live table, refreshed once a second."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._screen = LiveScreen()
        self._last: dict[str, tuple[float, float]] = {}
        self._t0 = time.monotonic()
        self._latest: dict[str, dict] = {}  # last good scrape per worker (workers exit before the last frame)
        self._first: dict[str, float] = {}  # region → when its first request was counted
        self._last_fresh: dict[str, float] = {}  # region → when one of its workers last answered
        self._client: httpx.Client | None = None

    def update(self, run) -> None:
        if self.quiet or not run.metrics_ports:
            return
        from rich.table import Table

        per_region: dict[str, dict] = defaultdict(lambda: {"ok": 0.0, "errors": 0.0, "cancelled": 0.0,
                                                            "buckets": defaultdict(float), "fresh": False})
        now = time.monotonic()
        for name, port in run.metrics_ports.items():
            region = name.rsplit("-w", 1)[0]
            if self._client is None:
                self._client = httpx.Client(timeout=0.5, verify=default_verify_context())
            fresh = scrape(self._client, port)
            s = fresh or self._latest.get(name)
            if s is None:
                continue
            self._latest[name] = s
            agg = per_region[region]
            agg["fresh"] = agg["fresh"] or fresh is not None
            agg["ok"] += s["ok"]
            agg["errors"] += s["errors"]
            agg["cancelled"] += s.get("cancelled", 0.0)
            for le, v in s["buckets"].items():
                agg["buckets"][le] += v
        elapsed = now - self._t0
        title = f"tailrace run {run.run_id}  {elapsed:.0f} s"
        table = Table(title=title, min_width=len(title) + 2,  # the title on one line above a narrow table
                      caption="rate: requests/s over the last second (the run's mean once a region's workers have "
                              "finished); p99 ≤: the upper edge of the latency histogram bucket that holds the 99th "
                              "percentile, a live estimate — the report computes exact percentiles")
        cancels = any(agg["cancelled"] for agg in per_region.values())
        for col in ("region", "requests", "rate /s", "errors", *(("cancelled",) if cancels else ()), "p99 ≤"):
            table.add_column(col, justify="right")
        for region, agg in sorted(per_region.items()):
            total = agg["ok"] + agg["errors"] + agg["cancelled"]
            if total > 0:
                self._first.setdefault(region, now)
            table.add_row(region, f"{total:,.0f}", self._rate(region, total, now, agg["fresh"]),
                          f"{agg['errors']:,.0f}", *((f"{agg['cancelled']:,.0f}",) if cancels else ()),
                          _p99_text(bucket_quantile(agg["buckets"], 0.99)))
        self._screen.show(table)

    def _rate(self, region: str, total: float, now: float, fresh: bool) -> str:
        """The last second's rate while the region's workers answer; the mean over its sending time after."""
        if not fresh:
            first, last = self._first.get(region), self._last_fresh.get(region)
            return f"{total / (last - first):,.0f} mean" if first is not None and last and last > first else "-"
        last_t, last_n = self._last.get(region, (now, total))
        self._last[region] = (now, total)
        self._last_fresh[region] = now
        return f"{(total - last_n) / (now - last_t):,.0f}" if now > last_t else "0"

    def close(self) -> None:
        self._screen.close()
        if self._client is not None:
            self._client.close()


class ChunkProgress:
    """The live per-region table of a master whose workers are on other hosts: read from the request chunks
    as they arrive in the run directory (their metrics ports are not reachable from here)."""

    def __init__(self, layout, quiet: bool, recent: int = 5000) -> None:
        self.layout, self.quiet, self.recent = layout, quiet, recent
        self._seen: set = set()
        self._per_region: dict[str, dict] = {}
        self._screen = LiveScreen()
        self._t0 = time.monotonic()
        self._last_update = 0.0

    def _read_new(self) -> None:
        import numpy as np
        import pyarrow.parquet as pq

        for path in self.layout.request_chunks():
            if path in self._seen:
                continue
            self._seen.add(path)
            try:
                table = pq.read_table(path, columns=["region", "status", "latency_ns"])
            except (OSError, ValueError):
                continue
            regions = table.column("region").to_numpy(zero_copy_only=False)
            status = table.column("status").to_numpy(zero_copy_only=False)
            latency = table.column("latency_ns").to_numpy()
            for region in set(regions.tolist()):
                mine = regions == region
                agg = self._per_region.setdefault(region, {"n": 0, "errors": 0, "cancelled": 0,
                                                           "latencies": np.empty(0)})
                agg["n"] += int(mine.sum())
                agg["errors"] += int((mine & (status != "ok") & (status != CANCELLED)).sum())
                agg["cancelled"] += int((mine & (status == CANCELLED)).sum())
                agg["latencies"] = np.concatenate([agg["latencies"], latency[mine & (status == "ok")]])[-self.recent:]

    def update(self, run_id: str) -> None:
        if self.quiet or time.monotonic() - self._last_update < 1.0:
            return
        self._last_update = time.monotonic()
        import numpy as np
        from rich.table import Table

        self._read_new()
        title = f"tailrace master {run_id}  {time.monotonic() - self._t0:.0f} s (results received)"
        table = Table(title=title, min_width=len(title) + 2)  # the title on one line above a narrow table
        for col in ("region", "requests", "errors", "cancelled", "p99 (recent)"):
            table.add_column(col, justify="right")
        for region, agg in sorted(self._per_region.items()):
            lat = agg["latencies"]
            table.add_row(region, f"{agg['n']:,}", f"{agg['errors']:,}", f"{agg['cancelled']:,}",
                          f"{np.percentile(lat, 99) / 1e6:.1f} ms" if len(lat) else "-")
        self._screen.show(table)

    def close(self) -> None:
        self._screen.close()
