"""HTTP side of the daemon: ``/metrics`` (Prometheus text), ``/status`` (JSON) and ``/healthz``, read-only.

``/healthz`` answers 200 ``serving`` once the daemon proves without compiling, 503 ``warming``
before and 503 ``stopping`` while it shuts down (what a load balancer's probe wants).

Plain ``http.server`` on its own threads: scrapes are rare and small, and the gRPC
listeners stay untouched by a slow scraper.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

log = logging.getLogger("cuzk.http")


class StatusHttpServer:
    """Serve ``/metrics``, ``/status`` and ``/healthz`` on ``host:port`` (port 0 picks a free one)."""

    def __init__(self, address: str, metrics_text: Callable[[], str], status: Callable[[], dict[str, Any]],
                 state: Callable[[], str]):
        """``state``: the daemon's "warming" | "serving" | "stopping"."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        outer = self

        class Handler(BaseHTTPRequestHandler):
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

            def _send(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt, *args):
                log.debug("%s %s", self.address_string(), fmt % args)

        self.metrics_text = metrics_text
        self.status = status
        self.state = state
        self._server = ThreadingHTTPServer((host, int(port)), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="cuzk-http", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> StatusHttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
