"""The report's table cells (analysis/report/html_parts.py)."""
from tailrace.analysis.report.html_parts import _fmt


def test_a_float_that_rounds_to_zero_has_no_sign():
    assert _fmt(-0.0004) == "0.00"
    assert _fmt(-0.0) == "0.00"
    assert _fmt(-1e-12, digits=3) == "0.000"


def test_other_floats_keep_their_sign_and_grouping():
    assert _fmt(-0.005001) == "-0.01"
    assert _fmt(-1234.5) == "-1,234.50"
    assert _fmt(2.25) == "2.25"
    assert _fmt(-10.0, digits=0) == "-10"


def test_none_and_text():
    assert _fmt(None) == "–"
    assert _fmt("<a>") == "&lt;a&gt;"


def test_the_manifest_section_says_which_profile_fields_the_run_set():
    """A run with --set load.rate=6 (or a sweep's point) says so beside its profile's name; one without, that it ran
    the profile as written."""
    from tailrace.analysis.report.html import _manifest_section
    from tailrace.contract.summary import RunSummary
    from tests import ROOT

    summary = RunSummary.from_json((ROOT / "tests" / "data" / "saved_runs" / "demo.summary.json").read_text())
    summary.manifest.overrides = []
    assert "none (the profile as written)" in _manifest_section(summary)
    summary.manifest.overrides = ["load.rate=6", "embedded.max_num_seqs.synthetic_lm=4"]
    assert "load.rate=6, embedded.max_num_seqs.synthetic_lm=4" in _manifest_section(summary)
