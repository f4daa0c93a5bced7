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
