"""Where the time goes, per region × endpoint: send lag, network up, server queue, compute, other, network down.

Network legs need the client's timestamps on the reference clock (clock-corrected) and the server's
receive/send stamps (the server's clock; for the embedded endpoint and a well-synchronised Triton
that is the reference). The legs add up to the latency measured from the intended send time.
"""
from __future__ import annotations

import os
from collections.abc import Set as AbstractSet
from functools import partial
from typing import Callable

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import as_slice, frame_of, group_positions, row_runs, strings, take, take_column, take_rows
from tailrace.analysis.read.threads import map_in_threads
from tailrace.analysis.stats.estimators import pairwise_mean
from tailrace.contract.summary.tables import LatencyLegs, TtftLegs

LEGS = ("send_lag", "network_up", "server_queue", "server_compute", "server_other", "network_down")


# each leg (ms) from the request columns it reads, as one function of them
LEG_COLUMNS: dict[str, tuple[tuple[str, ...], Callable[..., np.ndarray]]] = {
    "send_lag": (("send_lag_ns",), lambda lag: lag / 1e6),
    "network_up": (("server_receive_ns", "t_sent_ref"), lambda receive, sent: (receive - sent) / 1e6),
    "server_queue": (("server_queue_ns",), lambda queue: np.clip(queue, 0, None) / 1e6),
    "server_compute": (("server_compute_ns",), lambda compute: np.clip(compute, 0, None) / 1e6),
    "server_other": (("server_send_ns", "server_receive_ns", "server_queue_ns", "server_compute_ns"),
                     lambda send, receive, queue, compute: (send - receive - np.clip(queue, 0, None)
                                                            - np.clip(compute, 0, None)) / 1e6),
    "network_down": (("t_done_ref", "server_send_ns"), lambda done, send: (done - send) / 1e6),
    "latency": (("latency_ns",), lambda latency: latency / 1e6),
}
# the order decomposition_table computes them in: each column is spared after its last leg
LEG_ORDER = ("send_lag", "network_up", "server_queue", "server_compute", "server_other", "network_down", "latency")
# every column decomposition_table reads: its keys, then each leg's, in that order
DECOMPOSITION_COLUMNS = tuple(dict.fromkeys(("status", "server_receive_ns", "region", "endpoint",
                                             *(c for leg in LEG_ORDER for c in LEG_COLUMNS[leg][0]))))


def _has_legs(df: pd.DataFrame) -> np.ndarray:
    """The rows that report server timing (successful, with a server receive stamp)."""
    return ((df["status"] == "ok") & (df["server_receive_ns"] > 0)).to_numpy()


def _leg(name: str, column: Callable[[str], np.ndarray], rows: np.ndarray,
         runs: list[tuple[int, int]] | None = None) -> np.ndarray:
    """One leg (ms) of the requests at positions `rows`; `column(name)`: a request column's values. `runs`:
    the positions as runs (analysis/read/frames.py row_runs), when known: found once per group, not per column."""
    names, formula = LEG_COLUMNS[name]
    return formula(*(take(column(c), rows, runs) for c in names))


def _leg_mean(name: str, column: Callable[[str], np.ndarray], rows: np.ndarray) -> float:
    """The mean of one leg (ms) of the requests at positions `rows` (at least one): `_leg(...).mean()` to the bit,
    a block at a time (estimators.pairwise_mean), each block's leg computed as the whole
    one's is, value by value (a contiguous block a view) — so no array the size of the group is made, and each
    block's stays in the cache."""
    names, formula = LEG_COLUMNS[name]
    values = [column(c) for c in names]
    return pairwise_mean(len(rows), lambda a, b: formula(*(v[as_slice(rows[a:b])] for v in values)))


