"""`tailrace capacity PROFILE`: the highest Poisson rate at which every latency SLO still PASSES (on a generative
profile, every TTFT / TPOT / ITL / E2E SLO; the answer then says the output tokens/s at that rate too).

Servers the profile asks for ('embedded' / 'triton') are started once and reused by every trial; each trial
is a full run (Locust master + workers, region proxies, clock reference) at one rate, analysed like any
other. Output, in <out>/<capacity-id>/: capacity.json, trials.csv, latency_vs_load.svg, index.html, and
trials/<run-id>/ for each trial's run directory.
"""
from __future__ import annotations

import secrets
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from tailrace.analysis.decide.capacity_search import (
    FAIL,
    GENERATOR_LIMIT,
    LATENCY_METRICS,
    UNDECIDED,
    SearchState,
    beyond_reach,
    classify_trial,
    duration_to_decide_s,
    recommendation,
    retry_duration_s,
    trial_duration_s,
)
from tailrace.analysis.report import plots
from tailrace.contract.exit_codes import USAGE
from tailrace.contract.layout import CapacityLayout, ReportLayout, write_atomic
from tailrace.contract.profile import Profile
from tailrace.contract.summary import CapacityResult, CapacityTrial
from tailrace.harness.orchestration.answer_keys import answer_models
from tailrace.harness.orchestration.disk_space import LowDiskError, low_disk_reason, min_free_bytes
from tailrace.harness.orchestration.endpoint_check import EndpointCheckError
from tailrace.harness.orchestration.live_page import LivePage
from tailrace.harness.orchestration.local_run import LEAD_S, LocalRun
from tailrace.harness.orchestration.run_record import write_manifest
from tailrace.harness.services.processes import sigterm_as_interrupt
from tailrace.harness.services.servers import Servers, start_servers

TRIAL_OVERHEAD_S = LEAD_S + 12  # process start, clock samples, drain, analysis: what a trial costs beyond its load


class CapacityError(ValueError):
    """A profile that cannot drive a capacity search (the message says which field)."""


def check_profile(profile: Profile) -> None:
    if profile.load.scenario != "server":
        raise CapacityError(f"load.scenario: capacity search sends Poisson load (scenario 'server'), "
                            f"not {profile.load.scenario!r}")
    if profile.load.arrivals.process in ("onoff", "trace"):
        raise CapacityError(f"load.arrivals: capacity search varies load.rate; the {profile.load.arrivals.process} "
                            "process sets its own rate (use poisson, gamma or constant)")
    if not any(s.metric in LATENCY_METRICS for s in profile.slos):
        raise CapacityError("slos: capacity search needs at least one latency SLO (metric latency, or ttft / tpot / "
                            "itl / e2e on a generative endpoint; percentile + threshold_ms)")


def _trial_profile(profile: Profile, rate: float, duration_s: float, index: int) -> Profile:
    c = profile.capacity
    load = profile.load.model_copy(update={"rate": rate, "duration_s": duration_s, "warmup_s": c.trial_warmup_s,
                                           "phases": [], "seed": profile.load.seed + index})
    return profile.model_copy(update={"load": load})


