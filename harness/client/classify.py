"""Classifying a failed request into the record's status classes (pure functions)."""
from __future__ import annotations

import socket
import ssl

import grpc


def classify_exception(exc: BaseException) -> tuple[str, str, str]:
    """(status, code, short error text) for an exception raised while sending or receiving."""
    text = f"{type(exc).__name__}: {exc}"[:200]
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        code = exc.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return "timeout", code.name, text
        if code == grpc.StatusCode.UNAVAILABLE and _looks_like_connection(str(exc.details() or "")):
            return "connection", code.name, (exc.details() or "")[:200]
        return "grpc_error", code.name, (exc.details() or text)[:200]
    if isinstance(exc, (socket.timeout, TimeoutError)) or type(exc).__name__ in ("Timeout", "ConnectionTimeout"):
        return "timeout", "timeout", text
    if isinstance(exc, ConnectionRefusedError):
        return "connection", "refused", text
    if isinstance(exc, ConnectionResetError):
        return "connection", "reset", text
    if isinstance(exc, (BrokenPipeError, ConnectionAbortedError, ConnectionError, ssl.SSLError, socket.gaierror)):
        return "connection", type(exc).__name__, text
    if isinstance(exc, OSError) or type(exc).__name__ in ("HTTPConnectionClosed", "HTTPParseError",
                                                           "RemoteDisconnected", "IncompleteRead"):
        return "connection", "closed", text
    return "bad_response", "exception", text


def _looks_like_connection(details: str) -> bool:
    d = details.lower()
    return any(w in d for w in ("connection refused", "failed to connect", "connection reset", "socket closed",
                                "connect failed", "broken pipe", "end of tcp stream", "connection attempt"))


def classify_http_status(status: int) -> str:
    """'ok' for 2xx, else 'http_error'."""
    return "ok" if 200 <= status < 300 else "http_error"
