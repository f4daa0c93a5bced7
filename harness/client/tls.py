"""TLS for the generator's connections to an https:// or grpcs:// endpoint, from the endpoint's `tls` table
(contract/profile/'s `Tls`): an ssl context for HTTPS, channel credentials for gRPC. Files are read once,
before any load; a file that cannot be read is a `TlsError` naming the field and the path."""
from __future__ import annotations

import functools
import ssl
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from tailrace.contract.profile import Tls


class TlsError(ValueError):
    """A TLS setting that cannot be used; the message names the field (tls.ca, tls.cert, tls.key) and the file."""


def _read(field: str, path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TlsError(f"tls.{field} {path}: cannot read ({exc.strerror or exc})") from None
    if b"-----BEGIN" not in data:
        raise TlsError(f"tls.{field} {path}: not a PEM file")
    return data


@functools.cache
def default_verify_context() -> ssl.SSLContext:
    """httpx's default verification (certifi's CA bundle), built once per process: an httpx client made with
    `verify=True` loads the bundle again, ~50 ms of CPU each — for the orchestrator's many short polls of servers on
    this host, while a run's processes start on the same cores."""
    import httpx

    return httpx.create_ssl_context()


def ssl_context(tls: Tls | None, context_class: type[ssl.SSLContext] = ssl.SSLContext) -> ssl.SSLContext:
    """A client context that verifies the server and its name against `tls.ca` (default: the system's trust
    store) and presents `tls.cert`/`tls.key` when given (mutual TLS); HTTP/1.1 by ALPN. `context_class`:
    gevent.ssl.SSLContext for the generator's cooperative sockets."""
    tls = tls or Tls()
    context = context_class(ssl.PROTOCOL_TLS_CLIENT)  # verifies the certificate and the host name
    ca = _read("ca", tls.ca)
    try:
        if ca:
            context.load_verify_locations(cadata=ca.decode("ascii", "replace"))
        else:
            context.load_default_certs()
    except ssl.SSLError as exc:
        raise TlsError(f"tls.ca {tls.ca}: not a CA certificate ({exc.reason or exc})") from None
    if tls.cert:
        _read("cert", tls.cert)
        _read("key", tls.key)
        try:
            context.load_cert_chain(tls.cert, tls.key)
        except ssl.SSLError as exc:
            raise TlsError(f"tls.cert {tls.cert} / tls.key {tls.key}: not a certificate and its key "
                           f"({exc.reason or exc})") from None
    context.set_alpn_protocols(["http/1.1"])
    return context


def grpc_credentials(tls: Tls | None):
    """grpc.ChannelCredentials for a grpcs:// endpoint (the CA, and the client pair for mutual TLS)."""
    import grpc

    tls = tls or Tls()
    return grpc.ssl_channel_credentials(root_certificates=_read("ca", tls.ca), private_key=_read("key", tls.key),
                                        certificate_chain=_read("cert", tls.cert))


def grpc_tls_options(tls: Tls | None) -> list[tuple[str, str]]:
    """Channel options for a server-name override (the name checked in the certificate and sent as SNI)."""
    if tls is None or not tls.server_name:
        return []
    return [("grpc.ssl_target_name_override", tls.server_name), ("grpc.default_authority", tls.server_name)]


def describe_tls_failure(exc: BaseException) -> str | None:
    """A sentence for a TLS handshake failure (which setting to look at), or None when `exc` is not one."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or exc
        return (f"the server's certificate was refused ({why}): check tls.ca "
                "(the CA that signed it) and tls.server_name (the name it carries)")
    if isinstance(exc, ssl.SSLError):
        return (f"TLS handshake failed ({getattr(exc, 'reason', None) or exc}): check tls.cert / tls.key (mutual TLS) "
                "and tls.ca")
    return None


def grpc_channel(url: str, tls: Tls | None, options: Sequence[tuple[str, object]] = ()):
    """A channel to grpc://host:port (plain) or grpcs://host:port (TLS with the endpoint's `tls`)."""
    import grpc

    parts = urlsplit(url)
    if parts.scheme == "grpcs":
        return grpc.secure_channel(parts.netloc, grpc_credentials(tls), options=[*options, *grpc_tls_options(tls)])
    return grpc.insecure_channel(parts.netloc, options=list(options))


def sender_tls(endpoint) -> Tls | None:
    """The endpoint's `tls` for its senders, the server name defaulting to the host of the endpoint's own URL: a
    region reached through a local delay proxy (another address) still checks the server's certificate against
    the server's name. None for plain http:// and grpc://."""
    if not endpoint.uses_tls:
        return None
    tls = endpoint.tls or Tls()
    return tls if tls.server_name else tls.model_copy(update={"server_name": urlsplit(endpoint.url).hostname})
