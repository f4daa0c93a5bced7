"""Where the time goes, per region × endpoint: send lag, network up, server queue, compute, other, network down.

Network legs need the client's timestamps on the reference clock (clock-corrected) and the server's
receive/send stamps (the server's clock; for the embedded endpoint and a well-synchronised Triton
that is the reference). The legs add up to the latency measured from the intended send time.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

LEGS = ("send_lag", "network_up", "server_queue", "server_compute", "server_other", "network_down")


def decompose(df: pd.DataFrame) -> pd.DataFrame:
    """Per-request legs in ms (rows that report server timing), labelled by the request's row in `df`."""
    columns = ["region", "endpoint", "send_lag_ns", "server_receive_ns", "server_send_ns", "server_queue_ns",
               "server_compute_ns", "t_sent_ref", "t_done_ref", "latency_ns"]
    d = df.loc[((df["status"] == "ok") & (df["server_receive_ns"] > 0)).to_numpy(), columns]
    out = pd.DataFrame({
        "region": d["region"], "endpoint": d["endpoint"],
        "send_lag": d["send_lag_ns"] / 1e6,
        "network_up": (d["server_receive_ns"] - d["t_sent_ref"]) / 1e6,
        "server_queue": d["server_queue_ns"].clip(lower=0) / 1e6,
        "server_compute": d["server_compute_ns"].clip(lower=0) / 1e6,
        "server_other": (d["server_send_ns"] - d["server_receive_ns"] - d["server_queue_ns"].clip(lower=0)
                         - d["server_compute_ns"].clip(lower=0)) / 1e6,
        "network_down": (d["t_done_ref"] - d["server_send_ns"]) / 1e6,
        "latency": d["latency_ns"] / 1e6,
    })
    return out


def decomposition_table(legs: pd.DataFrame) -> list[dict]:
    """Mean of each leg per region × endpoint (ms), and their sum vs the mean latency."""
    rows = []
    for (region, endpoint), g in legs.groupby(["region", "endpoint"], sort=True):
        row = {"region": region, "endpoint": endpoint, "count": int(len(g))}
        for leg in LEGS:
            row[leg + "_ms"] = float(g[leg].mean())
        row["sum_ms"] = float(sum(row[leg + "_ms"] for leg in LEGS))
        row["latency_mean_ms"] = float(g["latency"].mean())
        row["p99_server_queue_ms"] = float(np.percentile(g["server_queue"], 99))
        rows.append(row)
    return rows
