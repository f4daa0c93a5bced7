"""Token-level latency of streamed (generative) requests, per endpoint × region (docs/METHODS.md, "Streams").

Definitions, each written once here:
- TTFT = t_first_token − t_intended: from the intended send time, so a generator that fell behind hides nothing;
- E2E = t_done − t_intended (the request's latency; the usage trailer never extends it);
- TPOT = (t_last_token − t_first_token) / (output_tokens − 1), per request (undefined for one token);
- ITL = the gaps between consecutive token events after the first, an event of k tokens counting as k gaps of
  gap / k, pooled over the requests of a group;
- output tokens/s = the output tokens of the measured phases' successful streams / the measured duration;
- goodput = the requests per second that succeeded within every token SLO that applies to them, each judged on
  the request's own value (its TTFT, TPOT, E2E; for ITL its largest gap).

Intervals: TTFT, TPOT and E2E are one value a request (order-statistic intervals, as the latency table's). ITL
pools many gaps of each stream, and the gaps of one stream are not independent: its interval counts each stream
as one independent sample (a lower bound on what they are worth), so it is never narrower than the streams
support.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import group_positions, strings
from tailrace.analysis.stats.correlation import integrated_time, stationarity
from tailrace.analysis.stats.estimators import (
    PercentileEstimate,
    clopper_pearson,
    proportion_verdict,
    sorted_percentile_ci,
)
from tailrace.analysis.stats.timeline import TokenTimeline
from tailrace.analysis.stats.validity import PhaseSeries, judge_trends
from tailrace.contract.records import CANCELLED
from tailrace.contract.summary.tables import SloVerdict, TokenRow

TOKEN_COLUMNS = ("endpoint", "region", "phase", "status", "stream_outcome", "ttft_ns", "t_first_token",
                 "t_last_token", "output_tokens", "input_tokens", "token_source", "latency_ns", "token_event_us",
                 "token_event_counts", "ttfa_ns", "reasoning_tokens", "media_count", "media_bytes", "schema_valid")
PERCENTILES = (50.0, 90.0, 99.0)
METRICS = ("ttft", "tpot", "itl", "e2e")


def inter_token_gaps_ms(offsets_us: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """One stream's inter-token latencies (ms): each gap between consecutive token events, spread over the tokens
    the later event carried."""
    if len(offsets_us) < 2:
        return np.empty(0)
    gaps = np.diff(offsets_us.astype(np.float64)) / 1e3
    carried = np.maximum(counts[1:].astype(np.int64), 1)
    return np.repeat(gaps / carried, carried)


def run_starts(counts: np.ndarray) -> np.ndarray:
    """Where each of consecutive runs of `counts` values starts, in the values laid one run after another."""
    return np.cumsum(counts) - counts


@dataclass(frozen=True)
class StreamGaps:
    """Many streams' inter-token latencies (ms): `values`, each stream's inter_token_gaps_ms one after another in the
    streams' order; `count`, how many of them are each stream's."""

    values: np.ndarray
    count: np.ndarray

    def largest(self) -> np.ndarray:
        """Each stream's largest gap, 0.0 where it has none (as inter_token_gaps_ms(...).max(initial=0.0))."""
        out = np.zeros(len(self.count))
        has = self.count > 0
        if has.any():
            starts = run_starts(self.count)
            out[has] = np.maximum(np.maximum.reduceat(self.values, starts[has]), 0.0)
        return out


