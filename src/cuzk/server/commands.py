"""The daemon's command-line verbs: ``cuzk daemon``, ``submit``, ``await``, ``status``, ``cancel``, ``keys``, ``jobs``, ``top``,
the clients' options (``cli_args``), and the gRPC client they use (``cuzk prove`` on a daemon without its local HTTP
socket too).

Clients find the daemon from ``--daemon ADDR``, else ``$CUZK_DAEMON``, else the first listen
address of the configuration (``--config``, ``$CUZK_CONFIG``, ``~/.config/cuzk/cuzk.toml``,
defaults: the unix socket in the default data directory); the token from ``$CUZK_TOKEN`` or
the configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..cli_args import add_arguments, client_options, priority_option, seconds
from ..engine.jobs import JobState
from ..memory.units import format_size


# -- the daemon ---------------------------------------------------------------------------------

def _cmd_daemon(args: argparse.Namespace) -> int:
    if args.idle_exit is not None and (args.no_supervise or args.idle_exit <= 0):
        raise ValueError("--idle-exit takes a positive number of seconds and the supervisor (not --no-supervise)")
    import logging
    import signal
    import threading

    from ..config import load_config
    from ..engine.supervisor import Supervisor, atomic_write_json
    from ..jit_cache import use_cache_dir

    config = load_config(args.config, overrides={
        "data_dir": args.data_dir, "listen": args.listen, "budget": args.budget, "http": args.http,
        "budget_over_limit": True if args.budget_over_limit else None,
        "token_file": args.token_file, "log_level": args.log_level})
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    config.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    use_cache_dir(config.data_dir)  # before numba is imported; the engine process inherits it
    if args.no_supervise:
        from .daemon import serve

        return serve(config)
    config_path = config.data_dir / "run" / "daemon-config.json"
    atomic_write_json(config_path, json.loads(config.to_json()))
    config_path.chmod(0o600)  # it may hold the token

    def engine_argv(budget: int | None, over_limit: bool = False) -> list[str]:
        return [sys.executable, "-m", "cuzk.server", str(config_path), *(["--budget", str(budget)] if budget else []),
                *(["--budget-over-limit"] if over_limit else [])]

    supervisor = Supervisor(engine_argv, config.data_dir, config.budget, config.supervisor,
                            budget_over_limit=config.budget_over_limit)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, supervisor.stop)
    if args.idle_exit is not None:
        stopped = threading.Event()
        threading.Thread(target=_stop_when_idle, args=(config.listen_addresses()[0], config.token, args.idle_exit,
                                                       supervisor.stop, stopped), name="idle-exit", daemon=True).start()
        try:
            return supervisor.run()
        finally:
            stopped.set()
    return supervisor.run()


def _stop_when_idle(address: str, token: str | None, idle_s: float, stop, stopped) -> None:
    """Call ``stop`` once no job has been queued, running or finished for ``idle_s`` seconds (``--idle-exit``: a daemon
    that `cuzk prove --keep-daemon` started goes away by itself, as gradle's or sccache's do). Asked over the daemon's
    own listener, as any client would, every quarter of ``idle_s`` (at most every 30 s); ``stopped``: a
    threading.Event set when the supervisor is done."""
    import logging

    from ..client import Client, DaemonError, DaemonUnavailable

    unfinished = [state.value for state in JobState if not state.terminal]
    last_activity = time.time()
    with Client(address, token, restart_grace=0.0) as client:
        while not stopped.wait(min(idle_s / 4, 30.0)):
            try:
                busy = client.list_jobs(states=unfinished, limit=1)
                newest = client.list_jobs(limit=1)
            except (DaemonError, DaemonUnavailable):  # starting or restarting: not idle
                last_activity = time.time()
                continue
            now = time.time()
            if busy:
                last_activity = now
            elif newest:
                last_activity = max(last_activity, newest[0].finished_at or now, newest[0].submitted_at)
            if now - last_activity >= idle_s:
                logging.getLogger("cuzk.daemon").info("no job for %.0f s (--idle-exit): stopping", now - last_activity)
                stop()
                return


# -- clients ------------------------------------------------------------------------------------

def grpc_client(args: argparse.Namespace, *, wait: bool = True):
    """The gRPC client of the daemon the command's options name. ``wait``: ride over a daemon restart (up to the
    client's grace, saying so on stderr), else fail at once."""
    from ..client import Client
    from ..client_base import wait_options
    from ..config import client_target

    address, token = client_target(args.daemon, args.config)
    return Client(address, args.token or token, tls_ca=args.tls_ca or os.environ.get("CUZK_TLS_CA") or None,
                  **wait_options(wait))


