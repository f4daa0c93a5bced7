"""What one endpoint's requests cost the hardware a monitor watches, and the utilization law checked — per monitor ×
endpoint × measured phase (pure):

- **measured utilization** of the endpoint's model: the CPU time its executions used (the embedded server's
  `tailrace_server_model_cpu_seconds_total`) per second per slot; or, for a monitor that watches this endpoint
  alone, the GPU's utilization;
- **the utilization law** U = X·S: the queueing table's inferred ρ = X · S / slots (throughput × the server's mean
  compute time per request, per execution slot) beside the measured U (not for a continuous batch — an LLM's, a
  pooling model's — whose requests share each step: there a request's compute time is not its own). They agree
  where compute is the measured resource's work; U below ρ says the slot was held while that resource waited (a
  sleep, I/O, another process on the core, the GIL);
- **energy per request**: measured where the monitor watches this endpoint alone and has an energy counter; an
  estimate (the model's CPU-seconds × the declared watts per core, labelled) where it has none. A model two
  endpoints share has its CPU-seconds split by their requests (said in `cpu_shared_by`).
"""
from __future__ import annotations

from dataclasses import dataclass

from tailrace.analysis.read.hardware import MonitorSeries
from tailrace.analysis.stats.hardware.windows import PhaseWindow, between, per_request_windows
from tailrace.contract.summary.tables import HardwareEndpointRow

AGREEMENT = 0.2  # measured U and ρ within 20% of ρ: the law holds for this resource


@dataclass(frozen=True)
class MonitorScope:
    """A monitor's endpoints (None: every endpoint; what its energy per request counts) and watts per core."""

    name: str
    endpoints: tuple[str, ...] | None = None
    watts_per_core: float | None = None


@dataclass(frozen=True)
class EndpointServing:
    """An endpoint's model and its execution slots (× requests per execution, with dynamic batching)."""

    model: str
    slots: float = 1.0
    continuous: bool = False  # a continuous batch (an LLM, a pooling model): a request's compute is shared, no ρ


def _law(rho: float | None, measured: float | None) -> str | None:
    """Whether U = X·S holds for the measured resource: U / ρ, and what a gap says."""
    if rho is None or measured is None or rho <= 0:
        return None
    ratio = measured / rho
    if abs(ratio - 1) <= AGREEMENT:
        return f"holds (U/ρ {ratio:.2f})"
    return f"U/ρ {ratio:.2f}: " + ("the slot also waited on something else" if ratio < 1 else
                                   "more work than the compute time")


def endpoint_rows(s: MonitorSeries, w: PhaseWindow, scope: MonitorScope,
                  serving: dict[str, EndpointServing]) -> list[HardwareEndpointRow]:
    """One row per endpoint of the phase the monitor says something of ([] where it says nothing per endpoint)."""
    duration = (w.t1 - w.t0) / 1e9
    alone = scope.endpoints is not None and len(scope.endpoints) == 1
    out = []
    for endpoint in sorted(w.intended):
        if scope.endpoints is not None and endpoint not in scope.endpoints or endpoint not in serving:
            continue
        model, slots = serving[endpoint].model, serving[endpoint].slots
        requests = len(w.intended[endpoint])
        sharing = {e: len(w.intended[e]) for e in w.intended if e in serving and serving[e].model == model}
        share = requests / sum(sharing.values())
        model_cpu = s.model_cpu_s.get(model)
        cpu_s = between(s.t_ns, model_cpu, w.t0, w.t1)
        gpu = s.values["gpu_util_pct"][(s.t_ns >= w.t0) & (s.t_ns <= w.t1)]
        gpu_util = float(gpu[gpu == gpu].mean()) / 100 if alone and (gpu == gpu).any() else None
        if cpu_s is None and gpu_util is None and not (alone and s.energy_j is not None):
            continue
        throughput = requests / duration if duration > 0 else None
        compute_ms = w.compute_ms.get(endpoint)
        rho = throughput * compute_ms / 1e3 / slots if throughput and compute_ms is not None and not \
            serving[endpoint].continuous else None
        row: dict = {"monitor": s.name, "endpoint": endpoint, "model": model, "phase": w.phase, "requests": requests,
               "throughput_rps": throughput, "mean_service_ms": compute_ms, "slots": slots, "rho": rho}
        if cpu_s is not None:
            mine = cpu_s * share
            measured = mine / duration / slots if duration > 0 else None
            row |= {"cpu_ms_per_request": mine / requests * 1e3 if requests else None,
                    "measured_utilization": measured, "measured_from": "the model's CPU time",
                    "cpu_shared_by": sorted(sharing) if len(sharing) > 1 else None}
            if scope.watts_per_core is not None and s.energy_j is None and model_cpu is not None:
                row |= {"estimated_energy_per_request_mj": mine * scope.watts_per_core / requests * 1e3
                        if requests else None,
                        "estimated_energy_per_request_mj_windows": per_request_windows(
                            s.t_ns, model_cpu * scope.watts_per_core * share, w.intended[endpoint], w.t0, w.t1),
                        "estimate_basis": f"the model's CPU-seconds × {scope.watts_per_core:g} W per core "
                                          "(an estimate)"}
        elif gpu_util is not None:
            row |= {"measured_utilization": gpu_util, "measured_from": "GPU utilization (a monitor of this endpoint "
                                                                       "alone)"}
        if alone and s.energy_j is not None:
            energy = between(s.t_ns, s.energy_j, w.t0, w.t1)
            row |= {"energy_per_request_mj": energy / requests * 1e3 if energy is not None and requests else None,
                    "energy_per_request_mj_windows": per_request_windows(s.t_ns, s.energy_j, w.intended[endpoint],
                                                                         w.t0, w.t1)}
        measured_u = row.get("measured_utilization")
        row["utilization_law"] = _law(rho, measured_u if isinstance(measured_u, float) else None)
        out.append(HardwareEndpointRow(**row))
    return out
