"""Model-variant decisions: Pareto frontiers, scores, constraints and pairwise tests on constructed results,
and the variants section of a real run (embedded fp32 / int8 / logreg, one process each, in-process baseline)."""


from __future__ import annotations

import numpy as np
import pytest

from tailrace.analysis.decide.decision import composite_scores, constraint_failures, decide, dominates, normalised, pareto
from tailrace.contract.summary.sections import VariantRow


def variant(name, p95, acc, mem, cap, samples=2000) -> VariantRow:
    return VariantRow(name=name, model=name, p95_ms=p95, accuracy=acc, memory_mb=mem, capacity_rps=cap,
                      samples=samples, correct=int(round(acc * samples)))


ROWS = [variant("fast", 10.0, 0.95, 300.0, 900.0), variant("accurate", 30.0, 0.99, 400.0, 300.0),
        variant("middling", 30.0, 0.95, 500.0, 250.0), variant("lean", 12.0, 0.96, 100.0, 800.0)]


def test_dominance_and_pareto_frontier():
    objectives = [("p95_ms", False), ("accuracy", True)]
    assert dominates(ROWS[0], ROWS[2], objectives)  # same accuracy, lower latency
    assert not dominates(ROWS[0], ROWS[1], objectives) and not dominates(ROWS[1], ROWS[0], objectives)
    front = pareto(ROWS, objectives)
    assert front == {"fast": [], "accurate": [], "middling": ["fast", "accurate", "lean"], "lean": []}
    mem = pareto(ROWS, [("memory_mb", False), ("capacity_rps", True)])
    assert mem["lean"] == [] and mem["fast"] == [] and set(mem["middling"]) == {"fast", "accurate", "lean"}
    assert not dominates(ROWS[0], ROWS[0].model_copy(update={"p95_ms": None}), objectives)  # unknown never dominated


def test_normalisation_respects_direction_and_the_score_weights():
    lat = normalised(ROWS, "p95_ms")
    assert lat["fast"] == 1.0 and lat["accurate"] == 0.0 and lat["lean"] == pytest.approx(0.9)
    acc = normalised(ROWS, "accuracy")
    assert acc["accurate"] == 1.0 and acc["fast"] == 0.0
    only_latency = composite_scores(ROWS, {"p95_ms": 1.0})
    assert max(only_latency, key=only_latency.get) == "fast"
    only_accuracy = composite_scores(ROWS, {"accuracy": 1.0, "p95_ms": 0.0})
    assert max(only_accuracy, key=only_accuracy.get) == "accurate"


def test_constraints_remove_variants_and_name_the_reason():
    fails = constraint_failures(ROWS[1], {"p95_ms_max": 20, "accuracy_min": 0.9, "memory_mb_max": None})
    assert fails == ["p95_ms 30 violates ≤ 20"]
    assert constraint_failures(ROWS[3].model_copy(update={"memory_mb": None}), {"memory_mb_max": 200}) == \
        ["memory_mb unknown (constraint ≤ 200)"]


def test_decision_table_ranks_survivors_with_pairwise_significance():
    rng = np.random.default_rng(3)
    latencies = {"fast": rng.gamma(4, 2.0, 3000), "lean": rng.gamma(4, 2.4, 3000),
                 "accurate": rng.gamma(4, 6.0, 3000), "middling": rng.gamma(4, 6.0, 3000)}
    d = decide(ROWS, latencies, {"p95_ms": 1.0, "accuracy": 1.0, "memory_mb": 0.5, "capacity_rps": 0.5},
               {"p95_ms_max": 20, "accuracy_min": 0.95})
    table = {v.name: v for v in d.variants}
    assert not table["accurate"].survives and not table["middling"].survives
    assert d.ranking == ["lean", "fast"] and d.recommended == "lean"
    assert table["lean"].rank == 1 and table["accurate"].rank is None
    [test] = d.pairwise
    assert (test.a, test.b) == ("lean", "fast")
    assert test.latency_significant and test.mann_whitney_p < 1e-6 and test.cohens_d > 0
    assert test.accuracy_p > 0.05 and not test.accuracy_significant  # 0.96 vs 0.95 on 2000 samples
    assert test.accuracy_test == "Fisher (counts)"
    # lean's only latency / accuracy edge over fast (accuracy) is not significant: the report says so
    [caveat] = d.caveats
    assert caveat.startswith("lean ranks above fast on higher accuracy") and "not significant" in caveat


def test_decision_flags_a_ranking_resting_on_noise():
    rng = np.random.default_rng(4)
    rows = [variant("a", 10.0, 0.95, 100.0, 500.0), variant("b", 10.1, 0.95, 120.0, 480.0)]
    same = {"a": rng.gamma(4, 2.0, 500), "b": rng.gamma(4, 2.0, 500)}
    d = decide(rows, same, {"p95_ms": 1.0, "memory_mb": 1.0}, {})
    assert d.recommended == "a" and len(d.caveats) == 1 and "not significant" in d.caveats[0]


