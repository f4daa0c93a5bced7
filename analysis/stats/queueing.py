"""Queueing and utilization per endpoint: Little's law from the timeline, utilization, the arrival process as
the server saw it, and M/M/1, M/G/1 (Pollaczek–Khinchine) and G/G/1 (Allen–Cunneen) checks."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pandas as pd

from tailrace.analysis.read.frames import group_positions, take, take_rows
from tailrace.analysis.stats.estimators import pairwise_mean, pairwise_sum
from tailrace.analysis.stats.sorting import TIME_SORT
from tailrace.contract.summary.tables import QueueingRow, QueueModels

UTILIZATION_FLAG = 0.7


WINDOW_BLOCK = 1 << 20  # intervals clipped at a time: a day's run holds tens of millions per endpoint


def time_average_in_system(starts_ns: np.ndarray, ends_ns: np.ndarray, t0: int, t1: int) -> float:
    """Mean number of intervals [start, end) overlapping time, over the window [t0, t1): their clipped lengths
    summed as integers (exact, in any order), a block at a time (float times: at once, numpy's float sum)."""
    if starts_ns.dtype.kind not in "iu" or ends_ns.dtype.kind not in "iu":
        e = np.clip(ends_ns, t0, t1) - np.clip(starts_ns, t0, t1)
        return float(np.sum(np.maximum(e, 0)) / (t1 - t0))
    total = 0
    for at in range(0, len(starts_ns), WINDOW_BLOCK):
        s = np.clip(starts_ns[at:at + WINDOW_BLOCK], t0, t1)
        e = np.clip(ends_ns[at:at + WINDOW_BLOCK], t0, t1)
        np.subtract(e, s, out=e)
        np.maximum(e, 0, out=e)
        total += int(np.sum(e))
    return float(np.int64(total) / (t1 - t0))


def mm1(lam: float, mean_service_s: float) -> dict:
    """M/M/1 predictions: utilization, mean wait in queue, mean and p99 time in system (seconds)."""
    mu = 1 / mean_service_s
    rho = lam / mu
    if rho >= 1:
        return {"rho": rho, "mean_wait_s": math.inf, "mean_sojourn_s": math.inf, "p99_sojourn_s": math.inf}
    return {"rho": rho, "mean_wait_s": rho / (mu - lam), "mean_sojourn_s": 1 / (mu - lam),
            "p99_sojourn_s": math.log(100) / (mu - lam)}


def mg1_mean_wait(lam: float, mean_service_s: float, service_second_moment_s2: float) -> float:
    """Pollaczek–Khinchine mean wait in queue of an M/G/1 FIFO queue: λ·E[S²] / (2(1 − ρ)) (seconds). It is
    M/M/1's ρ/(μ − λ) when S is exponential (E[S²] = 2/μ²); a service time noisier than exponential waits longer."""
    rho = lam * mean_service_s
    return math.inf if rho >= 1 else lam * service_second_moment_s2 / (2 * (1 - rho))


def gg1_mean_wait(lam: float, mean_service_s: float, arrival_cv2: float, service_cv2: float) -> float:
    """Allen–Cunneen (Kingman) mean wait in queue of a G/G/1 FIFO queue: (c_a² + c_s²)/2 · ρ/(1 − ρ) · E[S]
    (seconds). Exact for M/G/1 (c_a² = 1); arrivals burstier than Poisson (c_a² > 1) wait longer."""
    rho = lam * mean_service_s
    return math.inf if rho >= 1 else (arrival_cv2 + service_cv2) / 2 * rho / (1 - rho) * mean_service_s


def interarrival_cv2(arrivals_ns: np.ndarray, overwrite_input: bool = False) -> float | None:
    """Squared coefficient of variation of the gaps between arrival instants (1 for a Poisson process): the
    gaps' float var() / mean()², to the bit, a block of gaps at a time (numpy's pairwise order: estimators'
    pairwise_sum) — a day's endpoint has tens of millions of them; no array of them is made. `overwrite_input`:
    `arrivals_ns` (int64) may be sorted in place, as np.percentile's — no copy of them either."""
    ordered = np.asarray(arrivals_ns, dtype=np.int64)
    if overwrite_input:
        ordered.sort(kind=TIME_SORT)  # integers: the same array by any sort, the fastest for times
    else:
        ordered = np.sort(ordered, kind=TIME_SORT)
    n = len(ordered) - 1
    if n < 2:
        return None

    def gaps(a: int, b: int) -> np.ndarray:
        return np.diff(ordered[a:b + 1]).astype(np.float64)  # as np.diff(ordered)[a:b].astype(float)

    mean = pairwise_mean(n, gaps)
    if mean == 0:
        return None

    def squares(a: int, b: int) -> float:
        x = gaps(a, b)
        x -= mean
        np.multiply(x, x, out=x)
        return float(np.add.reduce(x))

    return float(pairwise_sum(n, squares) / n / mean ** 2)


SERVER_COLUMNS = ("server_receive_ns", "server_send_ns", "server_compute_ns", "server_queue_ns")


def _model_arrivals(receive_all: np.ndarray, served_rows: np.ndarray, of_model: np.ndarray, group: dict, size: int,
                    window: tuple[int, int]) -> tuple[float, float | None]:
    """(the rate, c_a²) of a model's arrivals in `window` — every endpoint's that shares it (`of_model`: per served
    row). Where the endpoint's group (`size` rows, its numbers in `group`) holds all of the model's rows, they are its
    own arrivals: its rate and c_a², not computed again."""
    if np.count_nonzero(of_model) == size:
        return group["lam"], group["arrival_cv2"]
    w0, w1 = window
    model_receive = take(receive_all, served_rows[np.flatnonzero(of_model)])
    model_arrivals = model_receive[(model_receive >= w0) & (model_receive < w1)]
    del model_receive
    return len(model_arrivals) / group["T"], interarrival_cv2(model_arrivals, overwrite_input=True)


def _stamps_tell(receive: np.ndarray, send: np.ndarray) -> dict[str, Any] | None:
    """What one endpoint's receive and send stamps (its served requests', fresh arrays this takes over) tell, in the
    central part of its time (None where under 20 requests arrive in it): λ, L, throughput, W, the residence's p99
    and c_a² — each big temporary made once and freed after its last use (a day's endpoint: tens of millions)."""
    t0, t1 = int(receive.min()), int(send.max())
    span = t1 - t0
    w0, w1 = t0 + span // 10, t1 - span // 10
    inside = (receive >= w0) & (receive < w1)
    if inside.sum() < 20 or w1 <= w0:
        return None
    T = (w1 - w0) / 1e9
    g: dict[str, Any] = {"inside": inside, "T": T, "lam": int(inside.sum()) / T, "window": (w0, w1),
                         "L": time_average_in_system(receive, send, w0, w1),
                         "throughput": float(((send >= w0) & (send < w1)).sum() / T)}
    arrivals = receive[inside]
    del receive
    residence_ns = send[inside]
    del send
    if residence_ns.dtype == arrivals.dtype:
        np.subtract(residence_ns, arrivals, out=residence_ns)
    else:  # a column with a missing stamp somewhere is float: the difference is too
        residence_ns = np.subtract(residence_ns, arrivals)
    residence = residence_ns / 1e9
    del residence_ns
    g["W"] = float(residence.mean())
    g["p99_residence_s"] = float(np.percentile(residence, 99, overwrite_input=True))  # (read no more)
    del residence
    g["arrival_cv2"] = interarrival_cv2(arrivals, overwrite_input=True)
    return g


def queueing_table(df: pd.DataFrame, slots: dict[str, int], synthetic_models: set[str],
                   requests_per_execution: dict[str, float] | None = None, among: np.ndarray | None = None,
                   column: Callable[[str], np.ndarray] | None = None, done: Callable[[str], None] | None = None
                   ) -> list[QueueingRow]:
    """Per endpoint: λ, throughput, L measured vs λ·W (server side), utilization, queue delay, M/M/1.

    The server side is the system: a request is in it from server receive to server send (the server's
    clock). The window is the central part of the run, so that requests cut off at the edges don't bias L.
    `requests_per_execution` (endpoint → from the server's statistics): with dynamic batching every request
    of a batch reports the batch's compute, so the slots are busy λ·S / (requests per execution).
    `among`: the rows to count (ascending positions; None: all). `df` holds status, endpoint, model and
    server_receive_ns; `column(name)` gives a server column's values (default: df's) and `done(name)` is told
    when one is read no more: the receive and send stamps are read first, then compute, then queue, so that a
    day's run never holds all four.
    """
    column = column or (lambda name: df[name].to_numpy())
    done = done or (lambda name: None)
    served = ((df["status"] == "ok") & (df["server_receive_ns"] > 0)).to_numpy()
    if among is not None:  # only these rows: the measured phases'
        wanted = np.zeros(len(served), dtype=bool)
        wanted[among] = True
        served = served & wanted
    served_rows = np.flatnonzero(served).astype(np.int32 if len(served) < 2**31 else np.int64)
    del served
    d = take_rows(df, served_rows, ["endpoint", "model"])
    # each group's rows of df, as positions of served_rows' width (group_positions' own are 64-bit)
    groups = {key: served_rows[idx] for key, idx in group_positions(d, ["endpoint", "model"]).items()}
    keys = sorted(groups, key=lambda k: (str(k[0]), str(k[1])))
    found: dict[tuple, dict] = {}
    receive_all, send_all = column("server_receive_ns"), column("server_send_ns")
    for endpoint, model in keys:  # what the receive and send stamps tell
        idx = groups[(endpoint, model)]
        g = _stamps_tell(take(receive_all, idx), take(send_all, idx))
        if g is None:
            continue
        window = g.pop("window")
        batch = (requests_per_execution or {}).get(endpoint) or 1.0
        if model in synthetic_models and batch == 1.0:  # the model's arrivals: every endpoint that shares it
            g["lam_model"], g["model_arrival_cv2"] = _model_arrivals(
                receive_all, served_rows, (d["model"] == model).to_numpy(), g, len(idx), window)
        found[(endpoint, model)] = g
    del receive_all, send_all, d
    done("server_receive_ns")
    done("server_send_ns")
    compute_all = column("server_compute_ns")
    for key, g in found.items():
        compute = take(compute_all, groups[key])[g["inside"]]
        g["S"] = float(compute.mean() / 1e9)
        if "lam_model" in g:
            service_s = compute.astype(float) / 1e9
            g["second_moment"] = float(np.mean(service_s ** 2))
    del compute_all
    done("server_compute_ns")
    queue_all = column("server_queue_ns")
    for key, g in found.items():
        queue = take(queue_all, groups[key])[g.pop("inside")]
        g["wq"] = float(queue.mean() / 1e9)
        g["p99_queue_ms"] = float(np.percentile(queue, 99, overwrite_input=True) / 1e6)  # (read no more)
    del queue_all
    done("server_queue_ns")
    return [_queueing_row(endpoint, model, found[(endpoint, model)], slots, requests_per_execution)
            for endpoint, model in keys if (endpoint, model) in found]


def _queueing_row(endpoint, model, g: dict, slots: dict[str, int],
                  requests_per_execution: dict[str, float] | None) -> QueueingRow:
    """One endpoint's queueing row from its measured numbers (queueing_table's `found`)."""
    lam, W, L, S, wq = g["lam"], g["W"], g["L"], g["S"], g["wq"]
    n_slots = slots.get(model, 1)
    batch = (requests_per_execution or {}).get(endpoint) or 1.0
    rho = lam * S / (n_slots * batch)
    row = {"endpoint": endpoint, "model": model, "slots": n_slots, "arrival_rate": lam,
           "throughput": g["throughput"],
           "L_measured": L, "lambda_W": lam * W, "littles_gap": (L - lam * W) / (lam * W) if lam * W else None,
           "mean_residence_ms": W * 1e3, "mean_service_ms": S * 1e3, "requests_per_execution": batch,
           "utilization": rho,
           "utilization_flag": rho > UTILIZATION_FLAG, "mean_queue_ms": wq * 1e3,
           "p99_queue_ms": g["p99_queue_ms"],
           # the arrival process at the server: the generators send Poisson, but the path and the host
           # can bunch requests up on the way (c_a² > 1), which queues them longer
           "arrival_cv2": g["arrival_cv2"]}
    # the endpoint's (model's) statistics include every endpoint that shares the model: use the model total
    if "lam_model" in g:  # a synthetic model, unbatched: batched executions are not an M/M/1 queue
        lam_model, second_moment, arrival_cv2 = g["lam_model"], g["second_moment"], g["model_arrival_cv2"]
        pred = mm1(lam_model, S)
        pk_wait = mg1_mean_wait(lam_model, S, second_moment)
        service_cv2 = second_moment / S ** 2 - 1 if S else None
        gg1_wait = (gg1_mean_wait(lam_model, S, arrival_cv2, service_cv2)
                    if arrival_cv2 is not None and service_cv2 is not None else None)
        row["mm1"] = QueueModels(**{"rho": pred["rho"], "mean_wait_ms": pred["mean_wait_s"] * 1e3,
                      "p99_sojourn_ms": pred["p99_sojourn_s"] * 1e3,
                      "measured_mean_wait_ms": wq * 1e3,
                      "measured_p99_sojourn_ms": g["p99_residence_s"] * 1e3,
                      "mean_wait_rel_error": (wq - pred["mean_wait_s"]) / pred["mean_wait_s"]
                      if pred["mean_wait_s"] not in (0, math.inf) else None,
                      # how exponential the measured service is (1 for Exp), and the M/G/1 wait it implies
                      "service_cv2": service_cv2,
                      "pk_mean_wait_ms": pk_wait * 1e3,
                      "pk_rel_error": (wq - pk_wait) / pk_wait if pk_wait not in (0, math.inf) else None,
                      # ... and the G/G/1 wait that the measured burstiness of the arrivals implies
                      "arrival_cv2": arrival_cv2,
                      "gg1_mean_wait_ms": gg1_wait * 1e3 if gg1_wait is not None else None,
                      "gg1_rel_error": (wq - gg1_wait) / gg1_wait if gg1_wait not in (None, 0, math.inf) else None,
                      # the part of the G/G/1 wait the arrivals' burstiness explains: what c_a² above Poisson's 1
                      # adds, (c_a² − 1) / (c_a² + c_s²) of it (negative: smoother than Poisson, less waiting)
                      "wait_from_burstiness_ms": gg1_wait * (arrival_cv2 - 1) / (arrival_cv2 + service_cv2) * 1e3
                      if gg1_wait not in (None, math.inf) and arrival_cv2 + service_cv2 > 0 else None})
    return QueueingRow(**row)
