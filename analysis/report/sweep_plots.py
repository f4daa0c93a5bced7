"""A sweep's figures (inline SVG): the throughput–interactivity frontier with each point's intervals on both axes
and the Pareto-optimal points joined, and each configuration's latency against load with its intervals."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from tailrace.analysis.report.plots import _plain_ms_ticks, _svg, plt
from tailrace.contract.summary import Estimate
from tailrace.contract.summary.sweep import FrontierPoint, SweepPoint


def _err(value: float | None, low: float | None, high: float | None) -> tuple[float, float]:
    if value is None:
        return 0.0, 0.0
    return max(0.0, value - low) if low is not None else 0.0, max(0.0, high - value) if high is not None else 0.0


def frontier_svg(points: Sequence[FrontierPoint]) -> str | None:
    """Output tokens/s of the server (per GPU where every point's monitors counted its GPUs) against tokens/s per
    user, a colour per configuration, 95% intervals on both axes, the Pareto frontier dashed."""
    if not points:
        return None
    per_gpu = all(p.tokens_per_s_per_gpu is not None for p in points)

    def server(p: FrontierPoint) -> Estimate:
        return (p.tokens_per_s_per_gpu if per_gpu else None) or p.tokens_per_s

    fig, ax = plt.subplots(figsize=(7, 4.2))
    by_config: dict[str, list[FrontierPoint]] = defaultdict(list)
    for p in points:
        by_config[p.config].append(p)
    for config, mine in sorted(by_config.items()):
        xs = [p.tokens_per_s_per_user.value or 0.0 for p in mine]
        ys = [server(p).value or 0.0 for p in mine]
        xerr = list(zip(*(_err(p.tokens_per_s_per_user.value, p.tokens_per_s_per_user.ci_low,
                                p.tokens_per_s_per_user.ci_high) for p in mine)))
        yerr = list(zip(*(_err(server(p).value, server(p).ci_low, server(p).ci_high) for p in mine)))
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="o", ms=4, capsize=2, lw=1, label=config or "points")
    best = sorted((p for p in points if p.pareto), key=lambda p: p.tokens_per_s_per_user.value or 0.0)
    if len(best) > 1:
        ax.plot([p.tokens_per_s_per_user.value or 0.0 for p in best], [server(p).value or 0.0 for p in best],
                "k--", lw=1, label="Pareto frontier")
    ax.set_xlabel("tokens/s per user (1000 / TPOT p50; more is more interactive)")
    ax.set_ylabel("output tokens/s per GPU" if per_gpu else "output tokens/s of the server")
    ax.legend(fontsize=7)
    return _svg(fig)


def latency_vs_load_svg(points: Sequence[SweepPoint], load_axis: str) -> str | None:
    """Each configuration's p50 and p99 (TTFT where the points stream, else latency) against load, with intervals;
    None where no point measured either."""
    rows = [p for p in points if p.status == "done" and p.load is not None]
    streams = any(p.ttft_ms for p in rows)
    by_config: dict[str, list[SweepPoint]] = defaultdict(list)
    for p in sorted(rows, key=lambda p: p.load or 0.0):
        by_config[p.config].append(p)
    curves = []
    for config, mine in sorted(by_config.items()):
        for q, style in (("p50", "o-"), ("p99", "^--")):
            est = [(p.ttft_ms if streams else p.latency_ms).get(q) for p in mine]
            kept = [(p.load, e) for p, e in zip(mine, est) if e is not None and e.value is not None]
            if kept:
                curves.append((config, q, style, kept))
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for config, q, style, kept in curves:
        err = list(zip(*(_err(e.value, e.ci_low, e.ci_high) for _, e in kept)))
        ax.errorbar([x or 0.0 for x, _ in kept], [e.value or 0.0 for _, e in kept], yerr=err, fmt=style, ms=4, lw=1,
                    capsize=2, label=f"{config or 'points'} {q}")
    ax.set_yscale("log")
    _plain_ms_ticks(ax.yaxis)
    ax.set_xlabel(load_axis)
    ax.set_ylabel(("TTFT" if streams else "latency") + " (ms, from the intended send)")
    ax.legend(fontsize=7)
    return _svg(fig)
