"""Pipelines: each pipeline's stages and the chain end to end, per pipeline × region and over every region.

A pipeline is its stages' records (pipeline: its name, session_id: its arrival, turn: the stage, 1..). Its
end-to-end time runs from stage 1's intended send to its last stage's last byte; its time to the answer's first
token, to the last stage's first token — both on the one worker's monotonic clock the stages were timed on (a
pipeline never crosses workers), so no clock correction enters them. A stage's latency counts from its own intended
send (the stage before's end + its pause). Only pipelines that arrived in a measured phase count; one the run's end
cut short (`run_end`) is neither a success nor a failure and counts in no percentile; a failed stage ends its
pipeline, counted by stage and error class, and fails every pipeline SLO (as an error fails a latency SLO).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import strings
from tailrace.analysis.stats.correlation import integrated_time
from tailrace.analysis.stats.estimators import proportion_verdict, sorted_percentile_ci
from tailrace.contract.profile import PIPELINE_METRICS
from tailrace.contract.summary.base import Estimate, TokenMetric
from tailrace.contract.summary.sections import PipelineFailure, PipelineRow, Pipelines, SlowPipeline, StageRow
from tailrace.contract.summary.tables import SloVerdict

PIPELINE_COLUMNS = ("pipeline", "session_id", "turn", "endpoint", "region", "phase", "status", "code", "error",
                    "session_end", "t_intended", "t_done", "t_first_token", "latency_ns", "send_lag_ns")
PERCENTILES = (50, 90, 99)
SLOWEST_PIPELINES = 5
ALL = "*"


@dataclass(frozen=True)
class Chains:
    """One row per pipeline run (measured or not), in a fixed order: what each ended as, when."""

    name: np.ndarray  # its pipeline
    region: np.ndarray
    measured: np.ndarray  # bool: it arrived in a measured phase
    end: np.ndarray  # done | error | run_end | '' (its records stop before an end: a worker lost)
    e2e_ms: np.ndarray  # NaN unless done
    ttft_ms: np.ndarray  # NaN unless done with a first token
    failed_stage: np.ndarray  # the stage (1..) that failed, 0 if none
    first_row: np.ndarray  # positions (in the frame) of stage 1's record
    t_start: np.ndarray  # stage 1's intended send (worker clock, ns): the time order
    first: np.ndarray  # its first and last records' places in the sorted stage rows
    last: np.ndarray


def chains_of(df: pd.DataFrame) -> tuple[Chains, pd.DataFrame]:
    """The pipelines in `df` (its pipeline stages' rows) and those rows in (pipeline, session, stage) order."""
    rows = df.loc[strings(df["pipeline"]) != ""]
    rows = rows.assign(_pos=np.arange(len(df))[strings(df["pipeline"]) != ""])
    rows = rows.sort_values(["pipeline", "session_id", "turn"], kind="stable")
    key = strings(rows["pipeline"]) + "\0" + strings(rows["session_id"])
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.empty(0, dtype=np.int64)
    ends = np.r_[starts[1:], len(key)] - 1 if len(key) else np.empty(0, dtype=np.int64)
    turn = rows["turn"].to_numpy()
    t_intended, t_done = rows["t_intended"].to_numpy(), rows["t_done"].to_numpy()
    first_token = rows["t_first_token"].to_numpy()
    end = strings(rows["session_end"])[ends]
    status = strings(rows["status"])
    has_first = turn[starts] == 1 if len(starts) else np.empty(0, dtype=bool)
    done = (end == "done") & (status[ends] == "ok") & has_first
    t0 = t_intended[starts]
    e2e = np.where(done, (t_done[ends] - t0) / 1e6, np.nan)
    ttft = np.where(done & (first_token[ends] >= 0), (first_token[ends] - t0) / 1e6, np.nan)
    failed = np.where(end == "error", turn[ends], 0)
    rows["_chain"] = np.repeat(np.arange(len(starts)), ends - starts + 1) if len(key) else np.empty(0, dtype=int)
    chains = Chains(strings(rows["pipeline"])[starts], strings(rows["region"])[starts],
                    (rows["phase"].to_numpy()[starts] > 0) & has_first, end, e2e, ttft, failed,
                    rows["_pos"].to_numpy()[starts], t0, starts, ends)
    return chains, rows


def _estimates(values: np.ndarray) -> TokenMetric:
    x = np.sort(values[np.isfinite(values)].astype(np.float64))
    out: dict[str, object] = {}
    for p in PERCENTILES:
        e = sorted_percentile_ci(x, p)
        out[f"p{p:g}"] = Estimate(value=e.value, ci_low=e.ci_low, ci_high=e.ci_high, percentile=float(p), n=e.n,
                                  min_samples=e.min_samples)
    out["mean"] = float(x.mean()) if len(x) else None
    return TokenMetric(**out)


def _good(chains: Chains, slos: list[dict], name: str) -> np.ndarray:
    """Done pipelines within every pipeline SLO that applies to `name` (its threshold, whatever its percentile)."""
    good = chains.end == "done"
    for slo in slos:
        if slo["metric"] in PIPELINE_METRICS and slo.get("pipeline", ALL) in (ALL, name):
            values = chains.e2e_ms if slo["metric"] == "pipeline_e2e" else chains.ttft_ms
            good &= np.nan_to_num(values, nan=np.inf) <= slo["threshold_ms"]
    return good


def _stage_rows(rows: pd.DataFrame, chosen: np.ndarray, stages: list[str]) -> list[StageRow]:
    """Per stage of one pipeline (the records `chosen` selects): requests, errors, latency from the stage's
    intended send (ok requests) and send lag."""
    turn, ok = rows["turn"].to_numpy(), strings(rows["status"]) == "ok"
    latency, lag = rows["latency_ns"].to_numpy() / 1e6, rows["send_lag_ns"].to_numpy() / 1e6
    out = []
    for k, endpoint in enumerate(stages, 1):
        at = chosen & (turn == k)
        out.append(StageRow(stage=k, endpoint=endpoint, requests=int(at.sum()), errors=int((at & ~ok).sum()),
                            latency_ms=_estimates(latency[at & ok]),
                            send_lag_p99_ms=float(np.percentile(lag[at], 99)) if at.any() else None))
    return out


def pipeline_table(df: pd.DataFrame, stages: dict[str, list[str]], slos: list[dict], duration_s: float
                   ) -> tuple[list[PipelineRow], Chains, pd.DataFrame]:
    """Rows per pipeline × region and over every region ('*'): pipelines started in the measured phases, how they
    ended, end-to-end and time-to-first-token percentiles with intervals, goodput under the pipeline SLOs, and each
    stage's latency and its share of the end-to-end mean. `stages`: each pipeline's stage endpoints, in order."""
    chains, rows = chains_of(df)
    chain_of_row = rows["_chain"].to_numpy()
    out = []
    for name, endpoints in stages.items():
        mine = chains.measured & (chains.name == name)
        good = _good(chains, slos, name) & mine
        for region in [ALL, *sorted(set(chains.region[mine].tolist()))]:
            at = mine if region == ALL else mine & (chains.region == region)
            stage_rows = _stage_rows(rows, at[chain_of_row], endpoints)
            done_e2e = chains.e2e_ms[at][np.isfinite(chains.e2e_ms[at])]
            e2e_mean = float(done_e2e.mean()) if len(done_e2e) else None
            for s in stage_rows:
                mean = s.latency_ms.mean
                s.share_of_e2e = mean / e2e_mean if mean is not None and e2e_mean else None
            ends = chains.end[at]
            out.append(PipelineRow(
                pipeline=name, region=region, started=int(at.sum()), done=int((ends == "done").sum()),
                failed=int((ends == "error").sum()), run_end=int((ends == "run_end").sum()),
                incomplete=int((ends == "").sum()),
                pipelines_per_s=float((ends == "done").sum() / duration_s) if duration_s else None,
                goodput_per_s=float((good & at).sum() / duration_s) if duration_s else None,
                e2e_ms=_estimates(chains.e2e_ms[at]), ttft_ms=_estimates(chains.ttft_ms[at]), stages=stage_rows))
    return out, chains, rows


def pipeline_failures(chains: Chains, rows: pd.DataFrame) -> list[PipelineFailure]:
    """Measured pipelines a failed stage ended, by pipeline, stage, endpoint and error class: how many, an example."""
    failed = np.flatnonzero(chains.measured & (chains.end == "error"))
    if not len(failed):
        return []
    last = rows.iloc[chains.last[failed]]
    frame = pd.DataFrame({"pipeline": chains.name[failed], "stage": last["turn"].to_numpy(),
                          "endpoint": strings(last["endpoint"]),
                          "status": strings(last["status"]), "code": strings(last["code"]),
                          "error": strings(last["error"])})
    by = frame.groupby(["pipeline", "stage", "endpoint", "status", "code"], observed=True)
    table = by.agg(count=("error", "size"), example_error=("error", "first")).reset_index()
    return [PipelineFailure(**{str(k): v for k, v in r.items()})
            for r in table.sort_values("count", ascending=False, kind="stable").to_dict(orient="records")]


def slowest_pipelines(chains: Chains, rows: pd.DataFrame, n: int = SLOWEST_PIPELINES) -> list[dict]:
    """The `n` measured pipelines with the longest end-to-end time (done), slowest first: each stage's latency, the
    wait before its intended send (its declared pause), its send lag, and the stage the time went to. `positions`:
    each stage's record in the frame (its trace ID is read from there)."""
    done = np.flatnonzero(chains.measured & np.isfinite(chains.e2e_ms))
    if not len(done):
        return []
    order = done[np.argsort(-chains.e2e_ms[done], kind="stable")[:n]]
    t_intended, t_done = rows["t_intended"].to_numpy(), rows["t_done"].to_numpy()
    latency, lag = rows["latency_ns"].to_numpy() / 1e6, rows["send_lag_ns"].to_numpy() / 1e6
    endpoint, positions = strings(rows["endpoint"]), rows["_pos"].to_numpy()
    out = []
    for c in order.tolist():
        at = range(chains.first[c], chains.last[c] + 1)
        stages = [{"stage": k + 1, "endpoint": endpoint[i], "latency_ms": float(latency[i]),
                   "wait_ms": float((t_intended[i] - t_done[i - 1]) / 1e6) if k else 0.0,
                   "send_lag_ms": float(lag[i])} for k, i in enumerate(at)]
        slowest = max(stages, key=lambda s: s["latency_ms"])
        out.append({"pipeline": chains.name[c], "region": chains.region[c], "e2e_ms": float(chains.e2e_ms[c]),
                    "ttft_ms": None if np.isnan(chains.ttft_ms[c]) else float(chains.ttft_ms[c]),
                    "slowest_stage": slowest["stage"], "slowest_endpoint": slowest["endpoint"],
                    "slowest_share": slowest["latency_ms"] / chains.e2e_ms[c], "stages": stages,
                    "positions": [int(positions[i]) for i in at]})
    return out


def pipeline_verdicts(chains: Chains, slos: list[dict], pipelines: list[str],
                      regions: list[str]) -> list[SloVerdict]:
    """One verdict per pipeline SLO × pipeline × region, on the measured pipelines that ended (done or failed: a
    failed one never met the goal; one without a first token never met a pipeline_ttft goal), judged as a latency
    SLO is (analysis/stats/slo.py): k of n above the threshold, PASS when the exact binomial interval of k/n,
    counting the independent samples the time-ordered pipelines are worth, lies below 1 − q/100."""
    out = []
    for i, slo in enumerate(slos):
        if slo["metric"] not in PIPELINE_METRICS:
            continue
        values_of = chains.e2e_ms if slo["metric"] == "pipeline_e2e" else chains.ttft_ms
        names = pipelines if slo.get("pipeline", ALL) == ALL else [slo["pipeline"]]
        where = regions if slo["region"] == ALL else [slo["region"]]
        q, threshold = slo["percentile"], slo["threshold_ms"]
        for name in names:
            for region in where:
                at = chains.measured & (chains.name == name) & (chains.region == region) & \
                    np.isin(chains.end, ("done", "error"))
                idx = np.flatnonzero(at)
                idx = idx[np.argsort(chains.t_start[idx], kind="stable")]
                values = np.nan_to_num(values_of[idx], nan=np.inf)
                exceeding = values > threshold
                n, k = len(values), int(exceeding.sum())
                v = proportion_verdict(k, n, 1 - q / 100, tau=integrated_time(exceeding) if n else 1.0)
                est = sorted_percentile_ci(np.sort(values), q) if n else None
                label = "E2E" if slo["metric"] == "pipeline_e2e" else "TTFT"
                out.append(SloVerdict(
                    slo=i, description=f"pipeline {label} p{q:g} < {threshold:g} ms", metric=slo["metric"],
                    implicit=False, endpoint=name, region=region, n=n, effective_n=v.effective_n, exceeding=k,
                    verdict=v.verdict, measured=est.value if est else None, ci_low=est.ci_low if est else None,
                    ci_high=est.ci_high if est else None, more_samples_needed=v.more_samples_needed, trend=None,
                    reason=None))
    return out


def pipeline_section(df: pd.DataFrame, stages: dict[str, list[str]], slos: list[dict], regions: list[str],
                     duration_s: float, trace_ids) -> PipelineResults:
    """The summary's pipelines section and their SLO verdicts. `trace_ids(index)`: the trace IDs of the frame's rows
    (the slowest pipelines' stages name theirs)."""
    table, chains, rows = pipeline_table(df, stages, slos, duration_s)
    slowest = slowest_pipelines(chains, rows)
    for slow in slowest:
        for stage, trace_id in zip(slow["stages"], trace_ids(df.index[slow.pop("positions")])):
            stage["trace_id"] = trace_id
    section = Pipelines(pipelines=table, failures=pipeline_failures(chains, rows),
                        slowest=[SlowPipeline(**slow) for slow in slowest])
    return PipelineResults(section, pipeline_verdicts(chains, slos, list(stages), regions))


@dataclass(frozen=True)
class PipelineResults:
    """The pipelines' statistics: the summary's section (None: a run without pipelines) and their SLO verdicts."""

    section: Pipelines | None = None
    verdicts: list[SloVerdict] = field(default_factory=list)

