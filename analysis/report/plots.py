"""Plots for the report, returned as inline SVG strings (matplotlib, Agg backend)."""
from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from tailrace.analysis.report.figure_rules import MIN_UTILIZATION_TO_PLOT, heatmap_rows  # noqa: E402

if TYPE_CHECKING:  # the figure process (analysis/report/figures.py) imports this module: none of the statistics (scipy)
    from tailrace.analysis.stats.timeline import Timeline, TokenTimeline
    from tailrace.contract.summary.capacity import CapacityResult, CapacityTrial
    from tailrace.contract.summary.sections import HitRatioOverTime, SessionsInFlight, VariantRow
    from tailrace.contract.summary.tables import (
        LatencyLegs,
        LatencyRow,
        Outage,
        QueueingRow,
        ServerTimelinePoint,
        TokenRow,
        TtftLegs,
    )

plt.rcParams.update({"figure.dpi": 96, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3,
                     "svg.fonttype": "none"})


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def heatmap_p99(latency_rows: Sequence[LatencyRow], label: str = "p99 latency (ms)") -> str | None:
    """p99 per region × endpoint on one colour scale: one kind of endpoint (a mixed run's one-shot endpoints; a
    stream's E2E would wash their differences out — its TTFT has token_heatmap)."""
    return heatmap([(r.region, r.endpoint, r.p99.value) for r in heatmap_rows(latency_rows)], label)


def heatmap(cells: Sequence[tuple[str, str, float | None]], label: str) -> str | None:
    """(region, endpoint, value) cells on one colour scale, each with its number (n/a: no value)."""
    if not cells:
        return None
    endpoints = sorted({e for _, e, _ in cells})
    regions = sorted({r for r, _, _ in cells})
    grid = np.full((len(regions), len(endpoints)), np.nan)
    for region, endpoint, v in cells:
        if v is not None:
            grid[regions.index(region), endpoints.index(endpoint)] = v
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(endpoints), 0.8 + 0.55 * len(regions)))
    im = ax.imshow(grid, cmap="YlOrRd", aspect="auto")
    cmap, norm = im.get_cmap(), im.norm
    ax.set_xticks(range(len(endpoints)), endpoints, rotation=20, ha="right")
    ax.set_yticks(range(len(regions)), regions)
    ax.grid(False)
    for i in range(len(regions)):
        for j in range(len(endpoints)):
            value = grid[i, j]
            ax.text(j, i, "n/a" if np.isnan(value) else f"{value:.1f}", ha="center", va="center",
                    color="black" if np.isnan(value) else _readable_on(cmap(norm(value))))
    fig.colorbar(im, ax=ax, label=label)
    return _svg(fig)


