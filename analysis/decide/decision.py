"""Model-variant decisions (pure): which variant to ship, given latency, accuracy, memory, capacity and energy.

Each variant is one endpoint (fp32 / int8, logreg / MLP, embedded / Triton). The decision:
  1. hard constraints from the profile (p95 ≤, accuracy ≥, memory ≤, capacity ≥, energy per request ≤) remove
     variants;
  2. the survivors are ranked by a composite score: each metric min-max normalised across all variants
     (1 = best, direction-aware), weighted by the profile's weights;
  3. Pareto frontiers (p95 latency vs accuracy, memory vs capacity, p95 vs energy per request; generative: TTFT p95
     vs output tokens/s) mark
     dominated variants;
  4. the ranking's differences are tested pairwise: latency (and TTFT, TPOT) by Mann–Whitney U and Cohen's d; accuracy by
     McNemar's exact test on the held-out samples both variants answered (a model's answer to a sample is
     deterministic, so repeated sends of one sample are not independent trials), or Fisher's exact test
     on counts when per-sample answers are unknown — a ranking that rests on insignificant differences
     says so.
"""
from __future__ import annotations

import numpy as np
from scipy import stats as sps

from tailrace.analysis.stats.estimators import cohens_d
from tailrace.contract.summary.sections import Decision, PairwiseTest, VariantRow

# metric → True when higher is better
DIRECTIONS = {"p95_ms": False, "accuracy": True, "memory_mb": False, "capacity_rps": True,
              "ttft_p95_ms": False, "tpot_p95_ms": False, "output_tokens_per_s": True, "energy_mj": False}
CONSTRAINTS = {"p95_ms_max": ("p95_ms", "≤"), "accuracy_min": ("accuracy", "≥"), "memory_mb_max": ("memory_mb", "≤"),
               "capacity_rps_min": ("capacity_rps", "≥"), "ttft_p95_ms_max": ("ttft_p95_ms", "≤"),
               "tpot_p95_ms_max": ("tpot_p95_ms", "≤"), "output_tokens_per_s_min": ("output_tokens_per_s", "≥"),
               "energy_budget_mj": ("energy_mj", "≤")}
# when the profile sets no weights: what a model variant is chosen on, and what an LLM endpoint is
DEFAULT_WEIGHTS = {"p95_ms": 1.0, "accuracy": 1.0, "memory_mb": 0.5, "capacity_rps": 0.5, "energy_mj": 0.5}
GENERATIVE_WEIGHTS = {"ttft_p95_ms": 1.0, "tpot_p95_ms": 1.0, "output_tokens_per_s": 0.5, "capacity_rps": 0.5,
                      "memory_mb": 0.25, "energy_mj": 0.5}
ALPHA = 0.05


def metric(row: VariantRow, key: str) -> float | None:
    """A variant's value of a metric DIRECTIONS names."""
    value = getattr(row, key)
    return None if value is None else float(value)


def dominates(a: VariantRow, b: VariantRow, objectives: list[tuple[str, bool]]) -> bool:
    """a is at least as good as b on every objective and strictly better on one (None never dominates)."""
    better = False
    for key, higher in objectives:
        va, vb = metric(a, key), metric(b, key)
        if va is None or vb is None:
            return False
        if (va < vb) if higher else (va > vb):
            return False
        if va != vb:
            better = True
    return better


def pareto(rows: list[VariantRow], objectives: list[tuple[str, bool]]) -> dict[str, list[str]]:
    """Variant name → the variants that dominate it ([] = on the frontier)."""
    return {r.name: [o.name for o in rows if o is not r and dominates(o, r, objectives)] for r in rows}


def normalised(rows: list[VariantRow], key: str) -> dict[str, float | None]:
    """Min-max scale of `key` across variants, 1 = best; all equal → 1."""
    values = [v for r in rows if (v := metric(r, key)) is not None]
    if not values:
        return {r.name: None for r in rows}
    lo, hi = min(values), max(values)
    out: dict[str, float | None] = {}
    for r in rows:
        v = metric(r, key)
        if v is None:
            out[r.name] = None
        elif hi == lo:
            out[r.name] = 1.0
        else:
            frac = (v - lo) / (hi - lo)
            out[r.name] = frac if DIRECTIONS[key] else 1 - frac
    return out


