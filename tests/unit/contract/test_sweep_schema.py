"""sweep.json's JSON Schema is documented (docs/sweep.schema.json) and is the models' own."""
from __future__ import annotations

import json

from tailrace.contract.summary.sweep import sweep_schema
from tests import ROOT


def test_the_documented_sweep_schema_is_the_models():
    documented = json.loads((ROOT / "docs" / "sweep.schema.json").read_text())
    assert documented == sweep_schema(), "docs/sweep.schema.json is stale: python -m tailrace.contract.summary.sweep"
