"""Where the time goes, per region × endpoint: send lag, network up, server queue, compute, other, network down.

Network legs need the client's timestamps on the reference clock (clock-corrected) and the server's
receive/send stamps (the server's clock; for the embedded endpoint and a well-synchronised Triton
that is the reference). The legs add up to the latency measured from the intended send time.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.frames import frame_of, group_positions, take_column

LEGS = ("send_lag", "network_up", "server_queue", "server_compute", "server_other", "network_down")


def decompose(df: pd.DataFrame) -> pd.DataFrame:
    """Per-request legs in ms (rows that report server timing), labelled by the request's row in `df`."""
    has_legs = ((df["status"] == "ok") & (df["server_receive_ns"] > 0)).to_numpy()

    def col(name: str) -> np.ndarray:
        return df[name].to_numpy()[has_legs]

    receive, send = col("server_receive_ns"), col("server_send_ns")
    queue, compute = np.clip(col("server_queue_ns"), 0, None), np.clip(col("server_compute_ns"), 0, None)
    return frame_of({
        "region": take_column(df["region"], has_legs), "endpoint": take_column(df["endpoint"], has_legs),
        "send_lag": col("send_lag_ns") / 1e6,
        "network_up": (receive - col("t_sent_ref")) / 1e6,
        "server_queue": queue / 1e6,
        "server_compute": compute / 1e6,
        "server_other": (send - receive - queue - compute) / 1e6,
        "network_down": (col("t_done_ref") - send) / 1e6,
        "latency": col("latency_ns") / 1e6,
    }, df.index[has_legs])


def decomposition_table(legs: pd.DataFrame) -> list[dict]:
    """Mean of each leg per region × endpoint (ms), and their sum vs the mean latency."""
    rows = []
    groups = group_positions(legs, ["region", "endpoint"])
    for (region, endpoint), idx in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        row = {"region": region, "endpoint": endpoint, "count": int(len(idx))}
        for leg in LEGS:
            row[leg + "_ms"] = float(legs[leg].to_numpy()[idx].mean())
        row["sum_ms"] = float(sum(row[leg + "_ms"] for leg in LEGS))
        row["latency_mean_ms"] = float(legs["latency"].to_numpy()[idx].mean())
        row["p99_server_queue_ms"] = float(np.percentile(legs["server_queue"].to_numpy()[idx], 99))
        rows.append(row)
    return rows
