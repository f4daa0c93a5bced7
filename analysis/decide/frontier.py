"""A sweep's answers from its points (pure): what each point measured, each SLO tier's outcome there, the highest
load each tier holds per configuration (with the next load to try at its edge), the knee of each configuration's
latency curve, and the throughput–interactivity frontier with its Pareto-optimal points.

- A tier passes at a point by capacity search's rules (analysis/decide/capacity_search.py `classify_trial`): every
  latency SLO of the tier PASSes; INCONCLUSIVE is not a pass; a backlog (latency still rising at the run's end)
  fails; a saturated generator is the generator's limit, not the server's.
- Tokens/s per user is 1000 / TPOT p50 (ms), its interval the TPOT interval's reciprocal; the server's output
  tokens/s is what it emitted while the load lasted (each token at its own instant), with the interval of its
  completed requests' count (Garwood's Poisson interval: the arrivals are random). A server that emitted much less
  than its streams asked for fell behind: that point did not hold its load.
- The knee: a monotone (isotonic) fit of the p99 against load, and the load where the fit rises fastest per unit of
  load — where queueing takes over."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

import numpy as np
import pandas as pd
from scipy import stats
from scipy.optimize import isotonic_regression

from tailrace.analysis.decide.capacity_search import FAIL, GENERATOR_LIMIT, PASS, UNDECIDED, classify_trial
from tailrace.analysis.read.frames import strings
from tailrace.analysis.stats.estimators import clopper_pearson
from tailrace.analysis.stats.outcomes.accuracy import trend
from tailrace.analysis.stats.timeline import TokenTimeline
from tailrace.analysis.stats.tokens import good_streams
from tailrace.contract.summary import Estimate, RunSummary
from tailrace.contract.summary.accuracy import AccuracyTrend
from tailrace.contract.summary.sweep import FrontierPoint, Knee, SweepPoint, TierEdge

PERCENTILES = ("p50", "p90", "p99")


def _estimates(metric) -> dict[str, Estimate]:
    return {p: metric.at(p) for p in PERCENTILES}


def count_interval(value: float, n: int, alpha: float = 0.05) -> Estimate:
    """`value` (a rate ∝ n events) with the Garwood interval of the Poisson count n it rests on."""
    if n <= 0:
        return Estimate(value=value, ci_low=None, ci_high=None, n=n)
    low = stats.chi2.ppf(alpha / 2, 2 * n) / 2 / n
    high = stats.chi2.ppf(1 - alpha / 2, 2 * n + 2) / 2 / n
    return Estimate(value=value, ci_low=value * low, ci_high=value * high, n=n)


def per_user(tpot: Estimate) -> Estimate | None:
    """Tokens/s per user from TPOT p50 (ms): 1000 / TPOT, the interval's ends swapped and inverted."""
    if not tpot.value:
        return None
    return Estimate(value=1000 / tpot.value, ci_low=1000 / tpot.ci_high if tpot.ci_high else None,
                    ci_high=1000 / tpot.ci_low if tpot.ci_low else None, n=tpot.n)


def tier_outcomes(summary: RunSummary, tier_slos: Mapping[str, Sequence[int]]) -> dict[str, tuple[str, str]]:
    """Each tier's (outcome, why) at one point: its SLOs' verdicts (by their index in the point's profile) judged by
    capacity search's rules."""
    out = {}
    for tier, indices in tier_slos.items():
        mine = [v for v in summary.slos if v.slo in set(indices)]
        out[tier] = classify_trial(mine, summary.valid, summary.invalid_reasons)
    return out


GOODPUT_COLUMNS = ("endpoint", "region", "phase", "status", "latency_ns", "ttft_ns", "t_first_token", "t_last_token",
                   "output_tokens", "token_event_us", "token_event_counts")


