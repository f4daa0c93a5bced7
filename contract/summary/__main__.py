"""python -m tailrace.contract.summary > docs/summary.schema.json: summary.json's JSON Schema."""
import json

from tailrace.contract.summary.run_summary import summary_schema

print(json.dumps(summary_schema(), indent=2))
