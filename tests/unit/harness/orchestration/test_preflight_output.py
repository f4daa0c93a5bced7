"""The output directory checked before anything starts: a file, a path under a file, a place no directory can be
made — each a reason naming it; a directory that can be made passes and nothing is left behind."""
from __future__ import annotations

from pathlib import Path

import pytest

from tailrace.harness.orchestration.preflight import check_output, unwritable


def test_a_directory_that_exists_or_can_be_made_passes_and_nothing_is_left(tmp_path):
    (tmp_path / "runs").mkdir()
    assert unwritable(tmp_path / "runs") is None
    assert unwritable(tmp_path / "new" / "deeper") is None
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["runs"]  # nothing made, nothing left
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_file_and_a_path_under_a_file_are_named(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert unwritable(afile) == "is a file, not a directory"
    assert unwritable(afile / "sub" / "runs") == f"cannot be made: {afile} is a file"
    assert afile.read_text() == "x"


def test_a_place_no_directory_can_be_made_is_named_by_the_systems_reason():
    assert unwritable(Path("/proc/tailrace-runs")) == "cannot be written: No such file or directory"


def test_check_output_names_where_the_directory_was_given(tmp_path):
    afile = tmp_path / "runs"
    afile.write_text("x")
    with pytest.raises(ValueError, match=r"^--out: .*runs is a file, not a directory$"):
        check_output(afile, "--out")
    with pytest.raises(ValueError, match=r"^output_dir: /proc/x cannot be written: No such file or directory$"):
        check_output(Path("/proc/x"))