def stream_gaps(offsets: Sequence[bytes], counts: Sequence[bytes]) -> StreamGaps:
    """inter_token_gaps_ms of every stream (`offsets`: each one's token_event_us, `counts`: its token_event_counts),
    in one pass over all of their events rather than a call a stream (a 1-minute run's 12,000 streams: 0.19 s a
    pass, and a report makes several) — the same arithmetic on each gap, so the same values. A stream whose
    events and counts differ in number is computed alone, as before (and raises as it did)."""
    events = np.fromiter((len(o) // 4 for o in offsets), dtype=np.int64, count=len(offsets))
    if any(len(c) // 2 != n for c, n in zip(counts, events)):
        gaps = [inter_token_gaps_ms(np.frombuffer(o, dtype="<i4"), np.frombuffer(c, dtype="<u2"))
                for o, c in zip(offsets, counts)]
        return StreamGaps(np.concatenate(gaps) if gaps else np.empty(0), np.array([len(g) for g in gaps], np.int64))
    times = np.frombuffer(b"".join(offsets), dtype="<i4").astype(np.float64)
    tokens = np.frombuffer(b"".join(counts), dtype="<u2")
    later = np.ones(len(times), dtype=bool)  # an event after its stream's first: a gap ends at it
    later[run_starts(events)[events > 0]] = False
    at = np.flatnonzero(later)
    carried = np.maximum(tokens[at].astype(np.int64), 1)
    values = np.repeat((times[at] - times[at - 1]) / 1e3 / carried, carried)
    stream = np.repeat(np.arange(len(events)), events)[at]
    return StreamGaps(values, np.bincount(stream, weights=carried, minlength=len(events)).astype(np.int64))


def _estimate(values: np.ndarray, effective_n: int | None = None) -> dict:
    x = np.sort(values.astype(np.float64))
    out: dict[str, object] = {}
    for p in PERCENTILES:
        e: PercentileEstimate = sorted_percentile_ci(x, p, effective_n=effective_n)
        out[f"p{p:g}"] = {"value": e.value, "ci_low": e.ci_low, "ci_high": e.ci_high, "min_samples": e.min_samples,
                          "effective_n": e.effective_n}
    out["mean"] = float(x.mean()) if len(x) else None
    return out


def _metric_values(df: pd.DataFrame, rows: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(values in ms — +inf for a request that failed —, whether each is one of the requests' own, streams):
    TTFT, TPOT, E2E one value a request (a request with one token has no TPOT); ITL the pooled gaps."""
    ok = df["status"].to_numpy()[rows] == "ok"
    if metric == "itl":  # each successful stream's gaps, one +inf for a failed request, in the rows' order
        offsets, counts = df["token_event_us"].to_numpy()[rows], df["token_event_counts"].to_numpy()[rows]
        gaps = stream_gaps(offsets[ok], counts[ok])
        each = np.ones(len(rows), dtype=np.int64)
        each[ok] = gaps.count
        values = np.full(int(each.sum()), np.inf)
        own = np.ones(len(values), dtype=bool)
        own[run_starts(each)[~ok]] = False
        values[own] = gaps.values
        return values, np.ones(len(values), dtype=bool), int(np.count_nonzero(each))
    if metric == "ttft":
        values = df["ttft_ns"].to_numpy()[rows] / 1e6
        good = ok & (values >= 0)
    elif metric == "tpot":
        tokens = df["output_tokens"].to_numpy()[rows].astype(np.int64)
        span = (df["t_last_token"].to_numpy()[rows] - df["t_first_token"].to_numpy()[rows]) / 1e6
        streamed = df["t_first_token"].to_numpy()[rows] >= 0
        keep = ~ok | ((tokens > 1) & streamed)  # a one-token stream, a whole response: no TPOT; a failure missed it
        values = np.where(ok, span / np.maximum(tokens - 1, 1), np.inf)[keep]
        return values, np.ones(len(values), dtype=bool), len(values)
    else:  # e2e
        values = df["latency_ns"].to_numpy()[rows] / 1e6
        good = ok
    return np.where(good, values, np.inf), np.ones(len(values), dtype=bool), len(values)


def token_verdicts(df: pd.DataFrame, slos: list[dict], endpoints: set[str], regions: list[str]) -> list[SloVerdict]:
    """One verdict per token SLO (ttft, tpot, itl, e2e) × generative endpoint × region, on the measured phases,
    as analysis/stats/slo.py judges a latency SLO: k values above the threshold (a failed request never met it)
    of n, PASS when the exact binomial interval of k/n (counting the independent samples they are worth) lies
    below 1 − q/100, FAIL above, else INCONCLUSIVE with the samples still needed. ITL counts each stream as one
    independent sample."""
    token_slos = [(i, s) for i, s in enumerate(slos) if s["metric"] in METRICS]
    if not token_slos:
        return []
    measured = df["endpoint"].isin(endpoints).to_numpy() & (df["phase"].to_numpy() > 0) \
        & (df["status"] != CANCELLED).to_numpy()  # abandoned by their client: neither met nor missed a goal
    rows = np.flatnonzero(measured)
    plain = pd.DataFrame({c: (df[c].astype(str) if c in ("endpoint", "region", "status") else df[c]).to_numpy()[rows]
                          for c in (*TOKEN_COLUMNS, "t_intended_ref") if c in df}).reset_index(drop=True)
    groups = group_positions(plain, ["endpoint", "region"]) if len(plain) else {}
    out = []
    for i, slo in token_slos:
        names = sorted(endpoints) if slo["endpoint"] == "*" else [slo["endpoint"]]
        where = sorted(regions) if slo["region"] == "*" else [slo["region"]]
        for endpoint in names:
            for region in where:
                positions = groups.get((endpoint, region), np.empty(0, dtype=np.int64))
                values, _, streams = _metric_values(plain, positions, slo["metric"]) if len(positions) else \
                    (np.empty(0), np.empty(0, dtype=bool), 0)
                q, threshold = slo["percentile"], slo["threshold_ms"]
                exceeding = values > threshold
                n, k = len(values), int(exceeding.sum())
                tau = max(1.0, n / streams) if slo["metric"] == "itl" and streams else integrated_time(exceeding)
                v = proportion_verdict(k, n, 1 - q / 100, tau=tau)
                judged = judge_trends(_phase_series(plain, positions, values), q, threshold, v.verdict) \
                    if slo["metric"] in ("ttft", "e2e") and n else None
                if judged is not None and judged.changes_verdict:
                    v = replace(v, verdict="INCONCLUSIVE")
                estimate = sorted_percentile_ci(np.sort(values), q, effective_n=streams if slo["metric"] == "itl"
                                                else None) if n else None
                out.append(SloVerdict(
                    slo=i, description=f"{slo['metric'].upper()} p{q:g} < {threshold:g} ms", metric=slo["metric"],
                    implicit=False, endpoint=endpoint, region=region, n=n, effective_n=v.effective_n, exceeding=k,
                    verdict=v.verdict, measured=estimate.value if estimate else None,
                    ci_low=estimate.ci_low if estimate else None, ci_high=estimate.ci_high if estimate else None,
                    more_samples_needed=v.more_samples_needed, trend=judged.direction if judged else None,
                    trend_kind=judged.kind if judged else None,
                    trend_changed_verdict=judged.changes_verdict if judged else None,
                    reason=judged.reason if judged else None))
    return out


def _phase_series(plain: pd.DataFrame, positions: np.ndarray, values: np.ndarray) -> list[PhaseSeries]:
    """A group's TTFT or E2E (`values`, one a request of `positions`; +inf for a failure) per measured phase in
    time order, with each phase's stationarity: what analysis/stats/validity.py judges a trend on, as
    analysis/stats/slo.py does a latency SLO's group."""
    if "t_intended_ref" not in plain:
        return []
    phases, times = plain["phase"].to_numpy()[positions], plain["t_intended_ref"].to_numpy()[positions]
    out = []
    for phase in np.unique(phases):
        rows = np.flatnonzero(phases == phase)
        order = rows[np.argsort(times[rows], kind="stable")]
        seconds = times[order] / 1e9
        out.append(PhaseSeries(int(phase), seconds, values[order], stationarity(seconds, values[order])))
    return out


def _group_row(df: pd.DataFrame, rows: np.ndarray, duration_s: float) -> dict:
    status = df["status"].to_numpy()[rows]
    ok = rows[status == "ok"]
    outcomes = np.where(df["stream_outcome"].to_numpy()[rows] == "", "not streamed", df["stream_outcome"].to_numpy()[rows])
    ttft = df["ttft_ns"].to_numpy()[ok]
    first, last = df["t_first_token"].to_numpy()[ok], df["t_last_token"].to_numpy()[ok]
    tokens = df["output_tokens"].to_numpy()[ok].astype(np.int64)
    many = (tokens > 1) & (first >= 0)  # a whole response (stream = false) has no token instants
    tpot = (last[many] - first[many]) / (tokens[many] - 1) / 1e6
    itl = stream_gaps(df["token_event_us"].to_numpy()[ok], df["token_event_counts"].to_numpy()[ok])
    sources = df["token_source"].to_numpy()[ok]
    return {
        "requests": int(len(rows)), "ok": int(len(ok)),
        "outcomes": {str(k): int(v) for k, v in zip(*np.unique(outcomes.astype(str), return_counts=True))},
        "output_tokens": int(tokens.sum()), "output_tokens_per_s": float(tokens.sum() / duration_s),
        "mean_output_tokens": float(tokens.mean()) if len(tokens) else None,
        "token_sources": sorted({str(s) for s in sources}),
        "ttft_ms": _estimate(ttft[ttft >= 0] / 1e6),
        "tpot_ms": _estimate(tpot),
        "itl_ms": _estimate(itl.values, effective_n=int(np.count_nonzero(itl.count))),
        "e2e_ms": _estimate(df["latency_ns"].to_numpy()[ok] / 1e6),
        **_reasoning(df, ok),
        **_media(df, rows, ok),
        **_schema(df, ok),
    }


def _schema(df: pd.DataFrame, ok: np.ndarray) -> dict:
    """Structured outputs: the share of the successful streams whose reply followed the JSON Schema, with its exact
    (Clopper-Pearson) 95% interval ({} where none was checked)."""
    if "schema_valid" not in df:
        return {}
    checked = df["schema_valid"].to_numpy()[ok]
    checked = checked[checked >= 0]
    if not len(checked):
        return {}
    valid = int(np.count_nonzero(checked == 1))
    low, high = clopper_pearson(valid, len(checked))
    return {"schema_checked": int(len(checked)), "schema_valid": valid, "schema_valid_rate": valid / len(checked),
            "schema_valid_ci_low": low, "schema_valid_ci_high": high}


def _media(df: pd.DataFrame, rows: np.ndarray, ok: np.ndarray) -> dict:
    """Where requests carried images or audio: media per request, their bytes, and the prompt tokens the server
    counted per request (theirs included)."""
    if "media_count" not in df:
        return {}
    count = df["media_count"].to_numpy()[rows]
    if not (count > 0).any():
        return {}
    prompt = df["input_tokens"].to_numpy()[ok]
    prompt = prompt[prompt >= 0]
    return {"media_per_request": float(count.mean()),
            "media_bytes_per_request": float(df["media_bytes"].to_numpy()[rows].mean()),
            "mean_input_tokens": float(prompt.mean()) if len(prompt) else None}


def _reasoning(df: pd.DataFrame, ok: np.ndarray) -> dict:
    """Where streams reasoned first (reasoning_content deltas): the time to the first answer token (content or a
    tool call) and the reasoning tokens, beside TTFT (the first token of either); {} where none did."""
    if "reasoning_tokens" not in df:
        return {}
    reasoning = df["reasoning_tokens"].to_numpy()[ok]
    if not (reasoning >= 0).any():
        return {}
    ttfa = df["ttfa_ns"].to_numpy()[ok]
    return {"ttfa_ms": _estimate(ttfa[ttfa >= 0] / 1e6), "reasoning_streams": int((reasoning >= 0).sum()),
            "mean_reasoning_tokens": float(reasoning[reasoning >= 0].mean())}


def token_table(df: pd.DataFrame, duration_s: float, endpoints: set[str],
                slos: Sequence[dict] = ()) -> list[TokenRow]:
    """Per endpoint × region, per endpoint and overall: TTFT, TPOT, ITL and E2E percentiles with intervals,
    output tokens/s, goodput (token_goodput), how streams ended ("not streamed": refused before a stream began) and
    where token counts came from — for the measured phases' requests to the generative `endpoints` (none: [])."""
    streamed = df["endpoint"].isin(endpoints).to_numpy() & (df["phase"].to_numpy() > 0)
    rows = np.flatnonzero(streamed)
    if not len(rows):
        return []
    plain = pd.DataFrame({c: (df[c].astype(str) if c in ("endpoint", "region", "status", "stream_outcome",
                                                            "token_source") else df[c]).to_numpy()[rows]
                          for c in TOKEN_COLUMNS if c in df}).reset_index(drop=True)
    out = []
    groups = group_positions(plain, ["endpoint", "region"])
    for (endpoint, region), positions in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        out.append({"endpoint": str(endpoint), "region": str(region), **_group_row(plain, positions, duration_s)})
    for endpoint in sorted(set(plain["endpoint"])):
        positions = np.flatnonzero(plain["endpoint"].to_numpy() == endpoint)
        out.append({"endpoint": endpoint, "region": "*", **_group_row(plain, positions, duration_s)})
    out.append({"endpoint": "*", "region": "*", **_group_row(plain, np.arange(len(plain)), duration_s)})
    goodput = token_goodput(df, list(slos), duration_s, endpoints)
    return [TokenRow(**row, goodput_rps=goodput.get((row["endpoint"], row["region"]), 0.0)) for row in out]


def _ok_streams(df: pd.DataFrame, endpoints: set[str]) -> np.ndarray:
    """Positions of the measured phases' successful requests to the generative `endpoints`."""
    return np.flatnonzero(df["endpoint"].isin(endpoints).to_numpy() & (df["phase"].to_numpy() > 0)
                          & (strings(df["status"]) == "ok"))


def _tail_curve(values: np.ndarray, points: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """(x, 1 − CDF) of `values` at most `points` points, dense in the tail."""
    x = np.sort(values)
    n = len(x)
    at = np.unique(np.r_[np.linspace(0, n - 1, points // 2).astype(np.int64),
                         n - np.unique(np.geomspace(1, n, points // 2).astype(np.int64))])
    return x[at], 1.0 - at / n


def token_curves(df: pd.DataFrame, endpoints: set[str]) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Per metric (ttft, tpot) and region, 1 − CDF (ms) of the measured successful streams."""
    rows = _ok_streams(df, endpoints)
    region = strings(df["region"])[rows]
    ttft = df["ttft_ns"].to_numpy()[rows] / 1e6
    tokens = df["output_tokens"].to_numpy()[rows].astype(np.int64)
    span = (df["t_last_token"].to_numpy()[rows] - df["t_first_token"].to_numpy()[rows]) / 1e6
    out: dict[str, dict] = {"ttft": {}, "tpot": {}}
    for name in sorted(set(region)):
        mine = region == name
        if (mine & (ttft >= 0)).any():
            out["ttft"][name] = _tail_curve(ttft[mine & (ttft >= 0)])
        many = mine & (tokens > 1) & (ttft >= 0)
        if many.any():
            out["tpot"][name] = _tail_curve(span[many] / (tokens[many] - 1))
    return out


TIMELINE_COLUMNS = ("endpoint", "region", "phase", "status", "t_intended_ref", "ttft_ns", "token_event_us",
                    "token_event_counts")


def token_timeline(df: pd.DataFrame, endpoints: set[str]) -> TokenTimeline | None:
    """Per second of the run (reference time from the first intended send), per region: output tokens received
    (each token event placed at its own instant: intended send + TTFT + its offset) and the TTFT p99 of the streams
    intended in that second. None without streams."""
    rows = _ok_streams(df, endpoints)
    if not len(rows):
        return None
    t0 = int(df["t_intended_ref"].to_numpy()[rows].min())
    intended_s = (df["t_intended_ref"].to_numpy()[rows] - t0) / 1e9
    first_s = intended_s + df["ttft_ns"].to_numpy()[rows] / 1e9
    offsets, counts = df["token_event_us"].to_numpy()[rows], df["token_event_counts"].to_numpy()[rows]
    region = strings(df["region"])[rows]
    ttft_ms = df["ttft_ns"].to_numpy()[rows] / 1e6
    event_s = [first + np.frombuffer(o, dtype="<i4") / 1e6 for first, o in zip(first_s, offsets)]
    whole_s = int(np.floor(max(float(np.max(e)) if len(e) else 0.0 for e in event_s))) + 1
    edges = np.arange(whole_s + 1)
    tokens, p99 = {}, {}
    for name in sorted(set(region)):
        mine = np.flatnonzero(region == name)
        at = np.concatenate([event_s[i] for i in mine])
        weights = np.concatenate([np.frombuffer(counts[i], dtype="<u2").astype(np.float64) for i in mine])
        tokens[name] = np.histogram(at, edges, weights=weights)[0]
        second = np.floor(intended_s[mine]).astype(np.int64)
        line = np.full(whole_s, np.nan)
        for s in np.unique(second):
            line[s] = np.percentile(ttft_ms[mine][second == s], 99)
        p99[name] = line
    return TokenTimeline(t0_ns=t0, whole_s=whole_s, tokens_per_s=tokens, ttft_p99_ms=p99)


def good_streams(df: pd.DataFrame, slos: list[dict], endpoints: set[str]) -> tuple[np.ndarray, np.ndarray]:
    """(positions of the measured phases' requests to the generative `endpoints`, whether each succeeded within
    every token SLO that applies to it — each judged on the request's own value: its TTFT, TPOT, E2E, and for ITL
    its largest gap). A latency SLO that names a generative endpoint applies to it as an E2E SLO (as its verdict
    does: analysis/stats/slo.py); one over every endpoint ('*') is the one-shot endpoints' goal, not a stream's."""
    rows = np.flatnonzero(df["endpoint"].isin(endpoints).to_numpy() & (df["phase"].to_numpy() > 0))
    endpoint, region = strings(df["endpoint"])[rows], strings(df["region"])[rows]
    good = strings(df["status"])[rows] == "ok"
    token_slos = [s for s in slos if s["metric"] in METRICS] + [
        s | {"metric": "e2e"} for s in slos if s["metric"] == "latency" and s["endpoint"] in endpoints]
    if token_slos:
        tokens = df["output_tokens"].to_numpy()[rows].astype(np.int64)
        span = (df["t_last_token"].to_numpy()[rows] - df["t_first_token"].to_numpy()[rows]) / 1e6
        per_request = {
            "ttft": df["ttft_ns"].to_numpy()[rows] / 1e6,
            "tpot": np.where((tokens > 1) & (df["t_first_token"].to_numpy()[rows] >= 0),
                             span / np.maximum(tokens - 1, 1), 0.0),
            "e2e": df["latency_ns"].to_numpy()[rows] / 1e6,
            "itl": stream_gaps(df["token_event_us"].to_numpy()[rows], df["token_event_counts"].to_numpy()[rows]
                               ).largest()}
        for slo in token_slos:
            applies = np.ones(len(rows), dtype=bool)
            if slo["endpoint"] != "*":
                applies &= endpoint == slo["endpoint"]
            if slo["region"] != "*":
                applies &= region == slo["region"]
            good &= ~applies | (per_request[slo["metric"]] <= slo["threshold_ms"])
    return rows, good


def token_goodput(df: pd.DataFrame, slos: list[dict], duration_s: float, endpoints: set[str]) -> dict:
    """(endpoint, region) → requests per second that succeeded within every token SLO that applies to them
    (good_streams)."""
    rows, good = good_streams(df, slos, endpoints)
    endpoint, region = strings(df["endpoint"])[rows], strings(df["region"])[rows]
    out = {}
    for e, r in set(zip(endpoint, region)):
        out[(e, r)] = float(good[(endpoint == e) & (region == r)].sum() / duration_s)
    for e in set(endpoint):
        out[(e, "*")] = float(good[endpoint == e].sum() / duration_s)
    out[("*", "*")] = float(good.sum() / duration_s)
    return out


MIX_SEPARATOR = " · "  # an endpoint × model group's name while the by-model rows are computed


def _by_model(df: pd.DataFrame, mixed: set[str]) -> tuple[pd.DataFrame, set[str]]:
    """The rows of the endpoints with a model mix (`mixed`), each one's endpoint named 'endpoint · model', and those
    names: every statistic of the token table and its verdicts, computed per endpoint × model as per endpoint."""
    rows = np.flatnonzero(df["endpoint"].isin(mixed).to_numpy())
    frame = df.iloc[rows].reset_index(drop=True)
    names = (frame["endpoint"].astype(str) + MIX_SEPARATOR + frame["model"].astype(str)).to_numpy()
    frame = frame.assign(endpoint=names)
    return frame, set(names)


R = TypeVar("R", TokenRow, SloVerdict)


def _split(row: R, **more: object) -> R:
    """`row` of the endpoint × model named as one ("endpoint·model") with the endpoint and the model apart."""
    endpoint, _, model = row.endpoint.partition(MIX_SEPARATOR)
    return row.model_copy(update={"endpoint": endpoint, "model": model or "*", **more})


@dataclass(frozen=True)
class ByModel:
    """The endpoints with a model mix, per model: their token rows and the verdicts of the SLOs that name a model."""

    rows: list[TokenRow] = field(default_factory=list)
    verdicts: list[SloVerdict] = field(default_factory=list)


def by_model_section(df: pd.DataFrame, duration_s: float, mixed: set[str], slos: list[dict],
                     model_slos: list[tuple[int, dict]], regions: list[str]) -> ByModel:
    """For the endpoints whose requests draw their model from a mix: the token table per endpoint × model × region
    and per endpoint × model ('*' region) — its goodput judged by the endpoint's SLOs (`slos`) and its model's — and
    the verdicts of the SLOs that name a model (`model_slos`: (index in the profile's SLOs, the SLO)), judged as
    token SLOs on that model's requests. Empty without a mix."""
    if not mixed:
        return ByModel()
    frame, names = _by_model(df, mixed)
    own = [s | {"endpoint": s["endpoint"] + MIX_SEPARATOR + s["model"],
                "metric": "e2e" if s["metric"] == "latency" else s["metric"]} for _, s in model_slos]
    inherited = [s | {"endpoint": name} for s in slos if s["endpoint"] in mixed
                 for name in names if name.partition(MIX_SEPARATOR)[0] == s["endpoint"]]
    general = [s for s in slos if s["endpoint"] == "*"]
    rows = [_split(r) for r in token_table(frame, duration_s, names, own + inherited + general) if r.endpoint != "*"]
    verdicts = []
    for v in token_verdicts(frame, own, names, regions):
        index, slo = model_slos[v.slo]
        verdicts.append(_split(v, slo=index, description=f"{v.description} ({slo['model']})"))
    return ByModel(rows, verdicts)