def tier_goodput(df: pd.DataFrame, tier_slos: Mapping[str, Sequence[dict]], duration_s: float,
                 streamed: set[str]) -> dict[str, float]:
    """Each tier's goodput at one point: the measured requests per second that succeeded within every one of the
    tier's SLOs that applies to them — a stream's by its own TTFT, TPOT, ITL and E2E (analysis/stats/tokens.py's
    good_streams), a one-shot request's by its latency (from the intended send)."""
    out = {}
    measured = df["phase"].to_numpy() > 0
    ok = strings(df["status"]) == "ok"
    endpoint, region = strings(df["endpoint"]), strings(df["region"])
    one_shot = measured & ~np.isin(endpoint, list(streamed))
    for tier, slos in tier_slos.items():
        rows, good = good_streams(df, list(slos), streamed)
        plain = one_shot & ok
        for slo in slos:
            if slo["metric"] != "latency":
                continue
            applies = ((endpoint == slo["endpoint"]) | (slo["endpoint"] == "*")) & (
                (region == slo["region"]) | (slo["region"] == "*"))
            plain &= ~applies | (df["latency_ns"].to_numpy() <= slo["threshold_ms"] * 1e6)
        out[tier] = float((good.sum() + plain.sum()) / duration_s) if duration_s > 0 else 0.0
    return out


KEPT_UP = 0.85  # tokens emitted during the load ≥ this share of the measured streams' tokens a second: held


def held_tokens_per_s(timeline: TokenTimeline | None, duration_s: float) -> float | None:
    """The output tokens/s the server emitted while the load lasted (the token timeline's seconds 1 … duration:
    the first second also carries the warm-up's streams, which the timeline leaves out); None without streams or
    without two seconds of load."""
    seconds = int(duration_s)
    if timeline is None or seconds < 2:
        return None
    emitted = sum(float(np.sum(per_second[1:seconds])) for per_second in timeline.tokens_per_s.values())
    return emitted / (seconds - 1)


def measured(summary: RunSummary, held: float | None = None) -> dict:
    """A point's measurements from its run's summary (SweepPoint's fields). `held`: the tokens/s emitted while the
    load lasted (held_tokens_per_s): the server's throughput where it is known; a server that emitted less than
    KEPT_UP of what its streams asked for fell behind (a backlog, as a latency still rising at the end says)."""
    row = summary.latency_row()
    tokens = summary.overall_tokens()
    asked = tokens.output_tokens_per_s if tokens is not None else None
    fell_behind = held is not None and asked is not None and held < KEPT_UP * asked
    fields: dict = {"verdict": summary.verdict, "backlog": any(v.backlog for v in summary.slos) or fell_behind,
                    "achieved_rate": row.achieved_rate, "requests": row.count,
                    "errors": row.errors, "latency_ms": {p: row.percentiles[p] for p in PERCENTILES
                                                         if p in row.percentiles}}
    if tokens is not None:
        fields |= {"ttft_ms": _estimates(tokens.ttft_ms), "tpot_ms": _estimates(tokens.tpot_ms),
                   "itl_ms": _estimates(tokens.itl_ms),
                   "output_tokens_per_s": count_interval(held if held is not None else tokens.output_tokens_per_s,
                                                         tokens.ok),
                   "tokens_per_s_per_user": per_user(tokens.tpot_ms.at("p50"))}
    whole = [r for r in summary.accuracy if r.region == "*" and r.phase == 0]
    if whole:
        judged, right = sum(r.judged for r in whole), sum(r.correct for r in whole)
        low, high = clopper_pearson(right, judged) if judged else (None, None)
        fields |= {"graded_judged": judged, "graded_correct": right, "accuracy": right / judged if judged else None,
                   "accuracy_ci_low": low, "accuracy_ci_high": high,
                   "correct_goodput_rps": sum(r.correct_goodput_rps or 0.0 for r in whole)}
    if summary.hardware is not None:
        energy = [r.energy_per_1k_output_tokens_j for r in summary.hardware.rows
                  if r.energy_per_1k_output_tokens_j is not None]
        fields["energy_per_1k_tokens_j"] = sum(energy) if energy else None
        gpus: dict[str, int] = {}  # per monitor, the most it spoke of in a phase
        for r in summary.hardware.rows:
            if r.gpus:
                gpus[r.monitor] = max(gpus.get(r.monitor, 0), r.gpus)
        fields["gpus"] = sum(gpus.values()) or None
    return fields


