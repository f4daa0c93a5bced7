"""Server-side statistics of the endpoints under test, saved into the run directory.

For each endpoint that exposes them: the KServe/Triton statistics extension (`GET <stats>/v2/models/stats`)
before and after the run and periodically, and the Prometheus metrics (Triton's port 8002, or the embedded
endpoint's `/metrics`). Per endpoint (paths from contract/layout.py's RunLayout):

    stats-before.json, stats-after.json   {t_ns, server, kind, model, model_stats: [...]}
    stats-timeline.jsonl                  one such object per interval
    metrics-before.prom, metrics-after.prom  the scrape, verbatim
    metrics-timeline.jsonl                {t_ns, samples: {"name{labels}": value}} for its model

A server that does not answer is skipped for that snapshot (an outage must not stop the run). The snapshots before
and after the load wait longer for it than the periodic ones during it (nothing else waits on them then: a server
busy or just started answered a scrape in over 2 s in CI), and one not had is said in the manifest's warnings.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tailrace.contract.credentials import Credential, CredentialError
from tailrace.contract.layout import RunLayout, append_line, write_atomic
from tailrace.contract.plan import RunPlan
from tailrace.contract.profile import Tls
from tailrace.harness.client.tls import default_verify_context, ssl_context


@dataclass(frozen=True)
class StatsTarget:
    endpoint: str
    model: str
    kind: str  # "embedded" | "triton" | "remote"
    stats_base: str | None  # http(s)://host:port of the statistics extension
    metrics_url: str | None
    auth: Credential | None = None  # read at each request, never stored in the run directory
    tls: Tls | None = None  # the endpoint's tls, for https:// statistics and metrics

    def headers(self) -> dict[str, str]:
        """The auth header, read now; none when the credential cannot be read (the snapshot is then skipped)."""
        if self.auth is None:
            return {}
        try:
            return self.auth.headers()
        except CredentialError:
            return {}

    def describe(self) -> dict:
        """What the manifest records of this target: no credential, no TLS files."""
        return {k: v for k, v in vars(self).items() if k not in ("auth", "tls")}


def stats_targets(plan: RunPlan) -> list[StatsTarget]:
    """What to snapshot for each endpoint of the plan (its resolved addresses, never through a proxy)."""
    targets = []
    for ep in plan.profile.endpoints:
        stats_base = ep.stats_url or (ep.url if ep.protocol == "kserve-http" else None)
        targets.append(StatsTarget(ep.name, ep.model, plan.endpoint_kinds[ep.name], stats_base, ep.metrics_url,
                                   Credential.of(ep), ep.tls))
    return targets


PROCESS_SAMPLES = ("process_resident_memory_bytes", "tailrace_server_peak_rss_bytes", "process_cpu_seconds_total",
                   "nv_cpu_memory_used_bytes", "nv_cpu_utilization")


def model_samples(prom_text: str, model: str) -> dict[str, float]:
    """Samples labelled with `model` (Triton's nv_* and the embedded endpoint's tailrace_*; vLLM's and the embedded
    generative models' by model_name), and the server's process-wide memory / CPU samples, by name{labels}."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(prom_text):
        for s in family.samples:
            if model not in (s.labels.get("model"), s.labels.get("model_name")) and s.name not in PROCESS_SAMPLES:
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()) if k not in ("model", "model_name"))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = float(s.value)
    return out


PERIODIC_TIMEOUT_S = 2.0  # a scrape during the load: the master's loop waits on it
SNAPSHOT_TIMEOUT_S = 10.0  # before and after the load


