"""The descriptor table grown before the run (harness/worker/descriptors.py): its size read back from the kernel."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tailrace.harness.worker.descriptors import reserve_descriptors, table_size


def test_table_size_is_the_kernels_figure():
    assert table_size() >= 64  # the smallest table Linux gives a process


def test_reserving_grows_the_table_at_once_and_moves_no_descriptor():
    """In a fresh process (a table of 64 or so): after reserving 3,000, the table holds them all before any is
    opened, and an open descriptor is where it was."""
    code = textwrap.dedent("""
        import os, resource, threading
        from tailrace.harness.worker.descriptors import reserve_descriptors, table_size
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        threading.Thread(target=lambda: None).start()  # a process with threads, as a Locust worker
        r, w = os.pipe()
        before = table_size()
        after = reserve_descriptors(3000)
        os.write(w, b"x")
        print(before, after, os.read(r, 1) == b"x", os.open(os.devnull, os.O_RDONLY) < 64)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    before, after = int(out[0]), int(out[1])
    assert before < 3000 <= after
    assert out[2:] == ["True", "True"]  # the pipe works; new descriptors still take the lowest free number


def test_reserving_stops_at_the_soft_limit():
    code = textwrap.dedent("""
        import resource
        from tailrace.harness.worker.descriptors import reserve_descriptors
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        print(reserve_descriptors(100_000))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 200 <= int(out) < 100_000


def test_a_small_count_leaves_the_table_alone():
    size = table_size()
    assert reserve_descriptors(1) == size
