"""The typed result is read as models where the run's numbers are decided and shown: the string-key lookups
(`x["k"]`, `x.get("k")` with a constant key) in tailrace/, analysis/report/ and analysis/decide/ stay at most
MAX_LOOKUPS. What is left are DataFrame columns, raw files' JSON (snapshots, manifests, profiles as written) and
figure data — counted all the same, so that a statistic handing a dict to the report shows here."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ROOMS = ("tailrace", "analysis/report", "analysis/decide")
MAX_LOOKUPS = 150


def string_key_lookups(source: str) -> int:
    """`x["k"]` and `x.get("k", …)` with a string constant `k`, in one module's source."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            count += 1
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            count += 1
    return count


def test_a_lookup_is_counted_whether_subscript_or_get():
    assert string_key_lookups('a["x"]; b.get("y"); c[0]; d.get(k); e["z"]["w"]') == 4


def test_the_typed_result_is_read_as_models():
    per_module = {str(path.relative_to(ROOT)): string_key_lookups(path.read_text())
                  for room in ROOMS for path in sorted((ROOT / room).rglob("*.py"))}
    total = sum(per_module.values())
    worst = sorted(per_module.items(), key=lambda kv: -kv[1])[:5]
    assert total <= MAX_LOOKUPS, f"{total} string-key lookups (at most {MAX_LOOKUPS}); the most: {worst}"
