"""Bearer-token check for TCP listeners (unix sockets rely on the socket file's permissions instead)."""

from __future__ import annotations

import hmac

import grpc


def bearer_matches(authorization: str | bytes, token: str) -> bool:
    """Whether an ``authorization`` value is ``Bearer <token>`` (compared in constant time); gRPC's and HTTP's check."""
    given = authorization.encode() if isinstance(authorization, str) else authorization
    return hmac.compare_digest(given, f"Bearer {token}".encode())


# The standard health checks answer without a token: load balancers and orchestrators probe them, and they tell
# nothing but whether the daemon serves.
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Refuse every call (but the health checks) whose ``authorization`` metadata is not ``Bearer <token>``."""

    def __init__(self, token: str):
        self._token = token

        def deny(_request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (send 'authorization: Bearer <token>')")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method in OPEN_METHODS:
            return continuation(handler_call_details)
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                if bearer_matches(value, self._token):
                    return continuation(handler_call_details)
                break
        return self._deny