class RunInterrupted(KeyboardInterrupt):
    """A run cut short by Ctrl-C or SIGTERM while its load ran: its manifest written (interrupted), its directory
    `run_dir` kept. A KeyboardInterrupt, so that a caller that does not expect it stops too."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(str(run_dir))
        self.run_dir = run_dir


def run_once(profile: Profile, out: Path, servers: Servers | None = None, live: LivePage | None = None) -> Path:
    """One full run of `profile` under `out` (a capacity trial, a sweep's point, shown on `live` if given), its
    manifest written; its run directory. RunInterrupted: Ctrl-C or SIGTERM cut its load short (the run's processes
    stopped, what it measured kept) — the search or sweep that asked for it ends there too."""
    run = LocalRun(profile, out, quiet=True, servers=servers, live=live)
    try:
        run.start()
        run.wait(lambda _r: None)
    finally:
        run.stop()
    layout = run.layout
    if layout is None:  # (start made it, or raised)
        raise RuntimeError("the trial's run directory was never made")
    write_manifest(layout, run.manifest(interrupted=False))
    if run.lifecycle is not None and run.lifecycle.signalled:
        raise RunInterrupted(run.run_dir)
    return run.run_dir


def _trial_row(index: int, rate: float, duration_s: float, run_dir: Path) -> CapacityTrial:
    from tailrace.analysis.analyze import analyze_run
    from tailrace.analysis.analyze_command import write_outputs
    from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS

    a = analyze_run(run_dir, ANALYSIS_COLUMNS)
    write_outputs(a, ReportLayout.of_run(run_dir).dir)
    s = a.summary
    outcome, why = classify_trial(s.slos, s.valid, s.invalid_reasons)
    overall = s.latency_row()
    streamed = s.overall_tokens()
    row: dict = {"trial": index, "rate": rate, "duration_s": duration_s, "achieved_rate": overall.achieved_rate,
                 "count": overall.count, "errors": overall.errors, "mean_ms": overall.mean_ms,
                 "outcome": outcome, "why": why, "run_id": s.run_id,
                 # an undecided trial: how long one at this rate would take to decide (None: none would)
                 "to_decide_s": duration_to_decide_s(s.slos, duration_s) if outcome == UNDECIDED else None}
    for p in ("p50", "p95", "p99"):
        est = overall.percentiles[p]
        row[f"{p}_ms"], row[f"{p}_ci_low"], row[f"{p}_ci_high"] = est.value, est.ci_low, est.ci_high
    row["output_tokens_per_s"] = streamed.output_tokens_per_s if streamed else None
    row["inputs_per_s"] = s.inputs_per_s()
    for metric in ("ttft", "tpot"):
        for p in ("p50", "p99"):
            row[f"{metric}_{p}_ms"] = streamed.metric(metric).at(p).value if streamed else None
    busiest = max((q for q in s.queueing if q.utilization is not None), key=lambda q: q.utilization or 0.0,
                  default=None)
    row["utilization"] = busiest.utilization if busiest else None
    row["mean_service_ms"] = busiest.mean_service_ms if busiest else None
    row["slots"] = busiest.slots if busiest else 1
    return CapacityTrial(**row, **_trial_hardware(s.hardware))


def _trial_hardware(hardware) -> dict:
    """A trial's energy per request (measured, summed over its monitors; else an estimate, apart) and the busiest
    endpoint's measured utilization, from its report's hardware section."""
    if hardware is None:
        return {}
    out = {}
    for key in ("energy_per_request_mj", "estimated_energy_per_request_mj", "energy_per_1k_output_tokens_j"):
        values = [getattr(r, key) for r in hardware.rows if getattr(r, key) is not None]
        out[key] = sum(values) if values else None
    measured = [r.measured_utilization for r in hardware.endpoints if r.measured_utilization is not None]
    out["measured_utilization"] = max(measured) if measured else None
    return out


def _log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, flush=True)


def run_capacity(profile: Profile, out: Path, quiet: bool = False, budget_s: float | None = None
                 ) -> tuple[Path, CapacityResult]:
    """Search, write the outputs; returns (capacity directory, result)."""
    check_profile(profile)
    c = profile.capacity
    budget = budget_s or c.budget_s
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    cap_dir = out / f"{profile.name}-capacity-{stamp}-{secrets.token_hex(2)}"
    layout = CapacityLayout(cap_dir)
    layout.trials.mkdir(parents=True)
    low = low_disk_reason(cap_dir, min_free_bytes())
    if low is not None:  # before any server starts: every trial would be stopped at once
        raise LowDiskError(f"{low}; no load was sent — free some space or choose another --out")
    shares = {r.name: r.share for r in profile.regions}
    weights = {e.name: e.weight for e in profile.endpoints}
    state = SearchState(c.start_rate, c.growth, c.tolerance)
    rows: list[CapacityTrial] = []
    started = time.monotonic()
    budget_spent = False
    servers = None
    if profile.uses_embedded or profile.uses_triton:
        servers = start_servers(profile, layout.logs, lambda m: _log(quiet, m),
                                answer_models(profile, layout.logs, Path.cwd()))
    stopped = False
    try:
        while (rate := state.next_rate()) is not None:
            rate = round(rate, 3)
            duration = trial_duration_s(rate, profile.slos, shares, weights, c.min_trial_s, c.max_trial_s,
                                        c.samples_margin)
            if time.monotonic() - started + duration + c.trial_warmup_s + TRIAL_OVERHEAD_S > budget:
                budget_spent = True
                break
            generator_retried, first_at_rate = False, True
            while True:
                index = len(rows) + 1
                _log(quiet, f"trial {index}: {rate:g} req/s for {duration:.3g} s …")
                run_dir = run_once(_trial_profile(profile, rate, duration, index), layout.trials, servers)
                row = _trial_row(index, rate, duration, run_dir)
                rows.append(row)
                retry = retry_duration_s(row.outcome, duration, c.max_trial_s, generator_retried, row.to_decide_s,
                                         first_at_rate=first_at_rate)
                first_at_rate = False
                if row.outcome == UNDECIDED and retry is None and duration < c.max_trial_s:
                    row.why += beyond_reach(row.to_decide_s, c.max_trial_s)
                if retry is None or (time.monotonic() - started + retry + c.trial_warmup_s + TRIAL_OVERHEAD_S
                                     > budget):
                    break
                if row.outcome == GENERATOR_LIMIT:
                    generator_retried = True
                    _log(quiet, f"trial {index}: {rate:g} req/s → generator-limit ({row.why}); once more "
                                "before the search trusts it")
                duration = retry
            state.record(rate, FAIL if row.outcome == UNDECIDED else row.outcome)
            _log(quiet, f"trial {index}: {rate:g} req/s → {row.outcome} (p99 "
                        f"{row.p99_ms if row.p99_ms is None else round(row.p99_ms, 2)} ms, "
                        f"ρ {row.utilization if row.utilization is None else round(row.utilization, 2)}): {row.why}")
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the trials so far answer; the one cut short is not one of them
        stopped = True
        _log(quiet, f"interrupted: the search stops after {len(rows)} trial(s); its report says what they found")
    finally:
        if servers is not None:
            servers.stop()
    result = summarize(state, rows, profile, budget_spent, time.monotonic() - started, stopped)
    write_capacity_report(cap_dir, result, rows, profile)
    return cap_dir, result


def summarize(state: SearchState, rows: list[CapacityTrial], profile: Profile, budget_spent: bool,
              elapsed_s: float, stopped: bool = False) -> CapacityResult:
    """The search's answer, its bracket, how it ended, and the provisioning recommendation."""
    c = profile.capacity
    lo, hi = state.highest_pass, state.lowest_fail
    if state.generator_limited:
        status = "at-least"
        note = (f"the generators could not sustain a higher rate (saturated or stalled): capacity is at least {lo:g} req/s"
                if lo else "the generators saturated or stalled before any rate passed")
    elif state.converged():
        status = "found"
        above = next((r for r in reversed(rows) if r.rate == hi), None)
        how = ("no trial up to max_trial_s could decide (as near capacity as the search resolves)"
               if above is not None and above.outcome == UNDECIDED else "failed")
        note = f"capacity {lo:g} req/s, within {c.tolerance:.0%} of the next rate, {hi:g}, which {how}"
    elif stopped:
        status = "stopped"
        note = ("interrupted before the bracket closed: " + (f"capacity between {lo:g} and {hi:g} req/s" if lo and hi
                else f"every rate so far passed: capacity is at least {lo:g} req/s" if lo
                else f"no rate so far passed (the lowest that failed: {hi:g} req/s)" if hi else "no trial finished"))
    elif lo is None:
        status = "none"
        note = "no tried rate passed every latency SLO"
    else:
        status = "budget"
        note = (f"time budget spent before the bracket closed: capacity between {lo:g} and {hi:g} req/s" if hi
                else f"time budget spent while every rate passed: capacity is at least {lo:g} req/s")
    best = next((r for r in reversed(rows) if r.rate == lo), None)
    tokens_per_s = best.output_tokens_per_s if best is not None else None
    if tokens_per_s is not None:
        note += f" ({tokens_per_s:,.0f} output tokens/s at that rate)"
    inputs_per_s = best.inputs_per_s if best is not None else None
    if inputs_per_s is not None:
        note += f" ({inputs_per_s:,.1f} texts or documents/s at that rate)"
    if best is not None and best.energy_per_request_mj is not None:
        note += f" ({best.energy_per_request_mj:,.3g} mJ per request at that rate)"
    elif best is not None and best.estimated_energy_per_request_mj is not None:
        note += f" (≈ {best.estimated_energy_per_request_mj:,.3g} mJ per request at that rate, an estimate)"
    advice = recommendation(lo, best.mean_service_ms, best.slots, best.mean_ms, c.headroom, c.max_utilization,
                            c.peak_rate) if lo and best else None
    return CapacityResult(profile=profile.name, status=status, note=note, capacity_rps=lo, bracket=[lo, hi],
                          tolerance=c.tolerance, trials=len(rows), elapsed_s=elapsed_s,
                          slos=[s for s in profile.slos if s.metric in LATENCY_METRICS],
                          capacity_output_tokens_per_s=tokens_per_s, capacity_inputs_per_s=inputs_per_s,
                          capacity_energy_per_request_mj=best.energy_per_request_mj if best else None,
                          capacity_estimated_energy_per_request_mj=best.estimated_energy_per_request_mj if best
                          else None,
                          recommendation=advice,
                          exit_code={"found": 0, "at-least": 4, "budget": 3, "stopped": 3, "none": 1}[status], trial_rows=rows)


def write_capacity_report(cap_dir: Path, result: CapacityResult, rows: list[CapacityTrial], profile: Profile) -> None:
    """capacity.json, trials.csv, latency_vs_load.svg and index.html of one capacity search."""
    import html

    layout = CapacityLayout(cap_dir)
    write_atomic(layout.result, result.model_dump_json(indent=2, exclude_none=False))
    trials = [r.model_dump(mode="json", exclude_unset=True) for r in rows]
    write_atomic(layout.trials_table, pd.DataFrame(trials).to_csv(index=False))
    svg = plots.latency_vs_load_svg(rows, result) if rows else ""
    write_atomic(layout.figure, svg)
    streamed = any(r.output_tokens_per_s is not None for r in rows)
    cols = ["trial", "rate", "duration_s", "achieved_rate", "count", "errors", "p50_ms", "p95_ms", "p99_ms",
            "p99_ci_low", "p99_ci_high", "utilization", "outcome", "why"]
    for key in ("measured_utilization", "energy_per_request_mj", "estimated_energy_per_request_mj"):
        if any(getattr(r, key) is not None for r in rows):  # what [[monitors]] measured, before the outcome
            cols.insert(cols.index("outcome"), key)
    if streamed:  # a generative profile: its tokens/s and token latencies beside the E2E ones
        cols[6:6] = ["output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms"]
    table = pd.DataFrame(trials, columns=cols).to_html(index=False, float_format=lambda v: f"{v:.2f}", na_rep="–",
                                                     classes="trials", border=0)
    rec = result.recommendation.model_dump(mode="json", exclude_unset=True) if result.recommendation else {}
    rec_rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(round(v, 3) if isinstance(v, float) else v))}"
                       f"</td></tr>" for k, v in rec.items())
    page = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>capacity {html.escape(profile.name)}"
            f"</title><style>body{{font-family:sans-serif;margin:2em;font-size:14px}}"
            f"td,th{{padding:2px 8px;text-align:right;white-space:nowrap}}table{{border-collapse:collapse}}"
            f"td:last-child{{text-align:left;white-space:normal;min-width:20em}}"
            f"</style></head><body><h1>Capacity search — {html.escape(profile.name)}</h1>"
            f"<p id='answer'><b>{html.escape(result.status)}</b>: {html.escape(result.note)}</p>"
            f"<h2>Latency vs offered load</h2>{svg}<h2>Trials</h2>{table}"
            f"<h2>Recommendation</h2><table>{rec_rows}</table>"
            f"<p>Planned rate per instance = min(capacity / headroom, max_utilization × slots / S); by Little's law "
            f"L = λ·W requests are in flight at that rate (size pools and queues for it).</p></body></html>")
    write_atomic(layout.page, page)


