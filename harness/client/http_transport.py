"""One endpoint's HTTP/1.1 transport, shared by the one-shot sender (senders.HttpSender) and the stream sender
(generative.StreamSender): the keep-alive pool to the host and port of its URL (TLS for https://), the credential's
header (read at each send: a rotated file is picked up), and the head every request to one path shares."""
from __future__ import annotations

from urllib.parse import urlparse

from tailrace.contract.credentials import Credential, CredentialError
from tailrace.contract.plan import EndpointTimeouts, PoolLimits
from tailrace.contract.profile import Tls
from tailrace.harness.client.http1 import Http1Pool
from tailrace.harness.client.outcome import Outcome
from tailrace.harness.client.tls import ssl_context

LARGE_BODY = 64 * 1024  # above this, a request's head and body leave in one gather write, never joined


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

    def check_and_fill(self, path: str, inline=None) -> None:
        """GET `path` with the credential must answer 200 (the endpoint reachable, its TLS handshake and credential
        accepted); then the pool — or the issue loop's `inline` pool — opens its warm connections."""
        route = self.base_path + path
        head = self.head("GET", route, "Connection: keep-alive")
        response = self.client.request(head + self.auth_line() + b"Content-Length: 0\r\n\r\n")
        if response.status != 200:
            raise ConnectionError(f"GET {route} answered {response.status}")
        (inline if inline is not None else self.client).prewarm(self.warm_connections)

    def request(self, head: bytes, headers: dict[str, str], body: bytes, out: Outcome
                ) -> bytes | tuple[bytes, bytes] | None:
        """One request's bytes — the shared `head`, the credential's line (read now), `headers`, the body — and
        `out.bytes_out`: a large body apart (gathered by the kernel), a small one in one buffer with its head. None,
        and `out` says why, when the credential cannot be read."""
        try:
            auth = self.auth_line()
        except CredentialError as exc:
            out.status, out.code, out.error = "client_error", "credential", str(exc)[:200]
            return None
        head = b"".join((head, auth, "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1"),
                         b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n"))
        out.bytes_out = len(head) + len(body)
        return (head, body) if len(body) > LARGE_BODY else head + body