def _add_client_options(p: argparse.ArgumentParser) -> None:
    add_arguments(p, client_options())


def _add_priority_option(p: argparse.ArgumentParser) -> None:
    add_arguments(p, (priority_option(),))


def _cmd_submit(args: argparse.Namespace) -> int:
    with grpc_client(args) as client:
        job_id, deduplicated = client.submit(args.key, Path(args.wtns), priority=args.priority, request_id=args.request_id)
    print(job_id)
    if deduplicated:
        print(f"(request id {args.request_id!r} was already submitted: this is that job)", file=sys.stderr)
    return 0


def _cmd_await(args: argparse.Namespace) -> int:
    from ..cli import check_outputs

    check_outputs(args.proof, args.public)
    with grpc_client(args) as client:
        result = client.await_proof(args.job_id, args.timeout)
    result.write(args.proof, args.public)
    return 0


def _cmd_cancel(args: argparse.Namespace) -> int:
    with grpc_client(args) as client:
        cancelled, state = client.cancel(args.job_id)
    print(f"{args.job_id}: {'cancelling' if cancelled and state not in ('CANCELLED',) else state.lower()}"
          + ("" if cancelled else " (already finished; nothing to cancel)"))
    return 0


def _cmd_keys(args: argparse.Namespace) -> int:
    if args.action in ("preload", "evict") and not args.key:
        print(f"error: cuzk keys {args.action} needs a key: a registered name or a .zkey path", file=sys.stderr)
        return 2
    with grpc_client(args) as client:
        if args.action == "preload":
            entry = client.preload(args.key)
            print(f"{entry['name']}: {entry['tier']} ({format_size(entry['reserved_bytes'])})")
        elif args.action == "evict":
            entry = client.evict(args.key)
            print(f"{entry['name']}: {entry['tier']} (freed {format_size(entry['freed_bytes'])})")
        else:
            keys = client.status()["keys"]
            if args.json:
                print(json.dumps(keys, indent=1))
            for k in keys if not args.json else []:
                devices = ",".join(map(str, k.get("resident_devices", []))) or "-"
                print(f"{k['name']:<32} {k['tier']:<6} {k['curve']:<10} 2^{k['domain_size'].bit_length() - 1:<3} "
                      f"{format_size(k['reserved_bytes']):>12}  in use {k['in_use']}  VRAM on {devices}  {k['path']}")
    return 0


def _cmd_jobs(args: argparse.Namespace) -> int:
    with grpc_client(args) as client:
        jobs = client.list_jobs(states=args.state, limit=args.limit)
    if args.json:
        from dataclasses import asdict

        print(json.dumps([asdict(j) for j in jobs], indent=1))
        return 0
    for j in jobs:
        print(f"{j.job_id}  {j.state:<12} {j.priority:<8} {j.circuit}" + (f"  {j.error}" if j.error else ""))
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    with grpc_client(args) as client:
        status = client.status()
    if args.json:
        print(json.dumps(status, indent=1))
        return 0
    from rich.console import Console

    Console().print(*render_status(status, []))
    return 0


def _cmd_top(args: argparse.Namespace) -> int:
    from rich.console import Console, Group
    from rich.live import Live

    console = Console()
    with grpc_client(args) as client:
        def frame():
            return Group(*render_status(client.status(), client.list_jobs(limit=args.jobs)))

        if args.once:
            console.print(frame())
            return 0
        try:
            with Live(frame(), console=console, refresh_per_second=4, screen=False) as live:
                while True:
                    time.sleep(args.interval)
                    live.update(frame())
        except KeyboardInterrupt:
            return 0