def composite_scores(rows: list[VariantRow], weights: dict[str, float]) -> dict[str, float]:
    """Weighted mean of the normalised metrics (metrics a variant lacks are left out of its mean)."""
    scaled = {k: normalised(rows, k) for k in weights if k in DIRECTIONS}
    scores = {}
    for r in rows:
        num = den = 0.0
        for key, w in weights.items():
            v = scaled.get(key, {}).get(r.name)
            if v is not None and w > 0:
                num += w * v
                den += w
        scores[r.name] = num / den if den else 0.0
    return scores


BASES = ("measured", "estimate: process CPU", "estimate: model CPU")  # the first present is the one ranked


def comparable_energy(rows: list[VariantRow]) -> list[str]:
    """Variants' energy is ranked on one basis only — measured joules where any variant has them, else the same
    kind of estimate: the others' energy_mj moves to estimated_energy_mj (not ranked) and a line says so. An
    estimate is never set against joules measured. Mutates `rows`."""
    bases = {r.energy_basis for r in rows if r.energy_mj is not None}
    if len(bases) < 2:
        return []
    ranked = next(b for b in BASES if b in bases)
    for r in rows:
        if r.energy_mj is not None and r.energy_basis != ranked:
            r.estimated_energy_mj, r.energy_mj = r.energy_mj, None
    return [f"energy per request is {ranked} for some variants and not for others: it is ranked on those "
            f"({', '.join(r.name for r in rows if r.energy_mj is not None)}) only"]


def constraint_failures(row: VariantRow, constraints: dict[str, float | None]) -> list[str]:
    """Why a variant violates the hard constraints ([] = it survives); a missing metric is a failure."""
    out = []
    for name, bound in constraints.items():
        if bound is None:
            continue
        key, op = CONSTRAINTS[name]
        v = metric(row, key)
        if v is None:
            out.append(f"{key} unknown (constraint {op} {bound:g})")
        elif (op == "≤" and v > bound) or (op == "≥" and v < bound):
            out.append(f"{key} {v:.4g} violates {op} {bound:g}")
    return out


def mcnemar(a_correct: dict[int, bool], b_correct: dict[int, bool]) -> tuple[float, float, int] | None:
    """(accuracy a − accuracy b, exact McNemar p-value, samples) over the samples both answered."""
    common = sorted(set(a_correct) & set(b_correct))
    if not common:
        return None
    a_only = sum(1 for i in common if a_correct[i] and not b_correct[i])
    b_only = sum(1 for i in common if b_correct[i] and not a_correct[i])
    p = 1.0 if a_only + b_only == 0 else float(sps.binomtest(a_only, a_only + b_only, 0.5).pvalue)
    return (a_only - b_only) / len(common), p, len(common)


def _latency_test(la: np.ndarray, lb: np.ndarray) -> tuple[float | None, float | None, float | None]:
    """(p95 a − p95 b, Mann–Whitney p, Cohen's d) of two samples (None without two values each)."""
    if len(la) < 2 or len(lb) < 2:
        return None, None, None
    return (float(np.percentile(la, 95) - np.percentile(lb, 95)),
            float(sps.mannwhitneyu(la, lb, alternative="two-sided").pvalue),
            float(cohens_d(lb, la)))  # (mean a − mean b) / pooled sd, like Δp95 = a − b


def pairwise(a: VariantRow, b: VariantRow, latencies: dict[str, np.ndarray],
             correctness: dict[str, dict[int, bool]] | None = None,
             token_latencies: dict[str, dict[str, np.ndarray]] | None = None) -> PairwiseTest:
    """Significance of the differences between variants a and b (latency and accuracy; for generative variants
    also TTFT and TPOT, from `token_latencies`: name → {"ttft": ms, "tpot": ms})."""
    la, lb = latencies.get(a.name, np.array([])), latencies.get(b.name, np.array([]))
    diff, p, d = _latency_test(la, lb)
    out = PairwiseTest(a=a.name, b=b.name, p95_diff_ms=diff, mann_whitney_p=p, cohens_d=d, accuracy_diff=None,
                       accuracy_p=None, accuracy_test=None)
    for kind in ("ttft", "tpot"):
        ta, tb = ((token_latencies or {}).get(n, {}).get(kind, np.array([])) for n in (a.name, b.name))
        if len(ta) and len(tb):
            diff, p, _ = _latency_test(ta, tb)
            setattr(out, f"{kind}_p95_diff_ms", diff)
            setattr(out, f"{kind}_mann_whitney_p", p)
            setattr(out, f"{kind}_significant", p is not None and p < ALPHA)
    paired = mcnemar(correctness[a.name], correctness[b.name]) \
        if correctness and a.name in correctness and b.name in correctness else None
    if paired is not None:
        out.accuracy_diff, out.accuracy_p, n = paired
        out.accuracy_test = f"McNemar, {n} distinct samples"
    elif a.samples and b.samples and a.correct is not None and b.correct is not None:
        table = [[a.correct, a.samples - a.correct], [b.correct, b.samples - b.correct]]
        out.accuracy_diff = a.correct / a.samples - b.correct / b.samples
        out.accuracy_p = float(sps.fisher_exact(table).pvalue)
        out.accuracy_test = "Fisher (counts)"
    out.latency_significant = out.mann_whitney_p is not None and out.mann_whitney_p < ALPHA
    out.accuracy_significant = out.accuracy_p is not None and out.accuracy_p < ALPHA
    return out


