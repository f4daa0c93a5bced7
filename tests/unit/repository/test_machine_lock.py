"""The lock that lets tests share the machine under pytest-xdist (tests/support.py `machine_turn`): a test that
runs alone excludes every other, shared tests overlap, and a test waiting to run alone is not starved."""
from __future__ import annotations

import threading

import pytest

from tests import support
from tests.support import machine_turn


def _enter_in_thread(lock_dir, shared: bool) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """(entered, release, thread): the thread holds its turn from `entered` until `release` is set."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with machine_turn(lock_dir, shared):
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return entered, release, thread


def test_a_test_alone_excludes_a_shared_one_until_it_ends(tmp_path):
    alone, end_alone, t1 = _enter_in_thread(tmp_path, shared=False)
    assert alone.wait(5)
    shared, end_shared, t2 = _enter_in_thread(tmp_path, shared=True)
    assert not shared.wait(0.3)  # the machine is taken
    end_alone.set()
    assert shared.wait(5)
    end_shared.set()
    t1.join(5), t2.join(5)


def test_shared_tests_overlap_and_a_waiting_lone_test_holds_off_new_ones(tmp_path):
    first, end_first, t1 = _enter_in_thread(tmp_path, shared=True)
    second, end_second, t2 = _enter_in_thread(tmp_path, shared=True)
    assert first.wait(5) and second.wait(5)  # both at once
    end_second.set()
    t2.join(5)
    alone, end_alone, t3 = _enter_in_thread(tmp_path, shared=False)
    assert not alone.wait(0.3)  # waits for the first shared test …
    late, end_late, t4 = _enter_in_thread(tmp_path, shared=True)
    assert not late.wait(0.3)  # … and a shared test arriving now waits behind it (the turnstile)
    end_first.set()
    assert alone.wait(5) and not late.is_set()
    end_alone.set()
    assert late.wait(5)
    end_late.set()
    for t in (t1, t3, t4):
        t.join(5)


def test_a_lone_test_lets_shared_ones_in_while_its_server_boots_and_is_alone_again_after(tmp_path):
    with machine_turn(tmp_path, shared=False) as turn:
        shared, end_shared, t1 = _enter_in_thread(tmp_path, shared=True)
        assert not shared.wait(0.3)  # alone
        back = threading.Event()

        def boot_window() -> None:
            with turn.shared_while():
                assert shared.wait(5)  # a shared test runs beside the boot
            back.set()

        window = threading.Thread(target=boot_window, daemon=True)
        window.start()
        assert shared.wait(5)
        assert not back.wait(0.3)  # alone again only once the shared test ends
        end_shared.set()
        assert back.wait(5)
        late, end_late, t2 = _enter_in_thread(tmp_path, shared=True)
        assert not late.wait(0.3)  # and alone after
        window.join(5)
    assert late.wait(5)
    end_late.set()
    t1.join(5), t2.join(5)


def test_a_shared_test_lets_off_only_the_generators_timing_and_a_lone_test_nothing(tmp_path):
    stall = "w0: generator paused or stalled for 0.25 s (1.0–9.0 s into the run): …"
    lost = "w1: worker lost (no heartbeat for 30 s)"
    kept = support._turn
    try:
        with machine_turn(tmp_path, shared=True):
            support.assert_valid({"valid": False, "invalid_reasons": [stall]})
            with pytest.raises(AssertionError, match="worker lost"):
                support.assert_valid({"valid": False, "invalid_reasons": [stall, lost]})
        with machine_turn(tmp_path, shared=False), pytest.raises(AssertionError, match="paused or stalled"):
            support.assert_valid({"valid": False, "invalid_reasons": [stall]})
        support.assert_valid({"valid": True, "invalid_reasons": []})
    finally:
        support._turn = kept