def tier_edges(points: Sequence[SweepPoint], tiers: Sequence[str], tolerance: float) -> list[TierEdge]:
    """Per configuration × tier: the highest load that passed (every repeat) with no failure at or below it, and the
    lowest load above it that did not pass (undecided counts there: the edge's bracket is as far as the sweep could
    tell). A load that could not be decided (too few requests for a percentile: a low load's short run) is no
    failure: it does not void the passes above it; the note names it."""
    out = []
    by_config: dict[str, list[SweepPoint]] = defaultdict(list)
    for p in points:
        if p.status == "done" and p.load is not None:
            by_config[p.config].append(p)
    for config, mine in sorted(by_config.items()):
        for tier in tiers:
            outcomes: dict[float, set[str | None]] = defaultdict(set)
            for p in mine:
                outcomes[p.load].add(p.tiers.get(tier))  # type: ignore[index]
            passes = sorted(load for load, seen in outcomes.items() if seen == {PASS})
            fails = sorted(load for load, seen in outcomes.items() if FAIL in seen)
            open_ = sorted(load for load, seen in outcomes.items() if load not in passes and load not in fails)
            lo = max((x for x in passes if not any(f <= x for f in fails)), default=None)
            hi = (min((x for x in (*fails, *open_) if x > lo), default=None) if lo is not None
                  else min(fails, default=None))
            within = lo is not None and hi is not None and (hi - lo) <= tolerance * hi
            limited = {load for load, seen in outcomes.items() if GENERATOR_LIMIT in seen}
            out.append(TierEdge(config=config, tier=tier, highest_pass=lo, lowest_fail=hi, within_tolerance=within,
                                note=_edge_note(lo, hi, hi in fails, [x for x in open_ if lo is None or x < lo],
                                                limited)))
    return out


def _edge_note(lo: float | None, hi: float | None, failed: bool, undecided: list[float],
               limited: AbstractSet[float] = frozenset()) -> str:
    """An edge in words: what held, the load above it that did not (`failed`: it failed, else it could not be
    decided, or the generator fell behind there: `limited`), and the other loads that could not be decided (below
    the edge, or every one where none passed)."""
    note = "no load passed" if lo is None else f"holds up to {lo:g}"
    if hi is not None:
        note += f", fails at {hi:g}" if failed else (
            f", the generator fell behind at {hi:g}" if hi in limited else f", undecided at {hi:g}")
    elif lo is not None:
        note += ", the highest load tried"
    behind = [x for x in undecided if x in limited]
    if undecided := [x for x in undecided if x not in limited]:
        note += f"; undecided at {', '.join(f'{x:g}' for x in undecided)} (too few requests to decide)"
    if behind:
        note += (f"; the generator fell behind at {', '.join(f'{x:g}' for x in behind)} (its load not sent as asked: "
                 "not the server's answer)")
    return note


def next_loads(edges: Sequence[TierEdge], tried: dict[str, set[float]]) -> list[tuple[str, float]]:
    """(configuration, load) to try next: the middle of each open bracket not yet tried (one per configuration)."""
    out: dict[str, float] = {}
    for e in edges:
        if e.within_tolerance or e.highest_pass is None or e.lowest_fail is None or e.config in out:
            continue
        middle = round((e.highest_pass + e.lowest_fail) / 2, 3)
        if middle not in tried.get(e.config, set()):
            out[e.config] = middle
    return sorted(out.items())


KNEE_PERCENTILES = ("p99", "p90", "p50")  # the first one a configuration has at three loads or more is fitted


def knees(points: Sequence[SweepPoint]) -> list[Knee]:
    """Per configuration with three loads or more: the load where its monotone-fitted p99 rises fastest — or its
    p90, or its p50, where short points have too few requests for a p99 (the summary gives no p99 below 368)."""
    out = []
    streams = any(p.ttft_ms for p in points)
    for config in sorted({p.config for p in points}):
        for q in KNEE_PERCENTILES:
            by_load: dict[float, list[float]] = defaultdict(list)
            for p in points:
                est = (p.ttft_ms if streams else p.latency_ms).get(q)
                if p.config == config and p.status == "done" and p.load is not None and est is not None \
                        and est.value is not None:
                    by_load[p.load].append(est.value)
            if len(by_load) >= 3:
                break
        loads = np.array(sorted(by_load))
        if len(loads) < 3:
            continue
        values = np.array([np.mean(by_load[x]) for x in loads])
        fit = isotonic_regression(values, increasing=True).x
        slopes = np.diff(fit) / np.diff(loads)
        i = int(np.argmax(slopes))
        out.append(Knee(config=config, metric=f"ttft {q}" if streams else f"latency {q}", load=float(loads[i]),
                        slope_ms_per_unit=float(slopes[i])))
    return out


