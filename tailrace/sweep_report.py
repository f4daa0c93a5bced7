"""A sweep's report: sweep.json (typed, its JSON Schema in docs/sweep.schema.json), points.csv, edges.csv,
frontier.csv, frontier.svg, latency_vs_load.svg and index.html."""
from __future__ import annotations

import html

from tailrace.analysis.report.csv_tables import flat_table
from tailrace.analysis.report.plots import accuracy_vs_load
from tailrace.analysis.report.sweep_plots import frontier_svg, latency_vs_load_svg
from tailrace.contract.layout import SweepLayout, write_atomic
from tailrace.contract.summary.sweep import SweepPoint, SweepResult


class Html(str):
    """A cell already written as HTML (a link)."""


def _cell(value) -> str:
    if isinstance(value, Html):
        return str(value)
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return html.escape(str(value))


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _status(p: SweepPoint) -> str:
    """A point's status: whether its generator fell behind (its numbers the generator's), in its run or in one it
    replaced, and a run again that failed."""
    if p.generator_limit:
        said = ("INVALID twice" if p.generator_rerun else "INVALID") + ": the generator fell behind (its numbers are " \
            "the generator's)"
    else:
        said = p.status + (" (run again: the first run's generator fell behind)" if p.generator_rerun else "")
    return said + (f"; {p.why}" if p.status == "done" and p.why else "")  # a run again that failed


def _points_table(r: SweepResult) -> str:
    rows = []
    for p in r.points:
        ttft, tpot = p.ttft_ms.get("p99"), p.tpot_ms.get("p50")
        tiers = ", ".join(f"{t} {o}" + (f" ({p.goodput_rps[t]:.1f}/s good)" if t in p.goodput_rps else "")
                          for t, o in p.tiers.items())
        rows.append([p.index, p.config, p.load, p.repeat, p.duration_s, _status(p), tiers or p.why[:120], p.achieved_rate,
                     p.latency_ms["p99"].value if "p99" in p.latency_ms else None,
                     ttft.value if ttft else None, tpot.value if tpot else None,
                     p.output_tokens_per_s.value if p.output_tokens_per_s else None,
                     p.tokens_per_s_per_user.value if p.tokens_per_s_per_user else None, p.gpus,
                     None if p.accuracy is None else f"{p.accuracy:.1%} [{p.accuracy_ci_low:.1%}, "
                                                     f"{p.accuracy_ci_high:.1%}]",
                     Html(f"<a href='{html.escape(p.run_dir)}/report/index.html'>report</a>") if p.run_dir else None])
    return _table(["#", "configuration", r.load_axis or "load", "repeat", "load s", "status", "tiers", "achieved /s",
                   "p99 ms", "TTFT p99 ms", "TPOT p50 ms", "tokens/s", "tokens/s per user", "GPUs", "accuracy [95% CI]",
                   "run"], rows)


def write_sweep_report(layout: SweepLayout, r: SweepResult) -> None:
    """Every output of a finished (or stopped) sweep beside its sweep.json."""
    write_atomic(layout.result, r.model_dump_json(indent=1))
    write_atomic(layout.table("points"), flat_table(r.points).to_csv(index=False))
    write_atomic(layout.table("edges"), flat_table(r.edges).to_csv(index=False))
    write_atomic(layout.table("frontier"), flat_table(r.frontier).to_csv(index=False))
    frontier = frontier_svg(r.frontier)
    curves = latency_vs_load_svg(r.points, r.load_axis or "load")
    graded = [p for p in r.points if p.status == "done" and p.load is not None and p.accuracy is not None
              and p.accuracy_ci_low is not None and p.accuracy_ci_high is not None]
    accuracy = accuracy_vs_load({c or "points": [(p.load or 0.0, p.accuracy or 0.0, p.accuracy_ci_low or 0.0,
                                                  p.accuracy_ci_high or 0.0) for p in graded if p.config == c]
                                 for c in sorted({p.config for p in graded})}, r.load_axis or "load") or ""
    if graded:
        write_atomic(layout.table("accuracy"), flat_table(r.accuracy_trends).to_csv(index=False))
        write_atomic(layout.figure("accuracy_vs_load"), accuracy)
    trends = "".join(
        f"<li>{html.escape(tr.endpoint or 'the points')}: accuracy <b>{tr.verdict}</b> — "
        + ", ".join(f"{a:.1%} at {x:g}" for a, x in zip(tr.accuracy, tr.loads) if a is not None)
        + (f"; {(tr.slope_per_rps or 0) * 100:+.3f} points per unit of load [{(tr.slope_ci_low or 0) * 100:+.3f}, "
           f"{(tr.slope_ci_high or 0) * 100:+.3f}], p = {tr.p_value:.3g}" if tr.p_value is not None else "") + "</li>"
        for tr in r.accuracy_trends)
    for name, figure in (("frontier", frontier), ("latency_vs_load", curves)):  # a figure with nothing to draw: none
        if figure is not None:
            write_atomic(layout.figure(name), figure)
        else:
            layout.figure(name).unlink(missing_ok=True)  # (a resumed sweep's older one)
    edges = _table(["configuration", "tier", "holds", "not held at", "within tolerance", ""],
                   [[e.config, e.tier, e.highest_pass, e.lowest_fail, e.within_tolerance, e.note] for e in r.edges])
    knees = _table(["configuration", "fitted", "knee at", "slope (ms per unit)"],
                   [[k.config, k.metric, k.load, k.slope_ms_per_unit] for k in r.knees]) if r.knees else (
        "<p>none: no configuration has a percentile at three loads or more</p>")
    advice = "".join(f"<li>{html.escape(line)}</li>" for line in r.recommendation) or "<li>no SLO tiers declared</li>"
    state = "complete" if r.complete else "stopped before its end (tailrace sweep --resume DIR goes on)"
    page = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>sweep {html.escape(r.profile)}</title>"
            "<style>body{font-family:sans-serif;margin:2em;font-size:14px}td,th{padding:2px 8px;text-align:right;"
            "white-space:nowrap}table{border-collapse:collapse}tr:nth-child(even){background:#f4f4f4}</style></head>"
            f"<body><h1>Sweep {html.escape(r.sweep_id)}</h1><p>{len(r.points)} point(s), {state}; "
            f"{r.elapsed_s / 60:.1f} min.</p><h2>Recommendation</h2><ul>{advice}</ul>"
            f"<h2>The highest load each tier holds</h2>{edges}"
            f"<h2>Throughput against interactivity</h2>{frontier or '<p>no streamed points</p>'}"
            f"<h2>Latency against load</h2>{curves or '<p>no point measured a percentile</p>'}<h3>Knees</h3>{knees}"
            + (f"<h2>Accuracy against load</h2>{accuracy}<ul>{trends}</ul>" if graded else "") +
            f"<h2>Points</h2>{_points_table(r)}</body></html>")
    write_atomic(layout.page, page)
