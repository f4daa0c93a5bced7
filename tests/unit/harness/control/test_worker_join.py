"""A worker's wait for its master, ended: by a Ctrl-C (exit 130) or by a master that never answers (exit 2), one line
each naming the master's address — not gevent's "KeyboardInterrupt" printout, nor Locust's blank "Failed to connect".
In a child process: importing Locust monkey-patches the interpreter with gevent (pytest-xdist's worker would hang)."""
from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import io, json, sys, contextlib
import gevent
from tailrace.harness.control import locust_adaptations as la

hub = gevent.get_hub()
before = hub.NOT_ERROR
out = {}
for name, raised in (("ctrl-c", KeyboardInterrupt()), ("locust-exit", SystemExit(1)), ("no-master", ConnectionError())):
    def connect(env, host, port, raised=raised):
        assert KeyboardInterrupt in hub.NOT_ERROR  # a Ctrl-C meanwhile is not printed by the hub
        raise raised
    la._LOCUST_CREATE_WORKER = connect
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            la._joining_worker(None, "m.example", 5557)
            code = None
        except SystemExit as exc:
            code = exc.code
    out[name] = [code, err.getvalue(), hub.NOT_ERROR == before]
la._LOCUST_CREATE_WORKER = lambda env, host, port: ["runner", host, port]
out["joined"] = la._joining_worker(None, "h", 1)
print(json.dumps(out))
"""


def test_a_wait_for_the_master_ended_says_why_in_one_line():
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    interrupted = "tailrace worker: interrupted before it reached its master at m.example:5557; nothing was sent\n"
    assert out["ctrl-c"] == [130, interrupted, True]
    assert out["locust-exit"] == [130, interrupted, True]  # Locust's own loop exits 1 on the Ctrl-C it caught
    code, said, restored = out["no-master"]
    assert code == 2 and restored and said.count("\n") == 1
    assert said.startswith("tailrace worker: no master answered at m.example:5557 in 305 s (--master: is "
                           "`tailrace master` running there")
    assert out["joined"] == ["runner", "h", 1]  # a worker that reaches its master is Locust's own
