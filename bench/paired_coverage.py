"""Benchmark: how often does `tailrace compare`'s paired interval of Δp99 cover the true difference?

Simulated pairs with common random numbers, as two runs of one seed make them: one M/M/1 queue's arrivals and
service draws, B's service times 5% longer than A's (Lindley's recursion, each queue started from its
stationary waiting time). The true Δp99 is known: the M/M/1 sojourn time is Exp(μ − λ), so
p99 = ln(100)/(μ − λ). For each utilisation ρ and number of pairs n, it draws `--reps` pairs of series and
counts how often analysis/stats/correlation.py's `paired_quantile_difference` (95%), the interval `tailrace compare`
gives paired runs, contains the truth, with the spread of the estimate against the interval's half-width: an
interval narrower than the estimate's spread covers less than 95%. Then the same for runs that do not share a
schedule (an independent draw for B): `compare`'s bootstrap, which resamples each run at the size its
time-ordered latencies are worth, side by side with resampling all n as if they were independent.

    .venv/bin/python bench/paired_coverage.py [--reps 200]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import write_section  # noqa: E402
from tailrace.analysis.decide.compare import compare_groups  # noqa: E402
from tailrace.analysis.stats.correlation import paired_quantile_difference  # noqa: E402
from tailrace.analysis.stats.estimators import bootstrap_diff_ci  # noqa: E402

COMMAND = ".venv/bin/python bench/paired_coverage.py"
SLOWER = 1.05  # B's service times over A's
CASES = ((0.5, 2_000), (0.5, 10_000), (0.5, 100_000), (0.8, 10_000), (0.8, 100_000))  # (ρ of A, pairs)
UNPAIRED_CASES = ((0.5, 10_000), (0.5, 100_000), (0.8, 100_000))  # (ρ of A, requests per run)


def crn_mm1_pair(rng: np.random.Generator, n: int, rho: float, slower: float = SLOWER
                 ) -> tuple[np.ndarray, np.ndarray, float]:
    """Sojourn times of n customers in A (service rate 1, arrivals ρ) and in B (the same draws, service × slower),
    and the true p99(B) − p99(A)."""
    lam = rho
    service, gaps = rng.exponential(1.0, n), rng.exponential(1 / lam, n - 1)
    out = []
    for scale in (1.0, slower):
        mu = 1.0 / scale
        walk = np.concatenate([[0.0], np.cumsum(service[:-1] * scale - gaps)])
        w0 = rng.exponential(1 / (mu - lam)) if rng.random() < lam / mu else 0.0
        out.append(np.maximum(walk + w0, walk - np.minimum.accumulate(walk)) + service * scale)
    return out[0], out[1], float(np.log(100) / (1.0 / slower - lam) - np.log(100) / (1.0 - lam))


def coverage(rho: float, n: int, reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    hits, estimates, halves, truth = 0, [], [], 0.0
    for _ in range(reps):
        a, b, truth = crn_mm1_pair(rng, n, rho)
        diff, low, high = paired_quantile_difference(a, b, 99)
        hits += low <= truth <= high
        estimates.append(diff)
        halves.append((high - low) / 2)
    spread = float(np.std(estimates))
    return {"rho": rho, "n": n, "truth": truth, "coverage": hits / reps, "bias": float(np.mean(estimates)) - truth,
            "needed_half": 1.96 * spread, "median_half": float(np.median(halves))}


def unpaired_coverage(rho: float, n: int, reps: int, seed: int) -> dict:
    """How often the Δp99 interval of two independent runs covers the truth: compare's, and an n-sized bootstrap."""
    rng = np.random.default_rng(seed)
    hits = naive_hits = 0
    for _ in range(reps):
        a, _, _ = crn_mm1_pair(rng, n, rho)
        _, b, truth = crn_mm1_pair(rng, n, rho)  # another draw: B does not share A's schedule
        row = compare_groups(a, b)
        hits += row.p99_ci_low <= truth <= row.p99_ci_high
        _, low, high = bootstrap_diff_ci(a, b, 99)
        naive_hits += low <= truth <= high
    return {"rho": rho, "n": n, "coverage": hits / reps, "naive": naive_hits / reps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    rows = []
    for i, (rho, n) in enumerate(CASES):
        rows.append(coverage(rho, n, args.reps, seed=5 + i))
        print(rows[-1], flush=True)
    lines = [f"Command: `{COMMAND} --reps {args.reps}` (CRN pairs of M/M/1 series, B's service {SLOWER - 1:.0%} "
             f"slower; {args.reps} repetitions per row; truth from the M/M/1 sojourn distribution).", "",
             "| ρ (A) | pairs | true Δp99 (× mean service) | coverage of the 95% interval | bias of Δp99 | "
             "half-width needed (1.96 × spread) | median half-width given |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['rho']} | {r['n']:,} | {r['truth']:.2f} | **{r['coverage']:.1%}** | {r['bias']:+.3f} | "
                     f"{r['needed_half']:.3f} | {r['median_half']:.3f} |")
    lines += ["", "Below ~95%, the interval is narrower than the estimate varies: the batch-means variance of "
                  "the influence function and the 10-section spread both underestimate it when the 1% slowest "
                  "requests are few and come in clusters (long busy periods at high ρ). Tried and not adopted: "
                  "withholding the interval when the runs are worth fewer than 1,000 independent requests "
                  "(the runs it kept at ρ = 0.8 covered 82–85%: the estimate of what they are worth is noisy in "
                  "the same way), and a 4-section floor (72–96% coverage, 30–50% wider where it was already right)."]
    unpaired = []
    for i, (rho, n) in enumerate(UNPAIRED_CASES):
        unpaired.append(unpaired_coverage(rho, n, args.reps, seed=50 + i))
        print(unpaired[-1], flush=True)
    lines += ["", "Runs that do not share a schedule (B an independent draw; `compare`'s bootstrap):", "",
              "| ρ (A) | requests per run | coverage: resampled at the size they are worth (`compare`) | "
              "coverage: resampled at n, as if independent |", "|---|---|---|---|"]
    lines += [f"| {r['rho']} | {r['n']:,} | **{r['coverage']:.1%}** | {r['naive']:.1%} |" for r in unpaired]
    write_section("Paired comparison: coverage of the Δp99 interval", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