def test_accuracy_compared_per_sample_with_mcnemar():
    # 500 held-out samples: a is right on 20 that b gets wrong, b on 5 that a gets wrong
    a = {i: i >= 30 or i < 20 for i in range(500)}
    b = {i: i >= 30 or 20 <= i < 25 for i in range(500)}
    rows = [variant("a", 10.0, 0.98, 100.0, 500.0), variant("b", 9.0, 0.95, 100.0, 500.0)]
    lat = {"a": np.full(50, 10.0), "b": np.full(50, 9.0)}
    d = decide(rows, lat, {"accuracy": 1.0}, {}, {"a": a, "b": b})
    [test] = d.pairwise
    assert test.accuracy_test == "McNemar, 500 distinct samples"
    assert test.accuracy_diff == pytest.approx(15 / 500)
    from scipy.stats import binomtest
    assert test.accuracy_p == pytest.approx(binomtest(20, 25, 0.5).pvalue) and test.accuracy_significant
    assert d.recommended == "a" and d.caveats == []  # a's edge (accuracy) is significant


def test_no_survivor_means_no_recommendation():
    d = decide(ROWS, {}, {"p95_ms": 1.0}, {"accuracy_min": 0.999})
    assert d.recommended is None and d.ranking == [] and d.pairwise == []


def test_energy_ranks_constrains_and_draws_a_frontier():
    """Seed 003's decision: an energy budget per request, energy in the composite score, p95 vs energy Pareto."""
    rows = [ROWS[0].model_copy(update={"energy_mj": 40.0, "energy_basis": "measured"}),
            ROWS[3].model_copy(update={"energy_mj": 12.0, "energy_basis": "measured"}),
            ROWS[1].model_copy(update={"energy_mj": 90.0, "energy_basis": "measured"})]
    d = decide(rows, {}, {"energy_mj": 1.0}, {"energy_budget_mj": 50})
    table = {v.name: v for v in d.variants}
    assert table["accurate"].constraint_failures == ["energy_mj 90 violates ≤ 50"]
    assert d.ranking == ["lean", "fast"]
    assert table["fast"].dominated_latency_energy_by == [] and table["accurate"].dominated_latency_energy_by \
        == ["fast", "lean"]


def test_estimated_energy_is_never_ranked_against_measured_joules():
    rows = [ROWS[0].model_copy(update={"energy_mj": 40.0, "energy_basis": "measured"}),
            ROWS[3].model_copy(update={"energy_mj": 1.0, "energy_basis": "estimate: model CPU"})]
    d = decide(rows, {}, {"energy_mj": 1.0, "p95_ms": 0.0}, {})
    table = {v.name: v for v in d.variants}
    assert table["lean"].energy_mj is None and table["lean"].estimated_energy_mj == 1.0
    assert any("measured for some variants and not for others: it is ranked on those (fast) only" in c
               for c in d.caveats)
    assert table["fast"].score == 1.0 and table["lean"].score == 0.0


def test_the_terminal_summary_says_which_variant_to_ship_and_its_caveats():
    """`tailrace run profiles/variants.toml` answered its question only in the report: the terminal now opens the
    answer as the report's section does — the variant, the ranking, each caveat; none where no variant survives."""
    import io

    from rich.console import Console

    from tailrace.analysis.analyze_command import _print_decision
    from tailrace.contract.summary import RunSummary
    from tests import ROOT

    rng = np.random.default_rng(4)
    rows = [variant("a", 10.0, 0.95, 100.0, 500.0), variant("b", 10.1, 0.95, 120.0, 480.0)]
    summary = RunSummary.from_json((ROOT / "tests" / "data" / "saved_runs" / "demo.summary.json").read_text())
    out = io.StringIO()
    console = Console(file=out, width=200)
    for d in (decide(rows, {"a": rng.gamma(4, 2.0, 500), "b": rng.gamma(4, 2.0, 500)},
                     {"p95_ms": 1.0, "memory_mb": 1.0}, {}),
              decide(ROWS, {}, {"p95_ms": 1.0}, {"accuracy_min": 0.999})):
        _print_decision(console, summary.model_copy(update={"decision": d}))
    lines = out.getvalue().splitlines()
    assert lines[0] == "decision: ship a (ranking: a > b)"
    assert lines[1].startswith("caveat: a ranks above b") and "not significant" in lines[1]
    assert lines[2] == "decision: none — no variant meets every constraint"
    _print_decision(console, summary.model_copy(update={"decision": None}))
    assert len(out.getvalue().splitlines()) == 3
