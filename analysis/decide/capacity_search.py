"""Capacity search, the pure parts: which rate to try next, how long a trial must be, what a trial's result
means, and what to provision (Little's law and a utilization bound).

The search grows the rate geometrically while trials PASS, then bisects the bracket [highest pass, lowest
fail] until hi / lo − 1 ≤ tolerance. A trial passes when every latency SLO (on a generative profile: every TTFT,
TPOT, ITL and E2E SLO) PASSES (an INCONCLUSIVE one is not a pass: too few samples or too close to call) and no
error-rate SLO FAILS. A trial whose latency rose
through it (a growing backlog: analysis/stats/validity.py) fails whatever its SLO verdicts, since it is above
capacity and a longer trial would only be slower. A trial whose generators
saturated — and whose latency SLOs did not clearly fail anyway — ends the search: the answer is then
"at least" the highest passing rate.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tailrace.analysis.stats.estimators import min_samples_for
from tailrace.contract.generator_limits import is_generator_limit
from tailrace.contract.profile import Slo
from tailrace.contract.summary import Recommendation, SloVerdict

PASS, FAIL, GENERATOR_LIMIT, UNDECIDED = "pass", "fail", "generator-limit", "undecided"
# the SLOs a capacity is judged on: a one-shot request's latency, a streamed one's TTFT, TPOT, ITL and E2E
LATENCY_METRICS = ("latency", "ttft", "tpot", "itl", "e2e")


@dataclass
class SearchState:
    start_rate: float
    growth: float = 2.0
    tolerance: float = 0.05
    min_rate: float = 0.5
    trials: list[tuple[float, str]] = field(default_factory=list)

    @property
    def highest_pass(self) -> float | None:
        passes = [r for r, o in self.trials if o == PASS]
        return max(passes) if passes else None

    @property
    def lowest_fail(self) -> float | None:
        fails = [r for r, o in self.trials if o == FAIL]
        return min(fails) if fails else None

    @property
    def generator_limited(self) -> bool:
        return any(o == GENERATOR_LIMIT for _, o in self.trials)

    def converged(self) -> bool:
        lo, hi = self.highest_pass, self.lowest_fail
        return lo is not None and hi is not None and hi / lo - 1 <= self.tolerance

    def next_rate(self) -> float | None:
        """The next rate to try, or None when the search is over."""
        if self.generator_limited or self.converged():
            return None
        lo, hi = self.highest_pass, self.lowest_fail
        if not self.trials:
            return self.start_rate
        if hi is None:
            return lo * self.growth if lo is not None else self.start_rate  # every trial passed so far: grow
        if lo is None:
            nxt = hi / self.growth  # even the first failed: shrink until something passes
            return nxt if nxt >= self.min_rate else None
        return (lo + hi) / 2

    def record(self, rate: float, outcome: str) -> None:
        self.trials.append((rate, outcome))


def trial_duration_s(rate: float, slos: Sequence[Slo], regions: dict[str, float], weights: dict[str, float],
                     min_s: float, max_s: float, margin: float) -> float:
    """Long enough that each latency (or token) SLO's smallest group holds `margin` × the samples its percentile
    needs; `regions`: each region's share, `weights`: each endpoint's."""
    total_w = sum(weights.values())
    needed = min_s
    for slo in slos:
        if slo.metric not in LATENCY_METRICS or slo.percentile is None:
            continue
        n = min_samples_for(slo.percentile / 100.0)
        region_share = regions[slo.region] if slo.region != "*" else min(regions.values())
        endpoint_share = (weights[slo.endpoint] if slo.endpoint != "*" else min(weights.values())) / total_w
        needed = max(needed, margin * n / (rate * region_share * endpoint_share))
    return float(min(max_s, math.ceil(needed)))


def generator_saturated(valid: bool, invalid_reasons: list[str]) -> bool:
    """Whether a run is invalid because its generator could not keep the schedule (behind it, or at its cap of
    requests in flight): its numbers are the generator's, not the server's, and a second run may hold it."""
    return not valid and any(is_generator_limit(r) for r in invalid_reasons)


def classify_trial(slo_verdicts: list[SloVerdict], valid: bool, invalid_reasons: list[str]) -> tuple[str, str]:
    """(outcome, why) of one trial from its SLO verdicts and validity."""
    latency = [v for v in slo_verdicts if v.metric in LATENCY_METRICS]
    errors = [v for v in slo_verdicts if v.metric == "error_rate"]
    failed = [v for v in latency + errors if v.verdict == "FAIL"]
    saturated = generator_saturated(valid, invalid_reasons)
    if failed:
        return FAIL, "; ".join(sorted({f"{v.description} ({v.endpoint}/{v.region})" for v in failed}))[:300]
    backlog = [v for v in latency if v.backlog]
    if backlog:  # latency still rising at the trial's end: the queue grows, so a longer trial would only get slower
        return FAIL, "backlog growing — " + "; ".join(sorted({f"{v.endpoint}/{v.region}: {v.reason}"
                                                              for v in backlog}))[:280]
    if saturated:
        return GENERATOR_LIMIT, "; ".join(invalid_reasons)[:300]
    if not valid:
        return FAIL, "run invalid: " + "; ".join(invalid_reasons)[:280]
    inconclusive = [v for v in latency if v.verdict != "PASS"]
    if inconclusive:
        return UNDECIDED, "not decidably under the SLO: " + "; ".join(
            sorted({f"{v.description} ({v.endpoint}/{v.region}) {v.verdict}" for v in inconclusive}))[:260]
    return PASS, "every latency SLO passes"


DECIDE_MARGIN = 1.25  # a retry runs this much longer than the extrapolation says deciding takes


def duration_to_decide_s(slo_verdicts: list[SloVerdict], duration_s: float) -> float | None:
    """How long a trial at the same rate would have to run for every INCONCLUSIVE latency SLO to decide, if the
    share of slow requests and their correlation that this `duration_s` trial measured hold: the duration scaled
    by (n + the samples still needed) / n of the neediest group (analysis/stats/estimators.py's proportion_verdict). A group
    whose latency fell through the trial (still settling: analysis/stats/slo.py makes its PASS INCONCLUSIVE) needs a
    trial at least twice as long. None when some group sits on its bound or sent nothing — no finite trial
    decides it."""
    longest = duration_s
    for v in slo_verdicts:
        if v.metric not in LATENCY_METRICS or v.verdict != "INCONCLUSIVE":
            continue
        if v.trend == "falling":
            longest = max(longest, duration_s * 2)
        if v.trend == "falling" and v.more_samples_needed is None:
            continue  # its samples decided: only the settling needs time
        if not v.n or v.more_samples_needed is None:
            return None
        longest = max(longest, duration_s * (v.n + v.more_samples_needed) / v.n)
    return longest


def retry_duration_s(outcome: str, duration_s: float, max_s: float, generator_retried: bool,
                     to_decide_s: float | None = None, first_at_rate: bool = False) -> float | None:
    """How long to run the same rate again, or None to accept the outcome. An undecided trial runs again long
    enough to decide (`to_decide_s`: duration_to_decide_s, with DECIDE_MARGIN; at least twice as long, at most
    max_s) — unless deciding would take longer than max_s: its slow share is then too close to the SLO's bound
    for any trial to tell, the rate is as near capacity as the search can resolve, and it counts as not passing
    rather than after a ladder of ever longer trials. The first trial at a rate (`first_at_rate`) always gets a
    second one, as a generator-limit trial does (once, at the same length): one stall of a noisy machine (a GC
    pause, a neighbour's burst) can put a short trial's slow share near the bound and must not end the search."""
    if outcome == UNDECIDED:
        hopeless = to_decide_s is None or to_decide_s > max_s
        if hopeless and not first_at_rate:
            return None
        decided_in = duration_s * 2 if hopeless or to_decide_s is None else to_decide_s * DECIDE_MARGIN
        longer = min(max_s, max(duration_s * 2, decided_in))
        return longer if longer > duration_s else None
    if outcome == GENERATOR_LIMIT and not generator_retried:
        return duration_s
    return None


def out_of_reach(to_decide_s: float | None, max_s: float, setting: str) -> str:
    """Why a run left undecided is not run again (longer): how long deciding would take against the longest run
    `setting` allows (its name, e.g. max_trial_s), or that no run would decide it."""
    if to_decide_s is None:
        return "its slow share sits on the SLO's bound: no run decides it"
    return f"deciding would take ~{to_decide_s:,.0f} s ({setting} {max_s:g})"


def beyond_reach(to_decide_s: float | None, max_s: float) -> str:
    """Why an undecided trial is not run again: appended to its `why`."""
    consequence = "" if to_decide_s is None else ": as near capacity as the search resolves"
    return f" — {out_of_reach(to_decide_s, max_s, 'max_trial_s')}{consequence}; counted as not passing"


def recommendation(capacity_rps: float, mean_service_ms: float | None, slots: int, mean_latency_ms: float | None,
                   headroom: float, max_utilization: float, peak_rate: float | None) -> Recommendation:
    """What to provision: the rate one instance should be planned at (the SLO capacity divided by the headroom,
    and no more than max_utilization × slots / S), the instances a peak needs, and by Little's law the
    requests in flight (L = λ·W) at that rate."""
    by_slo = capacity_rps / headroom
    by_utilization = max_utilization * slots / (mean_service_ms / 1000) if mean_service_ms else None
    planned = min(by_slo, by_utilization) if by_utilization else by_slo
    out = Recommendation(
        headroom=headroom, max_utilization=max_utilization, slots=slots, mean_service_ms=mean_service_ms,
        rate_by_slo_headroom=by_slo, rate_by_utilization=by_utilization, planned_rate_per_instance=planned,
        limited_by="utilization" if by_utilization and by_utilization < by_slo else "latency SLO",
        utilization_at_planned=planned * (mean_service_ms / 1000) / slots if mean_service_ms else None,
        in_flight_at_planned=planned * mean_latency_ms / 1000 if mean_latency_ms else None, peak_rate=peak_rate)
    if peak_rate:
        instances = max(1, math.ceil(peak_rate / planned))
        out.instances_for_peak, out.provisioned_rate = instances, instances * planned
    return out