def print_result(result: CapacityResult, cap_dir: Path) -> None:
    from rich.table import Table

    from tailrace.contract.terminal import console as terminal_console

    console = terminal_console()
    rows = result.trial_rows
    streamed = any(r.output_tokens_per_s is not None for r in rows)
    t = Table(title="capacity trials")
    energy = any(r.energy_per_request_mj is not None or r.estimated_energy_per_request_mj is not None for r in rows)
    for col in ("rate", "s", "achieved", *(("tokens/s", "TTFT p99", "TPOT p99") if streamed else ()), "p50", "p95",
                "p99 [95% CI]", "ρ", *(("mJ / request",) if energy else ()), "outcome"):
        t.add_column(col, justify="right")
    def f(v: float | None) -> str:
        return "–" if v is None or v != v else f"{v:.2f}"

    for r in rows:
        tokens = (f(r.output_tokens_per_s), f(r.ttft_p99_ms), f(r.tpot_p99_ms)) if streamed else ()
        t.add_row(f"{r.rate:g}", f"{r.duration_s:.3g}", f(r.achieved_rate), *tokens, f(r.p50_ms), f(r.p95_ms),
                  f"{f(r.p99_ms)} [{f(r.p99_ci_low)}, {f(r.p99_ci_high)}]", f(r.utilization),
                  *((f(r.energy_per_request_mj) if r.energy_per_request_mj is not None else
                     "≈ " + f(r.estimated_energy_per_request_mj),) if energy else ()), r.outcome)
    console.print(t)
    colour = {"found": "green", "at-least": "magenta", "budget": "yellow", "stopped": "yellow", "none": "red"}[
        result.status]
    console.print(f"[bold {colour}]{result.status}[/]: {result.note}")
    rec = result.recommendation
    if rec:
        console.print(f"plan ≤ {rec.planned_rate_per_instance:.1f} req/s per instance (limited by "
                      f"{rec.limited_by}; headroom ×{rec.headroom:g}, ρ ≤ {rec.max_utilization:g})"
                      + (f"; peak {rec.peak_rate:g}/s needs {rec.instances_for_peak} instance(s)"
                         if rec.peak_rate else ""))
    console.print(f"capacity report: {CapacityLayout(cap_dir).page}")


def capacity_command(profile: Profile, out: Path, quiet: bool, budget_s: float | None) -> int:
    """CLI entry: 0 found, 3 budget spent or interrupted before the bracket closed, 4 generator-limited (at least), 1
    none, 2 usage."""
    import sys

    try:
        min_free_bytes()  # a malformed $TAILRACE_MIN_FREE_MB: one line, before anything starts
    except ValueError as exc:
        print(f"tailrace capacity: {exc}", file=sys.stderr)
        return USAGE
    try:
        with sigterm_as_interrupt():  # a `kill PID` stops the search as Ctrl-C does: its report from what finished
            cap_dir, result = run_capacity(profile, out, quiet, budget_s)
    except (CapacityError, EndpointCheckError, LowDiskError) as exc:
        print(f"tailrace capacity: {exc}", file=sys.stderr)
        return USAGE
    print_result(result, cap_dir)
    return result.exit_code

