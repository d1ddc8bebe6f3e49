"""Bearer-token check for TCP listeners (unix sockets rely on the socket file's permissions instead)."""

from __future__ import annotations

import hmac

import grpc


# The standard health service answers without the token: load balancers' probes send none, and it tells only
# whether the daemon serves.
OPEN_METHOD_PREFIX = "/grpc.health.v1.Health/"


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Refuse every call whose ``authorization`` metadata is not ``Bearer <token>`` (health checks excepted)."""

    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

        def deny(_request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (send 'authorization: Bearer <token>')")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method.startswith(OPEN_METHOD_PREFIX):
            return continuation(handler_call_details)
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else value
                if hmac.compare_digest(given, self._expected):
                    return continuation(handler_call_details)
                break
        return self._deny
