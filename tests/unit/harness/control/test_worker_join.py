"""A worker's wait for its master, ended: by a Ctrl-C (exit 130) or by a master that never answers (exit 2), one line
each naming the master's address — not gevent's "KeyboardInterrupt" printout, nor Locust's blank "Failed to connect"."""
from __future__ import annotations

import gevent
import pytest

from tailrace.contract.exit_codes import INTERRUPTED, USAGE
from tailrace.harness.control import locust_adaptations


@pytest.mark.parametrize("raised, code, said", [
    (KeyboardInterrupt, INTERRUPTED, "tailrace worker: interrupted before it reached its master at m.example:5557; "
                                     "nothing was sent"),
    (SystemExit(1), INTERRUPTED, "tailrace worker: interrupted before it reached its master at m.example:5557"),
    (ConnectionError, USAGE, "tailrace worker: no master answered at m.example:5557 in 305 s (--master: is "
                             "`tailrace master` running there"),
])
def test_a_wait_for_the_master_ended_says_why_in_one_line(monkeypatch, capsys, raised, code, said):
    hub = gevent.get_hub()
    before = hub.NOT_ERROR

    def connect(env, host, port):
        assert KeyboardInterrupt in hub.NOT_ERROR  # a Ctrl-C meanwhile is not printed by the hub
        raise raised

    monkeypatch.setattr(locust_adaptations, "_LOCUST_CREATE_WORKER", connect)
    with pytest.raises(SystemExit) as exited:
        locust_adaptations._joining_worker(None, "m.example", 5557)
    assert exited.value.code == code
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1
    assert hub.NOT_ERROR == before


def test_a_worker_that_reaches_its_master_is_locusts_own(monkeypatch):
    monkeypatch.setattr(locust_adaptations, "_LOCUST_CREATE_WORKER", lambda env, host, port: ("runner", host, port))
    assert locust_adaptations._joining_worker(None, "h", 1) == ("runner", "h", 1)