def _readable_on(rgba) -> str:
    """Black or white, whichever reads better on a cell of colour `rgba` (WCAG relative luminance)."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(c) for c in rgba[:3])
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.179 else "white"


def _plain_ms_ticks(axis, subs: tuple[float, ...] = (1.0, 2.0, 5.0)) -> None:
    """Log-scaled axes labelled in plain numbers (2, 5, 20, 50 ms; 0.01, 0.001), never 2×10¹: easier to read,
    and no mathtext to parse for every label (0.4 s of a CDF plot's 0.7 s)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_minor_formatter(FuncFormatter(lambda *_: ""))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def latency_cdfs(curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> str:
    """1 − CDF per region on log axes, from its points (analysis/stats/latency.py region_cdfs)."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for region, (x, y) in curves.items():
        ax.plot(x, y, label=region, lw=1.4)
    if not curves:
        _no_data(ax, "no successful request in the measured phases")
    else:
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_ms_ticks(ax.xaxis)
        _plain_ms_ticks(ax.yaxis, subs=(1.0,))
    ax.set_xlabel("latency from intended send (ms)")
    ax.set_ylabel("fraction slower (1 − CDF)")
    for q in (0.5, 0.1, 0.01, 0.001):
        ax.axhline(q, color="grey", lw=0.5, ls=":")
    if curves:
        ax.legend()
    return _svg(fig)


def over_time(df: pd.DataFrame, phase_starts_s: list[float], outages: Sequence[Outage] = ()) -> str:
    """p99 per second and requests per second per region of request rows `df`; phase starts dashed, outage
    windows shaded."""
    from tailrace.analysis.stats.timeline import timeline

    return over_time_of(timeline(df), phase_starts_s, outages)


def over_time_of(line: Timeline, phase_starts_s: list[float], outages: Sequence[Outage] = ()) -> str:
    """over_time of the numbers analysis/stats/timeline.py computed (what a figure process is handed)."""
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 4.6), sharex=True)
    centres = np.arange(line.whole_s) + 0.5
    for region, p99_ms in line.p99_ms.items():
        ax1.plot(centres, p99_ms, label=f"{region} p99", lw=1)
        ax2.plot(centres, line.requests[region], lw=1, label=region)
    _mark_phases((ax1, ax2), phase_starts_s)
    for o in outages:
        end = (o.end_ref_ns - line.t0_ns) / 1e9 if o.end_ref_ns is not None else line.end_s
        for ax in (ax1, ax2):
            ax.axvspan((o.start_ref_ns - line.t0_ns) / 1e9, end, color="red", alpha=0.15, lw=0)
    if line.errors is not None:
        ax2.plot(centres, line.errors, lw=1, color="red", ls=":", label="errors")
    ax2.legend(fontsize=7, ncol=4)
    ax1.set_ylabel("p99 per second (ms)")
    if line.any_ok:
        ax1.set_yscale("log")
        _plain_ms_ticks(ax1.yaxis)
    else:
        _no_data(ax1, "no successful request: no latency to plot")
    ax2.set_ylabel("requests / s")
    ax2.set_xlabel("seconds since the first intended send (reference time); dashed: phase starts; "
                   "shaded: outages")
    ax1.legend(fontsize=7)
    return _svg(fig)


def _no_data(ax, text: str) -> None:
    """Say on the plot why it is empty (a run in which every request failed still gets its report)."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="red")


def _mark_phases(axes, phase_starts_s: Sequence[float]) -> None:
    for s in phase_starts_s:
        for ax in axes:
            ax.axvline(s, color="black", lw=0.8, ls="--")


def server_timeline(timelines: Mapping[str, Sequence[ServerTimelinePoint]], t0_ns: int,
                    phase_starts_s: Sequence[float] = ()) -> str | None:
    """Server-reported mean queue and compute time per snapshot interval, per endpoint; phases dashed."""
    series = {name: rows for name, rows in timelines.items() if rows}
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(8, 2.8))
    for name, rows in series.items():
        t = [(r.t_ns - t0_ns) / 1e9 for r in rows]
        for part, values, style in (("queue", [r.mean_queue_ms for r in rows], "--"),
                                    ("compute_infer", [r.mean_compute_infer_ms for r in rows], "-")):
            ax.plot(t, [np.nan if v is None else v for v in values], ls=style, marker=".", lw=1,
                    label=f"{name} {part}")
    _mark_phases([ax], phase_starts_s)
    ax.set_ylabel("ms per request (server)")
    ax.set_xlabel("seconds since the first intended send (server statistics, periodic snapshots)")
    ax.legend(fontsize=7)
    return _svg(fig)


def hardware_over_time(timeline: dict[str, dict[str, list]], phase_starts_s: Sequence[float] = ()) -> str | None:
    """What the hardware did through the run, per monitor: utilization (%), power (W), memory (MiB), one pane each
    that some monitor said; phases dashed."""
    panes = [(title, keys) for title, keys in (
        ("utilization %", (("cpu_busy_pct", "CPU busy", "interval_t_s"), ("gpu_util_pct", "GPU", "t_s"),
                           ("process_cpu_pct", "process CPU (% of a core)", "interval_t_s"),
                           ("kv_cache_pct", "KV cache", "t_s"))),
        ("power W", (("power_w", "from energy", "interval_t_s"), ("power_gauge_w", "gauge", "t_s"))),
        ("memory MiB", (("memory_mib", "used", "t_s"),)))
        if any(key in line for line in timeline.values() for key, _, _ in keys)]
    if not panes:
        return None
    fig, axes = plt.subplots(len(panes), 1, figsize=(8, 1.9 * len(panes) + 0.6), sharex=True, squeeze=False)
    axes = axes[:, 0]
    for ax, (title, keys) in zip(axes, panes):
        for monitor, line in timeline.items():
            for key, label, times in keys:
                if key in line:
                    ax.plot(line[times], [np.nan if v is None else v for v in line[key]], lw=1.2, marker=".",
                            ms=3, label=f"{monitor} {label}")
        ax.set_ylabel(title)
        ax.legend(fontsize=7)
    _mark_phases(list(axes), phase_starts_s)
    axes[-1].set_xlabel("seconds since the first intended send (the monitors' scrapes)")
    return _svg(fig)


