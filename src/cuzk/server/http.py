"""HTTP side of the daemon: ``/metrics`` (Prometheus text), ``/status`` (JSON), ``/healthz``, and
``POST /v1/prove/{key}`` (``http_prove``: token-guarded proofs for clients without gRPC).

``/healthz`` answers 200 ``serving`` once the daemon proves without compiling, 503 ``warming``
before and 503 ``stopping`` while it shuts down (what a load balancer's probe wants).

Plain ``http.server`` on its own threads: scrapes are rare and small, and the gRPC
listeners stay untouched by a slow scraper. With a TLS context it serves HTTPS (the
handshake runs on the request's thread, never on the accepting one). On ``unix:PATH`` it
serves the local HTTP socket (mode 0600), what ``cuzk prove`` uses on a local daemon
(``cuzk.local_client``: no grpc or protobuf to import).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socketserver
import ssl
import stat
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST

from .http_prove import PROVE_PREFIX, Answer, HttpProver, error

log = logging.getLogger("cuzk.http")


# A connection silent this long while a request is read (or its answer written) is dropped: a client that announces a
# body and sends nothing must not hold a thread for ever. Waiting for the proof is no socket operation: not bounded here.
READ_TIMEOUT_S = 60.0


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client that breaks off (or speaks plain HTTP to the TLS port) is its own business: one debug line, no traceback."""
        log.debug("HTTP connection from %s ended badly", client_address, exc_info=True)


class _QuietUnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    handle_error = _QuietServer.handle_error

    def server_bind(self) -> None:
        """Bind with mode 0600, over the socket file a killed daemon left (a listening socket is never a file's)."""
        path = self.server_address
        if os.path.exists(path) and stat.S_ISSOCK(os.stat(path).st_mode):
            os.unlink(path)
        old_umask = os.umask(0o177)
        try:
            super().server_bind()
        finally:
            os.umask(old_umask)


class StatusHttpServer:
    """Serve ``/metrics``, ``/status``, ``/healthz`` and, given a prover, ``POST /v1/prove/{key}`` on ``host:port``
    (port 0 picks a free one) or on ``unix:PATH``."""

    def __init__(self, address: str, metrics_text: Callable[[], str], status: Callable[[], dict[str, Any]],
                 state: Callable[[], str], prover: HttpProver | None = None, tls: ssl.SSLContext | None = None):
        """``state``: the daemon's "warming" | "serving" | "stopping"."""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            timeout = READ_TIMEOUT_S

            def do_GET(self):  # noqa: N802 (http.server's naming)
                path = self.path.split("?", 1)[0]
                try:
                    if path == "/metrics":
                        self._send(200, CONTENT_TYPE_LATEST, outer.metrics_text().encode())
                    elif path == "/status":
                        self._send(200, "application/json", json.dumps(outer.status(), indent=1, default=str).encode())
                    elif path == "/healthz":
                        state = outer.state()
                        self._send(200 if state == "serving" else 503, "text/plain", f"{state}\n".encode())
                    else:
                        self._send(404, "text/plain", b"not found: try /metrics, /status or /healthz\n")
                except Exception as exc:  # a broken scrape must not take the daemon down
                    log.exception("HTTP %s failed", path)
                    self._send(500, "text/plain", f"error: {exc}\n".encode())

            def do_POST(self):  # noqa: N802
                url = urlsplit(self.path)
                if outer.prover is None or not url.path.startswith(PROVE_PREFIX) or len(url.path) == len(PROVE_PREFIX):
                    return self._answer(error(404, "not found: POST /v1/prove/<key>"))
                refusal = outer.prover.authorize(self.headers.get("Authorization"))
                length = outer.prover.body_length(self.headers.get("Content-Length")) if refusal is None else refusal
                if isinstance(length, Answer):
                    self.close_connection = True  # the unread body must not be taken for the next request
                    return self._answer(length)
                if self.headers.get("Expect", "").lower() == "100-continue":
                    # curl asks before sending a body over 1 MiB and otherwise waits a second for this interim answer
                    # (http.server sends it only when it speaks HTTP/1.1, which this server does not): a request
                    # refused above never had its body sent.
                    self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    self.wfile.flush()
                body = self.rfile.read(length)
                self._answer(outer.prover.prove(unquote(url.path[len(PROVE_PREFIX):]), self.headers.get("Content-Type", ""),
                                                body, parse_qs(url.query)))

            def _not_allowed(self) -> None:
                """Other methods get the endpoints' JSON error form (http.server's own answer is an HTML 501 page)."""
                allowed = "POST" if self.path.startswith(PROVE_PREFIX) else "GET"
                self.close_connection = True  # a body it may carry stays unread
                refusal = error(405, f"method {self.command} not allowed here: {allowed} {self.path.split('?', 1)[0]}")
                self._answer(Answer(405, refusal.body, headers=(("Allow", allowed),)))

            do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

            def do_HEAD(self):  # noqa: N802 — a probe's HEAD /healthz: GET's status and headers (``_send`` drops the body)
                if self.path.startswith(PROVE_PREFIX):
                    self._not_allowed()
                else:
                    self.do_GET()

            def _answer(self, answer: Answer) -> None:
                self._send(answer.status, answer.content_type, answer.body, answer.headers)

            def _send(self, code: int, content_type: str, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def address_string(self) -> str:
                return self.client_address[0] if self.client_address else "local"  # a unix peer has no address

            def log_message(self, fmt, *args):
                log.debug("%s %s", self.address_string(), fmt % args)

        self.metrics_text = metrics_text
        self.status = status
        self.state = state
        self.prover = prover
        if address.startswith("unix:"):
            self._server = _QuietUnixServer(address[5:], Handler)
        else:
            host, _, port = address.rpartition(":")
            self._server = _QuietServer((host.strip("[]"), int(port)), Handler)
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True, do_handshake_on_connect=False)
        self._thread = threading.Thread(target=self._server.serve_forever, name="cuzk-http", daemon=True)

    @property
    def address(self) -> str:
        if isinstance(self._server.server_address, str):
            return "unix:" + self._server.server_address
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> StatusHttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if isinstance(self._server.server_address, str):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._server.server_address)