def decomposition_table(log, also: np.ndarray | None = None, streamed: AbstractSet[str] = frozenset()
                        ) -> tuple[list[LatencyLegs], pd.DataFrame]:
    """Mean of each leg per region × endpoint (ms), and their sum vs the mean latency, of the requests that
    report server timing; and the legs of the requests at rows `also` that do (decompose's, in `also`'s order).
    The requests to the `streamed` endpoints are left out: their server timing covers the first token
    (ttft_decomposition), not the whole response.
    `log`: the request log (analysis/read/chunks.py's ChunkColumns), read a leg at a time — each column spared after
    its last leg, one group's leg at a time: never a leg table of the whole run."""
    keys = log.frame(["status", "server_receive_ns", "region", "endpoint"])
    has_legs = _has_legs(keys)
    if streamed:
        has_legs = has_legs & ~keys["endpoint"].isin(streamed).to_numpy()
    also = np.asarray([] if also is None else also, dtype=np.int64)
    also = also[has_legs[also]]
    slow = {"region": take_column(keys["region"], also), "endpoint": take_column(keys["endpoint"], also)}
    rows = np.flatnonzero(has_legs).astype(np.int32 if len(has_legs) < 2**31 else np.int64)
    del has_legs
    groups = group_positions(take_rows(keys, rows, ["region", "endpoint"]), ["region", "endpoint"])
    del keys
    order = sorted(groups, key=lambda k: (str(k[0]), str(k[1])))
    at = {key: rows[groups[key]] for key in order}
    del rows, groups
    runs = {key: row_runs(at[key]) for key in order}
    out = {key: {"region": key[0], "endpoint": key[1], "count": int(len(at[key]))} for key in order}

    def group_leg(leg: str, columns: dict[str, np.ndarray], key) -> dict[str, float]:
        field = "latency_mean_ms" if leg == "latency" else leg + "_ms"
        if leg != "server_queue":
            return {field: _leg_mean(leg, columns.__getitem__, at[key])}
        values = _leg(leg, columns.__getitem__, at[key], runs[key])  # whole: its p99 too
        return {field: float(values.mean()), "p99_server_queue_ms": float(np.percentile(values, 99))}

    # the groups of a leg in parallel (numpy's gathers and arithmetic release the GIL): each group's numbers are
    # its own, computed as one at a time would. A long run's too: a leg's mean holds a block of it at a time, and
    # only the queue leg (for its p99) a group's whole leg, one per thread
    threads = os.cpu_count() or 1
    for i, leg in enumerate(LEG_ORDER):
        columns = {c: log.values(c) for c in LEG_COLUMNS[leg][0]}  # read (or waited for) once, here
        slow[leg] = _leg(leg, columns.__getitem__, also)
        for key, numbers in zip(order, map_in_threads(partial(group_leg, leg, columns), order, threads)):
            out[key].update(numbers)
        del columns
        later = {c for other in LEG_ORDER[i + 1:] for c in LEG_COLUMNS[other][0]}
        log.spare(*(c for c in LEG_COLUMNS[leg][0] if c not in later))
    rows_out = [LatencyLegs(**out[key], sum_ms=float(sum(out[key][leg + "_ms"] for leg in LEGS))) for key in order]
    return rows_out, frame_of({"region": slow["region"], "endpoint": slow["endpoint"],
                               **{leg: slow[leg] for leg in (*LEGS, "latency")}}, pd.Index(also))


# a streamed request's time to first token, split the same way: the server reports its queue and prefill time and
# when it received the request and sent the first token (the embedded server's server-timing); the first token's
# instant is moved to the reference clock with the offset at its send (a stream lasts seconds: the drift is not seen)
TTFT_LEGS = ("send_lag", "network_up", "server_queue", "server_prefill", "server_other", "network_down")
TTFT_DECOMPOSITION_COLUMNS = ("endpoint", "region", "phase", "status", "send_lag_ns", "server_receive_ns",
                              "t_sent_ref", "t_sent", "server_queue_ns", "server_compute_ns", "server_send_ns",
                              "t_first_token", "ttft_ns")


def ttft_decomposition(df: pd.DataFrame, endpoints: set[str]) -> list[TtftLegs]:
    """Mean of each leg of TTFT (ms) per region × endpoint, of the measured phases' successful streams to the
    generative `endpoints` whose server reported its timing; the legs add up to the mean TTFT."""
    status = strings(df["status"])
    rows = np.flatnonzero(df["endpoint"].isin(endpoints).to_numpy() & (df["phase"].to_numpy() > 0)
                          & (status == "ok") & (df["server_receive_ns"].to_numpy() > 0)
                          & (df["server_send_ns"].to_numpy() > 0) & (df["t_first_token"].to_numpy() > 0))
    if not len(rows):
        return []
    col = {c: df[c].to_numpy()[rows] for c in TTFT_DECOMPOSITION_COLUMNS[4:]}
    queue, prefill = np.clip(col["server_queue_ns"], 0, None), np.clip(col["server_compute_ns"], 0, None)
    first_ref = col["t_first_token"] + (col["t_sent_ref"] - col["t_sent"])
    legs = {"send_lag": col["send_lag_ns"], "network_up": col["server_receive_ns"] - col["t_sent_ref"],
            "server_queue": queue, "server_prefill": prefill,
            "server_other": col["server_send_ns"] - col["server_receive_ns"] - queue - prefill,
            "network_down": first_ref - col["server_send_ns"], "ttft": col["ttft_ns"]}
    keys = pd.DataFrame({"region": strings(df["region"])[rows],
                         "endpoint": strings(df["endpoint"])[rows]})
    out = []
    for (region, endpoint), positions in sorted(group_positions(keys, ["region", "endpoint"]).items()):
        means = {("ttft_mean" if leg == "ttft" else leg) + "_ms": float(values[positions].mean() / 1e6)
                 for leg, values in legs.items()}  # the leg's field of TtftLegs
        out.append(TtftLegs(region=region, endpoint=endpoint, count=int(len(positions)), **means,
                            sum_ms=float(sum(means[leg + "_ms"] for leg in TTFT_LEGS))))
    return out