def token_heatmap(token_rows: Sequence[TokenRow]) -> str | None:
    """TTFT p99 per region × endpoint (the summary's token rows); p90 where some group has too few streams for a
    p99 (the colour bar says which)."""
    cells = [r for r in token_rows if r.endpoint != "*" and r.region != "*"]
    p = "p99" if all(r.ttft_ms.at("p99").value is not None for r in cells) else "p90"
    return heatmap([(r.region, r.endpoint, r.ttft_ms.at(p).value) for r in cells], f"TTFT {p} (ms)")


def token_cdfs(curves: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]) -> str | None:
    """1 − CDF of TTFT and of TPOT per region, side by side, log axes."""
    if not any(curves.values()):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, (metric, label) in zip(axes, (("ttft", "TTFT from intended send (ms)"), ("tpot", "TPOT (ms)"))):
        for region, (x, y) in curves.get(metric, {}).items():
            ax.plot(x, y, label=region, lw=1.4)
        if curves.get(metric):
            ax.set_xscale("log")
            ax.set_yscale("log")
            _plain_ms_ticks(ax.xaxis)
            _plain_ms_ticks(ax.yaxis, subs=(1.0,))
            ax.legend(fontsize=7)
        else:
            _no_data(ax, "no stream with this metric")
        ax.set_xlabel(label)
    axes[0].set_ylabel("fraction slower (1 − CDF)")
    return _svg(fig)


def token_over_time(line: TokenTimeline | None, phase_starts_s: list[float]) -> str | None:
    """Output tokens received per second and the TTFT p99 of the streams intended in each second, per region."""
    if not line:
        return None
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 4.4), sharex=True)
    centres = np.arange(line.whole_s) + 0.5
    for region, p99 in line.ttft_p99_ms.items():
        ax1.plot(centres, p99, lw=1, label=f"{region} TTFT p99")
        ax2.plot(centres, line.tokens_per_s[region], lw=1, label=region)
    _mark_phases((ax1, ax2), phase_starts_s)
    ax1.set_yscale("log")
    _plain_ms_ticks(ax1.yaxis)
    ax1.set_ylabel("TTFT p99 (ms)")
    ax1.legend(fontsize=7)
    ax2.set_ylabel("output tokens / s")
    ax2.set_xlabel("seconds since the first intended send (reference time); dashed: phase starts")
    ax2.legend(fontsize=7, ncol=4)
    return _svg(fig)


def sessions_over_time(in_flight: SessionsInFlight, hits: HitRatioOverTime, phase_starts_s: list[float]) -> str | None:
    """Sessions in flight per second per endpoint, and the prefix-cache hit ratio over time (the requests' usage,
    solid; the ideal of an unbounded cache, dashed; the server's counters between its periodic scrapes, dots), per
    endpoint (analysis/stats/chains/sessions.py)."""
    if not in_flight.in_flight and not hits.by_endpoint:
        return None
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 4.4), sharex=True)
    for name, line in in_flight.in_flight.items():
        ax1.plot(np.arange(len(line)) + 0.5, line, lw=1, label=name)
    ax1.set_ylabel("sessions in flight")
    if in_flight.in_flight:
        ax1.legend(fontsize=7)
    else:
        _no_data(ax1, "no sessions")
    shift = (hits.t0_ns - in_flight.t0_ns) / 1e9 if in_flight.in_flight else 0.0
    for name, lines in hits.by_endpoint.items():
        for label, values, style in (("usage", lines.usage, "-"), ("ideal", lines.ideal, "--")):
            if values is not None:
                centres = shift + (np.arange(len(values)) + 0.5) * hits.bin_s
                ax2.plot(centres, values, ls=style, lw=1.2, label=f"{name} {label}")
        if lines.server:
            t, ratio = zip(*lines.server)
            ax2.plot(np.asarray(t) + shift, ratio, "o", ms=3, label=f"{name} server's counters")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("prefix-cache hit ratio")
    ax2.set_xlabel("seconds since the first intended send (reference time); dashed: phase starts / the ideal")
    if hits.by_endpoint:
        ax2.legend(fontsize=7, ncol=2)
    _mark_phases((ax1, ax2), phase_starts_s)
    return _svg(fig)


def ttft_bars(rows: Sequence[TtftLegs]) -> str | None:
    """Where TTFT goes, per region × endpoint (analysis/stats/decomposition.py ttft_decomposition)."""
    return decomposition_bars(rows, ("send_lag", "network_up", "server_queue", "server_prefill", "server_other",
                                     "network_down"), "mean time to first token (ms)")