def render_status(status: dict[str, Any], jobs: list) -> list:
    """Rich renderables for budget, keys, jobs and workers (``cuzk status`` and each frame of ``cuzk top``)."""
    from rich.table import Table

    out: list = []
    budget = status.get("budget", {})
    reading = (status.get("reconciler") or {}).get("latest") or {}
    server = status.get("server") or {}
    supervisor = status.get("supervisor") or {}
    head = Table.grid(padding=(0, 2))
    warmup = server.get("warmup") or {}
    state = server.get("state", "")
    if state == "warming":
        state = "warming (compiling the proving kernels; jobs are taken, the first ones are slower)"
    elif warmup.get("error"):
        state += f" (JIT warm-up failed: {warmup['error']})"
    head.add_row("daemon", f"{state}  pid {server.get('pid')}  {', '.join(server.get('listen', []))}"
                 + (f"  http {server['http']}" if server.get("http") else ""))
    head.add_row("budget", f"total {format_size(budget.get('total_bytes'))}  effective {format_size(budget.get('effective_total_bytes'))}  "
                 f"reserved {format_size(budget.get('reserved_bytes'))}  untracked {format_size(reading.get('untracked_bytes'))}  "
                 f"charged {format_size(reading.get('actual_bytes'))}  waiting {budget.get('waiters', 0)}")
    head.add_row("reserved", "  ".join(f"{c} {format_size(e['bytes'])}" for c, e in budget.get("by_category", {}).items()))
    if supervisor:
        head.add_row("supervisor", f"restarts {supervisor.get('restarts', 0)}  OOM kills {supervisor.get('oom_kills', 0)}  "
                     f"learned budget {format_size(supervisor.get('learned_budget')) if supervisor.get('learned_budget') else '-'}")
    by_state = status.get("jobs", {}).get("by_state", {})
    head.add_row("jobs", "  ".join(f"{s} {n}" for s, n in by_state.items()) or "none")
    out.append(head)

    if status.get("hosts") is not None:
        out.append(_hosts_table(status["hosts"]))

    keys = Table(title="keys", title_justify="left", expand=False)
    for col in ("name", "tier", "curve", "domain", "reserved", "in use", "loads", "VRAM on"):
        keys.add_column(col)
    for k in status.get("keys", []):
        keys.add_row(k["name"], k["tier"], k["curve"], f"2^{k['domain_size'].bit_length() - 1}", format_size(k["reserved_bytes"]),
                     str(k["in_use"]), str(k["loads"]), ",".join(map(str, k.get("resident_devices", []))) or "-")
    out.append(keys)

    workers = Table(title="workers", title_justify="left")
    for col in ("name", "kind", "backend", "device", "job", "done", "health"):
        workers.add_column(col)
    for w in status.get("workers", []):
        health = "ok" if w.get("healthy", True) else f"FAILED: {w.get('error') or ''}"[:60]
        workers.add_row(w["name"], w["kind"], str(w.get("backend") or "-"), "-" if w.get("device") is None else str(w["device"]),
                        (w.get("job") or "-")[:12], str(w.get("jobs_done", 0)), health)
    out.append(workers)

    if status.get("device_processes"):
        procs = Table(title="device worker processes", title_justify="left")
        for col in ("device", "backend", "pid", "proofs", "jobs", "restarts", "last exit"):
            procs.add_column(col)
        for p in status["device_processes"]:
            procs.add_row("-" if p["device"] is None else str(p["device"]), str(p["backend"]),
                          str(p["pid"]) + ("" if p["alive"] else " (down)"), str(p["proofs_per_device"]),
                          " ".join(j[:8] for j in p["jobs"]) or "-", str(p["restarts"]), p["last_exit"] or "-")
        out.append(procs)

    if jobs:
        table = Table(title="recent jobs", title_justify="left")
        for col in ("job", "state", "priority", "circuit", "time", "error"):
            table.add_column(col)
        for j in jobs:
            took = f"{j.finished_at - j.started_at:.2f} s" if j.finished_at and j.started_at else "-"
            table.add_row(j.job_id[:12], j.state.lower(), j.priority.lower(), j.circuit, took, j.error[:60])
        out.append(table)
    return out