class ServerStatsRecorder:
    """Takes the snapshots; `due()` tells the caller's loop when the next periodic one is wanted. `missed`: a
    warning for each snapshot before or after the load a server did not answer."""

    def __init__(self, layout: RunLayout, targets: list[StatsTarget], interval_s: float) -> None:
        self.layout, self.targets, self.interval_s = layout, targets, interval_s
        self._next = time.monotonic() + interval_s
        self._clients: dict[Tls | None, httpx.Client] = {}
        self.missed: list[str] = []

    def _client(self, target: StatsTarget, url: str) -> httpx.Client:
        """One client per TLS setting (httpx verifies per client); plain http:// ones share the first."""
        tls = target.tls if url.startswith("https://") else None
        if tls not in self._clients:
            self._clients[tls] = httpx.Client(timeout=PERIODIC_TIMEOUT_S,
                                              verify=ssl_context(tls) if tls is not None else default_verify_context())
        return self._clients[tls]


    def _get(self, target: StatsTarget, url: str, stage: str | None) -> tuple[httpx.Response | None, str]:
        """GET `url` (waiting longer for a snapshot's `stage` than during the load); once more on a kept-alive
        connection the server had closed (a server closes it after an error of its own: the next scrape must not be
        lost with it). (the response, or None when it cannot be had; why not, or "")."""
        timeout = PERIODIC_TIMEOUT_S if stage is None else SNAPSHOT_TIMEOUT_S
        why = ""
        for _ in (1, 2):
            try:
                r = self._client(target, url).get(url, headers=target.headers(), timeout=timeout)
                return r, "" if r.status_code == 200 else f"HTTP {r.status_code}"
            except httpx.RemoteProtocolError as exc:
                why = f"{type(exc).__name__}: {exc}"
            except httpx.TimeoutException as exc:
                return None, f"{type(exc).__name__} after {timeout:g} s"
            except httpx.HTTPError as exc:
                return None, f"{type(exc).__name__}: {exc}"
        return None, why

    def _stats(self, target: StatsTarget, stage: str | None = None) -> dict | None:
        if not target.stats_base:
            return None
        r, why = self._get(target, f"{target.stats_base}/v2/models/{target.model}/stats", stage)
        if r is None or r.status_code != 200:
            if r is None and stage is not None:  # (a model the extension keeps no statistics of answers 404: none)
                self.missed.append(f"{target.endpoint}: the server's statistics of {target.model} {stage} the run "
                                   f"were not had ({target.stats_base}: {why}); its counts are not known")
            return None
        return {"t_ns": time.time_ns(), "server": target.stats_base, "kind": target.kind, "model": target.model,
                "model_stats": r.json().get("model_stats", [])}

    def _metrics(self, target: StatsTarget, stage: str | None = None) -> str | None:
        if not target.metrics_url:
            return None
        r, why = self._get(target, target.metrics_url, stage)
        if r is not None and r.status_code == 200:
            return r.text
        if stage is not None:
            self.missed.append(f"{target.endpoint}: the server's metrics {stage} the run were not scraped "
                               f"({target.metrics_url}: {why}); the change of its counters is not known")
        return None

    def _scrape(self, stage: str | None = None) -> list[tuple[StatsTarget, dict | None, str | None]]:
        """Statistics and metrics per target, asking each server once for endpoints that share it (`stage`: a
        snapshot's, "before" or "after": waited for longer, its misses said)."""
        stats_cache: dict[tuple, dict | None] = {}
        metrics_cache: dict[str | None, str | None] = {}
        out = []
        for t in self.targets:
            key = (t.stats_base, t.model)
            if key not in stats_cache:
                stats_cache[key] = self._stats(t, stage)
            if t.metrics_url not in metrics_cache:
                metrics_cache[t.metrics_url] = self._metrics(t, stage)
            out.append((t, stats_cache[key], metrics_cache[t.metrics_url]))
        return out

    def snapshot(self, stage: str) -> None:
        """`stage` is "before" or "after": full statistics and the verbatim metrics scrape."""
        for t, stats, text in self._scrape(stage):
            if stats is not None:
                write_atomic(self.layout.stats_snapshot(t.endpoint, stage), json.dumps(stats))
            if text is not None:
                write_atomic(self.layout.metrics_scrape(t.endpoint, stage), text)

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def periodic(self) -> None:
        """Append one line per endpoint to its stats and metrics timelines."""
        self._next = time.monotonic() + self.interval_s
        for t, stats, text in self._scrape():
            if stats is not None:
                append_line(self.layout.stats_timeline(t.endpoint), json.dumps(stats))
            if text is not None:
                append_line(self.layout.metrics_timeline(t.endpoint),
                            json.dumps({"t_ns": time.time_ns(), "samples": model_samples(text, t.model)}))

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