def decomposition_bars(rows: Sequence[LatencyLegs | TtftLegs],
                       legs: tuple[str, ...] = ("send_lag", "network_up", "server_queue", "server_compute",
                                                "server_other", "network_down"),
                       label: str = "mean time (ms)") -> str | None:
    """Each region × endpoint's mean time, leg by leg (`legs`: the rows' `<leg>_ms` fields), as stacked bars."""
    if not rows:
        return None
    labels = [f"{r.region}\n{r.endpoint}" for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.45 * len(rows)))
    left = np.zeros(len(rows))
    for leg in legs:
        v = np.array([max(0.0, getattr(r, leg + "_ms") or 0.0) for r in rows])
        ax.barh(labels, v, left=left, label=leg.replace("_", " "))
        left += v
    ax.invert_yaxis()
    ax.set_xlabel(label)
    ax.legend(ncol=3, fontsize=7, loc="lower right")
    return _svg(fig)


def queue_vs_utilization(rows: Sequence[QueueingRow]) -> str | None:
    """Mean queue delay against utilization, one point per endpoint; None when every endpoint ran under
    MIN_UTILIZATION_TO_PLOT (points huddled at ρ ≈ 0 say nothing: the report says so in words instead)."""
    points = [(r.endpoint, r.utilization, r.mean_queue_ms) for r in rows
              if r.utilization is not None and r.mean_queue_ms is not None]
    if not points or max(rho for _, rho, _ in points) < MIN_UTILIZATION_TO_PLOT:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for endpoint, rho, queue_ms in points:
        ax.scatter(rho, queue_ms, s=30)
        ax.annotate(endpoint, (rho, queue_ms), fontsize=7, xytext=(4, 2), textcoords="offset points")
    ax.axvline(0.7, color="red", lw=0.8, ls="--")
    ax.set_xlabel("utilization ρ = λ·S / slots")
    ax.set_ylabel("mean queue delay (ms)")
    return _svg(fig)


DENSE_CLOCK_SAMPLES = 60  # a worker with more clock samples is drawn as a line with a band, not error bars


def clock_offsets(clock: pd.DataFrame) -> str | None:
    if clock.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 3))
    t0 = clock["local_ns"].min()
    dense = clock.groupby("worker").size().max() > DENSE_CLOCK_SAMPLES
    for worker, g in clock.groupby("worker"):
        x, offset, half_delay = (g["local_ns"] - t0) / 1e9, g["offset_ns"] / 1e6, g["delay_ns"] / 2e6
        if dense:  # an hour of samples: a line and a band draw in a fraction of the time of a marker and bar each
            line, = ax.plot(x, offset, lw=1, label=worker)
            ax.fill_between(x, offset - half_delay, offset + half_delay, color=line.get_color(), alpha=0.2, lw=0)
        else:
            ax.errorbar(x, offset, yerr=half_delay, fmt="o-", ms=3, lw=1, label=worker)
    ax.set_xlabel("seconds (worker clock)" + ("; band: ± half each sample's round trip" if dense else ""))
    ax.set_ylabel("offset to reference (ms)")
    ax.legend(fontsize=7)
    return _svg(fig)


def trace_rates(per_second: dict) -> str | None:
    """A replayed trace: its requests per second (its instants, scaled) against the sends per second."""
    trace, sent = per_second.get("trace") or [], per_second.get("sent") or []
    if not trace:
        return None
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.step(range(len(trace)), trace, where="post", lw=1.5, label="trace (requests its instants put in each second)")
    ax.step(range(len(sent)), sent, where="post", lw=1, ls="--", label="sent")
    ax.set_xlabel("second of the measured window")
    ax.set_ylabel("requests / s")
    ax.legend(fontsize=7)
    return _svg(fig)


