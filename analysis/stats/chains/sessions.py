"""Sessions and prefix caching (pure): TTFT, E2E and prompt length by turn, what sessions did (turns, duration, why
they ended, session goodput, sessions in flight), and the prefix-cache hit ratio three ways — the server's own
counters, its per-request usage (`cached_tokens`), and the ideal of an unbounded cache over the prompts tailrace built.

A session counts where its first turn was sent in a measured phase; a turn's statistics count where the turn itself
was. Session goodput: sessions per second of the measured duration whose every turn succeeded within every token
SLO that applies to it (analysis/stats/tokens.py good_streams).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import strings
from tailrace.analysis.stats.estimators import sorted_percentile_ci
from tailrace.contract.summary.base import Estimate
from tailrace.contract.summary.sections import (
    HitRatioLines,
    HitRatioOverTime,
    PrefixCacheRow,
    SessionRow,
    SessionsInFlight,
    TurnRow,
)

SESSION_COLUMNS = ("endpoint", "region", "phase", "status", "session_id", "turn", "session_end", "pipeline", "t_intended_ref",
                   "latency_ns", "ttft_ns", "input_tokens", "prompt_tokens_sent", "cached_tokens",
                   "ideal_cached_tokens")
LAST_TURN_ROW = 8  # turns from this one on share a row of the by-turn table ("8+")
HIT_BIN_S = 5.0  # the hit ratio over time: per this many seconds


def _pct(values: np.ndarray, p: float) -> Estimate:
    e = sorted_percentile_ci(np.sort(values.astype(np.float64)), p)
    return Estimate(value=e.value, ci_low=e.ci_low, ci_high=e.ci_high, min_samples=e.min_samples)


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


def turn_table(df: pd.DataFrame, endpoints: set[str]) -> list[TurnRow]:
    """Per session endpoint and turn (1, 2, …, LAST_TURN_ROW+): requests, ok, TTFT and E2E p50 / p99 (ms, with
    intervals, of the successful turns), mean prompt tokens (the server's count, else as built), mean cached
    tokens, and the turns' hit ratio (cached / prompt tokens, where the server reported both)."""
    turn = df["turn"].to_numpy()
    measured = (df["phase"].to_numpy() > 0) & (turn > 0) & df["endpoint"].isin(endpoints).to_numpy()
    out = []
    endpoint = strings(df["endpoint"])
    ok = strings(df["status"]) == "ok"
    prompt = np.where(df["input_tokens"].to_numpy() >= 0, df["input_tokens"].to_numpy(),
                      df["prompt_tokens_sent"].to_numpy()).astype(np.float64)
    cached = df["cached_tokens"].to_numpy().astype(np.float64)
    for name in sorted(endpoints):
        mine = measured & (endpoint == name)
        if not mine.any():
            continue
        for k in range(1, min(int(turn[mine].max()), LAST_TURN_ROW) + 1):
            at = mine & ((turn == k) if k < LAST_TURN_ROW else (turn >= k))
            good = at & ok
            reported = at & (cached >= 0) & (prompt > 0)
            out.append(TurnRow(
                endpoint=name, turn=str(k) if k < LAST_TURN_ROW else f"{k}+", requests=int(at.sum()),
                ok=int(good.sum()),
                ttft_p50=_pct(df["ttft_ns"].to_numpy()[good] / 1e6, 50),
                ttft_p99=_pct(df["ttft_ns"].to_numpy()[good] / 1e6, 99),
                e2e_p50=_pct(df["latency_ns"].to_numpy()[good] / 1e6, 50),
                e2e_p99=_pct(df["latency_ns"].to_numpy()[good] / 1e6, 99),
                prompt_tokens_mean=_mean(prompt[at & (prompt >= 0)]),
                cached_tokens_mean=_mean(cached[at & (cached >= 0)]),
                hit_ratio=float(cached[reported].sum() / prompt[reported].sum()) if reported.any() else None))
    return out


def session_table(df: pd.DataFrame, endpoints: set[str], good_positions: np.ndarray, good: np.ndarray,
                  duration_s: float) -> list[SessionRow]:
    """Per session endpoint: sessions started in the measured phases, turns sent, turns per session (mean, max),
    session duration (first turn's intended send → last turn's end; p50, p95 s), how sessions ended, and session
    goodput (/s). `good_positions`, `good`: good_streams' requests and whether each met every token SLO."""
    turn = df["turn"].to_numpy()
    endpoint = strings(df["endpoint"])
    session = df["session_id"].to_numpy()
    met = np.ones(len(df), dtype=bool)
    met[good_positions] = good
    met &= strings(df["status"]) == "ok"
    intended = df["t_intended_ref"].to_numpy()
    done = intended + df["latency_ns"].to_numpy()
    out = []
    for name in sorted(endpoints):
        mine = (endpoint == name) & (turn > 0)
        starts = mine & (turn == 1) & (df["phase"].to_numpy() > 0)
        ids = np.unique(session[starts])
        if not len(ids):
            continue
        in_run = mine & np.isin(session, ids)
        frame = pd.DataFrame({"session": session[in_run], "turn": turn[in_run], "met": met[in_run],
                              "start": intended[in_run], "done": done[in_run],
                              "end": strings(df["session_end"])[in_run]})
        by = frame.groupby("session")
        turns = by["turn"].max().to_numpy()
        span_s = ((by["done"].max() - by["start"].min()).to_numpy()) / 1e9
        every_turn_met = by["met"].all().to_numpy()
        ended = frame.loc[frame["end"] != "", "end"].value_counts().to_dict()
        out.append(SessionRow(endpoint=name, sessions=int(len(ids)), turns_sent=int(in_run.sum()),
                              turns_mean=float(turns.mean()), turns_max=int(turns.max()),
                              duration_p50_s=float(np.percentile(span_s, 50)),
                              duration_p95_s=float(np.percentile(span_s, 95)),
                              ended={k: int(v) for k, v in sorted(ended.items())},
                              still_running=int(len(ids) - sum(ended.values())),
                              good_sessions=int(every_turn_met.sum()),
                              session_goodput_rps=float(every_turn_met.sum() / duration_s) if duration_s else None))
    return out


def sessions_in_flight(df: pd.DataFrame, endpoints: set[str]) -> SessionsInFlight:
    """Per second since the first intended send (reference time): sessions in flight (from their first turn's
    intended send to their last turn's end), per session endpoint. Empty without sessions."""
    turn = df["turn"].to_numpy()
    rows = np.flatnonzero((turn > 0) & df["endpoint"].isin(endpoints).to_numpy())
    if not len(rows):
        return SessionsInFlight()
    t0 = int(df["t_intended_ref"].to_numpy().min())
    frame = pd.DataFrame({"endpoint": strings(df["endpoint"])[rows],
                          "session": df["session_id"].to_numpy()[rows],
                          "start": (df["t_intended_ref"].to_numpy()[rows] - t0) / 1e9,
                          "done": (df["t_intended_ref"].to_numpy()[rows] + df["latency_ns"].to_numpy()[rows] - t0)
                          / 1e9})
    spans = frame.groupby(["endpoint", "session"]).agg(start=("start", "min"), done=("done", "max")).reset_index()
    whole_s = int(np.ceil(spans["done"].max())) + 1
    out = {}
    for name, g in spans.groupby("endpoint"):
        steps = np.zeros(whole_s + 1)
        np.add.at(steps, np.floor(g["start"].to_numpy()).astype(int), 1)
        np.add.at(steps, np.minimum(np.floor(g["done"].to_numpy()).astype(int) + 1, whole_s), -1)
        out[str(name)] = np.cumsum(steps)[:whole_s].tolist()
    return SessionsInFlight(t0_ns=t0, in_flight=out)


def cache_table(df: pd.DataFrame, endpoints: set[str], counters: dict[str, dict]) -> list[PrefixCacheRow]:
    """Per generative endpoint whose requests say anything of caching: the hit ratio from the server's counters
    (`counters`: endpoint → {"queries", "hits", "metric"}, the deltas over the run of its model's
    prefix_cache_queries / _hits), from the requests' usage (cached / prompt tokens, where reported), and the ideal
    of an unbounded cache over the prompts as built (ideal_cached / prompt tokens as built)."""
    endpoint = strings(df["endpoint"])
    measured = df["phase"].to_numpy() > 0
    cached, prompt = df["cached_tokens"].to_numpy(), df["input_tokens"].to_numpy()
    ideal, built = df["ideal_cached_tokens"].to_numpy(), df["prompt_tokens_sent"].to_numpy()
    out = []
    for name in sorted(endpoints):
        mine = measured & (endpoint == name)
        reported = mine & (cached >= 0) & (prompt > 0)
        known = mine & (ideal >= 0) & (built > 0)
        server = counters.get(name)
        if not reported.any() and not known.any() and not server:
            continue
        out.append(PrefixCacheRow(
            endpoint=name,
            server_hit_ratio=server["hits"] / server["queries"] if server and server["queries"] else None,
            server_queries=server["queries"] if server else None, server_metric=server["metric"] if server else None,
            usage_hit_ratio=float(cached[reported].sum() / prompt[reported].sum()) if reported.any() else None,
            requests_reporting=int(reported.sum()),
            ideal_hit_ratio=float(ideal[known].sum() / built[known].sum()) if known.any() else None,
            prompt_tokens=int(prompt[reported].sum()) if reported.any() else int(built[known].sum())))
    return out


def hit_ratio_over_time(df: pd.DataFrame, endpoints: set[str]) -> HitRatioOverTime:
    """Per HIT_BIN_S bin of intended send (reference time from the first): the usage hit ratio and the ideal's, per
    endpoint (empty without either)."""
    endpoint = strings(df["endpoint"])
    cached, prompt = df["cached_tokens"].to_numpy(), df["input_tokens"].to_numpy()
    ideal, built = df["ideal_cached_tokens"].to_numpy(), df["prompt_tokens_sent"].to_numpy()
    if not ((cached >= 0).any() or (ideal >= 0).any()):
        return HitRatioOverTime()
    t0 = int(df["t_intended_ref"].to_numpy().min())
    bins = ((df["t_intended_ref"].to_numpy() - t0) / 1e9 // HIT_BIN_S).astype(int)
    n = int(bins.max()) + 1
    out = {}
    for name in sorted(endpoints):
        mine = endpoint == name

        def ratio(num, den, use):
            top = np.bincount(bins[use], weights=num[use].astype(float), minlength=n)
            bottom = np.bincount(bins[use], weights=den[use].astype(float), minlength=n)
            return np.where(bottom > 0, top / np.maximum(bottom, 1), np.nan).tolist()
        usage = mine & (cached >= 0) & (prompt > 0)
        known = mine & (ideal >= 0) & (built > 0)
        if usage.any() or known.any():
            out[name] = HitRatioLines(usage=ratio(cached, prompt, usage) if usage.any() else None,
                                      ideal=ratio(ideal, built, known) if known.any() else None)
    return HitRatioOverTime(bin_s=HIT_BIN_S, t0_ns=t0, by_endpoint=out) if out else HitRatioOverTime()
