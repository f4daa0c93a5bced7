"""The report page: one self-contained HTML file (inline CSS, inline SVG plots), read top-down."""
from __future__ import annotations

import html
import json

from tailrace.analysis.report.figure_rules import MIN_UTILIZATION_TO_PLOT, heatmap_rows
from tailrace.analysis.report.figures import Figures, InlineFigures
from tailrace.analysis.report.html_parts import Shown, _ci, _fmt, _iso, _p, _pct, _table
from tailrace.analysis.report.verdict_grid import not_passing, verdict_grid, why_words
from tailrace.analysis.report.workload_sections import (
    _accuracy_section,
    _cancellations_section,
    _decision_section,
    _hardware_section,
    _pipelines_section,
    _pooling_section,
    _scenario_section,
    _sessions_section,
    _tokens_section,
)
from tailrace.analysis.result import Analysis
from tailrace.analysis.stats.scenarios import phase_boundaries_s
from tailrace.analysis.stats.timeline import timeline
from tailrace.analysis.stats.validity import CHECKS
from tailrace.contract.summary import (
    ArrivalProcessRow,
    Hardware,
    QueueingRow,
    RunSummary,
    ServerSpans,
)

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{margin-bottom:4px} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;font-size:13px;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f4f4f4} td.l,th.l{text-align:left} .mono{font-family:ui-monospace,monospace;font-size:12px}
.badge{display:inline-block;padding:4px 12px;border-radius:4px;color:#fff;font-weight:600}
.PASS{background:#2e7d32}.FAIL{background:#c62828}.INCONCLUSIVE{background:#ef6c00}.INVALID{background:#6a1b9a}
td.PASS,td.FAIL,td.INCONCLUSIVE{color:#fff;text-align:center} .flag{color:#c62828;font-weight:600} .warn{color:#8d6e00}
.note{color:#666;font-size:13px} svg{max-width:100%;height:auto} .scroll{overflow-x:auto;max-width:100%}
details{margin:8px 0} .nowrap{white-space:nowrap} td ul{margin:0;padding-left:18px} summary{cursor:pointer;color:#444}
"""


def _poisson_section(s: RunSummary) -> str:
    """The Poisson checks of the delivered sends, per phase and worker."""
    parts = []
    parts.append("<h2 id='arrivals'>Was the load Poisson?</h2>")
    parts.append(f"<p class='note'>{html.escape(CHECKS['arrivals'])} The schedule (intended send times) is the load "
                 "tailrace offered; the actual sends are what the endpoint received.</p>")
    rows = [Shown(a, ks_pvalue=_p(a.ks_pvalue), ad_pvalue=_p(a.ad_pvalue), dispersion_pvalue=_p(a.dispersion_pvalue))
            for a in s.arrivals]
    parts.append(_table(rows, [("phase_name", "phase"), ("source", "worker"), ("count", "n"), ("rate", "rate /s"),
                               ("intended_rate", "intended /s"), ("ks_pvalue", "KS p"), ("ad_pvalue", "AD p"),
                               ("index_of_dispersion", "dispersion"), ("dispersion_pvalue", "dispersion p"),
                               ("interpretation", "what it means")],
                        left={"source", "phase_name", "interpretation"}))
    return "".join(parts)


def _process_section(rows: list[ArrivalProcessRow], figures: Figures) -> str:
    """The delivered sends against the asked process (gamma, constant, on/off, trace), and a trace's per second."""
    process = rows[0].process
    parts = [f"<h2 id='arrivals'>Was the load the {html.escape(process)} process asked for?</h2>",
             "<p class='note'>Merged: every region's sends on the reference clock (the one global process); per "
             "worker: its share of it — thinning a renewal process moves its gaps' c² toward 1 (p·(cv² − 1) + 1), "
             "thinning an on/off process scales its rates. gamma / constant: gap cv with a 99% bootstrap interval "
             "against the expected; on/off: index of dispersion of counts over one cycle's windows against the "
             "model's; trace: send lag behind each row's (scaled) instant.</p>",
             _table([Shown(r, ok={True: "yes", False: "NO", None: "–"}[r.ok],
                           interval=_ci([r.ci_low, r.ci_high])) for r in rows],
                    [("phase_name", "phase"), ("source", "worker"), ("count", "n"), ("statistic", "statistic"),
                     ("measured", "measured"), ("interval", "99% CI"), ("expected", "asked / model"),
                     ("ok", "as asked"), ("interpretation", "what it means")],
                    left={"phase_name", "source", "statistic", "interpretation", "interval"})]
    merged = next((r for r in rows if r.source == "merged" and r.per_second), None)
    if merged is not None:
        parts.append(figures.svg("trace_rates", lambda: (merged.per_second,)) or "")
    return "".join(parts)


def _validity_section(s: RunSummary) -> str:
    """Stationarity and independence per endpoint × region, each check explained in one sentence."""
    rows = [Shown(v, stationarity=f"trend: {v.reason}" if v.stationary is False else
                  "stable" if v.stationary else "too few requests to test",
                  median=(f"{v.first_median_ms:.3g} → {v.last_median_ms:.3g} ms"
                          if v.first_median_ms is not None and v.last_median_ms is not None else None))
            for v in s.validity]
    return ("<h2 id='validity'>Are these numbers trustworthy?</h2>"
            f"<p class='note'><b>Stationarity.</b> {html.escape(CHECKS['stationarity'])} "
            f"<b>Independence.</b> {html.escape(CHECKS['independence'])} "
            "<b>Arrivals</b>: see 'Was the load Poisson?' below.</p>" +
            _table(rows, [("endpoint", "endpoint"), ("region", "region"), ("n", "n"),
                          ("phases", "phases tested"), ("median", "median first → last (fitted)"),
                          ("stationarity", "stationarity"), ("lag1_autocorrelation", "lag-1 r"),
                          ("effective_n_p99", "worth for p99"), ("independence", "independence")],
                   left={"endpoint", "region", "phases", "median", "stationarity", "independence"}))


_QUEUE_CORE = [("endpoint", "endpoint"), ("model", "model"), ("slots", "slots"), ("arrival_rate", "λ /s"),
               ("throughput", "X /s"), ("L_measured", "L measured"), ("lambda_W", "λ·W"), ("littles_gap", "Little gap"),
               ("mean_service_ms", "S ms"), ("rho", "ρ"), ("measured_u", "measured U"), ("mean_queue_ms", "Wq ms"),
               ("p99_queue_ms", "queue p99 ms"), ("arrival_cv2", "arrival c_a²")]
_QUEUE_MODELS = [("endpoint", "endpoint"), ("mm1_mean_wait_ms", "M/M/1 Wq ms"), ("mm1_service_cv2", "service c_s²"),
                 ("mm1_pk_mean_wait_ms", "M/G/1 Wq ms"), ("mm1_gg1_mean_wait_ms", "G/G/1 Wq ms"),
                 ("mm1_wait_from_burstiness_ms", "of it from burstiness ms"),
                 ("mm1_p99_sojourn_ms", "M/M/1 p99 ms"), ("mm1_measured_p99_sojourn_ms", "measured p99 ms")]


def measured_utilization(hardware: Hardware | None) -> dict[str, str]:
    """Endpoint → its model's measured utilization over the measured phases (weighted by their durations) and what
    it was measured from, as the queueing table shows it beside ρ."""
    out: dict[str, str] = {}
    # a continuous batch has no ρ of its own: its measured U is not set beside the queueing table's
    rows = [(r.endpoint, r.measured_utilization, r.requests / r.throughput_rps, r.measured_from or "")
            for r in (hardware.endpoints if hardware else [])
            if r.measured_utilization is not None and r.throughput_rps and r.rho is not None]
    for endpoint in sorted({e for e, _, _, _ in rows}):
        mine = [(u, span, source) for e, u, span, source in rows if e == endpoint]
        u = sum(u * span for u, span, _ in mine) / sum(span for _, span, _ in mine)
        out[endpoint] = f"{u:.2f} ({'CPU' if 'CPU' in mine[0][2] else 'GPU'})"
    return out


def _queueing_section(queueing: list[QueueingRow], figures: Figures | None = None,
                      measured: dict[str, str] | None = None) -> str:
    """Little's law and utilization for every endpoint (ρ beside the utilization a monitor measured, where one
    did); the queueing-model predictions only for the endpoints they apply to (a synthetic exponential service),
    said in words for the rest."""
    if not queueing:
        return ("<p class='note'>No server timings: the endpoints did not report when they received and answered "
                "each request (Triton and the embedded endpoint do), so there is no server-side queueing to "
                "show.</p>")
    rows = [Shown(q, rho=f"{q.utilization:.2f} > 0.7" if q.utilization_flag and q.utilization is not None
                  else q.utilization, measured_u=(measured or {}).get(q.endpoint),
                  **{f"mm1_{k}": getattr(q.mm1, k) for k in (type(q.mm1).model_fields if q.mm1 else ())})
            for q in queueing]
    core = [c for c in _QUEUE_CORE if any(r.get(c[0]) is not None for r in rows) or c[0] == "endpoint"]
    parts = [_table(rows, core, left={"endpoint", "model"})]
    modelled = [r for q, r in zip(queueing, rows) if q.mm1]
    if modelled:
        parts.append("<p class='note'>Queueing models for the endpoints with a known service process "
                     "(synthetic exponential service):</p>")
        parts.append(_table(modelled, [c for c in _QUEUE_MODELS if any(r.get(c[0]) is not None for r in modelled)],
                            left={"endpoint"}))
    others = [q.endpoint for q in queueing if not q.mm1]
    if others:
        parts.append(f"<p class='note'>No queueing-model prediction for {html.escape(', '.join(others))}: their "
                     "service time is the model's own, not a known distribution; Little's law and utilization "
                     "above still hold.</p>")
    plot = (figures or InlineFigures()).svg("queue_vs_utilization", lambda: (queueing,))
    if plot:
        parts.append(plot)
    elif queueing:
        parts.append(f"<p class='note'>Every endpoint ran under {MIN_UTILIZATION_TO_PLOT:.0%} utilization: "
                     "requests almost never queued behind each other, so there is no queue-delay curve to draw.</p>")
    parts.append("<p class='note'>ρ = λ·S / slots (flagged above 0.7, where queue delay climbs steeply); Little gap: "
                 "how far the time-average number in the server L is from λ·W (small = consistent timestamps); "
                 "c_a²: the squared coefficient of variation of the gaps between arrivals at the server "
                 "(1 = Poisson). Measured U: the utilization law U = X·S checked against a monitor — the model's "
                 "CPU time per second per slot (the embedded server), or the GPU's utilization (a monitor of this "
                 "endpoint alone); per phase under <a href='#hardware'>What the hardware did</a>.</p>")
    return "".join(parts)


def _manifest_section(s: RunSummary) -> str:
    """The manifest as a readable table, the raw JSON folded away."""
    m = s.manifest
    host_cpu = m.host_cpu
    items = [("run", s.run_id), ("profile", s.profile),
             ("profile fields set", ", ".join(m.overrides) if m.overrides else "none (the profile as written)"),
             ("valid", m.valid),
             ("started", _iso(m.start_ns)), ("ended", _iso(m.end_ns)),
             ("duration s", (m.end_ns - m.start_ns) / 1e9 if m.start_ns and m.end_ns else None),
             ("seed", m.seed), ("git commit", m.git_sha),
             ("host", ", ".join(f"{k} {v}" for k, v in (m.host or {}).items()) or None),
             ("host CPU busy / steal", f"{host_cpu.busy_fraction or 0:.1%} / {host_cpu.steal_fraction or 0:.2%}"
              if host_cpu else None),
             ("workers", ", ".join(sorted(m.workers or {})) or None),
             ("invalid because", "; ".join(m.invalid_reasons or []) or "–"),
             ("warnings", m.warnings or "–"),
             ("versions", ", ".join(f"{k} {v}" for k, v in (m.versions or {}).items()) or None)]
    def cell(v) -> str:
        return ("<ul>" + "".join(f"<li>{html.escape(str(x))}</li>" for x in v) + "</ul>") if isinstance(v, list) \
            else _fmt(v)
    table = "<table>" + "".join(f"<tr><th class='l nowrap'>{html.escape(k)}</th><td class='l'>{cell(v)}</td></tr>"
                                for k, v in items) + "</table>"
    raw = html.escape(json.dumps(m.model_dump(mode="json", exclude_unset=True), indent=1, default=str)[:20000])
    return (f"<h2 id='manifest'>Manifest</h2>{table}<details><summary>raw manifest (JSON)</summary>"
            f"<pre class='mono'>{raw}</pre></details>")


def _verdict_grid_section(s: RunSummary) -> str:
    """The SLO verdicts at a glance (analysis/report/verdict_grid.py): a row per SLO and endpoint, a column per
    region and '*', then each verdict that is not PASS in a line with why."""
    if not s.slos:
        return ""
    regions, rows = verdict_grid(s.slos)
    head = "<th class='l'>SLO</th><th class='l'>endpoint</th>" + "".join(
        f"<th>{html.escape(r)}</th>" for r in regions)
    body = []
    for row in rows:
        cells = []
        for region in regions:
            text = row.cell(region)
            cells.append(f"<td class='{html.escape(text.split(' ', 1)[0])}'>{html.escape(text)}</td>")
        body.append(f"<tr><td class='l'>{html.escape(row.description)}</td><td class='l'>{html.escape(row.endpoint)}"
                    f"</td>{''.join(cells)}</tr>")
    why = "".join(f"<li class='{'flag' if v.verdict == 'FAIL' else 'warn'}'>{html.escape(why_words(v))}</li>"
                  for v in not_passing(s.slos))
    return ("<h2 id='verdicts'>SLO verdicts at a glance</h2><div class='scroll'><table id='verdict-grid'>"
            f"<tr>{head}</tr>{''.join(body)}</table></div>" + (f"<ul id='not-passing'>{why}</ul>" if why else "")
            + "<p class='note'>Each cell: the verdict and the measured value; '*': the verdict over every region "
              "(the worst, and how many regions have it). Intervals, sample counts and reasons: "
              "<a href='#slo-details'>SLO verdicts in detail</a>.</p>")


def _slo_section(s: RunSummary) -> str:
    """The SLO verdicts, with their intervals and what would decide an INCONCLUSIVE one."""
    parts: list[str] = []
    parts.append("<details id='slo-details'><summary><b>SLO verdicts in detail</b> (one row per SLO × endpoint × "
                 "region)</summary>")
    parts.append(_table(s.slos, [("description", "SLO"), ("endpoint", "endpoint"), ("region", "region"),
                                    ("n", "n"), ("effective_n", "worth (independent)"), ("exceeding", "exceeding"),
                                    ("measured", "measured"), ("ci_low", "CI low"), ("ci_high", "CI high"),
                                    ("verdict", "verdict"), ("more_samples_needed", "more samples needed"),
                                    ("reason", "trend, or why not PASS")],
                        left={"description", "endpoint", "region", "reason"}, css={"verdict": lambda r: r.verdict}))
    parts.append("<p class='note'>PASS: the 95% distribution-free CI of the percentile (or the exact binomial CI of "
                 "the error rate) lies under the threshold; FAIL: above; INCONCLUSIVE: it straddles it — 'more samples "
                 "needed' says how many more would decide, if the observed proportion holds — or latency trended "
                 "through a phase in a way that could carry the percentile across the threshold by the phase's end "
                 "(a level that settled, or a drift too small to matter, is reported here and leaves the verdict "
                 "as it was). Requests that queue behind each other are correlated: the CIs count the independent "
                 "samples they are worth ('worth'), never more than n.</p></details>")
    return "".join(parts)


def _phases_section(s: RunSummary, analysis: Analysis, figures: Figures, streamed: frozenset, mixed: bool) -> str:
    """Latency and throughput over time, and the table of phases."""
    parts: list[str] = []
    df = analysis.requests
    starts = phase_boundaries_s(analysis.data.plan.profile)
    line_note = ("<p class='note'>The p99 lines are the one-shot endpoints' (the streams' TTFT over time is in "
                 "<a href='#tokens'>Streamed responses</a>); requests / s counts every request.</p>") if mixed else ""
    parts.append("<h2 id='phases'>Latency and throughput over time, per phase</h2>" +
                 (figures.svg("over_time_of", lambda: (timeline(df, streamed), starts, s.outages))
                  or "") + line_note)
    parts.append(_table([Shown(r, p50_ci=_ci(r.p50_ci), p95_ci=_ci(r.p95_ci), p99_ci=_ci(r.p99_ci))
                         for r in s.phases],
                        [("name", "phase"), *([("kind", "endpoints")] if mixed else []), ("start_s", "from s"),
                         ("end_s", "to s"), ("count", "requests"), ("errors", "errors"),
                         *([("cancelled", "cancelled")] if any(r.cancelled for r in s.phases) else []),
                         ("intended_rate", "intended /s"), ("achieved_rate", "achieved /s"),
                         ("p50_ms", "p50 ms"), ("p50_ci", "95% CI"), ("p95_ms", "p95 ms"), ("p95_ci", "95% CI"),
                         ("p99_ms", "p99 ms"), ("p99_ci", "95% CI")], left={"name", "kind"}))
    if mixed:
        parts.append("<p class='note'>One row per phase and kind of endpoint: a stream's latency is its E2E (first "
                     "byte to last token), never pooled with the one-shot endpoints' latencies.</p>")
    return "".join(parts)


def _latency_section(s: RunSummary, open_loop: bool, mixed: bool) -> str:
    """The latency table: per endpoint × region, from the intended send time, with 95% CIs."""
    parts: list[str] = []
    parts.append("<h2>Latency (ms, from intended send time) with 95% CIs</h2>")
    rows: list[dict] = []
    for r in s.latency:
        overall = r.endpoint == "*" and r.region == "*"
        rows.append({"endpoint": f"* ({r.kind})" if overall and mixed else r.endpoint, "region": r.region,
                     "kind": "stream (E2E)" if r.kind == "stream" else r.kind, "count": r.count,
                     "rate": f"{r.achieved_rate:.1f} / " + (f"{r.intended_rate:.1f}" if r.intended_rate
                                                          else "—" if open_loop else "closed loop"),
                     "errors": r.errors,
                     "mean": r.mean_ms, "p50": _pct(r, "p50"), "p90": _pct(r, "p90"), "p99": _pct(r, "p99"),
                     "p99.9": _pct(r, "p99.9"), "max": r.max_ms, "accuracy": r.accuracy, "goodput": r.goodput_rps})
    cols = [("endpoint", "endpoint"), ("region", "region"), *([("kind", "kind")] if mixed else []), ("count", "n"),
            ("rate", "rate achieved / intended"),
            ("goodput", "goodput /s"), ("errors", "errors"), ("mean", "mean"), ("p50", "p50"), ("p90", "p90"),
            ("p99", "p99"), ("p99.9", "p99.9"), ("max", "max"), ("accuracy", "accuracy")]
    table = _table(rows, cols, left={"endpoint", "region", "kind"})
    for shown in rows:  # percentile cells hold markup
        for k in ("p50", "p90", "p99", "p99.9"):
            table = table.replace(html.escape(shown[k]), shown[k], 1)
    parts.append(table)
    parts.append("<p class='note'>Percentiles use numpy's default (linear) definition; CIs are order-statistic "
                 "(binomial) intervals for the independent samples the requests are worth (batch means over "
                 "time-ordered requests); a percentile is shown only with enough samples for both CI ends. Goodput: "
                 "requests per second that succeeded within every latency SLO that applies to them"
                 + (" — for a stream, within every TTFT, TPOT, ITL and E2E SLO that applies to it (the same number as "
                    "in <a href='#tokens'>Streamed responses</a>). A stream's latency is its E2E; the overall row "
                    "'* (one-shot)' pools the one-shot endpoints only (the streams' is in the tokens table)"
                    if mixed else "") + ".</p>")
    return "".join(parts)


def _server_sections(s: RunSummary, analysis: Analysis, figures: Figures) -> str:
    """The server's own statistics (deltas of the statistics extension) and the cold start of servers the run started."""
    parts: list[str] = []
    if s.endpoint_statistics:
        parts.append("<h3 id='server-statistics'>Server-side statistics: queue vs compute (deltas of the "
                     "statistics extension, Triton's or the embedded endpoint's)</h3>")
        parts.append(_table(s.endpoint_statistics, [
            ("kind", "server"), ("endpoint", "endpoint(s)"), ("model", "model"), ("success", "success"),
            ("client_ok", "client ok"), ("fail", "fail"), ("execution_count", "executions"),
            ("mean_batch", "mean batch"), ("mean_queue_ms", "queue ms"), ("mean_compute_input_ms", "input ms"),
            ("mean_compute_infer_ms", "infer ms"), ("mean_compute_output_ms", "output ms")],
            left={"kind", "endpoint", "model"}))
        parts.append("<p class='note'>Per request means over the run (warm-up included, like the server's "
                     "counters); 'client ok' counts the same endpoints' successful requests in the log.</p>")
        parts.append(figures.svg("server_timeline", lambda: (
            s.server_timeline,
            analysis.requests["t_intended_ref"].min(),
            phase_boundaries_s(analysis.data.plan.profile))) or "")

    if s.cold_start:
        parts.append("<h2 id='cold-start'>Cold start</h2>")
        parts.append(_table(s.cold_start, [
            ("endpoint", "endpoint"), ("server", "server"), ("ready_s", "spawn → ready s"),
            ("first_success_s", "spawn → first success s"), ("first_request_ms", "first request ms"),
            ("first_k", "first K"), ("first_k_errors", "errors in K"), ("first_k_mean_ms", "first K mean ms"),
            ("first_k_max_ms", "first K max ms"), ("steady_mean_ms", "steady mean ms"),
            ("steady_p50_ms", "steady p50 ms"), ("first_k_vs_steady", "first K / steady")],
            left={"endpoint", "server"}))
        parts.append("<p class='note'>For servers this run started itself: spawn to readiness, to the first "
                     "successful inference (a real sample), and the run's first K requests per endpoint against "
                     "the measured phase (profile <code>cold_start.first_k</code>).</p>")
    return "".join(parts)


def _clock_and_outage_sections(s: RunSummary, analysis: Analysis, figures: Figures) -> str:
    """The workers' clocks against the reference, and the outages (runs of failures per endpoint)."""
    parts: list[str] = []
    parts.append("<h2>Clocks</h2>" + (figures.svg("clock_offsets", lambda: (analysis.data.clock,))
                                      or "<p class='note'>no samples</p>"))
    parts.append(_table(s.clock, [("worker", "worker"), ("offset_ms", "offset ms"), ("drift_ppm", "drift ppm"),
                                     ("uncertainty_ms", "± ms"), ("samples_used", "samples used"),
                                     ("samples_total", "of")], left={"worker"}))
    parts.append("<p class='note'>Offset = reference clock − worker clock, added to the worker's timestamps to put "
                 "them on the reference clock. A worker whose clock runs 40 ms ahead (a profile's "
                 "<code>clock_skew_ms = 40</code>) has an offset of −40 ms: the sign is the opposite of the skew.</p>")
    parts.append("<h2 id='outages'>Outages</h2>")
    if s.outages:
        parts.append(_table([Shown(o, errors=", ".join(f"{k}: {v}" for k, v in o.errors.items()),
                                   regions=", ".join(o.regions), end_s=o.end_s if o.recovered else "not recovered")
                             for o in s.outages],
                            [("endpoint", "endpoint"), ("start_s", "from s"), ("end_s", "to s"),
                             ("duration_s", "duration s"), ("failed", "failed requests"), ("regions", "regions"),
                             ("errors", "error classes")], left={"endpoint", "regions", "errors"}))
        parts.append("<p class='note'>An outage is a run of at least 5 consecutive failed requests to one endpoint "
                     "(all regions merged, by intended time on the reference clock); it ends at the next success. "
                     "Shaded on the time plot.</p>")
    else:
        parts.append("<p class='note'>none: no endpoint had 5 consecutive failures</p>")
    return "".join(parts)


def _slowest_section(s: RunSummary, mixed: bool) -> str:
    """The slowest requests, with their trace IDs and where their time went."""
    parts: list[str] = []
    parts.append("<h2>Slowest requests</h2>")
    if mixed:
        parts.append("<p class='note'>The slowest of each kind of endpoint: one-shot requests by latency, streams by "
                     "E2E.</p>")
    parts.append(_table(s.slowest, [("trace_id", "trace ID"), ("region", "region"), ("endpoint", "endpoint"),
                                       *([("kind", "kind")] if mixed else []),
                                       ("status", "status"), ("latency_ms", "latency ms"),
                                       ("send_lag_ms", "send lag"), ("network_up_ms", "net up"),
                                       ("server_queue_ms", "queue"), ("server_compute_ms", "compute"),
                                       ("network_down_ms", "net down"), *_SPAN_COLUMNS],
                        left={"trace_id", "region", "endpoint", "kind", "span_server_span"}))
    if s.server_spans is not None:
        parts.append(_server_spans_section(s.server_spans))
    return "".join(parts)


# the server's own span of a slowest request (OpenTelemetry), where it came back
_SPAN_COLUMNS = [("span_server_span", "server span"), ("span_server_queue_ms", "span: queue"),
                 ("span_server_prefill_ms", "prefill"), ("span_server_decode_ms", "decode"),
                 ("span_server_ttft_ms", "server TTFT"), ("span_server_compute_ms", "span: compute")]


def _server_spans_section(section: ServerSpans) -> str:
    """The servers' spans joined to the requests: the share found, the server's split beside the client's view."""
    def cell(v: dict | None) -> str:
        return "–" if not v else f"{v['p50']:.2f} / {v['p99']:.2f}"

    rows = [Shown(r, names=", ".join(r.span_names) or "–", **{k: cell(getattr(r, k)) for k in (
        "server_queue_ms", "server_compute_ms", "server_ttft_ms", "server_prefill_ms", "server_decode_ms",
        "client_ttft_ms", "client_rest_ms")}) for r in section.rows]
    return ("<h3 id='server-spans'>The servers' own spans</h3>" + _table(rows, [
        ("endpoint", "endpoint"), ("requests", "requests"), ("with_server_span", "with a server span"),
        ("share", "share"), ("names", "span"), ("server_queue_ms", "queue p50 / p99 ms"),
        ("server_prefill_ms", "prefill"), ("server_decode_ms", "decode"), ("server_compute_ms", "compute"),
        ("server_ttft_ms", "server TTFT"), ("client_ttft_ms", "client TTFT"),
        ("client_rest_ms", "client TTFT − send lag − server TTFT")], left={"endpoint", "names"})
        + f"<p class='note'>{section.spans:,} spans read ({html.escape(', '.join(section.sources))}), joined to the "
        "requests whose span is their parent (the request's <code>traceparent</code>); "
        f"{section.unknown_trace_spans:,} belong to traces no request of this run carries and are left out. Server "
        "times are the server's own (its clock, its attributes: vLLM's <code>gen_ai.latency.*</code>, Triton's "
        "QUEUE_START / COMPUTE_START / COMPUTE_END events); the last column is what the client saw that the server "
        "did not — the network there and back and the client's reading.</p>")


def _workload_sections(analysis: Analysis, figures: Figures) -> list[str]:
    """The sections of the workloads the run has: streams, embeddings, rerank, pipelines, accuracy, cancelled streams,
    sessions."""
    s, parts = analysis.summary, []
    if s.tokens:
        parts.append(_tokens_section(s.tokens, analysis, figures))
    if s.embeddings:
        parts.append(_pooling_section(s.embeddings, rerank=False))
    if s.rerank:
        parts.append(_pooling_section(s.rerank, rerank=True))
    if s.pipelines is not None and s.pipelines.pipelines:
        parts.append(_pipelines_section(s.pipelines))
    if s.accuracy:
        parts.append(_accuracy_section(s, figures))
    if s.cancellations:
        parts.append(_cancellations_section(s.cancellations))
    if s.sessions is not None and s.sessions.model_fields_set:  # (a run without sessions has an empty section)
        parts.append(_sessions_section(s.sessions, analysis.data.plan.profile, figures))
    return parts


def render(analysis: Analysis, figures: Figures | None = None) -> str:
    """The whole page; `figures` draws its figures (analysis/report/figures.py; default: here, as they are asked for)."""
    figures = figures or InlineFigures()
    s = analysis.summary
    df = analysis.requests
    parts = [f"<h1>tailrace report — {html.escape(s.run_id)}</h1>",
             f"<p><span class='badge {s.verdict}' id='verdict'>{s.verdict}</span> "
             f"profile <b>{html.escape(s.profile)}</b> · {s.input.rows_read:,} requests from "
             f"{s.input.chunks_read} chunks · {len(s.input.chunks_skipped)} chunk(s) skipped</p>"]
    labels = {"invalid": ("flag", "INVALID:"), "warning": ("warn", "warning:"), "skipped": ("flag", "skipped")}
    parts += [f"<p class='{labels[kind][0]}'>{labels[kind][1]} {html.escape(text)}</p>" for kind, text in s.notices()]

    errors_section = "<h2>Errors</h2>" + _table(
        [Shown(e, example_trace_ids=" ".join(e.example_trace_ids)) for e in s.errors],
        [("status", "class"), ("code", "code"), ("count", "count"), ("example_error", "example"),
         ("example_trace_ids", "trace IDs")], left={"status", "code", "example_error", "example_trace_ids"})
    all_failed = len(df) > 0 and not (df["status"] == "ok").any()
    if all_failed:  # what went wrong comes first when nothing went right
        parts.append("<p class='flag'>Every request failed.</p>" + errors_section)
    parts.append(_verdict_grid_section(s))

    parts.append(_scenario_section(s.scenario))
    if s.decision:
        parts.append(_decision_section(s.decision, figures))
    streamed = frozenset(e.name for e in analysis.data.plan.profile.endpoints if e.generative)
    mixed = bool(streamed) and any(r.kind == "one-shot" for r in s.latency)
    only = (" <span class='note'>(one-shot endpoints; the streams' TTFT and TPOT per region are in "
            "<a href='#tokens'>Streamed responses</a>)</span>") if mixed else ""
    parts.append(f"<h2>p99 latency by region × endpoint{only}</h2>")
    parts.append(figures.svg("heatmap_p99", lambda: (s.latency,)) or "<p class='note'>no data</p>")
    if any(r.p99.value is None for r in heatmap_rows(s.latency)):  # said only where a cell shows it
        parts.append("<p class='note'>n/a: too few independent samples for a p99 with both ends of its CI (see the "
                     "latency table).</p>")
    parts.append(f"<h2>Latency distribution per region{only}</h2>" +
                 (figures.svg("latency_cdfs", lambda: (analysis.cdfs,)) or ""))
    parts.append(_phases_section(s, analysis, figures, streamed, mixed))

    parts.append(_latency_section(s, analysis.data.plan.profile.load.scenario == "server", mixed))
    parts += _workload_sections(analysis, figures)
    parts.append(_validity_section(s))

    parts.append("<h2>Where the time goes</h2>")
    parts.append(figures.svg("decomposition_bars", lambda: (s.decomposition,))
                 or "<p class='note'>no server timings</p>")
    parts.append(_table(s.decomposition, [("region", "region"), ("endpoint", "endpoint"), ("count", "n"),
                                             ("send_lag_ms", "send lag"), ("network_up_ms", "network up"),
                                             ("server_queue_ms", "queue"), ("server_compute_ms", "compute"),
                                             ("server_other_ms", "server other"), ("network_down_ms", "network down"),
                                             ("sum_ms", "sum"), ("latency_mean_ms", "mean latency")],
                        left={"region", "endpoint"}))

    parts.append("<h2>Queueing and utilization</h2>" + _queueing_section(s.queueing, figures, measured_utilization(
        s.hardware)))
    if s.hardware is not None and (s.hardware.rows or s.hardware.missing):
        parts.append(_hardware_section(s.hardware, figures, analysis.data.plan.profile))
    parts.append(_server_sections(s, analysis, figures))
    if s.arrival_process:
        parts.append(_process_section(s.arrival_process, figures))
    else:
        parts.append(_poisson_section(s))
    parts.append(_clock_and_outage_sections(s, analysis, figures))
    parts.append(_slo_section(s))
    if not all_failed:
        parts.append(errors_section)
    parts.append(_slowest_section(s, mixed))
    parts.append(_manifest_section(s))
    script = ("<script>document.addEventListener('DOMContentLoaded',function(){"
              "document.body.dataset.rendered=String(document.querySelectorAll('svg').length);});</script>")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>tailrace {html.escape(s.run_id)}"
            f"</title><style>{_CSS}</style>{script}</head><body>{''.join(parts)}</body></html>")
