"""docs/API.md's examples, run as written (tailrace/api.py), from a directory laid out like the repository after
`make demo`: profiles/ and build/models (the session's model repository)."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests import ROOT

pytestmark = pytest.mark.shares_machine  # functional checks: may run beside another such test (tests/conftest.py)


def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "API.md").read_text(), re.S)


@pytest.mark.timeout(600)
def test_the_documented_api_examples_run(model_repo, tmp_path, capsys):
    examples = _examples()
    assert len(examples) == 5
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "models").symlink_to(model_repo)
    here = Path.cwd()
    os.chdir(tmp_path)
    namespace: dict = {}
    try:
        for code in examples:
            exec(compile(code, "docs/API.md", "exec"), namespace)  # noqa: S102 — the documentation's own code
    finally:
        os.chdir(here)
    result, again, table, comparison = namespace["result"], namespace["again"], namespace["table"], namespace["comparison"]
    assert result.verdict in ("PASS", "INCONCLUSIVE") and result.exit_code in (0, 3)
    overall = result.summary.latency_row()
    assert overall == result.summary.latency[-1] and overall.count > 300
    assert overall.p50.value is not None and overall.p50.ci_low <= overall.p50.value <= overall.p50.ci_high
    assert {s.verdict for s in result.summary.slos} <= {"PASS", "FAIL", "INCONCLUSIVE"} and result.summary.slos
    assert comparison.valid and len(comparison.rows) == 4 and all(r.paired for r in comparison.rows)
    assert (result.run_dir / "report" / "summary.json").exists()
    requests = namespace["requests"]
    assert {"t_intended_ref", "t_sent_ref", "t_done_ref", "trace_id"} <= set(requests.columns) and len(requests) > 300
    by_second = namespace["p99_by_second"]  # api.query: the same requests, per second on the reference clock
    assert set(by_second["region"]) == set(requests["region"].astype(str)) and by_second["second"].min() == 0
    assert (by_second["p99_ms"] > 0).all()
    assert namespace["analysis"].summary.run_id == result.summary.run_id
    assert len(table) == 4 and table["paired"].all()  # 2 endpoints × 2 regions, one seed: paired
    first = table.iloc[0]
    typed = comparison.row(first["endpoint"], first["region"], first["metric"])
    assert typed.differences["p99"].value == first["p99_diff_ms"] and typed.verdict == first["verdict"]
    assert again.run_dir != result.run_dir
    assert "p99" in capsys.readouterr().out
