"""Δ accuracy between two runs, pure: the paired interval (items both judged) covers the true difference at its
claimed rate and is narrower than the unpaired one on the same answers; a variant's graded answers are its accuracy and
its per-item answers for McNemar."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tailrace.analysis.decide.accuracy_compare import paired_difference, unpaired_difference
from tailrace.analysis.decide.variants import per_sample_correct


def test_the_paired_interval_covers_the_truth_and_beats_the_unpaired_one():
    rng = np.random.default_rng(11)
    truth, covered, widths = -0.05, 0, []
    for _ in range(300):
        easy = rng.random(400) < 0.8  # items either model gets right mostly: the pairing's gain
        a = easy | (rng.random(400) < 0.3)
        b = a & ~(rng.random(400) < -truth / a.mean())  # B loses about 5 points, on the items A had right
        d = paired_difference(dict(enumerate(a.tolist())), dict(enumerate(b.tolist())))
        assert d is not None
        diff, low, high, p, n = d
        covered += low <= truth <= high  # B's expected loss given A's answers: 5 points
        _, ulow, uhigh, _ = unpaired_difference(int(a.sum()), 400, int(b.sum()), 400)
        widths.append((high - low, uhigh - ulow))
        assert n == 400 and diff == pytest.approx(b.mean() - a.mean())
    assert covered / 300 > 0.92
    assert np.mean([w[0] for w in widths]) < 0.6 * np.mean([w[1] for w in widths])


def test_no_change_is_not_significant_and_the_unpaired_interval_holds_its_level():
    rng = np.random.default_rng(12)
    significant = sum(unpaired_difference(int(rng.binomial(300, 0.7)), 300, int(rng.binomial(300, 0.7)), 300)[3] < 0.05
                      for _ in range(300))
    assert significant / 300 < 0.07
    diff, low, high, p = unpaired_difference(90, 100, 60, 100)
    assert diff == pytest.approx(-0.3) and high < 0 and p < 1e-4


def test_a_graded_variants_answers_are_per_item_first_answers():
    ok = pd.DataFrame({"item": [3, 3, 5, 7, 9], "grade": ["correct", "wrong", "wrong", "truncated", "correct"],
                       "t_intended_ref": [1, 2, 3, 4, 5], "batch_size": 1, "correct_count": -1, "correct": False,
                       "sample_index": 0})
    assert per_sample_correct(ok) == {3: True, 5: False, 9: True}  # truncated is not an answer judged
