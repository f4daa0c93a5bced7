"""A raw loopback HTTP server with scripted behaviour, for the generator's HTTP/1.1 clients' tests."""
from __future__ import annotations

import socket
import threading
import time

from tailrace.harness.services.processes import free_port

BODY = b'{"ok":true}'
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
REQUEST = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}"


class ScriptedServer:
    """mode: keepalive (answer every request on a connection), close-after-one (answer, then close silently),
    hang (read, never answer)."""

    def __init__(self, mode: str) -> None:
        self.mode, self.connections = mode, 0
        self.port = free_port()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        with conn:
            while True:
                data = b""
                while not data.endswith(b"{}"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    data += chunk
                if self.mode == "hang":
                    time.sleep(5)
                    return
                conn.sendall(RESPONSE)
                if self.mode == "close-after-one":
                    return

    def close(self) -> None:
        self.sock.close()
