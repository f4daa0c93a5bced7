"""Small helpers on ONNX files for the model builds."""
from __future__ import annotations

from pathlib import Path


def dedupe_opsets(onx):
    """Drop repeated opset_import entries for one domain (skl2onnx 1.20 writes the default twice), in one order:
    skl2onnx lists the domains as a set hands them over, so their order moved with the process's string hash seed
    and the same build gave different bytes in two processes."""
    seen: dict[str, int] = {}
    for entry in onx.opset_import:
        seen[entry.domain] = max(seen.get(entry.domain, 0), entry.version)
    del onx.opset_import[:]
    for domain, version in sorted(seen.items()):
        onx.opset_import.add(domain=domain, version=version)
    return onx


def onnx_parameter_count(path: Path) -> int:
    """Number of learned scalars: initializer elements plus float attributes of ML operators
    (skl2onnx stores LinearClassifier and Scaler weights as node attributes)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    in_initializers = sum(numpy_helper.to_array(t).size for t in model.graph.initializer)
    in_attributes = sum(len(a.floats) for node in model.graph.node for a in node.attribute)
    return int(in_initializers + in_attributes)
