"""``cuzk cluster serve``: the front door of a Ray cluster, served as the daemon is served.

The hosts join the Ray cluster the way Ray users already do (``ray start --head`` on one,
``ray start --address HEAD:6379`` on the others); ``cuzk cluster serve --ray-address
HEAD:6379`` then starts one host engine per node and listens where a daemon would (the
config's listeners, token, TLS and HTTP endpoints: ``server.Daemon`` with the cluster's
front door as its engine).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

log = logging.getLogger("cuzk.cluster")


def _cmd_serve(args: argparse.Namespace) -> int:
    from ..config import ConfigError, load_config
    from ..server.daemon import Daemon, StartupError

    config = load_config(args.config, overrides={
        "data_dir": args.data_dir, "listen": args.listen, "http": args.http, "token_file": args.token_file,
        "log_level": args.log_level})
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        import ray
    except ImportError:
        print("error: cuzk cluster needs Ray: pip install 'cuzk[cluster]'", file=sys.stderr)
        return 2
    from .frontdoor import ClusterEngine
    from .hosts import NAMESPACE

    config.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    ray.init(address=args.ray_address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
    try:
        engine_settings = {key: value for key, value in config.engine.items() if key != "keys"}
        cluster = ClusterEngine(config.data_dir, engine_settings, keys={**config.engine.get("keys", {}), **config.keys})
        daemon = Daemon(config, engine=cluster.start()).start()
    except (StartupError, ConfigError, ValueError, OSError, RuntimeError) as exc:
        log.error("cuzk cluster cannot start: %s", exc)
        ray.shutdown()
        return 1
    try:
        stop.wait()
    finally:
        log.info("cuzk cluster front door stopping")
        daemon.stop()
        ray.shutdown()
    return 0


def add_cluster_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="many hosts as one prover, on Ray (pip install 'cuzk[cluster]')")
    csub = p.add_subparsers(dest="cluster_command", required=True)
    s = csub.add_parser("serve", help="start one engine per Ray node and serve the daemon's API in front of them",
                        description="Start one cuzk engine on every node of a Ray cluster (each planning its budget against "
                                    "its own host's limit) and serve the daemon's gRPC API and HTTP endpoints in front of "
                                    "them: cuzk prove --daemon, submit, await, status, top and cuzk bench --addr work as "
                                    "against one daemon.")
    s.add_argument("--ray-address", metavar="ADDR",
                   help="the Ray cluster (HEAD:6379; default: $RAY_ADDRESS, else the cluster `ray start` began on this "
                        "machine, else a new one-node cluster here)")
    s.add_argument("--listen", action="append", metavar="ADDR",
                   help="unix:PATH or HOST:PORT (TCP needs a token); repeatable (default: unix:<data-dir>/cuzk.sock)")
    s.add_argument("--data-dir", help="the front door's journal and socket; each host engine's under hosts/<node id> on "
                                      "its own node (default: ~/.local/share/cuzk)")
    s.add_argument("--config", help="TOML config file: listeners, token, [keys] and the [engine] table every host uses")
    s.add_argument("--http", help="HOST:PORT for /metrics and /status ('' turns it off; default 127.0.0.1:9750)")
    s.add_argument("--token-file", help="file holding the bearer token TCP clients must send")
    s.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    s.set_defaults(func=_cmd_serve)
