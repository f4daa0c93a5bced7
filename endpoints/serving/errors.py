"""The one error type the endpoint raises for a request it refuses, mapped to HTTP and gRPC."""
from __future__ import annotations

import grpc


class InferenceError(Exception):
    """A refused request: carries the HTTP status and gRPC code that describe it."""

    def __init__(self, message: str, http_status: int = 400,
                 grpc_code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status
        self.grpc_code = grpc_code


def not_found(message: str) -> InferenceError:
    """Unknown model or route."""
    return InferenceError(message, 404, grpc.StatusCode.NOT_FOUND)


def unavailable(message: str) -> InferenceError:
    """Queue full or server shutting down: retry later."""
    return InferenceError(message, 503, grpc.StatusCode.UNAVAILABLE)
