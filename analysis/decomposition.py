"""Where the time goes, per region × endpoint: send lag, network up, server queue, compute, other, network down.

Network legs need the client's timestamps on the reference clock (clock-corrected) and the server's
receive/send stamps (the server's clock; for the embedded endpoint and a well-synchronised Triton
that is the reference). The legs add up to the latency measured from the intended send time.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.frames import frame_of, group_positions, take, take_column, take_rows

LEGS = ("send_lag", "network_up", "server_queue", "server_compute", "server_other", "network_down")


def _has_legs(df: pd.DataFrame) -> np.ndarray:
    """The rows that report server timing (successful, with a server receive stamp)."""
    return ((df["status"] == "ok") & (df["server_receive_ns"] > 0)).to_numpy()


def _legs(df: pd.DataFrame, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The legs (ms) and the latency of the requests at positions `rows` of `df`."""
    def col(name: str) -> np.ndarray:
        return take(df[name].to_numpy(), rows)

    receive, send = col("server_receive_ns"), col("server_send_ns")
    queue, compute = np.clip(col("server_queue_ns"), 0, None), np.clip(col("server_compute_ns"), 0, None)
    return {"send_lag": col("send_lag_ns") / 1e6,
            "network_up": (receive - col("t_sent_ref")) / 1e6,
            "server_queue": queue / 1e6,
            "server_compute": compute / 1e6,
            "server_other": (send - receive - queue - compute) / 1e6,
            "network_down": (col("t_done_ref") - send) / 1e6,
            "latency": col("latency_ns") / 1e6}


def decompose(df: pd.DataFrame) -> pd.DataFrame:
    """Per-request legs in ms (rows that report server timing), labelled by the request's row in `df`."""
    rows = np.flatnonzero(_has_legs(df))
    return frame_of({"region": take_column(df["region"], rows), "endpoint": take_column(df["endpoint"], rows),
                     **_legs(df, rows)}, df.index[rows])


def decomposition_table(df: pd.DataFrame) -> list[dict]:
    """Mean of each leg per region × endpoint (ms), and their sum vs the mean latency, of the requests in `df`
    that report server timing. One group's legs at a time: never a leg table of the whole run."""
    rows = np.flatnonzero(_has_legs(df))
    out = []
    groups = group_positions(take_rows(df, rows, ["region", "endpoint"]), ["region", "endpoint"])
    for (region, endpoint), idx in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        legs = _legs(df, rows[idx])
        row = {"region": region, "endpoint": endpoint, "count": int(len(idx))}
        for leg in LEGS:
            row[leg + "_ms"] = float(legs[leg].mean())
        row["sum_ms"] = float(sum(row[leg + "_ms"] for leg in LEGS))
        row["latency_mean_ms"] = float(legs["latency"].mean())
        row["p99_server_queue_ms"] = float(np.percentile(legs["server_queue"], 99))
        out.append(row)
    return out
