"""The request an endpoint is sent, resolved once before the start instant from what the server says of the
model (or what the profile declares) and the endpoint's `shapes`, `batch_size` and `outputs`. It travels in
the run plan to every worker, so the orchestration's check and the workers' requests are the same.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tailrace.contract.profile import Endpoint
from tailrace.contract.tensors import TensorSpec


class InputSpec(BaseModel):
    """One input of the request: its per-sample shape (no batch dimension); -1 where only the data can say."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    datatype: str
    shape: list[int]


class RequestSpec(BaseModel):
    """What one request of an endpoint holds, and what it asks for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inputs: list[InputSpec]
    outputs: list[str]
    output_datatypes: dict[str, str]
    output_shapes: dict[str, list[int]] = {}
    batched: bool  # the model has a batch dimension: a request is [batch_size, *shape]
    batch_size: int
    source: str  # where the inputs came from: "server metadata", "server config", "profile"

    def input_shape(self, spec: InputSpec) -> list[int]:
        """The request's shape of an input (with the batch dimension when the model has one)."""
        return [self.batch_size, *spec.shape] if self.batched else list(spec.shape)

    def describe(self) -> list[str]:
        """One line per input, and the outputs asked for."""
        lines = [f"{i.name} {i.datatype} {self.input_shape(i)}" for i in self.inputs]
        return lines + [f"asks for {', '.join(self.outputs)}"]


class RequestSpecError(ValueError):
    """The model and the endpoint's settings do not fit; the message names the input and what differs."""


def has_batch_dimension(inputs: list[TensorSpec], max_batch_size: int | None) -> bool:
    """The config's max_batch_size > 0, or every input's first dimension is dynamic (a model without a config,
    or one that batches explicitly with max_batch_size 0): the request's rows go there."""
    if max_batch_size:
        return True
    return bool(inputs) and all(t.shape and t.shape[0] == -1 for t in inputs)


def resolve_request(endpoint: Endpoint, inputs: list[TensorSpec], outputs: list[TensorSpec],
                    max_batch_size: int | None, default_batch: int, source: str) -> RequestSpec:
    """The request for `endpoint` from the model's tensors; RequestSpecError names every problem."""
    batched = has_batch_dimension(inputs, max_batch_size)
    batch = endpoint.batch_size or default_batch
    problems = []
    if not batched and batch != 1:
        problems.append(f"batch_size {batch}: the model has no batch dimension (its inputs: "
                        f"{', '.join(map(str, inputs))}); use batch_size = 1")
    if batched and max_batch_size and batch > max_batch_size:
        problems.append(f"batch_size {batch} exceeds the model's max_batch_size {max_batch_size}")
    names = {t.name for t in inputs}
    problems += [f"shapes.{n}: the model has no input {n!r} (its inputs: {', '.join(sorted(names))})"
                 for n in endpoint.shapes if n not in names]
    problems += [f"ranges.{n}: the model has no input {n!r}" for n in endpoint.ranges if n not in names]
    specs = []
    for t in inputs:
        shape = list(t.shape[1:] if batched else t.shape)
        given = endpoint.shapes.get(t.name)
        if given is not None:
            if len(given) != len(shape) or any(want != -1 and g != want for g, want in zip(given, shape)):
                problems.append(f"shapes.{t.name}: {given} does not fit the model's {shape} (batch dimension "
                                f"{'left out' if batched else 'none'})")
            else:
                shape = list(given)
        specs.append(InputSpec(name=t.name, datatype=t.datatype, shape=shape))
    declared = {t.name: t for t in outputs}
    wanted = list(endpoint.outputs) if endpoint.outputs else [t.name for t in outputs]
    problems += [f"outputs: the model has no output {n!r} (its outputs: {', '.join(declared) or 'none'})"
                 for n in wanted if n not in declared and outputs]
    check = endpoint.check
    if check is not None and check.output and check.output not in wanted:
        problems.append(f"check.output: {check.output!r} is not among the outputs asked for ({', '.join(wanted)})")
    if problems:
        raise RequestSpecError("; ".join(problems))
    return RequestSpec(inputs=specs, outputs=wanted,
                       output_datatypes={n: declared[n].datatype for n in wanted if n in declared},
                       output_shapes={n: list(declared[n].shape) for n in wanted if n in declared},
                       batched=batched, batch_size=batch if batched else 1, source=source)


def scenario_request(request: RequestSpec, batch_size: int) -> RequestSpec:
    """The request with the scenario's rows per request (multi-stream queries, offline batches)."""
    if batch_size == request.batch_size:
        return request
    if not request.batched:
        raise RequestSpecError(f"the scenario sends {batch_size} samples per request and the model has no batch "
                               f"dimension")
    return request.model_copy(update={"batch_size": batch_size})


def declared_request(endpoint: Endpoint, default_batch: int) -> RequestSpec | None:
    """The request from the profile's own `inputs` (servers without metadata), or None."""
    if not endpoint.inputs:
        return None
    tensors = [TensorSpec(t.name, t.datatype, tuple(t.shape)) for t in endpoint.inputs]
    outputs = [TensorSpec(n, "", ()) for n in endpoint.outputs or []]
    spec = resolve_request(endpoint, tensors, outputs, None, default_batch, "profile")
    return spec
