"""The pages of the runs as a history: `tailrace runs`' list (runs.html) and `tailrace runs trend`'s chart of one
metric across a profile's runs with each run's interval, the significant changes marked (trend-PROFILE-METRIC.html)."""
from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from tailrace.contract.layout import ReportLayout
from tailrace.contract.summary.history import CatalogueEntry, Trend

MAX_TICKS = 24

STYLE = ("<style>body{font-family:sans-serif;margin:2em;font-size:14px}td,th{padding:2px 8px;text-align:right;"
         "white-space:nowrap}td.l,th.l{text-align:left}table{border-collapse:collapse}"
         "tr:nth-child(even){background:#f4f4f4}.PASS{color:#1a7f37}.FAIL{color:#cf222e}.INCONCLUSIVE{color:#9a6700}"
         ".INVALID{color:#6e7781}.sig{color:#cf222e;font-weight:bold}</style>")


def when(start_ns: int | None) -> str:
    """A run's start, UTC, to the second."""
    if start_ns is None:
        return "–"
    return datetime.fromtimestamp(start_ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:,.2f}"


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>{STYLE}"
            f"</head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


def _report_link(run_dir: Path, page: Path) -> str:
    report = ReportLayout.of_run(run_dir).page
    try:
        href = report.resolve().relative_to(page.resolve().parent)
    except ValueError:
        href = report.resolve()
    return f"<a href='{html.escape(str(href))}'>report</a>" if report.exists() else ""


def runs_page(entries: Sequence[tuple[Path, CatalogueEntry]], skipped: Sequence[str], page: Path) -> str:
    """The runs listed: profile, start, verdict, requests and the key percentiles, each linking its report."""
    rows = "".join(
        f"<tr><td class='l'>{html.escape(e.run_id)}</td><td class='l'>{html.escape(e.profile)}</td>"
        f"<td class='l'>{html.escape(', '.join(e.overrides))}</td><td>{when(e.start_ns)}</td>"
        f"<td class='l {e.verdict}'>{e.verdict}</td><td>{e.requests:,}</td>"
        f"<td>{e.errors:,}</td><td>{_ms(e.achieved_rate)}</td><td>{_ms(e.p50_ms)}</td><td>{_ms(e.p95_ms)}</td>"
        f"<td>{_ms(e.p99_ms)}</td><td>{_ms(e.ttft_p99_ms)}</td><td class='l'>{html.escape((e.git_sha or '')[:10])}</td>"
        f"<td>{_report_link(d, page)}</td></tr>" for d, e in entries)
    head = "".join(f"<th{' class=l' if c in ('run', 'profile', 'settings', 'verdict', 'commit') else ''}>{c}</th>"
                   for c in ("run", "profile", "settings", "started (UTC)", "verdict", "requests", "errors", "achieved /s",
                             "p50 ms", "p95 ms", "p99 ms", "TTFT p99 ms", "commit", ""))
    left_out = ("<h2>Left out</h2><ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in skipped) + "</ul>") \
        if skipped else ""
    return _page("tailrace runs", f"<p>{len(entries)} run(s), oldest first; {len(skipped)} left out. Requests: all "
                                  f"the run recorded (warm-up too), as its own summary line says; errors and rate: the "
                                  f"measured phases. p50–p99: the latency table's row over every endpoint and region "
                                  f"(its one-shot requests where the run has any, else the streams' E2E).</p>"
                                  f"<table id='runs'><tr>{head}</tr>{rows}</table>{left_out}")


def trend_svg(t: Trend) -> str | None:
    """The metric run by run with its 95% interval; a significant change from the run before in red."""
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    points = [p for p in t.points if p.value is not None]
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.6))
    xs = list(range(len(points)))
    values = [p.value or 0.0 for p in points]
    low = [max(0.0, (p.value or 0.0) - p.ci_low) if p.ci_low is not None else 0.0 for p in points]
    high = [max(0.0, p.ci_high - (p.value or 0.0)) if p.ci_high is not None else 0.0 for p in points]
    starts = [0, *(x for x, p in zip(xs, points) if x and p.settings_changed), len(points)]
    for i, (a, b) in enumerate(zip(starts, starts[1:])):  # a run with other settings starts a new line
        ax.errorbar(xs[a:b], values[a:b], yerr=[low[a:b], high[a:b]], fmt="o-", ms=4, capsize=3, lw=1,
                    color="#1f77b4", label=t.metric if i == 0 else None)
        if a:
            ax.axvline(a - 0.5, color="#888", ls="--", lw=0.8, label="other settings" if a == starts[1] else None)
    flagged = [(x, p.value) for x, p in zip(xs, points) if p.significant]
    if flagged:
        ax.plot(*zip(*flagged), "o", ms=9, mfc="none", mec="#d62728", mew=2, label="changed (p < 0.05)")
    every = max(1, len(points) // MAX_TICKS)  # a long history: a label every so many runs
    ax.set_xticks(xs[::every], [when(p.start_ns)[5:16] for p in points[::every]], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(f"{t.metric} ({t.unit}, 95% interval)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg")
    plt.close(fig)
    return out.getvalue()


def trend_page(t: Trend) -> str:
    """The chart and the table of the trend."""
    rows = "".join(
        f"<tr><td class='l'>{html.escape(p.run_id)}</td><td>{when(p.start_ns)}</td><td class='l {p.verdict}'>"
        f"{p.verdict}</td><td>{_ms(p.value)}</td><td>[{_ms(p.ci_low)}, {_ms(p.ci_high)}]</td>"
        f"<td{' class=sig' if p.significant else ''}>"
        + (f"settings: {html.escape(', '.join(p.settings_changed))}" if p.settings_changed else "–" if p.change is None
           else f"{p.change:+,.3g}" + (f" ({p.relative:+.1%})" if p.relative is not None else ""))
        + f"</td><td>{'–' if p.p_value is None else f'{p.p_value:.3g}'}</td>"
          f"<td class='l'>{html.escape((p.git_sha or '')[:10])}</td></tr>" for p in t.points)
    where = f"endpoint {t.endpoint}, region {t.region}"
    body = (f"<p>{len(t.points)} run(s) of {html.escape(t.profile)}, {html.escape(where)}, oldest first. A change is "
            f"significant (red) when p &lt; 0.05 against the run before (percentiles: on the two intervals; an error "
            f"rate: Fisher's exact test); a run with other settings than the one before (--set, a sweep's point) is not judged "
            f"against it: its change says what was set.</p>{trend_svg(t) or ''}<table id='trend'><tr><th class='l'>run</th>"
            "<th>started (UTC)</th><th class='l'>verdict</th><th>value</th><th>95% interval</th><th>change</th>"
            f"<th>p</th><th class='l'>commit</th></tr>{rows}</table>")
    return _page(f"{t.profile}: {t.metric} across runs", body)
