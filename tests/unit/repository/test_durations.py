"""tests/durations.py: the order the two test workers take the files in, from a CI timeline's seconds."""
from __future__ import annotations

import json

from tests.durations import UNKNOWN_S, file_order, from_timeline


def test_a_timeline_sums_each_files_seconds_alone_and_shared():
    line = lambda test, shared, s: json.dumps({"test": test, "worker": "gw0", "shared": shared, "asked": 0,  # noqa: E731
                                                "began": 10.0, "ended": 10.0 + s})
    table = from_timeline([line("tests/integration/a.py::t1", False, 30), line("tests/integration/a.py::t2", True, 5),
                           line("tests/integration/b.py::t", True, 2.5)])
    assert table == {"tests/integration/a.py": {"alone": 30.0, "shared": 5.0},
                     "tests/integration/b.py": {"alone": 0.0, "shared": 2.5}}


def test_the_unit_tier_first_then_the_files_most_alone_then_the_longest():
    durations = {"tests/unit/u.py": {"alone": 0.0, "shared": 3.0},
                 "tests/integration/lone.py": {"alone": 20.0, "shared": 0.0},
                 "tests/integration/mixed_long.py": {"alone": 60.0, "shared": 60.0},
                 "tests/integration/mixed_short.py": {"alone": 5.0, "shared": 5.0},
                 "tests/integration/shared.py": {"alone": 0.0, "shared": 200.0}}
    files = [*durations, "tests/integration/new_alone.py", "tests/integration/new_shared.py"]
    alone = {"tests/integration/lone.py", "tests/integration/mixed_long.py", "tests/integration/mixed_short.py",
             "tests/integration/new_alone.py"}
    order = sorted(files, key=lambda f: file_order(f, f in alone, durations))
    assert order == ["tests/unit/u.py", "tests/integration/lone.py", "tests/integration/new_alone.py",
                     "tests/integration/mixed_long.py", "tests/integration/mixed_short.py",
                     "tests/integration/shared.py", "tests/integration/new_shared.py"]
    assert file_order("tests/integration/new_shared.py", False, {})[2] == -UNKNOWN_S
