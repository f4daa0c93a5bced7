"""A remote worker's results travel to its master over Locust's own channel (contract/messages.py's CHUNK /
ACK), from a spool on the worker's disk.

The worker writes its closed chunks and worker.json into its spool (its own run directory, as a local worker
writes into the run's); `ChunkUplink` sends each closed file once, keeps it until the master acknowledges it
(the names are appended to the spool's acked.txt), re-sends what is unacknowledged after `resend_s` (a
reconnect, a lost message) and at the end. The master writes a file once, whatever the number of copies.

Nothing heavy runs on the worker's event loop: files are read on gevent's thread pool, and sending hands
the bytes to ZeroMQ. A worker killed mid-run loses at most its open chunk: what it closed is at the master or
in its spool (`tailrace collect SPOOL RUN_DIR` adds it afterwards).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tailrace.contract.layout import WorkerLayout, append_line


class ChunkUplink:
    """Sends one worker's closed files to its master until each is acknowledged."""

    def __init__(self, layout: WorkerLayout, send: Callable[[str, bytes], None], read=None,
                 resend_s: float = 5.0) -> None:
        self.layout, self.send, self.resend_s = layout, send, resend_s
        self.read = read or (lambda path: path.read_bytes())  # a worker passes gevent's thread pool here
        self.acked: set[str] = set(layout.acked.read_text().split()) if layout.acked.exists() else set()
        self.sent_at: dict[str, float] = {}
        self.bytes_sent = 0
        self.files_sent = 0

    def pending(self) -> list[Path]:
        """Closed files not yet acknowledged."""
        return [p for p in self.layout.shipped_files() if p.name not in self.acked]

    def poll(self) -> int:
        """Send every closed file not sent yet or unacknowledged for `resend_s`; returns how many were sent."""
        now = time.monotonic()
        sent = 0
        for path in self.pending():
            last = self.sent_at.get(path.name)
            if last is not None and now - last < self.resend_s:
                continue
            try:
                data = self.read(path)
            except OSError:
                continue  # it will be there next time (or the disk is gone: collect cannot help either)
            self.send(path.name, data)
            self.sent_at[path.name] = now
            self.bytes_sent += len(data)
            self.files_sent += 1
            sent += 1
        return sent

    def ack(self, name: str) -> None:
        """The master has `name`: never send it again (recorded in the spool)."""
        if name in self.acked:
            return
        self.acked.add(name)
        self.sent_at.pop(name, None)
        try:
            append_line(self.layout.acked, name)
        except OSError:
            pass  # the spool keeps the file; collect is idempotent

    def drain(self, timeout_s: float, sleep=time.sleep) -> list[str]:
        """At the end: send what is left and wait for the acknowledgements; returns the names still unacknowledged."""
        deadline = time.monotonic() + timeout_s
        self.resend_s = min(self.resend_s, 2.0)
        while time.monotonic() < deadline:
            self.poll()
            if not self.pending():
                return []
            sleep(0.1)
        return [p.name for p in self.pending()]
