"""The report's sections for what a run's workload was: streams (tokens, TTFT split), embeddings and rerank,
the hardware, cancelled streams, pipelines, sessions, the scenario and a decision between variants."""
from __future__ import annotations

import html

from tailrace.analysis.report.figures import Figures
from tailrace.analysis.report.html_parts import Shown, _ci, _fmt, _table, _token_cell
from tailrace.analysis.result import Analysis
from tailrace.analysis.stats.scenarios import phase_boundaries_s
from tailrace.contract.summary import (
    CancellationRow,
    Decision,
    EmbeddingRow,
    Hardware,
    Pipelines,
    RunSummary,
    Scenario,
    Sessions,
    TokenRow,
)


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
             figures.svg("token_heatmap", lambda: (rows,)) or "",
             *(["<h3>TTFT p99 per region × endpoint · model</h3>", figures.svg("token_heatmap", lambda: (
                 [r.model_copy(update={"endpoint": f"{r.endpoint} · {r.model}"}) for r in s.tokens_by_model],)) or ""]
               if s.tokens_by_model else []),
             "<h3>TTFT and TPOT per region</h3>",
             figures.svg("token_cdfs", lambda: (curves.curves,)) or "",
             "<h3>Tokens and TTFT over time</h3>",
             figures.svg("token_over_time", lambda: (curves.timeline,
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
        parts.append(figures.svg("ttft_bars", lambda: (split,)) or "")
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


def _share(value: float | None, low: float | None = None, high: float | None = None) -> str:
    if value is None:
        return "–"
    return f"{value:.1%}" + (f" [{low:.1%}, {high:.1%}]" if low is not None and high is not None else "")


def _accuracy_section(s: RunSummary, figures: Figures) -> str:
    """Graded answers: accuracy per endpoint × region × phase with its interval, why answers were not right, accuracy
    against offered load and its trend, correct goodput beside goodput."""
    names = {p.phase: p.name for p in s.phases}
    shown = [Shown(r, where=("every phase" if r.phase == 0 else names.get(r.phase, str(r.phase))),
                   accuracy_ci=_share(r.accuracy, r.ci_low, r.ci_high), offered=_fmt(r.offered_rps),
                   goodput="" if r.correct_goodput_rps is None else f"{r.correct_goodput_rps:.2f}")
             for r in s.accuracy]
    series = {e: [(r.offered_rps, r.accuracy, r.ci_low, r.ci_high) for r in s.accuracy
                  if r.endpoint == e and r.region == "*" and r.phase > 0 and r.offered_rps is not None
                  and r.accuracy is not None and r.ci_low is not None and r.ci_high is not None]
              for e in sorted({r.endpoint for r in s.accuracy})}
    parts = ["<h2 id='accuracy'>Accuracy under load</h2>", _table(shown, [
        ("endpoint", "endpoint"), ("region", "region"), ("where", "phase"), ("offered", "offered req/s"),
        ("judged", "judged"), ("correct", "right"), ("accuracy_ci", "accuracy [95% CI]"), ("wrong", "wrong"),
        ("unparsable", "unparsable"), ("truncated", "truncated"), ("cut", "cut"), ("error", "error"),
        ("grader_error", "grader error"), ("goodput", "correct goodput req/s")],
        left={"endpoint", "region", "where"})]
    if len([p for v in series.values() for p in v]) > 1:
        parts.append("<div class='plots'>" + (figures.svg("accuracy_vs_load", lambda: (series,)) or "") + "</div>")
    for tr in s.accuracy_trends:
        if tr.verdict == "not tested":
            continue
        parts.append(f"<p><b>{html.escape(tr.endpoint)}</b>: accuracy <b>{tr.verdict}</b> as load rises — "
                     f"{_share(tr.accuracy[0])} at {tr.loads[0]:g} req/s, {_share(tr.accuracy[-1])} at "
                     f"{tr.loads[-1]:g} req/s ({(tr.change or 0) * 100:+.1f} points); "
                     f"{(tr.slope_per_rps or 0) * 100:+.3f} points per req/s "
                     f"[{(tr.slope_ci_low or 0) * 100:+.3f}, {(tr.slope_ci_high or 0) * 100:+.3f}], "
                     f"Cochran–Armitage p = {tr.p_value:.3g}.</p>")
    parts.append("<p class='note'>Graded requests only (prompts.graded). Accuracy = right / judged, judged = right + "
                 "wrong + unparsable: the model's answers. Truncated (not right, stopped at max_tokens), cut (timed "
                 "out, cancelled, its stream cut), errors and grader errors are counted apart, never as the "
                 "model's mistakes. Intervals: exact (Clopper–Pearson). Correct goodput: graded requests per second "
                 "that were right and on time for every SLO that applies, beside goodput (every request on time). "
                 "The trend: a line through each phase's accuracy against its offered load, weighted by what it "
                 "judged, with the Cochran–Armitage test for a trend in proportions (docs/METHODS.md, \"Accuracy "
                 "under load\").</p>")
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
    variants = d.variants
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
