"""One endpoint's HTTP/1.1 transport, shared by the one-shot sender (senders.HttpSender) and the stream sender
(generative.StreamSender): the keep-alive pool to the host and port of its URL (TLS for https://), the credential's
header (read at each send: a rotated file is picked up), and the head every request to one path shares."""
from __future__ import annotations

from urllib.parse import urlparse

from tailrace.contract.credentials import Credential
from tailrace.contract.plan import EndpointTimeouts, PoolLimits
from tailrace.contract.profile import Tls
from tailrace.harness.client.http1 import Http1Pool
from tailrace.harness.client.tls import ssl_context


class HttpTransport:
    """The pool (`client`), where it goes (`host`, `port`, the URL's `base_path`), its timeouts, and the
    connections to open before the run (`warm_connections`)."""

    def __init__(self, url: str, timeouts: EndpointTimeouts, credential: Credential | None, tls: Tls | None,
                 pool: PoolLimits, kernel_stamps: bool = False) -> None:
        parsed = urlparse(url)
        self.host = parsed.hostname or ""
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.base_path = parsed.path.rstrip("/")
        context = None
        if parsed.scheme == "https":
            from gevent.ssl import SSLContext

            context = ssl_context(tls, SSLContext)
        self.client = Http1Pool(self.host, self.port, timeouts.total_s, context, tls.server_name if tls else None,
                                kernel_stamps=kernel_stamps)
        self.timeouts, self.credential = timeouts, credential
        self.warm_connections = pool.warm

    def head(self, method: str, path: str, *lines: str) -> bytes:
        """A request's shared head: its request line, Host, and `lines` (each request adds its own after it)."""
        return "".join((f"{method} {path} HTTP/1.1\r\n", f"Host: {self.host}:{self.port}\r\n",
                        *(f"{line}\r\n" for line in lines))).encode("latin-1")

    def auth_line(self) -> bytes:
        """The credential's header line, as read now (b"": none); CredentialError when it was never readable."""
        if self.credential is None:
            return b""
        return f"{self.credential.header}: {self.credential.value()}\r\n".encode("latin-1")
