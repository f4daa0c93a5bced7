"""`tailrace compare RUN_A RUN_B`: per endpoint × region, is B faster, slower, or not significantly different?

When both runs share the seed and the load (the same schedule), requests are paired by their place in it —
the k-th request a worker scheduled in A with the k-th in B (common random numbers) — and the differences of
p50 / p95 / p99 get paired intervals (analysis/stats/correlation.py), with the Wilcoxon signed-rank test. Otherwise
the runs are compared as independent samples: bootstrap intervals and Mann–Whitney U. Each row is one metric:
latency (a streamed request's E2E); for streamed (generative) endpoints also TTFT and TPOT, each paired the same way.
Where both runs have [[monitors]], a second table compares their energy per request (analysis/decide/energy_compare.py).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from tailrace.analysis.decide.accuracy_compare import accuracy_table, compare_accuracy
from tailrace.analysis.decide.energy_compare import compare_energy, energy_table
from tailrace.analysis.decide.schedule_pairs import PLACE, Places, matched, place_keys, shared_codes
from tailrace.analysis.read import process_memory
from tailrace.analysis.read.frames import take_rows
from tailrace.analysis.read.rundir import (
    COMPARE_BYTES_PER_ROW,
    RunData,
    RunDirError,
    check_fits,
    load_run,
    request_rows,
    run_validity,
)
from tailrace.analysis.stats.correlation import effective_size, paired_quantile_difference, quantile_tau
from tailrace.analysis.stats.estimators import bootstrap_diff_ci, cohens_d, min_samples_for, sorted_percentile
from tailrace.contract import exit_codes
from tailrace.contract.summary.base import ALL, Estimate
from tailrace.contract.summary.compare import CompareRow

PERCENTILES = (50, 95, 99)
COMPARE_COLUMNS = ("endpoint", "region", "worker", "phase", "status", "latency_ns", "t_intended", "sample_index",
                   "session_id", "turn")
# a run with streams also has these (analysis/read/rundir.py reads its token columns): TTFT and TPOT are compared
STREAM_METRIC_COLUMNS = ("ttft_ns", "t_first_token", "t_last_token", "output_tokens")
METRICS = ("latency", "ttft", "tpot")
GROUP = ["endpoint", "region"]
MIN_SAMPLES = 20
PAIRED_MATCH = 0.99  # the share of pairs whose sent sample must agree for the schedules to count as one


def _with_metrics(rows: pd.DataFrame, suffix: str = "") -> pd.DataFrame:
    """`rows` with one column (ms) per compared metric: latency; for streamed requests also TTFT and TPOT (NaN
    where a request has none: a one-shot request, a one-token stream)."""
    out = {"latency": rows["latency_ns" + suffix].to_numpy() / 1e6}
    if "ttft_ns" + suffix in rows:
        ttft = rows["ttft_ns" + suffix].to_numpy()
        tokens = rows["output_tokens" + suffix].to_numpy().astype(np.int64)
        span = (rows["t_last_token" + suffix].to_numpy() - rows["t_first_token" + suffix].to_numpy()) / 1e6
        out["ttft"] = np.where(ttft >= 0, ttft / 1e6, np.nan)
        out["tpot"] = np.where((ttft >= 0) & (tokens > 1), span / np.maximum(tokens - 1, 1), np.nan)
    return pd.DataFrame(out, index=rows.index)


def _latencies(df: pd.DataFrame) -> pd.DataFrame:
    """The successful measured requests' latencies (and streams' TTFT and TPOT), in intended-send order (the order
    their correlation is measured in; workers' clocks differ by their offsets, which leaves the order of
    neighbours)."""
    columns = ["endpoint", "region", "t_intended", "latency_ns", *(c for c in STREAM_METRIC_COLUMNS if c in df)]
    rows = take_rows(df, ((df["phase"] > 0) & (df["status"] == "ok")).to_numpy(), columns)
    rows = rows.iloc[np.argsort(rows["t_intended"].to_numpy(), kind="stable")]
    return pd.concat([rows[["endpoint", "region"]], _with_metrics(rows)], axis=1)


def _verdict(out: CompareRow, p_value: float) -> str:
    """Where the test finds a difference (p < 0.05), the percentiles whose interval lies wholly above 0 (B slower) or
    below it (B faster): "B slower" where the median moved, "B slower at p95, p99" where only the tail did, "mixed"
    where they disagree; else no significant difference."""
    if not p_value < 0.05:
        return "no significant difference"
    slower, faster = [], []
    for p in PERCENTILES:
        low, high = out.difference(p).ci_low, out.difference(p).ci_high
        if low is not None and low > 0:
            slower.append(f"p{p:g}")
        elif high is not None and high < 0:
            faster.append(f"p{p:g}")
    if slower and faster:
        return f"mixed: B slower at {', '.join(slower)}, faster at {', '.join(faster)}"
    for side, word in ((slower, "slower"), (faster, "faster")):
        if side:
            return f"B {word}" if side[0] == "p50" else f"B {word} at {', '.join(side)}"
    return "no significant difference"


def _too_few(out: CompareRow, p: float, n: int) -> bool:
    """Leave percentile p out (None, with a note) when either run has fewer samples than `tailrace analyze`
    needs to report it (the order-statistic interval's minimum)."""
    need = min_samples_for(p / 100)
    if n >= need:
        return False
    for key in ("a_ms", "b_ms", "diff_ms", "ci_low", "ci_high"):
        setattr(out, f"p{p}_{key}", None)
    out.notes = [*out.notes, f"p{p:g} needs ≥ {need} samples per run"]
    return True


def _percentile(out: CompareRow, p: float, a_ms: float, b_ms: float, diff: tuple[float, float | None, float | None]
                ) -> None:
    """B − A at percentile p into the row: each run's value, the difference and its interval."""
    setattr(out, f"p{p}_a_ms", a_ms)
    setattr(out, f"p{p}_b_ms", b_ms)
    for key, value in zip(("diff_ms", "ci_low", "ci_high"), diff):
        setattr(out, f"p{p}_{key}", value)


def _judged(out: CompareRow, test: str, p_value: float, a: np.ndarray, b: np.ndarray) -> CompareRow:
    """The row with its test, Cohen's d and verdict (significant where the test and a percentile's interval both say
    so: _verdict)."""
    out.test, out.test_p, out.cohens_d = test, p_value, cohens_d(a, b)
    out.verdict = _verdict(out, p_value)
    return out


def compare_groups(a: np.ndarray, b: np.ndarray, seed: int = 0, endpoint: str = ALL, region: str = ALL,
                   metric: str = "latency") -> CompareRow:
    """Independent samples in time order: differences B − A (ms) with bootstrap CIs, Mann–Whitney U p-value,
    Cohen's d. Each run is resampled at the size its time-ordered latencies are worth for the percentile
    (analysis/stats/correlation.py): queueing correlates neighbours, and an n-sized resample of n correlated
    latencies gives an interval too narrow (bench/paired_coverage.py's unpaired rows)."""
    out = CompareRow(endpoint=endpoint, region=region, metric=metric, paired=False, n_a=int(len(a)), n_b=int(len(b)))
    sorted_a, sorted_b = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))  # once for all
    for p in PERCENTILES:
        if _too_few(out, p, min(len(a), len(b))):
            continue
        size_a, size_b = (effective_size(len(x), quantile_tau(x, sorted_percentile(xs, p / 100)))
                          for x, xs in ((a, sorted_a), (b, sorted_b)))
        _percentile(out, p, float(np.percentile(sorted_a, p)), float(np.percentile(sorted_b, p)),
                    bootstrap_diff_ci(sorted_a, sorted_b, p, seed=seed, sizes=(size_a, size_b), is_sorted=True))
    # U sums ranks, which are half-integers: below 2^53 the sum is exact in any order, so the sorted samples give the
    # same U and p-value to the bit, and scipy's sort of the two joined finds two runs (0.19 s against 0.76 s at 3.5 M)
    tested = stats.mannwhitneyu(sorted_a, sorted_b, alternative="two-sided")
    return _judged(out, "Mann–Whitney U", float(tested.pvalue), a, b)