def _hosts_table(hosts: list[dict[str, Any]]):
    """A cluster front door's hosts: budget, jobs held against pipeline slots, room per key, or why they are down."""
    from rich.table import Table

    table = Table(title="hosts", title_justify="left")
    for col in ("host", "budget", "reserved", "jobs", "room", "never"):
        table.add_column(col)
    for h in hosts:
        if "error" in h:
            table.add_row(h["host"], "-", "-", "-", "-", f"DOWN: {h['error']}"[:60])
            continue
        routing = h.get("routing") or {}
        room = " ".join(f"{k} {n}" for k, n in sorted(routing.get("room", {}).items())) or "-"
        never = ", ".join(sorted(routing.get("never", {}))) or "-"
        table.add_row(h["host"], format_size(h["budget"]["total_bytes"]), format_size(h["budget"]["reserved_bytes"]),
                      f"{routing.get('held', '-')}/{routing.get('slots', '-')}", room, never)
    return table


# -- registration -------------------------------------------------------------------------------

def add_daemon_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("daemon", help="run the proving daemon (engine under a supervisor that restarts it)")
    p.add_argument("--config", help="TOML config file (default: $CUZK_CONFIG, else ~/.config/cuzk/cuzk.toml if present)")
    p.add_argument("--data-dir", help="journal, sockets and learned budget live here (default: ~/.local/share/cuzk)")
    p.add_argument("--listen", action="append", metavar="ADDR",
                   help="unix:PATH or HOST:PORT (TCP needs a token); repeatable (default: unix:<data-dir>/cuzk.sock)")
    p.add_argument("--budget", help="memory ceiling, e.g. 24GiB (default: the real limit: cgroup or MemTotal)")
    p.add_argument("--budget-over-limit", action="store_true",
                   help="trust --budget even above the detected limit (cgroup or MemTotal), with a loud warning; the kernel "
                        "may then OOM-kill the engine, after which the supervisor's learned budget (under the real limit) wins")
    p.add_argument("--http", help="HOST:PORT for /metrics, /status and /healthz ('' turns it off; default 127.0.0.1:9750)")
    p.add_argument("--token-file", help="file holding the bearer token TCP clients must send")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--no-supervise", action="store_true", help="run the engine in this process, without restarts")
    p.add_argument("--idle-exit", type=float, metavar="SECONDS",
                   help="stop once no job has been queued, running or finished for this long (what `cuzk prove "
                        "--keep-daemon` starts its daemon with)")
    p.set_defaults(func=_cmd_daemon)

    p = sub.add_parser("submit", help="queue a proof on the daemon; prints the job id")
    p.add_argument("key", help="a key name registered with the daemon, or a .zkey path")
    p.add_argument("wtns")
    _add_priority_option(p)
    p.add_argument("--request-id", help="idempotency key: submitting it again returns the same job")
    _add_client_options(p)
    p.set_defaults(func=_cmd_submit)

    p = sub.add_parser("await", help="wait for a job and write its proof: cuzk await <job_id> <proof.json> <public.json>")
    p.add_argument("job_id")
    p.add_argument("proof")
    p.add_argument("public")
    p.add_argument("--timeout", type=seconds, help="seconds (default: wait as long as it takes)")
    _add_client_options(p)
    p.set_defaults(func=_cmd_await)

    p = sub.add_parser("cancel", help="cancel a job wherever it is")
    p.add_argument("job_id")
    _add_client_options(p)
    p.set_defaults(func=_cmd_cancel)

    p = sub.add_parser("status", help="the daemon's budget, keys, jobs and workers")
    p.add_argument("--json", action="store_true", help="the full status document")
    _add_client_options(p)
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("keys", help="list, preload or evict the daemon's proving keys")
    p.add_argument("action", nargs="?", default="list", choices=["list", "preload", "evict"])
    p.add_argument("key", nargs="?", help="name or .zkey path (preload, evict)")
    p.add_argument("--json", action="store_true")
    _add_client_options(p)
    p.set_defaults(func=_cmd_keys)

    p = sub.add_parser("jobs", help="list the daemon's jobs, newest first")
    p.add_argument("--state", action="append", choices=[s.value for s in JobState])
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true", help="the jobs as a JSON list (times are Unix seconds)")
    _add_client_options(p)
    p.set_defaults(func=_cmd_jobs)

    p = sub.add_parser("top", help="live view of the daemon: budget, keys, jobs, workers")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    p.add_argument("--jobs", type=int, default=12, help="recent jobs shown")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    _add_client_options(p)
    p.set_defaults(func=_cmd_top)