def _token_edge(test: PairwiseTest, kind: str) -> tuple[float | None, float | None, bool]:
    """(p95 difference, Mann–Whitney p, significant) of TTFT or TPOT between the two variants of `test`."""
    return (getattr(test, f"{kind}_p95_diff_ms"), getattr(test, f"{kind}_mann_whitney_p"),
            getattr(test, f"{kind}_significant"))


def ranking_caveat(top: str, second: str, test: PairwiseTest) -> str | None:
    """A warning when `top` is better than `second` on neither latency nor accuracy by a significant margin."""
    faster = test.p95_diff_ms is not None and test.p95_diff_ms < 0
    more_accurate = test.accuracy_diff is not None and test.accuracy_diff > 0
    token_edges = {kind: edge for kind in ("ttft", "tpot") if ((edge := _token_edge(test, kind))[0] or 0) < 0}
    if (faster and test.latency_significant) or (more_accurate and test.accuracy_significant) or any(
            significant for _, _, significant in token_edges.values()):
        return None
    edges = [f"lower {kind.upper()} p95 by {-(diff or 0):.3g} ms (Mann–Whitney p = {_p(p)})"
             for kind, (diff, p, _) in token_edges.items()]
    if faster:
        edges.append(f"lower p95 by {-(test.p95_diff_ms or 0):.3g} ms (Mann–Whitney p = {_p(test.mann_whitney_p)})")
    if more_accurate:
        edges.append(f"higher accuracy by {test.accuracy_diff:.3%} ({test.accuracy_test} p = "
                     f"{_p(test.accuracy_p)})")
    rest = "; ".join(edges) if edges else "neither lower latency nor higher accuracy"
    return (f"{top} ranks above {second} on {rest} — not significant at α = {ALPHA}: the ranking rests on "
            "memory / capacity, on the weights, or on noise")


def decide(rows: list[VariantRow], latencies: dict[str, np.ndarray], weights: dict[str, float],
           constraints: dict[str, float | None], correctness: dict[str, dict[int, bool]] | None = None,
           token_latencies: dict[str, dict[str, np.ndarray]] | None = None) -> Decision:
    """The decision table: constraints, score, rank, Pareto status, and the pairwise tests behind the ranking."""
    caveats = comparable_energy(rows)
    scores = composite_scores(rows, weights)
    front_latency = pareto(rows, [("p95_ms", False), ("accuracy", True)])
    front_memory = pareto(rows, [("memory_mb", False), ("capacity_rps", True)])
    front_tokens = pareto(rows, [("ttft_p95_ms", False), ("output_tokens_per_s", True)])
    front_energy = pareto(rows, [("p95_ms", False), ("energy_mj", False)])
    table = []
    for r in rows:
        fails = constraint_failures(r, constraints)
        table.append(r.model_copy(update={
            "score": scores[r.name], "constraint_failures": fails, "survives": not fails,
            "dominated_latency_accuracy_by": front_latency[r.name], "dominated_memory_capacity_by": front_memory[r.name],
            "dominated_ttft_throughput_by": front_tokens[r.name], "dominated_latency_energy_by": front_energy[r.name],
            "rank": None}))
    survivors = sorted((t for t in table if t.survives), key=lambda t: -(t.score or 0.0))
    for i, t in enumerate(survivors, start=1):
        t.rank = i
    tests = [pairwise(survivors[0], other, latencies, correctness, token_latencies) for other in survivors[1:]] \
        if survivors else []
    if len(survivors) > 1:
        caveat = ranking_caveat(survivors[0].name, survivors[1].name, tests[0])
        if caveat:
            caveats.append(caveat)
    return Decision(weights=weights, constraints=constraints, variants=table, ranking=[t.name for t in survivors],
                    recommended=survivors[0].name if survivors else None, pairwise=tests, caveats=caveats)


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"
