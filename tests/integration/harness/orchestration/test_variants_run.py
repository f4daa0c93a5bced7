"""The variants profile run for real: the decision section from measured endpoints."""


from __future__ import annotations

import pytest

from tests import ROOT

pytestmark = pytest.mark.shares_machine  # functional checks at low rates: may run beside another such test


def variant(name, p95, acc, mem, cap, samples=2000):
    return {"name": name, "model": name, "p95_ms": p95, "accuracy": acc, "memory_mb": mem, "capacity_rps": cap,
            "samples": samples, "correct": int(round(acc * samples))}


@pytest.fixture(scope="module")
def variants_run(model_repo, tmp_path_factory):

    from tailrace.analysis.analyze import analyze_run
    from tailrace.contract.profile import load_profile
    from tests.support import run_with

    profile = load_profile(ROOT / "profiles" / "variants.toml")
    data = str(model_repo / "_data" / "digits_test.npz")  # the shipped profile names build/models' copy
    profile = profile.model_copy(update={
        "endpoints": [e.model_copy(update={"data": data}) for e in profile.endpoints],
        "load": profile.load.model_copy(update={"rate": 150, "duration_s": 8, "warmup_s": 1}),
        "embedded": profile.embedded.model_copy(update={"models_dir": str(model_repo)}),
        "server_stats": profile.server_stats.model_copy(update={"interval_s": 1})})
    run, manifest = run_with(profile, tmp_path_factory.mktemp("variants"))
    return analyze_run(run.run_dir)


def test_variants_profile_produces_the_decision_section(variants_run):
    from tailrace.analysis.report.html import render

    d = variants_run.summary.to_dict()["decision"]
    table = {v["name"]: v for v in d["variants"]}
    assert set(table) == {"mlp-fp32", "mlp-int8", "logreg"}
    for v in table.values():
        assert v["accuracy"] > 0.95 and v["p95_ms"] is not None and v["capacity_rps"] > 0
        assert v["memory_mb"] > 10 and v["memory_shared_with"] == []  # one endpoint process per variant
        assert v["model_size_bytes"] > 0
    assert table["mlp-int8"]["model_size_bytes"] < table["mlp-fp32"]["model_size_bytes"]
    assert d["recommended"] in table and len(d["pairwise"]) == len(d["ranking"]) - 1
    base = d["baseline"]
    assert base["name"] == "mlp-fp32-inprocess" and base["protocol"] == "inprocess" and base["accuracy"] > 0.95
    assert 0 < base["p50_ms"] < table["mlp-fp32"]["p50_ms"]  # no network, no server: cheaper
    assert table["mlp-fp32"]["serving_overhead_p50_ms"] > 0
    page = render(variants_run)
    assert "id='decision'" in page and "Pareto: p95 vs accuracy" in page and "Mann–Whitney" in page
    for key in ("dominated_latency_accuracy_by", "dominated_memory_capacity_by"):
        assert any(not v[key] for v in table.values()), key  # some variant is always on the frontier
    assert page.count("Pareto frontier") >= 2  # both plots drawn, whatever the frontier's size


def test_each_variant_has_its_own_process_watched_and_energy_ranked_as_an_estimate(variants_run):
    """One monitor per variant's process (url 'embedded' resolved to the process serving that variant): its
    memory, its CPU, an energy estimate per request ranked on one basis and labelled on the page."""
    from tailrace.analysis.report.html import render

    summary = variants_run.summary
    d = summary.to_dict()["decision"]
    table = {v["name"]: v for v in d["variants"]}
    assert d["weights"]["energy_mj"] == 0.5
    for v in table.values():
        assert v["energy_basis"] == "estimate: process CPU" and v["energy_mj"] > 0
        assert v["exporter_memory_mb"] > 10
    assert any(not v["dominated_latency_energy_by"] for v in table.values())
    rows = {r.monitor: r for r in summary.hardware.rows}
    assert set(rows) == {"mlp-fp32-process", "mlp-int8-process", "logreg-process"}
    assert {r.endpoints[0] for r in rows.values()} == set(table)
    # each monitor scraped its own variant's server: its per-model CPU series is that variant's model alone
    models = {r.monitor: r.model for r in summary.hardware.endpoints}
    assert models == {"mlp-fp32-process": "digits_mlp_fp32", "mlp-int8-process": "digits_mlp_int8",
                      "logreg-process": "digits_logreg_fp32"}
    page = render(variants_run)
    assert "Pareto: p95 vs energy" in page and "≈ " in page
