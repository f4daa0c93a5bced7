"""A staging-like credential check for the embedded endpoint (`tailrace serve --auth-header H --auth-file F`):
every request must carry header H with the file's current content (re-read when the file changes, as the
generator does — contract/credentials.py), else HTTP 401 / gRPC UNAUTHENTICATED. Health checks stay open, as
behind a real gateway's liveness probes."""
from __future__ import annotations

import hmac

import grpc

from tailrace.contract.credentials import Credential, CredentialError

OPEN_PATHS = ("/v2/health/live", "/v2/health/ready", "/metrics")


def accepted(credential: Credential, presented: str | None) -> bool:
    """Does `presented` equal the credential's current value (compared in constant time)?"""
    try:
        expected = credential.value()
    except CredentialError:
        return False
    return presented is not None and hmac.compare_digest(presented.encode(), expected.encode())


def require_credential(app, credential: Credential):
    """ASGI 3 middleware: 401 for an HTTP request without the credential (health and metrics stay open)."""
    header = credential.header.lower().encode("latin-1")

    async def guarded(scope, receive, send):
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await app(scope, receive, send)
        presented = next((v.decode("latin-1") for k, v in scope["headers"] if k == header), None)
        if accepted(credential, presented):
            return await app(scope, receive, send)
        body = b'{"error":"missing or wrong credential"}'
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return guarded


class CredentialInterceptor(grpc.ServerInterceptor):
    """UNAUTHENTICATED for a gRPC call without the credential (ServerLive / ServerReady stay open)."""

    OPEN = ("/inference.GRPCInferenceService/ServerLive", "/inference.GRPCInferenceService/ServerReady")

    def __init__(self, credential: Credential) -> None:
        self.credential = credential
        self.key = credential.header.lower()

        def deny(_request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong credential")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method in self.OPEN:
            return continuation(handler_call_details)
        presented = next((v for k, v in handler_call_details.invocation_metadata or () if k == self.key), None)
        return continuation(handler_call_details) if accepted(self.credential, presented) else self._deny
