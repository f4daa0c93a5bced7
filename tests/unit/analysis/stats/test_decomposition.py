"""The latency decomposition's legs: each leg's mean found a block at a time is the whole leg's mean, to the bit."""
from __future__ import annotations

import numpy as np
import pytest

from tailrace.analysis.stats.decomposition import LEG_COLUMNS, _leg, _leg_mean
from tailrace.analysis.stats.estimators import SUM_BLOCK


@pytest.mark.parametrize("rows", [5, SUM_BLOCK - 3, SUM_BLOCK + 9, 4 * SUM_BLOCK + 1])
def test_a_legs_mean_a_block_at_a_time_is_the_whole_legs_mean(rows):
    """Every leg of requests scattered over a log, in stretches of contiguous rows and single ones, around a block's
    length and beyond it — with negative queue and compute stamps (clipped to 0), as numpy's mean of the whole
    leg gives it; a rounding that differed by one block's order would differ in the last bits."""
    rng = np.random.default_rng(rows)
    n = 3 * rows
    t0 = 1_700_000_000 * 10**9
    sent = t0 + np.cumsum(rng.integers(1, 10**6, n))
    receive = sent + rng.integers(-50_000, 2_000_000, n)
    columns = {"t_sent_ref": sent, "server_receive_ns": receive,
               "server_queue_ns": rng.integers(-1_000, 5_000_000, n), "server_compute_ns": rng.integers(-10, 9e6, n),
               "send_lag_ns": rng.integers(0, 3_000_000, n), "latency_ns": rng.integers(10**5, 10**9, n)}
    columns["server_send_ns"] = receive + rng.integers(0, 20_000_000, n)
    columns["t_done_ref"] = columns["server_send_ns"] + rng.integers(-10_000, 3_000_000, n)
    scattered = np.flatnonzero(rng.random(n) < (rows - rows // 2) / n)
    picked = np.unique(np.concatenate([np.arange(rows // 2, rows), scattered]))  # a stretch, and single rows
    for leg in LEG_COLUMNS:
        whole = float(_leg(leg, columns.__getitem__, picked).mean())
        assert _leg_mean(leg, columns.__getitem__, picked) == whole, leg