def slower_than_allowed(row: CompareRow, percentile: float, margin: float) -> bool:
    """B is significantly slower than A at `percentile` by more than `margin` (a fraction of A's value): the
    whole interval of the difference lies above margin × A."""
    low, base = row.difference(percentile).ci_low, row.a_ms(percentile)
    return low is not None and base is not None and low > margin * base


def parse_gate(text: str) -> tuple[float, float]:
    """`p99:5%` → (99, 0.05); ValueError naming the flag when it is not one of PERCENTILES with a margin."""
    name, sep, margin = text.partition(":")
    try:
        percentile = float(name.strip().lower().removeprefix("p"))
        value = float(margin.strip().removesuffix("%")) / (100 if margin.strip().endswith("%") else 1)
    except ValueError:
        raise ValueError(f"--fail-if-slower {text!r}: expected PERCENTILE:MARGIN, e.g. p99:5%") from None
    if not sep or percentile not in PERCENTILES or value < 0:
        raise ValueError(f"--fail-if-slower {text!r}: the percentile is one of "
                         f"{', '.join(f'p{p}' for p in PERCENTILES)} and the margin ≥ 0 (e.g. p99:5%)")
    return percentile, value


def compare_paired(a: np.ndarray, b: np.ndarray, endpoint: str = ALL, region: str = ALL,
                   metric: str = "latency") -> CompareRow:
    """Paired samples in schedule order (a[t], b[t]: one scheduled request): differences B − A (ms) with paired
    intervals, the Wilcoxon signed-rank p-value, Cohen's d."""
    out = CompareRow(endpoint=endpoint, region=region, metric=metric, paired=True, n_a=int(len(a)), n_b=int(len(b)))
    for p in PERCENTILES:
        if _too_few(out, p, len(a)):
            continue
        _percentile(out, p, float(np.percentile(a, p)), float(np.percentile(b, p)), paired_quantile_difference(a, b, p))
    differences = b - a
    return _judged(out, "Wilcoxon signed-rank", float(stats.wilcoxon(differences).pvalue) if np.any(differences)
                   else 1.0, a, b)


