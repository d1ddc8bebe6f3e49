"""The engine process: one ``Engine``, its gRPC listeners and its HTTP endpoints.

``cuzk daemon`` runs this under the supervisor (``python -m cuzk.server CONFIG.json
[--budget BYTES]``) or, with ``--no-supervise``, in its own process. Listeners: the unix
socket (mode 0600, no token: the file's permissions are the access control), the local HTTP
socket beside it (``cuzk.http.sock`` for ``cuzk.sock``, the same endpoints as the HTTP listener
under the same access control: what ``cuzk prove`` uses, ``cuzk.local_client``) and, when
configured, TCP addresses that demand the bearer token — over TLS when ``tls_cert`` and
``tls_key`` are configured (recommended: otherwise the token crosses the network in clear); the
HTTP listener (metrics, status, and ``POST /v1/prove/{key}`` behind the same token) serves
HTTPS with the same certificate then. Once everything listens,
``<data_dir>/run/daemon.json`` says where (the HTTP port actually bound included), which is
what tests and tools wait for.

Every gRPC listener also serves the standard health service (``grpc.health.v1``; on TCP without
the token: it tells nothing but the state) and server reflection. The daemon's state is
"warming" from the moment it listens until its JIT warm-up (``engine/warmup.py``, in the
background: jobs are taken meanwhile, they just compile what they need) has run, "serving"
after, "stopping" once asked to stop: health answers NOT_SERVING, SERVING, NOT_SERVING, and
HTTP ``/healthz`` 503, 200, 503.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import ssl
import sys
import threading
import time
from concurrent import futures
from dataclasses import asdict
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .. import __version__
from ..config import ConfigError, DaemonConfig
from ..engine.supervisor import EXIT_CONFIG, SIGNAL_POLL_S, SupervisorState, atomic_write_json
from ..local_client import local_http_socket
from ..proto import cuzk_pb2 as pb
from ..proto import cuzk_pb2_grpc as pb_grpc
from .auth import BearerTokenInterceptor
from .http import StatusHttpServer
from .http_prove import HttpProver
from .metrics import DaemonMetrics
from .service import CuzkService

log = logging.getLogger("cuzk.daemon")

CUZK_SERVICE = pb.DESCRIPTOR.services_by_name["Cuzk"].full_name
SERVICE_NAMES = (CUZK_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME)  # what reflection lists

DAEMON_FILE = Path("run") / "daemon.json"
GRPC_THREADS = 64
SHUTDOWN_GRACE_S = 5.0
WARMING, SERVING, STOPPING = "warming", "serving", "stopping"


class StartupError(RuntimeError):
    """The daemon cannot start as configured (address in use, bad key...): restarting will not help."""


class Daemon:
    def __init__(self, config: DaemonConfig, budget: int | None = None, *, heartbeat: bool = False,
                 budget_over_limit: bool = False, engine=None):
        """``budget``: the supervisor's ceiling (configured or learned), else the config's; ``budget_over_limit``
        trusts the supervisor's ``budget`` over the detected limit (it says so only for an unlearned configured one).
        ``engine``: serve this engine-like object (the cluster's front door, ``cuzk.cluster``) instead of building an
        ``Engine`` from the config."""
        self.config = config
        self.started_at = time.time()
        self.engine = engine if engine is not None else self._make_engine(config, budget, heartbeat, budget_over_limit)
        self.metrics = DaemonMetrics(self.status)
        self.engine.add_listener(self._on_state)
        self.service = CuzkService(self.engine, self.status, self.metrics.text, witness_paths=config.witness_paths)
        self._servers: list[grpc.Server] = []
        self._http: StatusHttpServer | None = None
        self._local_http: StatusHttpServer | None = None
        self._stopped = threading.Event()
        self.health = health.HealthServicer()  # grpc.health.v1, shared by every listener
        self._state_lock = threading.Lock()  # the state only moves forward: warming → serving → stopping
        self.state = WARMING
        self.warmup: dict[str, Any] = {"seconds": None, "error": None}
        self._set_health(WARMING)

    @staticmethod
    def _make_engine(config: DaemonConfig, budget: int | None, heartbeat: bool, budget_over_limit: bool):
        from ..engine import Engine, EngineConfig

        values: dict[str, Any] = {**config.engine, "heartbeat": heartbeat}
        values["keys"] = {**config.engine.get("keys", {}), **config.keys}
        if budget is not None or config.budget is not None:
            values["budget_bytes"] = budget if budget is not None else config.budget
            values["budget_over_limit"] = budget_over_limit if budget is not None else config.budget_over_limit
        try:
            engine_config = EngineConfig.from_mapping(config.data_dir, values)
        except (TypeError, ValueError) as exc:
            raise StartupError(f"engine configuration: {exc}") from exc
        return Engine(engine_config)

    def _set_health(self, state: str) -> None:
        self.state = state
        serving = health_pb2.HealthCheckResponse.SERVING if state == SERVING else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in ("", CUZK_SERVICE):  # "": the server as a whole, as health clients ask by default
            self.health.set(service, serving)

    def _warm_up(self) -> None:
        """The engine's JIT warm-up (the cluster's front door: its hosts'), then "serving"."""
        try:
            self.warmup["seconds"] = round(self.engine.warm_up(), 3)
        except Exception as exc:  # proofs still work, compiling as they go: say so, and serve
            log.exception("JIT warm-up failed; the first proofs compile what they need")
            self.warmup["error"] = f"{type(exc).__name__}: {exc}"
        with self._state_lock:
            if self.state == WARMING:
                self._set_health(SERVING)

    def _on_state(self, job_id: str, state) -> None:
        if state.terminal:
            self.metrics.observe(self.engine.get(job_id))

    def status(self) -> dict[str, Any]:
        supervisor = SupervisorState.load(self.config.data_dir)
        status = self.engine.status()
        for key in status.get("keys", []):
            try:  # what one proof with this key reserves besides the key itself
                key["working_set_bytes"] = self.engine.working_set(key["name"]).total_bytes
            except (ValueError, OSError) as exc:
                key["working_set_error"] = str(exc)
        return {
            **status,
            "supervisor": asdict(supervisor) if supervisor.supervisor_pid else None,
            "server": {"version": __version__, "state": self.state, "warmup": dict(self.warmup),
                       "pid": os.getpid(), "started_at": self.started_at,
                       "listen": self.config.listen_addresses(), "http": self._http.address if self._http else None,
                       "local_http": self._local_http.address if self._local_http else None,
                       "max_request_bytes": self.config.max_request},
        }

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Daemon:
        try:
            self._listen()
        except BaseException:
            self.stop()
            raise
        self.engine.start()
        threading.Thread(target=self._warm_up, name="cuzk-warmup", daemon=True).start()
        atomic_write_json(self.config.data_dir / DAEMON_FILE, {
            "pid": os.getpid(), "listen": self.config.listen_addresses(), "http": self._http.address if self._http else None,
            "local_http": self._local_http.address if self._local_http else None, "started_at": self.started_at})
        log.info("cuzk daemon %s serving on %s%s", __version__, ", ".join(self.config.listen_addresses()),
                 f"; HTTP on {self._http.address}" if self._http else "")
        return self

    def _listen(self) -> None:
        options = [("grpc.max_receive_message_length", self.config.max_request), ("grpc.max_send_message_length", 64 << 20),
                   ("grpc.so_reuseport", 0)]
        unix = [a for a in self.config.listen_addresses() if a.startswith("unix:")]
        tcp = self.config.tcp_addresses()
        groups = [(unix, [], self.service)] if unix else []
        if unix:  # first: a client that finds the gRPC socket finds this one too
            self._serve_local_http(unix[0][5:])
        if tcp:
            groups.append((tcp, [BearerTokenInterceptor(self.config.token)], self.service.without_witness_paths()))
        credentials = self._tls_credentials() if tcp else None
        if tcp and credentials is None:
            log.warning("TCP listener(s) %s without TLS: the bearer token travels in clear (set tls_cert and tls_key)",
                        ", ".join(tcp))
        for addresses, interceptors, service in groups:
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=GRPC_THREADS, thread_name_prefix="cuzk-grpc"),
                                 interceptors=interceptors, options=options)
            pb_grpc.add_CuzkServicer_to_server(service, server)
            health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
            reflection.enable_server_reflection(SERVICE_NAMES, server)
            for address in addresses:
                if address.startswith("unix:"):
                    Path(address[5:]).parent.mkdir(parents=True, exist_ok=True)
                old_umask = os.umask(0o077)  # the socket file is created 0600
                try:
                    if address.startswith("unix:") or credentials is None:
                        port = server.add_insecure_port(address)
                    else:
                        port = server.add_secure_port(address, credentials)
                except RuntimeError as exc:
                    raise StartupError(f"cannot listen on {address}: {exc}") from exc
                finally:
                    os.umask(old_umask)
                if port == 0 and not address.startswith("unix:"):
                    raise StartupError(f"cannot listen on {address} (in use, or not an address of this machine)")
            server.start()
            self._servers.append(server)
        if self.config.http:
            try:
                prover = HttpProver(self.engine, self.config.token, self.config.max_request)
                self._http = StatusHttpServer(self.config.http, self.metrics.text, self.status, lambda: self.state, prover,
                                              self._tls_context()).start()
            except OSError as exc:
                raise StartupError(f"cannot serve HTTP on {self.config.http}: {exc.strerror or exc}") from exc

    def _serve_local_http(self, grpc_socket: str) -> None:
        """The HTTP endpoints on a unix socket beside the gRPC one (``local_client``: what a one-shot ``cuzk prove``
        uses, without grpc's import). Optional: where it cannot listen (a path too long for a socket), clients use gRPC."""
        path = local_http_socket(grpc_socket)
        prover = HttpProver(self.engine, None, self.config.max_request, local=self.service.key_paths,
                            witness_paths=self.config.witness_paths)
        try:
            self._local_http = StatusHttpServer("unix:" + path, self.metrics.text, self.status, lambda: self.state,
                                                prover).start()
        except OSError as exc:
            log.warning("no local HTTP socket at %s (%s): local clients use gRPC", path, exc.strerror or exc)

    def _tls_credentials(self) -> grpc.ServerCredentials | None:
        if self.config.tls_cert is None:
            return None
        try:
            chain, key = Path(self.config.tls_cert).read_bytes(), Path(self.config.tls_key).read_bytes()
        except OSError as exc:
            raise StartupError(f"cannot read the TLS certificate or key: {exc}") from exc
        return grpc.ssl_server_credentials([(key, chain)])

    def _tls_context(self) -> ssl.SSLContext | None:
        """The HTTP listener's TLS, from the same certificate and key as the TCP gRPC listeners."""
        if self.config.tls_cert is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(self.config.tls_cert, self.config.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(f"cannot load the TLS certificate or key for HTTP: {exc}") from exc
        return context

    def stop(self) -> None:
        """Stop taking calls, stop the engine (work in flight stays journaled for the next one)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        with self._state_lock:
            self._set_health(STOPPING)
        self.health.enter_graceful_shutdown()
        (self.config.data_dir / DAEMON_FILE).unlink(missing_ok=True)
        # The engine first, so callers awaiting a job hear "restarting" rather than a cut connection.
        self.engine.stop(timeout=SHUTDOWN_GRACE_S)
        events = [server.stop(SHUTDOWN_GRACE_S) for server in self._servers]
        for event in events:
            event.wait()
        for http in (self._http, self._local_http):
            if http is not None:
                http.stop()


def serve(config: DaemonConfig, budget: int | None = None, *, heartbeat: bool = False, budget_over_limit: bool = False) -> int:
    """Run a daemon in this process until SIGTERM/SIGINT; the exit status tells the supervisor what happened."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        daemon = Daemon(config, budget, heartbeat=heartbeat, budget_over_limit=budget_over_limit).start()
    except (StartupError, ConfigError, ValueError, OSError, RuntimeError) as exc:
        # Bad config, a key that cannot be read, an address in use, a data directory another daemon holds.
        log.error("cuzk daemon cannot start: %s", exc)
        return EXIT_CONFIG
    try:
        while not stop.wait(SIGNAL_POLL_S):  # not an untimed wait (SIGNAL_POLL_S says why)
            pass
    finally:
        log.info("cuzk daemon stopping")
        daemon.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cuzk.server", description="the cuzk engine process (started by `cuzk daemon`)")
    parser.add_argument("config_json", help="the resolved daemon configuration, as written by `cuzk daemon`")
    parser.add_argument("--budget", type=int, help="memory ceiling in bytes (the supervisor's learned budget)")
    parser.add_argument("--budget-over-limit", action="store_true", help="trust --budget over the detected limit")
    args = parser.parse_args(argv)
    config = DaemonConfig.from_json(Path(args.config_json).read_text())
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    return serve(config, args.budget, heartbeat=True, budget_over_limit=args.budget_over_limit)
