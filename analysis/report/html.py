"""The report page: one self-contained HTML file (inline CSS, inline SVG plots), read top-down."""
from __future__ import annotations

import html
import json
from collections.abc import Collection

from tailrace.analysis.report.figures import Figures, InlineFigures
from tailrace.analysis.report.verdict_grid import not_passing, verdict_grid, why_words
from tailrace.analysis.result import Analysis
from tailrace.analysis.stats.queueing import MIN_UTILIZATION_TO_PLOT
from tailrace.analysis.stats.scenarios import phase_boundaries_s
from tailrace.analysis.stats.timeline import timeline
from tailrace.analysis.stats.validity import CHECKS
from tailrace.contract.summary import (
    ArrivalProcessRow,
    CancellationRow,
    Decision,
    EmbeddingRow,
    Estimate,
    Hardware,
    LatencyRow,
    Pipelines,
    QueueingRow,
    Row,
    RunSummary,
    Scenario,
    ServerSpans,
    Sessions,
    TokenRow,
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


def _fmt(v, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return html.escape(str(v))


class Shown:
    """A row of the summary shown with some cells of its own (formatted, or computed from the row)."""

    def __init__(self, row: Row | None, **cells) -> None:
        self.row, self.cells = row, cells

    def get(self, column: str):
        return self.cells[column] if column in self.cells else getattr(self.row, column, None)


def _cell(row: Row | Shown | dict, column: str):
    """The value a table shows in `column` of `row` (a summary row's field of that name)."""
    if isinstance(row, (Shown, dict)):
        return row.get(column)
    return getattr(row, column, None)


def _table(rows: list, columns: list[tuple[str, str]], left: Collection[str] = frozenset(), css: dict | None = None
           ) -> str:
    if not rows:
        return "<p class='note'>none</p>"
    head = "".join(f"<th class='{'l' if k in left else ''}'>{html.escape(label)}</th>" for k, label in columns)
    body = []
    for r in rows:
        cells = []
        for k, _ in columns:
            cls = ("l " if k in left else "") + ((css or {}).get(k, lambda _r: "")(r))
            cells.append(f"<td class='{cls.strip()}'>{_fmt(_cell(r, k))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<div class='scroll'><table><tr>{head}</tr>{''.join(body)}</table></div>"


def _pct(row: LatencyRow, name: str) -> str:
    est = row.percentiles[name]
    if est.value is None:
        worth = est.effective_n
        extra = f" independent; worth {worth:,}" if worth is not None and est.n is not None and worth < est.n else ""
        return f"<span class='note'>needs ≥ {est.min_samples:,}{extra}</span>"
    if est.ci_low is None:
        return (f"{est.value:.2f} <span class='note'>[no interval: worth {est.effective_n:,} independent, "
                f"needs ≥ {est.min_samples:,}]</span>")
    return f"{est.value:.2f} <span class='note'>[{est.ci_low:.2f}, {est.ci_high:.2f}]</span>"


def _p(value) -> str | None:
    """A p-value as read: two significant digits, '< 0.0001' below that."""
    if value is None:
        return None
    return "< 0.0001" if value < 1e-4 else f"{value:.2g}"


def _ci(pair) -> str:
    return "" if not pair or pair[0] is None else f"[{pair[0]:.2f}, {pair[1]:.2f}]"


def _token_cell(e: Estimate | None) -> str | None:
    """A token percentile as text: the value and its interval, or why there is no interval / no value."""
    if e is None:
        return None
    if e.value is None:
        return f"needs ≥ {e.min_samples:,}"
    if e.ci_low is None:
        return f"{e.value:.2f} (no interval: worth {e.effective_n:,}, needs ≥ {e.min_samples:,})"
    return f"{e.value:.2f} [{e.ci_low:.2f}, {e.ci_high:.2f}]"


def _prompt_lengths_note(profile) -> str:
    """How exact each generative endpoint's prompt lengths are: in its tokenizer's tokens, or words ≈ tokens."""
    items = []
    for ep in (e for e in profile.endpoints if e.generative):
        spec = ep.prompts
        source = f"a prompt file ({html.escape(spec.file)})" if spec and spec.file else "synthetic prompts"
        exact = (f"lengths in the tokenizer's tokens ({html.escape(spec.tokenizer)}; outputs counted with it where the "
                 "server reported none)") if spec and spec.tokenizer else \
            "lengths approximate (words ≈ tokens: the profile names no prompts.tokenizer)"
        items.append(f"<li>{html.escape(ep.name)}: {source}, {exact}</li>")
    return f"<p class='note'>Prompts:</p><ul class='note'>{''.join(items)}</ul>" if items else ""


def _tokens_section(rows: list[TokenRow], analysis: Analysis, figures: Figures) -> str:
    """Streamed (generative) requests: TTFT, TPOT, ITL and E2E per endpoint × region, tokens/s, goodput, how they
    ended — per model of an endpoint's mix too —; the TTFT heatmap, CDFs, the timeline and where TTFT goes."""
    table_rows, cols = _token_table_rows(rows)
    note = ("<p class='note'>All in ms with 95% intervals. TTFT = first token − intended send time (never the actual "
            "send: a generator that fell behind hides nothing); E2E = end − intended send time; TPOT = (last token − "
            "first token) / (output tokens − 1) per request; ITL = the gaps between token events after the first, an "
            "event of k tokens counting as k gaps of gap/k, pooled — its interval counts each stream as one "
            "independent sample, since the gaps of one stream are not independent. Token counts come from the "
            "server's usage ('usage': on every event; 'final_usage': in the trailer only; 'output': the model's "
            "count output; 'tokenizer': the server reported none and the profile's tokenizer counted the text; "
            "'events': none of these, so events were counted — then a token count may be off where an event "
            "carried several). Goodput: streams per second that succeeded within every token SLO that applies to them, "
            "each judged on its own TTFT, TPOT, E2E and largest gap.</p>")
    s, curves = analysis.summary, analysis.token_figures
    parts = ["<h2 id='tokens'>Streamed responses: tokens</h2>",
             _table(table_rows, cols, left={"endpoint", "region", "outcomes", "sources"}), note]
    if s.tokens_by_model:
        by_rows, by_cols = _token_table_rows([r.model_copy(update={"endpoint": f"{r.endpoint} · {r.model}"})
                                              for r in s.tokens_by_model])
        parts += ["<h3 id='tokens-by-model'>By model</h3>",
                  _table(by_rows, by_cols, left={"endpoint", "region", "outcomes", "sources"}),
                  "<p class='note'>The endpoints whose requests draw their model from a weighted list (LoRA adapters, "
                  "models behind one gateway): the same numbers per endpoint · model; an SLO that names a model is "
                  "judged on its requests only.</p>"]
    parts += [_prompt_lengths_note(analysis.data.plan.profile),
             "<h3>TTFT p99 per region × endpoint (p90 where a group has too few streams for a p99)</h3>",
             figures.svg("token_heatmap", lambda: ([r.raw for r in rows],)) or "",
             *(["<h3>TTFT p99 per region × endpoint · model</h3>", figures.svg("token_heatmap", lambda: (
                 [{**r.raw, "endpoint": f"{r.endpoint} · {r.model}"} for r in s.tokens_by_model],)) or ""]
               if s.tokens_by_model else []),
             "<h3>TTFT and TPOT per region</h3>",
             figures.svg("token_cdfs", lambda: (curves.get("curves") or {},)) or "",
             "<h3>Tokens and TTFT over time</h3>",
             figures.svg("token_over_time", lambda: (curves.get("timeline") or {},
                                                     phase_boundaries_s(analysis.data.plan.profile))) or ""]
    return "".join(parts) + _ttft_split(s, figures)


def _token_table_rows(rows: list[TokenRow]) -> tuple[list[dict], list[tuple[str, str]]]:
    """The tokens table's cells and columns for `rows`."""
    table_rows = []
    for r in rows:
        row = {"endpoint": r.endpoint, "region": r.region, "ok": f"{r.ok:,} / {r.requests:,}",
               "tps": r.output_tokens_per_s, "sources": ", ".join(r.token_sources), "goodput": r.goodput_rps,
               "outcomes": ", ".join(f"{k} {v:,}" for k, v in r.outcomes.items())}
        for metric in ("ttft", "tpot", "itl", "e2e"):
            for p in ("p50", "p99"):
                row[f"{metric}_{p}"] = _token_cell(r.metric(metric).at(p))
        if r.ttfa_ms is not None:
            row.update({"ttfa_p50": _token_cell(r.ttfa_ms.at("p50")), "ttfa_p99": _token_cell(r.ttfa_ms.at("p99")),
                        "reasoning": r.mean_reasoning_tokens})
        if r.schema_valid_rate is not None:
            row["schema"] = f"{r.schema_valid_rate:.1%} of {r.schema_checked:,}" + (
                "" if r.schema_valid_ci_low is None else f" [{r.schema_valid_ci_low:.1%}, {r.schema_valid_ci_high:.1%}]")
        if r.media_per_request is not None:
            row.update({"media": f"{r.media_per_request:.2f} ({(r.media_bytes_per_request or 0) / 1024:,.0f} KiB)",
                        "prompt": r.mean_input_tokens})
        table_rows.append(row)
    reasoned = any(r.ttfa_ms is not None for r in rows)
    media = [("media", "media / request (size)"), ("prompt", "prompt tokens (mean, media's included)")] \
        if any(r.media_per_request is not None for r in rows) else []
    cols = [("endpoint", "endpoint"), ("region", "region"), ("ok", "ok / streams"), ("tps", "output tokens/s"),
            ("goodput", "goodput /s"), ("ttft_p50", "TTFT p50"), ("ttft_p99", "TTFT p99"),
            *([("ttfa_p50", "first answer p50"), ("ttfa_p99", "first answer p99"),
               ("reasoning", "reasoning tokens (mean)")] if reasoned else []), ("tpot_p50", "TPOT p50"),
            ("tpot_p99", "TPOT p99"),
            ("itl_p50", "ITL p50"), ("itl_p99", "ITL p99"), ("e2e_p50", "E2E p50"), ("e2e_p99", "E2E p99"),
            *media, *([("schema", "follows the JSON Schema [95% CI]")] if any(
                r.schema_valid_rate is not None for r in rows) else []),
            ("outcomes", "how streams ended"), ("sources", "token counts from")]
    return table_rows, cols


def _ttft_split(s: RunSummary, figures: Figures) -> str:
    """Where time to first token goes, when the servers said."""
    parts = []
    split = s.ttft_decomposition
    parts.append("<h3>Where time to first token goes</h3>")
    if split:
        parts.append(figures.svg("ttft_bars", lambda: ([r.raw for r in split],)) or "")
        parts.append(_table(split, [("region", "region"), ("endpoint", "endpoint"), ("count", "n"),
                                    ("send_lag_ms", "send lag"), ("network_up_ms", "network up"),
                                    ("server_queue_ms", "queue"), ("server_prefill_ms", "prefill"),
                                    ("server_other_ms", "server other"), ("network_down_ms", "network down"),
                                    ("sum_ms", "sum"), ("ttft_mean_ms", "mean TTFT")], left={"region", "endpoint"}))
        parts.append("<p class='note'>Means in ms, from the server's own account of each stream (its server-timing "
                     "header: queue, prefill, when it received the request and sent the first token); network legs "
                     "on the reference clock.</p>")
    else:
        parts.append("<p class='note'>The servers did not say when they received the requests and sent their first "
                     "tokens (a server-timing header with queue, prefill, recv and send), so TTFT is not split.</p>")
    return "".join(parts)


def _pooling_section(rows: list[EmbeddingRow], rerank: bool) -> str:
    """Embeddings or rerank endpoints: inputs (texts, documents) and tokens per second, goodput in inputs, latency
    by inputs per request."""
    unit = "documents" if rerank else "inputs"
    main = [Shown(r, slo=f"≤ {r.latency_slo_ms:g} ms" if r.latency_slo_ms is not None else "none") for r in rows]
    anchor, title = ("rerank", "Rerank") if rerank else ("embeddings", "Embeddings")
    what = "Documents are those a request asked to be scored against its query" if rerank else \
        "Inputs are the texts a request carried (its batch)"
    parts = [f"<h2 id='{anchor}'>{title}</h2>",
             _table(main, [("endpoint", "endpoint"), ("region", "region"), ("ok", "ok"), ("requests", "requests"),
                           ("inputs_per_s", f"{unit}/s"), ("mean_inputs_per_request", f"{unit} / request"),
                           ("input_tokens_per_s", "input tokens/s"), ("mean_tokens_per_input", f"tokens / {unit[:-1]}"),
                           ("good_inputs_per_s", f"goodput ({unit}/s)"), ("slo", "latency SLO")],
                    left={"endpoint", "region"}),
             f"<p class='note'>{what}; input tokens are the server's usage (– where it reported none). Goodput counts the "
             f"{unit} of requests that succeeded within every latency SLO of their endpoint × region. Each request's "
             "latency, with its intervals, is in the latency table above.</p>"]
    batches = [Shown(b, endpoint=r.endpoint, region=r.region) for r in rows for b in r.by_batch]
    if any(len(r.by_batch) > 1 for r in rows):
        parts.append(f"<h3>Latency by {'document count' if rerank else 'batch size'}</h3>" + _table(
            batches, [("endpoint", "endpoint"), ("region", "region"), ("batch", f"{unit} / request"),
                      ("requests", "ok requests"), ("p50_ms", "p50 (ms)"), ("p99_ms", "p99 (ms)")],
            left={"endpoint", "region", "batch"}) + "<p class='note'>Per region (pooled, the regions' network delays "
            "would weigh on the buckets one region sends more of); –: too few requests in the bucket for that "
            "percentile.</p>")
    return "".join(parts)


def _hardware_section(section: Hardware, figures: Figures, profile) -> str:
    """What the hardware did per monitor × measured phase, through the run, and what the monitors could not say."""
    def mib(v: float | None) -> str:
        return "–" if v is None else f"{v / 2**20:,.0f}"

    shown = [Shown(r, memory=mib(r.memory_max_bytes), gpu_memory=mib(r.gpu_memory_max_bytes),
                   power="–" if r.power_w is None else f"{r.power_w:,.1f} ({r.power_from})")
             for r in section.rows]
    estimates = [Shown(r, estimate=f"{r.estimated_energy_j:,.1f}", per_request=r.estimated_energy_per_request_mj,
                       per_tokens=r.estimated_energy_per_1k_output_tokens_j)
                 for r in section.rows if r.estimated_energy_j is not None]
    parts = ["<h2 id='hardware'>What the hardware did</h2>", _table(shown, [
        ("monitor", "monitor"), ("phase", "phase"), ("cpu_busy_pct", "CPU busy %"),
        ("process_cores", "process CPU cores"), ("gpu_util_pct", "GPU util %"),
        ("sm_active_pct", "SM active %"), ("kv_cache_pct", "KV cache %"), ("memory", "memory max (MiB)"),
        ("gpu_memory", "GPU memory max (MiB)"), ("power", "power W"), ("energy_j", "energy J"),
        ("idle_power_w", "idle W"), ("energy_above_idle_j", "above idle J"), ("requests", "ok requests"),
        ("energy_per_request_mj", "mJ / request"), ("energy_per_1k_output_tokens_j", "J / 1k output tokens"),
        ("output_tokens_per_j", "output tokens / J")], left={"monitor", "power"}),
        "<p class='note'>Each measured phase from its first intended send to its last response. Energy is an energy "
        "counter's increase over that window (DCGM, Triton, RAPL, NVML, Kepler; measured, never estimated), above "
        "idle less the power measured before the load; per request over the phase's ok requests of the monitor's "
        "endpoints (every endpoint unless it names some), per output token over their tokens. Where a monitor has "
        "no energy counter, its power gauge is shown and no "
        "joules are computed.</p>",
        figures.svg("hardware_over_time", lambda: (section.timeline, phase_boundaries_s(profile))) or ""]
    if estimates:
        parts += ["<h3>Energy estimated, not measured</h3>", _table(estimates, [
            ("monitor", "monitor"), ("phase", "phase"), ("process_cores", "process CPU cores"),
            ("estimate", "estimated J"), ("per_request", "estimated mJ / request (the whole process)"),
            ("per_tokens", "estimated J / 1k output tokens"), ("estimate_basis", "made of")],
            left={"monitor", "estimate_basis"}),
            "<p class='note'>No energy counter on these sources: an estimate from the process's CPU time and the "
            "watts per core the profile declares — a labelled estimate, never added to measured joules.</p>"]
    if section.endpoints:
        parts += ["<h3>Per endpoint: the utilization law and energy per request</h3>", _table([Shown(
            r, measured=r.energy_per_request_mj, estimated=r.estimated_energy_per_request_mj,
            shared=", ".join(r.cpu_shared_by or []) or "–") for r in section.endpoints], [
            ("monitor", "monitor"), ("endpoint", "endpoint"), ("model", "model"), ("phase", "phase"),
            ("throughput_rps", "X /s"), ("mean_service_ms", "S ms"), ("slots", "slots"), ("rho", "ρ = X·S/slots"),
            ("measured_utilization", "measured U"), ("measured_from", "measured from"),
            ("utilization_law", "U = X·S"), ("cpu_ms_per_request", "CPU ms / request"), ("shared", "CPU shared by"),
            ("measured", "mJ / request"), ("estimated", "≈ mJ / request (its model's compute only)")],
            left={"monitor", "endpoint", "model", "measured_from", "utilization_law", "shared"}),
            "<p class='note'>The utilization law holds (U within 20% of ρ) where the slot's time is the measured "
            "resource's work; U below ρ: the slot was held while that resource waited (a sleep, I/O, another "
            "process on the core). mJ / request is measured only for a monitor of this endpoint alone with an "
            "energy counter; ≈ is the model's CPU-seconds × the declared watts per core — an estimate.</p>"]
    if section.missing:
        parts.append("<p class='note'>Not said: " + "; ".join(html.escape(m) for m in section.missing) + ".</p>")
    return "".join(parts)


def _cancellations_section(rows: list[CancellationRow]) -> str:
    """Cancelled streams: the cancel rate with its interval, what closed them, the tokens served to them, and the
    server's own count of aborted requests."""
    shown = [Shown(r, rate=r.rate_text,
                   triggers=", ".join(f"{k} {v:,}" for k, v in sorted(r.by_trigger.items())) or "–",
                   server="–" if r.server_aborted is None else f"{r.server_aborted:,} (ours: {r.cancelled_server_scope:,})")
             for r in rows]
    return ("<h2 id='cancellations'>Cancelled streams</h2>" + _table(shown, [
        ("endpoint", "endpoint"), ("region", "region"), ("after", "declared"), ("requests", "requests"),
        ("cancelled", "cancelled"), ("rate", "cancel rate [95% CI]"), ("triggers", "closed by"),
        ("before_first_token", "before the first token"), ("tokens_received", "tokens served to them"),
        ("mean_tokens_received", "tokens per cancelled"), ("closed_after_p50_ms", "closed after p50 (ms)"),
        ("closed_after_p90_ms", "p90"), ("server", "server's aborted (ours)")], left={"endpoint", "region", "after"})
        + "<p class='note'>Streams the client closed as the profile's <code>cancel</code> declares (measured phases; "
          "closed after: from the intended send). Which requests are cancelled is a fixed hash of the seed and each "
          "request's place in the arrivals, the same in every run of the seed: the rate is this run's realized draw "
          "(its interval: of a run with these requests drawn anew), not an estimate of the declared share. A "
          "cancelled request is neither ok nor an error: it is in no latency percentile, no goodput and no error "
          "rate, here only. The server's count is its requests finished "
          "for reason 'abort', its model's over the whole run (a client's timeout closes a stream too), beside ours "
          "over the same: the whole run, every endpoint of that server and model.</p>")


def _pipelines_section(section: Pipelines) -> str:
    """Pipelines: end to end and to the answer's first token per pipeline × region, each stage's latency and share,
    the failures by stage, and the slowest pipelines' stages."""
    rows = [Shown(r, e2e_p50=_token_cell(r.e2e_ms.p50), e2e_p99=_token_cell(r.e2e_ms.p99),
                  ttft_p50=_token_cell(r.ttft_ms.p50), ttft_p99=_token_cell(r.ttft_ms.p99)) for r in section.pipelines]
    parts = ["<h2 id='pipelines'>Pipelines</h2>",
             _table(rows, [("pipeline", "pipeline"), ("region", "region"), ("started", "started"), ("done", "done"),
                           ("failed", "failed"), ("run_end", "cut by the run's end"), ("pipelines_per_s", "done/s"),
                           ("goodput_per_s", "goodput/s"), ("e2e_p50", "E2E p50"), ("e2e_p99", "E2E p99"),
                           ("ttft_p50", "TTFT p50"), ("ttft_p99", "TTFT p99")], left={"pipeline", "region"}),
             "<p class='note'>From each pipeline's arrival (its first stage's intended send) to its last stage's last "
             "byte (E2E) or its answer's first token (TTFT), ms, with 95% intervals; pipelines that arrived in the "
             "measured phases. Goodput counts the pipelines done within every pipeline SLO.</p>"]
    stages = [Shown(st, pipeline=r.pipeline, region=r.region, p50=_token_cell(st.latency_ms.p50),
                    p99=_token_cell(st.latency_ms.p99),
                    share=f"{st.share_of_e2e:.0%}" if st.share_of_e2e is not None else None)
              for r in section.pipelines for st in r.stages]
    parts += ["<h3>By stage</h3>", _table(stages, [
        ("pipeline", "pipeline"), ("region", "region"), ("stage", "stage"), ("endpoint", "endpoint"),
        ("requests", "requests"), ("errors", "errors"), ("p50", "latency p50"), ("p99", "latency p99"),
        ("share", "share of E2E"), ("send_lag_p99_ms", "send lag p99 (ms)")], left={"pipeline", "region", "endpoint"}),
        "<p class='note'>A stage's latency counts from its own intended send: the stage before's end plus its "
        "declared pause (its send lag shows a generator late to send it). Share: the stage's mean latency over the "
        "pipelines' mean E2E (the rest is pauses).</p>"]
    if section.failures:
        parts += ["<h3>Failed pipelines by stage</h3>", _table(section.failures, [
            ("pipeline", "pipeline"), ("stage", "stage"), ("endpoint", "endpoint"), ("status", "status"),
            ("code", "code"), ("count", "pipelines"), ("example_error", "example")],
            left={"pipeline", "endpoint", "status", "code", "example_error"})]
    slow = [Shown(st, pipeline=p.pipeline, region=p.region, e2e=f"{p.e2e_ms:.1f}",
                  where=f"stage {p.slowest_stage} ({p.slowest_endpoint}, {p.slowest_share:.0%})"
                  if st.stage == 1 else "") for p in section.slowest for st in p.stages]
    if slow:
        parts += ["<h3>Slowest pipelines</h3>", _table(slow, [
            ("pipeline", "pipeline"), ("region", "region"), ("e2e", "E2E (ms)"), ("where", "time went to"),
            ("stage", "stage"), ("endpoint", "endpoint"), ("latency_ms", "latency (ms)"), ("wait_ms", "pause (ms)"),
            ("send_lag_ms", "send lag (ms)"), ("trace_id", "trace ID")],
            left={"pipeline", "region", "where", "endpoint", "trace_id"})]
    return "".join(parts)


def _sessions_section(sessions: Sessions, profile, figures: Figures) -> str:
    """Sessions: by turn (turn 1 against later turns, the headline of a session workload), what sessions did, and
    the prefix cache's hit ratios side by side."""
    parts = []
    if sessions.turns:
        rows = [Shown(r, ttft_p50=_token_cell(r.ttft_p50), ttft_p99=_token_cell(r.ttft_p99),
                      e2e_p50=_token_cell(r.e2e_p50), e2e_p99=_token_cell(r.e2e_p99),
                      hit=f"{r.hit_ratio:.1%}" if r.hit_ratio is not None else None) for r in sessions.turns]
        parts += ["<h2 id='sessions'>Sessions</h2><h3>By turn</h3>",
                  _table(rows, [("endpoint", "endpoint"), ("turn", "turn"), ("requests", "requests"), ("ok", "ok"),
                                ("ttft_p50", "TTFT p50"), ("ttft_p99", "TTFT p99"), ("e2e_p50", "E2E p50"),
                                ("e2e_p99", "E2E p99"), ("prompt_tokens_mean", "prompt tokens"),
                                ("cached_tokens_mean", "cached tokens"), ("hit", "hit ratio")],
                         left={"endpoint", "ttft_p50", "ttft_p99", "e2e_p50", "e2e_p99"}),
                  "<p class='note'>ms with 95% intervals, from each turn's intended send: turn 1's is the session's "
                  "arrival, turn k+1's is turn k's end + its think time, so a generator late to send a next turn "
                  "shows here as it does in send lag. A later turn carries the conversation so far: a longer prompt, "
                  "most of it cached where the server caches prefixes.</p>"]
        table = [Shown(r, ended=", ".join(f"{k} {v:,}" for k, v in r.ended.items()) or "–",
                       duration=f"{_fmt(r.duration_p50_s)} / {_fmt(r.duration_p95_s)}") for r in sessions.sessions]
        parts += ["<h3>What sessions did</h3>",
                  _table(table, [("endpoint", "endpoint"), ("sessions", "sessions"), ("turns_sent", "turns sent"),
                                 ("turns_mean", "turns a session"), ("duration", "duration p50 / p95 s"),
                                 ("ended", "how they ended"), ("still_running", "unfinished"),
                                 ("good_sessions", "every turn met the SLOs"),
                                 ("session_goodput_rps", "session goodput /s")], left={"endpoint", "ended"}),
                  "<p class='note'>Sessions whose first turn was sent in a measured phase. Ended: done (its turns ran "
                  "out), error (a failed turn, sessions.on_error = \"end\"), context_limit (the next prompt would "
                  "not fit sessions.context_tokens), run_end (the next turn was due after the run). Session goodput: "
                  "sessions per second whose every turn succeeded within every token SLO that applies.</p>"]
    cache = sessions.prefix_cache
    if cache:
        def ratio(v):
            return f"{v:.1%}" if v is not None else "–"
        rows = [Shown(r, server=ratio(r.server_hit_ratio), usage=ratio(r.usage_hit_ratio),
                      ideal=ratio(r.ideal_hit_ratio)) for r in cache]
        parts += ["<h3 id='prefix-cache'>Prefix cache</h3>",
                  _table(rows, [("endpoint", "endpoint"), ("server", "server's counters"),
                                ("usage", "requests' usage"), ("ideal", "ideal (unbounded cache)"),
                                ("prompt_tokens", "prompt tokens"), ("server_metric", "counters")],
                         left={"endpoint", "server_metric"}),
                  "<p class='note'>Hit ratio = prompt tokens served from the cache / prompt tokens. The server's "
                  "counters are its model's over the whole run (warm-up and other endpoints of the model included); "
                  "the usage is the requests' own (usage.prompt_tokens_details.cached_tokens); the ideal is what a "
                  "cache that never evicts would hold of the prompts tailrace built (within a session, and a trace's "
                  "shared blocks). A server well below the ideal has too small a cache, or evicts early.</p>"]
    plot = figures.svg("sessions_over_time", lambda: (sessions.in_flight, sessions.hit_ratio_over_time,
                                                      phase_boundaries_s(profile)))
    if plot:
        parts += ["<h3>Sessions in flight and the hit ratio over time</h3>", plot]
    return "".join(parts)


def _scenario_section(sc: Scenario) -> str:
    """What the scenario itself reports (MLPerf-style), above the generic tables."""
    name = sc.scenario
    head = f"<h2 id='scenario'>Scenario: {html.escape(name)}</h2>"
    if name == "server":
        return head + f"<p class='note'>{html.escape(sc.arrivals or 'Poisson')} arrivals, open loop; latency " \
                      "from the intended send time.</p>"
    if name == "single-stream":
        flat = ", ".join(f"{k}: {v}" for k, v in (sc.max_in_flight_per_region or {}).items())
        return head + _table(sc.p90 or [], [("endpoint", "endpoint"), ("region", "region"), ("queries", "queries"),
                                            ("errors", "errors"), ("p90_ms", "p90 ms"), ("ci_low", "CI low"),
                                            ("ci_high", "CI high"), ("note", "")], left={"endpoint", "region", "note"}) + \
            f"<p class='note'>One request at a time per region ({_fmt(sc.queries_per_s, 1)} queries/s in all); most " \
            f"requests ever in flight per region: {html.escape(flat)}.</p>"
    if name == "multi-stream":
        rows = [Shown(v, region=k) for k, v in (sc.intervals or {}).items()]
        return head + _table(sc.p99 or [], [("endpoint", "endpoint"), ("region", "region"), ("queries", "queries"),
                                            ("errors", "errors"), ("p99_ms", "p99 per query ms"), ("ci_low", "CI low"),
                                            ("ci_high", "CI high"), ("note", "")], left={"endpoint", "region", "note"}) + \
            _table(rows, [("region", "region"), ("intervals", "intervals"), ("missed", "missed"),
                          ("missed_fraction", "missed fraction")], left={"region"}) + \
            f"<p class='note'>A query of {sc.samples_per_query} samples every {sc.interval_ms:g} ms per " \
            "region; an interval that finds the previous query unfinished is missed.</p>"
    return head + f"<p><b>{_fmt(sc.samples_per_s, 1)} samples/s</b> ({_fmt(sc.batches_per_s)} batches/s of " \
                  f"{sc.batch}, accuracy {_fmt(sc.accuracy, 4)})</p>" + \
        _table(sc.per_region or [], [("region", "region"), ("samples_per_s", "samples/s"), ("batches", "batches"),
                                     ("p50_batch_ms", "p50 per batch ms")], left={"region"})


def _decision_section(d: Decision, figures: Figures) -> str:
    """Trade-offs between model variants: metrics, Pareto frontiers, score, constraints, ranking, tests."""
    def dominated(by: list[str]) -> str:
        return "dominated by " + ", ".join(by) if by else "frontier"

    rows = [Shown(v, p50=f"{_fmt(v.p50_ms)} {_ci(v.p50_ci)}", p95=f"{_fmt(v.p95_ms)} {_ci(v.p95_ci)}",
                  p99=f"{_fmt(v.p99_ms)} {_ci(v.p99_ci)}",
                  size_kb=v.model_size_bytes / 1024 if v.model_size_bytes else None,
                  memory=(_fmt(v.memory_mb, 1) + (" (shared)" if v.memory_shared_with else ""))
                  if v.memory_mb is not None else "–",
                  pareto_lat=dominated(v.dominated_latency_accuracy_by),
                  pareto_mem=dominated(v.dominated_memory_capacity_by),
                  fails="; ".join(v.constraint_failures) or "–", overhead=v.serving_overhead_p50_ms,
                  ttft=f"{_fmt(v.ttft_p95_ms)} {_ci(v.ttft_p95_ci)}", tpot=f"{_fmt(v.tpot_p95_ms)} {_ci(v.tpot_p95_ci)}",
                  pareto_tokens=dominated(v.dominated_ttft_throughput_by),
                  pareto_energy=dominated(v.dominated_latency_energy_by),
                  energy=("–" if v.energy_mj is None else f"{'≈ ' if (v.energy_basis or '').startswith('estimate') else ''}"
                          f"{v.energy_mj:,.3g}") if v.estimated_energy_mj is None else
                  f"≈ {v.estimated_energy_mj:,.3g} (not ranked)")
            for v in d.variants]
    energy = any(v.energy_mj is not None or v.estimated_energy_mj is not None for v in d.variants)
    streamed = any(v.ttft_p95_ms is not None for v in d.variants)
    parts = ["<h2 id='decision'>Model variants: trade-offs and decision</h2>"]
    rec = d.recommended
    verdict = html.escape(rec) if rec else "none — no variant meets every constraint"
    ranking = f" (ranking: {html.escape(' > '.join(d.ranking))})" if d.ranking else ""
    parts.append(f"<p id='recommended'>Recommended: <b>{verdict}</b>{ranking}</p>")
    for c in d.caveats:
        parts.append(f"<p class='flag'>{html.escape(c)}</p>")
    token_cols = [("ttft", "TTFT p95 ms [CI]"), ("tpot", "TPOT p95 ms [CI]"),
                  ("output_tokens_per_s", "output tokens/s")] if streamed else []
    parts.append(_table(rows, [("name", "variant"), ("model", "model"), ("protocol", "protocol"),
                               ("requests", "requests"), ("accuracy", "accuracy"), *token_cols, ("p50", "p50 ms [CI]"),
                               ("p95", "p95 ms [CI]"), ("p99", "p99 ms [CI]"), ("capacity_rps", "capacity /s"),
                               ("memory", "peak RSS MB"), *([("energy", "mJ / request")] if energy else []),
                               ("size_kb", "model KB"), ("overhead", "serving p50 − model p50"),
                               ("score", "score"), ("fails", "constraint failures"), ("rank", "rank")],
                        left={"name", "model", "protocol", "fails", "p50", "p95", "p99", "memory", "ttft", "tpot",
                              "energy"}))
    parts.append(_table(rows, [("name", "variant"), ("pareto_lat", "Pareto: p95 vs accuracy"),
                               ("pareto_mem", "Pareto: memory vs capacity"),
                               *([("pareto_tokens", "Pareto: TTFT p95 vs tokens/s")] if streamed else []),
                               *([("pareto_energy", "Pareto: p95 vs energy")] if energy else []),
                               ("capacity_source", "capacity from"), ("energy_basis", "energy")],
                        left={"name", "pareto_lat", "pareto_mem", "pareto_tokens", "pareto_energy", "capacity_source",
                              "energy_basis"}))
    variants = [v.raw for v in d.variants]
    latency_accuracy = figures.svg("pareto_scatter", lambda: (
        variants, "p95_ms", "accuracy", "dominated_latency_accuracy_by", "p95 latency (ms)", "accuracy", True,
        True))
    memory_capacity = figures.svg("pareto_scatter", lambda: (
        variants, "memory_mb", "capacity_rps", "dominated_memory_capacity_by", "peak server RSS (MB)",
        "capacity (req/s)", True, True))
    parts.append("<div class='plots'>" + (latency_accuracy or "") + (memory_capacity or "") + "</div>")
    parts.append(_table(d.pairwise, [("a", "ranked first"), ("b", "vs"), ("p95_diff_ms", "Δp95 ms"),
                                        ("mann_whitney_p", "Mann–Whitney p"), ("cohens_d", "Cohen's d"),
                                        *([("ttft_p95_diff_ms", "ΔTTFT p95 ms"), ("ttft_mann_whitney_p", "TTFT p"),
                                           ("tpot_p95_diff_ms", "ΔTPOT p95 ms"), ("tpot_mann_whitney_p", "TPOT p")]
                                          if streamed else []),
                                        ("accuracy_diff", "Δaccuracy"), ("accuracy_p", "accuracy p"),
                                        ("accuracy_test", "accuracy test")], left={"a", "b", "accuracy_test"}))
    weights = ", ".join(f"{k} ×{v:g}" for k, v in d.weights.items())
    cons = ", ".join(f"{k} = {v:g}" for k, v in d.constraints.items() if v is not None) or "none"
    base = d.baseline
    parts.append(f"<p class='note'>Score: each metric scaled 0–1 across variants (1 = best), weighted {weights}. "
                 f"Hard constraints: {cons}. A dominated variant is no better on either axis than another and "
                 "worse on one. mJ / request: from [[monitors]] over the measured phases — measured (an energy "
                 "counter on a monitor of that variant alone) or ≈ an estimate (its model's CPU-seconds × the "
                 "declared watts per core); the two are never ranked against each other."
                 + (f" Baseline {html.escape(base.name)} (in-process, no network): p50 "
                                    f"{_fmt(base.p50_ms)} ms — the model's own cost." if base else "") + "</p>")
    return "".join(parts)


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
    plot = (figures or InlineFigures()).svg("queue_vs_utilization", lambda: ([q.raw for q in queueing],))
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


def _iso(ns) -> str | None:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC" \
        if ns else None


def _manifest_section(s: RunSummary) -> str:
    """The manifest as a readable table, the raw JSON folded away."""
    m = s.manifest
    host_cpu = m.host_cpu
    items = [("run", s.run_id), ("profile", s.profile), ("valid", m.valid),
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
    raw = html.escape(json.dumps(m.raw, indent=1, default=str)[:20000])
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
                 (figures.svg("over_time_of", lambda: (timeline(df, streamed), starts, [o.raw for o in s.outages]))
                  or "") + line_note)
    parts.append(_table([Shown(r, p50_ci=_ci(r.p50_ci), p95_ci=_ci(r.p95_ci), p99_ci=_ci(r.p99_ci))
                         for r in s.phases],
                        [("name", "phase"), *([("kind", "endpoints")] if mixed else []), ("start_s", "from s"),
                         ("end_s", "to s"), ("count", "requests"),
                         ("errors", "errors"), ("intended_rate", "intended /s"), ("achieved_rate", "achieved /s"),
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
            {name: [p.raw for p in points] for name, points in s.server_timeline.items()},
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
    parts.append(figures.svg("heatmap_p99", lambda: ([r.raw for r in s.latency],)) or "<p class='note'>no data</p>")
    parts.append("<p class='note'>n/a: too few independent samples for a p99 with both ends of its CI (see the "
                 "latency table).</p>")
    parts.append(f"<h2>Latency distribution per region{only}</h2>" +
                 (figures.svg("latency_cdfs", lambda: (analysis.cdfs,)) or ""))
    parts.append(_phases_section(s, analysis, figures, streamed, mixed))

    parts.append(_latency_section(s, analysis.data.plan.profile.load.scenario == "server", mixed))
    if s.tokens:
        parts.append(_tokens_section(s.tokens, analysis, figures))
    if s.embeddings:
        parts.append(_pooling_section(s.embeddings, rerank=False))
    if s.rerank:
        parts.append(_pooling_section(s.rerank, rerank=True))
    if s.pipelines is not None and s.pipelines.pipelines:
        parts.append(_pipelines_section(s.pipelines))
    if s.cancellations:
        parts.append(_cancellations_section(s.cancellations))
    if s.sessions is not None and s.sessions.model_fields_set:  # (a run without sessions has an empty section)
        parts.append(_sessions_section(s.sessions, analysis.data.plan.profile, figures))
    parts.append(_validity_section(s))

    parts.append("<h2>Where the time goes</h2>")
    parts.append(figures.svg("decomposition_bars", lambda: ([d.raw for d in s.decomposition],))
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
