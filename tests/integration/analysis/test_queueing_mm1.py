"""The analysis checks itself against queueing theory on a real run of synthetic_mm1 (one slot, Exp service)."""
from __future__ import annotations

import os

import pytest

from tailrace.analysis.analyze import analyze_run
from tests.support import make_profile, run_with, split_cpus

# μ = 500/s: 20 s at ρ 0.5 is 5,000 arrivals, and a short relaxation time: the mean wait to a few per cent. The
# long runs at ρ 0.8 (120 s, where one run's sampling error is ~6% and stalls weigh 1/(1 − ρ)) are
# bench/queueing_mm1.py's, with the spread across repeats in docs/BENCHMARKS.md.
MEAN_SERVICE_MS = 2.0
# The endpoint on one core, the generator on the other: sharing both cores, they delay each other, and the
# server then reads arrivals in bunches (arrival c_a² 1.2–1.4 measured at the server instead of ~1.1, mean wait
# +15–55% over M/M/1 in single runs instead of +6–8%).
ENDPOINT_CPUS, GENERATOR_CPUS = split_cpus()


def mm1_run(model_repo, out, rate: float, duration_s: float):
    profile = make_profile(
        model_repo,
        endpoints=[{"name": "mm1", "url": "embedded", "protocol": "kserve-http", "model": "synthetic_mm1"}],
        regions=[{"name": "local", "share": 1.0}],
        load={"rate": rate, "duration_s": duration_s, "warmup_s": 3, "seed": int(rate)},
        embedded={"models_dir": str(model_repo), "slots": {"synthetic_mm1": 1},
                  "queue_depth": {"synthetic_mm1": 4096}, "mm1_mean_ms": MEAN_SERVICE_MS,
                  "cpus": ENDPOINT_CPUS},
        generator={"cpus": GENERATOR_CPUS},
        clock={"servers": ["embedded"], "interval_s": 10})
    affinity = {}

    def record_affinity(run):
        affinity["endpoint"] = os.sched_getaffinity(run.servers.instances[0].process.pid)
        affinity["worker"] = os.sched_getaffinity(run.workers["local-w0"].pid)
        affinity["master"] = os.sched_getaffinity(run.master.pid)

    run, manifest = run_with(profile, out, during=record_affinity)
    if ENDPOINT_CPUS:  # the pinning took effect on the processes the run started
        assert affinity == {"endpoint": set(ENDPOINT_CPUS), "worker": set(GENERATOR_CPUS),
                            "master": set(GENERATOR_CPUS)}, affinity
    return manifest, analyze_run(run.run_dir).summary.to_dict()


def queueing_failures(manifest: dict, summary: dict, rho: float) -> list[str]:
    """What of the queueing analysis disagrees with theory in one run (empty: all agrees)."""
    failures = []
    # Generator and server share this 2-core machine, so a window or two may exceed the saturation threshold
    # (the run is then INVALID, as it must be); what matters here is that arrivals stayed close to schedule.
    if not all("send lag" in reason for reason in manifest["invalid_reasons"]):
        failures.append(f"invalid for another reason than send lag: {manifest['invalid_reasons']}")
    overall = next(r for r in summary["latency"] if r["endpoint"] == "*" and r["region"] == "*")
    if overall["send_lag_p99_ms"] >= 10.0:
        failures.append(f"send lag p99 {overall['send_lag_p99_ms']:.2f} ms")
    q = next(row for row in summary["queueing"] if row["model"] == "synthetic_mm1")
    mm1 = q["mm1"]
    # This VM's hypervisor takes CPU in bursts under load (steal: 2–5% of a run, up to ~19% in a second): it
    # bunches the arrivals the server sees (c_a² 1.1–1.5 instead of 1) and stretches services in clusters. The
    # queue that ran is then a G/G/1 one; M/G/1 assumes Poisson arrivals, and M/M/1 an exponential service too.
    poisson_arrivals = abs(mm1["arrival_cv2"] - 1) <= 0.1
    exponential_service = abs(mm1["service_cv2"] - 1) <= 0.1
    checks = {
        "Little's law within 5%": abs(q["littles_gap"]) < 0.05,
        "mean service within 15% of its nominal mean": abs(q["mean_service_ms"] - MEAN_SERVICE_MS) / MEAN_SERVICE_MS < 0.15,
        "utilization within 0.1 of the target": abs(q["utilization"] - rho) < 0.1,
        "utilization flagged above 0.7": q["utilization_flag"] == (q["utilization"] > 0.7),
        # the synthetic service is Exp(mean) plus the host's jitter: about exponential
        "service CV² in (0.8, 1.6)": 0.8 < mm1["service_cv2"] < 1.6,
        # the measured wait agrees with Allen–Cunneen on the measured c_a² and c_s² ...
        "mean wait within 15% of G/G/1": abs(mm1["gg1_rel_error"]) < 0.15,
        # ... with Pollaczek–Khinchine on the measured E[S²] while the arrivals stayed Poisson ...
        "mean wait within 15% of M/G/1": not poisson_arrivals or abs(mm1["pk_rel_error"]) < 0.15,
        # ... and with M/M/1 itself while the service stayed exponential too
        "mean wait within 15% of M/M/1": not (poisson_arrivals and exponential_service)
        or abs(mm1["mean_wait_rel_error"]) < 0.15,
    }
    failures += [f"{name}: {q}" for name, ok in checks.items() if not ok]
    return failures


@pytest.mark.timeout(600)  # up to three runs of ~45 s each
def test_littles_law_and_mm1_wait(model_repo, tmp_path):
    """The analysis agrees with queueing theory on a real run at ρ 0.5: Little's law, utilization, and the mean
    wait against G/G/1 on the measured c_a² and c_s², and against M/G/1 and M/M/1 when the run kept to their
    assumptions. A cluster of hypervisor stalls can move one run; so a run that disagrees is repeated, up to three
    runs, and the test fails when all three disagree. Every run's figures are printed."""
    rho, duration_s = 0.5, 20
    failures = []
    for attempt in (1, 2, 3):
        manifest, summary = mm1_run(model_repo, tmp_path / f"attempt-{attempt}", rho * 1000 / MEAN_SERVICE_MS,
                                    duration_s)
        found = queueing_failures(manifest, summary, rho)
        mm1 = next(row for row in summary["queueing"] if row["model"] == "synthetic_mm1")["mm1"]
        steal = (manifest.get("host_cpu") or {}).get("steal_fraction")
        print(f"attempt {attempt}: host steal {steal if steal is None else f'{steal:.1%}'}, "
              f"c_a² {mm1['arrival_cv2']:.3f} c_s² {mm1['service_cv2']:.3f} vs G/G/1 "
              f"{mm1['gg1_rel_error']:+.1%} vs M/G/1 {mm1['pk_rel_error']:+.1%} vs M/M/1 {mm1['mean_wait_rel_error']:+.1%}")
        if not found:
            return
        failures.append(f"attempt {attempt}: " + " | ".join(found))
        print(failures[-1])
    pytest.fail("\n".join(failures))