def same_schedule(a: RunData, b: RunData) -> bool:
    """Whether two runs drew one schedule: the same seed, load, regions and endpoints (names and weights)."""
    pa, pb = a.plan.profile, b.plan.profile
    def shape(p):
        return ([(r.name, r.share, r.workers) for r in p.regions], [(e.name, e.weight) for e in p.endpoints])
    return (a.manifest.get("seed") is not None and a.manifest.get("seed") == b.manifest.get("seed")
            and pa.load.model_dump() == pb.load.model_dump() and shape(pa) == shape(pb))


def pair_requests(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame | None:
    """A's and B's measured requests paired by schedule position (analysis/decide/schedule_pairs.py), both
    successful, in schedule order — by endpoint and region (their names' order), then A's intended send, then A's
    worker and row (columns endpoint, region, latency_a_ms, latency_b_ms and, where both runs streamed, TTFT and
    TPOT); None when the sent samples disagree, i.e. the schedules were not the same after all."""
    shared = {c: shared_codes(a[c], b[c]) for c in PLACE}
    codes_a, codes_b = {c: shared[c][0] for c in PLACE}, {c: shared[c][1] for c in PLACE}
    measured_a, measured_b = (np.flatnonzero(df["phase"].to_numpy() > 0) for df in (a, b))
    t_a, t_b = a["t_intended"].to_numpy(), b["t_intended"].to_numpy()
    rows_a, rows_b = matched(Places.of(measured_a, place_keys(a, measured_a, codes_a), t_a[measured_a]),
                             Places.of(measured_b, place_keys(b, measured_b, codes_b), t_b[measured_b]))
    if len(rows_a) == 0 or (a["sample_index"].to_numpy()[rows_a]
                            == b["sample_index"].to_numpy()[rows_b]).mean() < PAIRED_MATCH:
        return None
    ok = (a["status"] == "ok").to_numpy()[rows_a] & (b["status"] == "ok").to_numpy()[rows_b]
    rows_a, rows_b = rows_a[ok], rows_b[ok]
    worker = a["worker"].cat.codes.to_numpy() if isinstance(a["worker"].dtype, pd.CategoricalDtype) \
        else codes_a["worker"]  # A's own order of its workers (its rows' order before the pairing)
    endpoint, region = codes_a["endpoint"], codes_a["region"]
    order = np.lexsort((rows_a, worker[rows_a], t_a[rows_a], region[rows_a], endpoint[rows_a]))
    rows_a, rows_b = rows_a[order], rows_b[order]
    streams = [c for c in STREAM_METRIC_COLUMNS if c in a and c in b]
    columns = ["latency_ns", *(streams if "ttft_ns" in streams else ())]
    metrics_a, metrics_b = (_with_metrics(pd.DataFrame({c: df[c].to_numpy()[rows] for c in columns}))
                            for df, rows in ((a, rows_a), (b, rows_b)))
    names = pd.DataFrame({"endpoint": pd.Categorical.from_codes(endpoint[rows_a], categories=shared["endpoint"][2]),
                          "region": pd.Categorical.from_codes(region[rows_a], categories=shared["region"][2])})
    return pd.concat([names, metrics_a.add_suffix("_a_ms"), metrics_b.add_suffix("_b_ms")], axis=1)


def _rows_read(data: RunData) -> dict[str, int]:
    """worker → the request rows read from its chunks."""
    counts = pd.Series(data.log.values("worker")).value_counts(sort=False)
    return {str(worker): int(n) for worker, n in counts.items() if n}


def compare_runs(run_a: Path, run_b: Path, paired: bool | None = None, skipped: list | None = None,
                 invalid: list[str] | None = None) -> list[CompareRow]:
    """One comparison row per endpoint × region present in both runs. `paired`: None pairs the requests when the
    runs share a schedule (same_schedule), True insists (RunDirError when they do not), False never pairs.
    `skipped`: extended with both runs' chunks that could not be read (analysis/read/chunks.py's SkippedChunk);
    `invalid`: with why either run is INVALID, as `tailrace analyze` judges it (analysis/read/rundir.py's
    run_validity), each reason naming its run."""
    data_a, data_b = load_run(run_a, COMPARE_COLUMNS), load_run(run_b, COMPARE_COLUMNS)
    if skipped is not None:
        skipped.extend([*data_a.skipped, *data_b.skipped])
    if invalid is not None:
        for label, data in (("A", data_a), ("B", data_b)):
            invalid.extend(f"{label} ({data.run_dir}): {reason}" for reason in run_validity(data, _rows_read(data))[1])
    pairs = None
    if paired is not False and same_schedule(data_a, data_b):
        pairs = pair_requests(data_a.requests, data_b.requests)
    if paired and pairs is None:
        raise RunDirError(f"{run_b}: not the schedule of {run_a} (seed, load, regions or endpoints differ, or the "
                          "sent samples disagree): the requests cannot be paired")
    rows = []
    if pairs is not None:
        for (e, r), g in pairs.groupby(GROUP, sort=True, observed=True):
            for metric in METRICS:
                if f"{metric}_a_ms" not in g:
                    continue
                a, b = g[f"{metric}_a_ms"].to_numpy(), g[f"{metric}_b_ms"].to_numpy()
                both = ~(np.isnan(a) | np.isnan(b))
                if both.sum() >= MIN_SAMPLES:
                    rows.append(compare_paired(a[both], b[both], str(e), str(r), metric))
        return rows
    a, b = _latencies(data_a.requests), _latencies(data_b.requests)
    groups_b = b.groupby(GROUP, observed=True).indices
    for (endpoint, region), ga in a.groupby(GROUP, sort=True, observed=True):
        gb = b.iloc[groups_b.get((endpoint, region), [])]
        for metric in METRICS:
            if metric not in ga or metric not in gb:
                continue
            va, vb = ga[metric].to_numpy(), gb[metric].to_numpy()
            va, vb = va[~np.isnan(va)], vb[~np.isnan(vb)]
            if len(va) >= MIN_SAMPLES and len(vb) >= MIN_SAMPLES:
                rows.append(compare_groups(va, vb, endpoint=str(endpoint), region=str(region), metric=metric))
    return rows



METRIC_LABELS = {"latency": "latency (E2E)", "ttft": "TTFT", "tpot": "TPOT"}


def _accuracy(run_a: Path, run_b: Path, paired: bool) -> list:
    """The graded endpoints' Δ accuracy, printed (none where neither graded; a failure is one line, the latency table
    stands)."""
    from tailrace.contract.terminal import console

    try:
        accuracy = compare_accuracy(run_a, run_b, paired)
    except (RunDirError, ValueError, OSError) as exc:
        print(f"tailrace compare: accuracy not compared: {exc}", file=sys.stderr)
        return []
    if accuracy:
        console().print(accuracy_table(accuracy, run_a, run_b))
    return accuracy


def _metric_suffix(row: CompareRow) -> str:
    return "" if row.metric == "latency" else f" {METRIC_LABELS[row.metric]}"


def _difference_cell(d: Estimate, p: float) -> str:
    """"+1.23 ms [+0.50, +2.10]" (ms, B − A with its interval), or what the percentile needs."""
    if d.value is None:
        return f"needs ≥ {min_samples_for(p / 100)}"
    if d.ci_low is None or d.ci_high is None:
        return f"{d.value:+.2f}"
    return f"{d.value:+.2f} [{d.ci_low:+.2f}, {d.ci_high:+.2f}]"


def _slower(d: Estimate) -> str:
    """A tripped gate's difference: "+1.23 ms [+0.50, +2.10]"."""
    return f"{d.value or 0:+.2f} ms [{d.ci_low or 0:+.2f}, {d.ci_high or 0:+.2f}]"


def compare_command(run_a: Path, run_b: Path, out: Path | None, paired: bool | None = None,
                    fail_if_slower: Sequence[str] = (), exits: bool = False) -> int:
    """Print the comparison (and write it as JSON/CSV when --out is given). Exit 2 on unreadable runs, bad flags or
    runs with no endpoint × region in common; 4 when either run is INVALID as `tailrace analyze` judges it (its
    manifest says so, a request chunk could not be read, or requests its workers recorded are missing: the table
    is still printed); 1 when a --fail-if-slower gate trips (a CI regression gate).
    `exits`: this process exits after it (analysis/read/process_memory.py's `settle`)."""
    from rich.table import Table

    from tailrace.contract.terminal import console

    if exits:  # first, before a thread starts (Arrow's, reading the footers): analysis/read/process_memory.py
        process_memory.settle()
    try:
        gates = [parse_gate(g) for g in fail_if_slower]
        request_count = request_rows([run_a, run_b])
        check_fits([run_a, run_b], COMPARE_BYTES_PER_ROW, "compare", request_count)
        skipped: list = []
        invalid: list[str] = []
        rows = compare_runs(run_a, run_b, paired, skipped, invalid)
    except (RunDirError, ValueError) as exc:
        print(f"tailrace compare: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    for chunk in skipped:  # compared without their rows: as tailrace analyze says it
        print(f"tailrace compare: skipped {chunk.path}: {chunk.reason}", file=sys.stderr)
    if not rows:
        print(f"tailrace compare: {run_a} and {run_b} have no endpoint × region in common with ≥ {MIN_SAMPLES} "
              "successful measured requests each: nothing to compare", file=sys.stderr)
        return exit_codes.USAGE
    how = ("paired by schedule position (same seed): paired CIs, Wilcoxon signed-rank"
           if rows and rows[0].paired else "independent samples: bootstrap CIs, Mann–Whitney U")
    table = Table(title=f"B = {run_b.name} vs A = {run_a.name} (ms, B − A, 95% CI; {how})")
    for col in ("endpoint", "region", "metric", "n", "Δp50", "Δp95", "Δp99", "test p", "Cohen's d", "verdict"):
        table.add_column(col, justify="right")
    for r in rows:
        cells = [_difference_cell(r.difference(p), p) for p in PERCENTILES]
        table.add_row(r.endpoint, r.region, METRIC_LABELS[r.metric], f"{min(r.n_a, r.n_b):,}", *cells,
                      f"{r.test_p:.3g}" if r.test_p is not None else "–",
                      f"{r.cohens_d:+.2f}" if r.cohens_d is not None else "–", r.verdict)
    console().print(table)
    try:
        energy = compare_energy(run_a, run_b)
    except (RunDirError, ValueError, OSError) as exc:  # the latency table above stands
        energy = []
        print(f"tailrace compare: energy not compared: {exc}", file=sys.stderr)
    if energy:
        console().print(energy_table(energy, run_a, run_b))
    accuracy = _accuracy(run_a, run_b, rows[0].paired)
    if out:
        try:
            out.mkdir(parents=True, exist_ok=True)
            written = [r.model_dump(mode="json", exclude_unset=True) for r in rows]
            (out / "compare.json").write_text(json.dumps(written, indent=2))
            pd.DataFrame(written).to_csv(out / "compare.csv", index=False)
            if accuracy:
                kept = [r.model_dump(mode="json") for r in accuracy]
                (out / "compare_accuracy.json").write_text(json.dumps(kept, indent=2))
                pd.DataFrame(kept).to_csv(out / "compare_accuracy.csv", index=False)
            if energy:
                deltas = [r.model_dump(mode="json") for r in energy]
                (out / "compare_energy.json").write_text(json.dumps(deltas, indent=2))
                pd.DataFrame(deltas).to_csv(out / "compare_energy.csv", index=False)
        except OSError as exc:  # the table above is printed: nothing measured is lost
            print(f"tailrace compare: --out {out} could not be written ({exc})", file=sys.stderr)
            return exit_codes.INTERNAL
    tripped = [f"{r.endpoint}/{r.region}{_metric_suffix(r)}: p{p:g} slower by {_slower(r.difference(p))} > "
               f"{margin:.0%} of {r.a_ms(p) or 0:.2f} ms" for p, margin in gates for r in rows
               if slower_than_allowed(r, p, margin)]
    for line in tripped:
        print(f"tailrace compare: --fail-if-slower: {line}", file=sys.stderr)
    unjudged = [f"{r.endpoint}/{r.region}{_metric_suffix(r)}: p{p:g} has no interval ("
                + "; ".join(n for n in r.notes if n.startswith(f"p{p:g}")) + ")"
                for p, _ in gates for r in rows if r.difference(p).ci_low is None]
    for line in unjudged:
        print(f"tailrace compare: --fail-if-slower not judged: {line}", file=sys.stderr)
    for line in invalid:  # numbers that cannot be trusted, or missing requests: never a gate's pass
        print(f"tailrace compare: INVALID: {line}", file=sys.stderr)
    return (exit_codes.INVALID if invalid else exit_codes.FAIL if tripped
            else exit_codes.INCONCLUSIVE if unjudged else exit_codes.PASS)
