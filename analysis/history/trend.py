"""One metric of one profile's runs over time (`tailrace runs trend`): each run's value with its 95% interval, read
from its summary.json, and whether it changed significantly from the run before.

A percentile's change is judged on the two runs' intervals: each interval's half-width over 1.96 is taken as that
estimate's standard error, and z = Δ / √(se_a² + se_b²) (two-sided p < 0.05: significant). The percentile intervals
are distribution-free and may be asymmetric, so this is an approximation; `tailrace compare A B` tests a pair of
runs exactly on their requests. An error rate's change is Fisher's exact test on the two runs' counts."""
from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats

from tailrace.analysis.stats.estimators import clopper_pearson
from tailrace.contract.summary import Estimate, RunSummary
from tailrace.contract.summary.history import CatalogueEntry, SummaryHeadline, Trend, TrendPoint
from tailrace.contract.summary.tables import first_latency_row

ALPHA = 0.05
Z95 = 1.959963984540054
LATENCY = ("p50", "p90", "p95", "p99", "p99.9")  # the latency table's (a stream's: its E2E)
TOKENS = tuple(f"{m}_{q}" for m in ("ttft", "tpot", "itl", "e2e") for q in ("p50", "p90", "p99"))
METRICS = (*LATENCY, *TOKENS, "error_rate")


class TrendError(ValueError):
    """A metric tailrace does not trend, or an endpoint × region no run has."""


def _latency(summary: RunSummary | SummaryHeadline, metric: str, endpoint: str,
             region: str) -> tuple[Estimate | None, int, int]:
    row = first_latency_row(summary.latency, endpoint, region)
    if row is None:
        return None, 0, 0
    if metric == "error_rate":
        low, high = clopper_pearson(row.errors, row.count) if row.count else (None, None)
        return Estimate(value=row.error_rate, ci_low=low, ci_high=high, n=row.count), row.errors, row.count
    return row.percentiles.get(metric), 0, row.count


def value_of(summary: RunSummary | SummaryHeadline, metric: str, endpoint: str = "*",
             region: str = "*") -> tuple[Estimate | None, int, int]:
    """(the metric's estimate in a run, errors, requests): None where the run has no such row or value."""
    if metric not in METRICS:
        raise TrendError(f"--metric {metric!r}: one of {', '.join(METRICS)}")
    if metric in TOKENS:
        name, q = metric.split("_")
        row = next((r for r in summary.tokens if r.endpoint == endpoint and r.region == region), None)
        return (getattr(row, f"{name}_ms").at(q) if row is not None else None), 0, row.ok if row is not None else 0
    return _latency(summary, metric, endpoint, region)


def _change_p(metric: str, before: tuple[Estimate, int, int], now: tuple[Estimate, int, int]) -> float | None:
    """The two-sided p-value of the change from `before` to `now` (None: an interval is missing)."""
    (a, k_a, n_a), (b, k_b, n_b) = before, now
    if metric == "error_rate":
        if not n_a or not n_b:
            return None
        return float(stats.fisher_exact([[k_a, n_a - k_a], [k_b, n_b - k_b]]).pvalue)
    if None in (a.value, b.value, a.ci_low, a.ci_high, b.ci_low, b.ci_high):
        return None
    se = math.hypot((a.ci_high - a.ci_low) / (2 * Z95), (b.ci_high - b.ci_low) / (2 * Z95))  # type: ignore[operator]
    if se == 0:
        return 0.0 if a.value != b.value else 1.0
    return float(2 * stats.norm.sf(abs((b.value - a.value) / se)))  # type: ignore[operator]


def settings_changed(before: Sequence[str], now: Sequence[str]) -> list[str]:
    """The overrides (`field=value`) of a run that the run before did not have, and `field` (its profile's own value)
    for each the run before set and this one does not: empty when both ran the same settings."""
    fields_now = {o.split("=", 1)[0] for o in now}
    return [o for o in now if o not in before] + [
        f.split("=", 1)[0] for f in before if f.split("=", 1)[0] not in fields_now]


def trend(runs: Sequence[tuple[CatalogueEntry, RunSummary | SummaryHeadline]], profile: str, metric: str,
          endpoint: str = "*",
          region: str = "*") -> Trend:
    """The metric over the profile's runs (given oldest first): a point per run that has it, each change from the
    run before that has it judged — where both ran the same settings (their overrides): a run at another load or
    configuration (`--set`, a sweep's point) shows what changed instead, and its change is not judged."""
    out = Trend(profile=profile, metric=metric, endpoint=endpoint, region=region,
                unit="fraction" if metric == "error_rate" else "ms")
    before: tuple[Estimate, int, int] | None = None
    before_overrides: list[str] = []
    for entry, summary in runs:
        estimate, errors, n = value_of(summary, metric, endpoint, region)
        if estimate is None or estimate.value is None:
            continue
        point = TrendPoint(run=entry.run, run_id=entry.run_id, start_ns=entry.start_ns, git_sha=entry.git_sha,
                           verdict=entry.verdict, value=estimate.value, ci_low=estimate.ci_low,
                           ci_high=estimate.ci_high, n=n or estimate.n, overrides=entry.overrides)
        if before is not None:
            point.settings_changed = settings_changed(before_overrides, entry.overrides)
        if before is not None and before[0].value is not None and not point.settings_changed:
            point.change = estimate.value - before[0].value
            point.relative = point.change / before[0].value if before[0].value else None
            point.p_value = _change_p(metric, before, (estimate, errors, n))
            point.significant = point.p_value is not None and point.p_value < ALPHA
        out.points.append(point)
        before, before_overrides = (estimate, errors, n), entry.overrides
    if not out.points and runs:
        raise TrendError(f"no run of {profile!r} has {metric} for endpoint {endpoint!r}, region {region!r}")
    return out