def frontier(points: Sequence[SweepPoint]) -> list[FrontierPoint]:
    """Every streamed point on the throughput–interactivity plane, the Pareto-optimal ones (no other point has more
    tokens/s for the server — per GPU where every point's monitors counted its GPUs — and for each user) marked. A
    point whose server fell behind (a backlog: latency still rising at its end) is no operating point — its tokens/s
    counts the drain after the load — and is left out, as is one whose generator fell behind (its load not the one
    asked for)."""
    rows = [(p, p.output_tokens_per_s, p.tokens_per_s_per_user) for p in points if p.status == "done"
            and not p.backlog and not p.generator_limit]
    placed = [(p, server, user, user.value, server.value) for p, server, user in rows
              if server is not None and user is not None and server.value is not None and user.value is not None]
    if placed and all(p.gpus for p, *_ in placed):  # every point's GPUs counted: the frontier per GPU
        placed = [(p, server, user, x, y / (p.gpus or 1)) for p, server, user, x, y in placed]
    out = []
    for p, server, user, x, y in placed:
        dominated = any(qx >= x and qy >= y and (qx > x or qy > y) for q, _, _, qx, qy in placed if q is not p)
        per_gpu = _scaled(server, 1 / p.gpus) if p.gpus else None
        out.append(FrontierPoint(index=p.index, config=p.config, load=p.load, tokens_per_s=server,
                                 tokens_per_s_per_user=user, tokens_per_s_per_gpu=per_gpu, gpus=p.gpus,
                                 energy_per_1k_tokens_j=p.energy_per_1k_tokens_j, pareto=not dominated))
    return out


def _scaled(e: Estimate, factor: float) -> Estimate:
    """An estimate and its interval times a constant (a count of GPUs is exact)."""
    def times(v: float | None) -> float | None:
        return v * factor if v is not None else None
    return Estimate(value=times(e.value), ci_low=times(e.ci_low), ci_high=times(e.ci_high))


def recommendation(edges: Sequence[TierEdge], tiers: Sequence[str], load_unit: str) -> list[str]:
    """Per tier: the configuration that holds the most load, by what margin over the next, and whether the two
    brackets overlap (then the edge between them is not significant at the sweep's resolution)."""
    out = []
    for tier in tiers:
        ranked = sorted((e for e in edges if e.tier == tier and e.highest_pass is not None),
                        key=lambda e: -(e.highest_pass or 0.0))
        if not ranked:
            decided = any(e.tier == tier and e.lowest_fail is not None for e in edges)
            out.append(f"{tier}: no configuration held any load tried" if decided else
                       f"{tier}: no load could be decided (too few requests at each: a longer load.duration_s)")
            continue
        best = ranked[0]
        line = f"{tier}: {best.config or 'the configuration'} holds {best.highest_pass:g} {load_unit}"
        if best.lowest_fail is not None:
            line += f" (fails at {best.lowest_fail:g})"
        if len(ranked) > 1:
            second = ranked[1]
            margin = (best.highest_pass or 0) / (second.highest_pass or 1) - 1
            overlap = second.lowest_fail is None or (best.highest_pass or 0) < (second.lowest_fail or 0)
            line += (f"; {second.config} holds {second.highest_pass:g}" + (
                " — their brackets overlap: the edge between them is not significant at this resolution"
                if overlap else f" — the first holds {margin:.0%} more, beyond the second's bracket"))
        out.append(line)
    return out


__all__ = ["FAIL", "PASS", "UNDECIDED", "count_interval", "frontier", "knees", "measured", "next_loads",
           "per_user", "recommendation", "tier_edges", "tier_outcomes"]


def accuracy_trends(points: Sequence[SweepPoint]) -> list[AccuracyTrend]:
    """Per configuration whose points graded answers at two or more loads: accuracy against load (the points'
    answers pooled at each load, repeats together) with its trend (analysis/stats/outcomes/accuracy.py)."""
    out = []
    by_config: dict[str, dict[float, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for p in points:
        if p.status == "done" and p.load is not None and p.graded_judged:
            pooled = by_config[p.config][p.load]
            pooled[0] += p.graded_correct
            pooled[1] += p.graded_judged
    for config, at in sorted(by_config.items()):
        loads = sorted(at)
        right, judged = [at[x][0] for x in loads], [at[x][1] for x in loads]
        out.append(AccuracyTrend(endpoint=config, loads=loads, judged=judged,
                                 accuracy=[k / n for k, n in zip(right, judged)], **trend(loads, right, judged)))
    return out