def pareto_scatter(rows: Sequence[VariantRow], x: str, y: str, dominated_key: str, x_label: str, y_label: str,
                   x_better_low: bool, y_better_high: bool) -> str | None:
    """Variants as points (hollow = dominated), the frontier joined; arrows say which way is better (`x`, `y`,
    `dominated_key`: VariantRow fields)."""
    pts = [(r.name, getattr(r, x), getattr(r, y), bool(getattr(r, dominated_key))) for r in rows
           if getattr(r, x) is not None and getattr(r, y) is not None]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    front = sorted((p for p in pts if not p[3]), key=lambda p: p[1])
    if len(front) > 1:
        ax.plot([p[1] for p in front], [p[2] for p in front], color="green", lw=1, ls="--", label="Pareto frontier")
    for name, px, py, dominated in pts:
        ax.scatter(px, py, s=50, facecolors="none" if dominated else "green", edgecolors="grey" if dominated
                   else "green", zorder=3)
        ax.annotate(name + (" (dominated)" if dominated else ""), (px, py), fontsize=7, xytext=(4, 4),
                    textcoords="offset points")
    ax.set_xlabel(x_label + (" (lower is better)" if x_better_low else " (higher is better)"))
    ax.set_ylabel(y_label + (" (higher is better)" if y_better_high else " (lower is better)"))
    ax.set_title(f"Pareto frontier: {len(front)} of {len(pts)} variants" if len(front) > 1 else
                 f"Pareto frontier: {front[0][0]} dominates the rest" if front and len(pts) > 1 else
                 "Pareto frontier", fontsize=8)
    if len(front) > 1:
        ax.legend(fontsize=7)
    return _svg(fig)


def latency_vs_load_svg(rows: Sequence[CapacityTrial], result: CapacityResult) -> str:
    """p50 / p95 / p99 (with CIs) against offered load; SLO thresholds dotted; the found capacity marked."""
    from tailrace.analysis.decide.capacity_search import PASS

    fig, ax = plt.subplots(figsize=(8, 4))
    df = pd.DataFrame([r.model_dump() for r in rows]).sort_values("rate")
    for p, style in (("p50", "o-"), ("p95", "s-"), ("p99", "^-")):
        d = df[df[f"{p}_ms"].notna()]
        if d.empty:
            continue
        low, high = (pd.to_numeric(d[f"{p}_ci_{side}"], errors="coerce") for side in ("low", "high"))
        err = [(d[f"{p}_ms"] - low).clip(lower=0).fillna(0), (high - d[f"{p}_ms"]).clip(lower=0).fillna(0)]
        ax.errorbar(d["rate"], d[f"{p}_ms"], yerr=err, fmt=style, ms=4, lw=1, capsize=2, label=p)
    for column, label in (("ttft_p50_ms", "TTFT p50"), ("ttft_p99_ms", "TTFT p99"), ("tpot_p50_ms", "TPOT p50")):
        d = df[pd.to_numeric(df[column], errors="coerce").notna()] if column in df else df.iloc[:0]
        if not d.empty:
            ax.plot(d["rate"], d[column], "--", marker="D", ms=3, lw=1, label=label)
    for slo in result.slos:
        if slo.threshold_ms is None:
            continue
        ax.axhline(slo.threshold_ms, color="red", ls=":", lw=1)
        name = "" if slo.metric == "latency" else slo.metric.upper() + " "
        ax.annotate(f"{name}p{slo.percentile or 0:g} SLO {slo.threshold_ms:g} ms",
                    (df["rate"].min(), slo.threshold_ms), fontsize=7, color="red", va="bottom")
    lo, hi = result.bracket
    if lo:
        ax.axvline(lo, color="green", lw=1.2, label=f"capacity {lo:g}/s")
    if lo and hi:
        ax.axvspan(lo, hi, color="green", alpha=0.1)
    failed = df[(df["outcome"] != PASS) & df["p99_ms"].notna()]
    if not failed.empty:
        ax.scatter(failed["rate"], failed["p99_ms"], marker="x", s=90, color="red", zorder=4,
                   label="trial not passing")
    ax.set_yscale("log")
    _plain_ms_ticks(ax.yaxis)
    ax.set_xlabel("offered load (requests/s, Poisson)")
    ax.set_ylabel("latency from intended send (ms)")
    ax.legend(fontsize=7)
    return _svg(fig)


def accuracy_vs_load(series: Mapping[str, Sequence[tuple[float, float, float, float]]],
                     x_label: str = "offered load (requests/s)") -> str | None:
    """Accuracy against offered load, a line per endpoint or configuration, each point (load, accuracy, its 95%
    interval's low and high) with its interval."""
    if not any(series.values()):
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, points in sorted(series.items()):
        if not points:
            continue
        points = sorted(points)
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        err = [[max(0.0, y - p[2]) for y, p in zip(ys, points)], [max(0.0, p[3] - y) for y, p in zip(ys, points)]]
        ax.errorbar(xs, ys, yerr=err, fmt="o-", ms=4, capsize=3, lw=1, label=name)
    ax.set_xlabel(x_label)
    ax.set_ylabel("accuracy (graded answers right)")
    ax.set_ylim(top=1.02)
    ax.legend(fontsize=7)
    return _svg(fig)
