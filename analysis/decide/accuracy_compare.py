"""`tailrace compare`'s accuracy: per graded endpoint, B's accuracy − A's with a 95% interval.

When both runs drew one schedule (the same seed and load), the same items were asked in both: the difference is
paired on the items both judged (each item's first judged answer in each run) — the interval Wald's for a paired
difference of proportions with Agresti and Min's half-answer added to each cell, the test McNemar's exact one on
the items only one run answered right. Otherwise the judged answers are independent samples: Newcombe's interval
from each run's Wilson interval, Fisher's exact test. Only judged answers count (right, wrong, unparsable)."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from scipy import stats

from tailrace.analysis.decide.decision import mcnemar
from tailrace.analysis.read.rundir import RunData, load_run
from tailrace.analysis.stats.outcomes.accuracy import JUDGED, by_answerer
from tailrace.contract.summary.compare import AccuracyDelta

READ = ("endpoint", "phase", "grade", "item", "t_intended", "pipeline")
Z = float(stats.norm.ppf(0.975))


def _wilson(k: int, n: int) -> tuple[float, float]:
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return centre - half, centre + half


def unpaired_difference(k_a: int, n_a: int, k_b: int, n_b: int) -> tuple[float, float, float, float]:
    """(B − A, Newcombe's 95% interval, Fisher's exact two-sided p) of two independent proportions — pure."""
    p_a, p_b = k_a / n_a, k_b / n_b
    (la, ua), (lb, ub) = _wilson(k_a, n_a), _wilson(k_b, n_b)
    diff = p_b - p_a
    low = diff - math.sqrt((p_b - lb) ** 2 + (ua - p_a) ** 2)
    high = diff + math.sqrt((ub - p_b) ** 2 + (p_a - la) ** 2)
    p = float(stats.fisher_exact([[k_a, n_a - k_a], [k_b, n_b - k_b]])[1])
    return diff, low, high, p


def paired_difference(a: dict[int, bool], b: dict[int, bool]) -> tuple[float, float, float, float, int] | None:
    """(B − A on the items both judged, its 95% interval, McNemar's exact p, items) — pure; None without items."""
    common = sorted(set(a) & set(b))
    if not common:
        return None
    only_a = sum(1 for i in common if a[i] and not b[i])
    only_b = sum(1 for i in common if b[i] and not a[i])
    n = len(common)
    diff = (only_b - only_a) / n
    # Agresti–Min: half an answer added to each of the four cells
    c_a, c_b, n_adj = only_a + 0.5, only_b + 0.5, n + 2.0
    d_adj = (c_b - c_a) / n_adj
    se = math.sqrt(max(0.0, (c_a + c_b) - (c_b - c_a) ** 2 / n_adj)) / n_adj
    tested = mcnemar(a, b)
    p = tested[1] if tested is not None else 1.0
    return diff, max(-1.0, d_adj - Z * se), min(1.0, d_adj + Z * se), p, n


def _judged(data: RunData) -> pd.DataFrame:
    """The measured phases' judged answers (grade a plain string, a pipeline's under its own name: by_answerer). The
    rows are picked before any value becomes a string: a 10 M-row run with none judged had taken 7 s here."""
    df = data.requests
    if "grade" not in df or not len(df):
        return pd.DataFrame(columns=list(READ))
    judged = df.loc[(df["phase"].to_numpy() > 0) & df["grade"].isin(JUDGED).to_numpy()]
    return by_answerer(judged).assign(grade=judged["grade"].astype(str))


def _first_answers(g: pd.DataFrame) -> dict[int, bool]:
    g = g.sort_values("t_intended", kind="stable")
    return {int(k): v == "correct" for k, v in g.groupby("item")["grade"].first().items()}


def compare_accuracy(run_a: Path, run_b: Path, paired: bool) -> list[AccuracyDelta]:
    """One row per endpoint both runs graded. `paired`: the runs drew one schedule (compare's same_schedule)."""
    a, b = _judged(load_run(run_a, READ)), _judged(load_run(run_b, READ))
    rows = []
    for endpoint in sorted(set(a["endpoint"].astype(str)) & set(b["endpoint"].astype(str))):
        ga, gb = a[a["endpoint"].astype(str) == endpoint], b[b["endpoint"].astype(str) == endpoint]
        if not len(ga) or not len(gb):
            continue
        k_a, k_b = int((ga["grade"] == "correct").sum()), int((gb["grade"] == "correct").sum())
        row = AccuracyDelta(endpoint=endpoint, paired=False, n_a=len(ga), n_b=len(gb), accuracy_a=k_a / len(ga),
                            accuracy_b=k_b / len(gb))
        both = paired_difference(_first_answers(ga), _first_answers(gb)) if paired else None
        if both is not None:
            row.diff, row.ci_low, row.ci_high, row.p_value, row.items = both
            row.paired, row.test = True, f"McNemar, {both[4]} items both judged"
        else:
            row.diff, row.ci_low, row.ci_high, row.p_value = unpaired_difference(k_a, len(ga), k_b, len(gb))
            row.test = "Fisher's exact"
        row.verdict = ("no significant change" if row.p_value >= 0.05 or row.diff is None
                       else "B less accurate" if row.diff < 0 else "B more accurate")
        rows.append(row)
    return rows


def accuracy_table(rows: list[AccuracyDelta], run_a: Path, run_b: Path):
    """The terminal table of compare_accuracy's rows."""
    from rich.table import Table

    table = Table(title=f"accuracy: B = {run_b.name} vs A = {run_a.name} (B − A, 95% CI; judged answers)")
    for col in ("endpoint", "A", "B", "Δ accuracy", "test", "p", "verdict"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r.endpoint, f"{r.accuracy_a:.1%} of {r.n_a:,}", f"{r.accuracy_b:.1%} of {r.n_b:,}",
                      f"{(r.diff or 0) * 100:+.1f} pts [{(r.ci_low or 0) * 100:+.1f}, {(r.ci_high or 0) * 100:+.1f}]",
                      r.test or "", f"{r.p_value:.3g}" if r.p_value is not None else "–", r.verdict)
    return table
