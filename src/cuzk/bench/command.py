"""``cuzk bench``: its arguments, the progress bar while it runs, the table (or JSON) at the end."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .workload import DEFAULT_PRIORITY, PRIORITY_NAMES


def _engine_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. synth_workers=2")
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    return key.strip(), parsed


def add_bench_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark the daemon: proofs/s, latency per phase, peak memory, OOM recoveries",
                       description="Start a daemon (or attach to one with --addr), run a workload through it and report "
                                   "throughput, latency per phase, memory against the budget and the limit, and each OOM "
                                   "recovery. With no key it runs the bundled example.")
    w = p.add_argument_group("workload")
    w.add_argument("--zkey", action="append", metavar="K", help="a proving key; repeat with --wtns for a mix")
    w.add_argument("--wtns", action="append", metavar="W", help="the witness for the --zkey in the same position")
    w.add_argument("--circuit", action="append", metavar="DIR", help="a directory holding circuit.zkey and witness.wtns")
    w.add_argument("--jobs", type=int, default=8, metavar="N", help="measured jobs (default 8)")
    w.add_argument("--concurrency", type=int, default=2, metavar="C", help="jobs in flight at once (default 2)")
    w.add_argument("--priority", action="append", metavar="P",
                   help=f"priorities to cycle through: {', '.join(PRIORITY_NAMES)} "
                        f"(repeat or comma-separate; default {DEFAULT_PRIORITY})")
    w.add_argument("--warmup", type=int, default=1, metavar="N", help="unmeasured jobs per circuit first, the first of each alone (default 1)")
    d = p.add_argument_group("daemon")
    d.add_argument("--addr", metavar="ADDR", help="attach to a running daemon (unix:PATH or HOST:PORT) instead of starting one")
    d.add_argument("--token", help="bearer token for a TCP --addr (default: $CUZK_TOKEN)")
    d.add_argument("--tls-ca", metavar="PEM", help="TLS to a TCP --addr, trusting these CA certificates (default: $CUZK_TLS_CA)")
    d.add_argument("--data-dir", help="data directory of the daemon the bench starts (default: a fresh OUT/daemon)")
    d.add_argument("--budget", metavar="SIZE", help="memory ceiling for the daemon the bench starts, e.g. 8GiB")
    d.add_argument("--budget-over-limit", action="store_true",
                   help="trust --budget even above the detected limit (the daemon warns loudly; an OOM kill then teaches "
                        "the supervisor a budget under the real limit): how to force an OOM recovery on purpose")
    d.add_argument("--memory-limit", metavar="SIZE",
                   help="run the daemon in a child memory cgroup with this hard limit (needs a writable cgroup)")
    d.add_argument("--engine", action="append", type=_engine_option, metavar="KEY=VALUE",
                   help="an [engine] setting for the daemon the bench starts, e.g. synth_workers=2 or backend=cpu")
    d.add_argument("--max-oom-retries", type=int, default=3, metavar="N",
                   help="stop once the engine was OOM-killed more often than this (default 3)")
    o = p.add_argument_group("output")
    o.add_argument("--out", default="cuzk-bench", metavar="DIR",
                   help="results.json, timeline.csv, timeline.png, daemon.log go here (default ./cuzk-bench)")
    o.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    o.add_argument("--sample-interval", type=float, default=0.25, metavar="S", help="seconds between timeline samples (default 0.25)")
    o.add_argument("--timeout", type=float, metavar="S", help="stop the run after this many seconds")
    o.add_argument("--no-plot", action="store_true", help="skip the PNG (drawn with matplotlib: the 'plot' extra)")
    o.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_bench)


def _cmd_bench(args: argparse.Namespace) -> int:
    import os

    from rich.console import Console

    from ..memory.units import parse_size
    from .daemon import DaemonStartError
    from .report import render
    from .result import BenchOptions
    from .runner import BenchRun
    from .workload import circuits_from_args

    plot = not args.no_plot
    if plot:
        from .plot import PLOT_EXTRA_MISSING, can_plot

        if not can_plot():
            print(f"note: {PLOT_EXTRA_MISSING}", file=sys.stderr)
            plot = False
    priorities = [p.strip().lower() for item in (args.priority or [DEFAULT_PRIORITY]) for p in item.split(",") if p.strip()]
    options = BenchOptions(
        circuits=circuits_from_args(args.zkey, args.wtns, args.circuit), out_dir=Path(args.out), jobs=args.jobs,
        concurrency=args.concurrency, priorities=priorities, warmup=args.warmup, addr=args.addr,
        token=args.token or os.environ.get("CUZK_TOKEN"), tls_ca=args.tls_ca or os.environ.get("CUZK_TLS_CA") or None,
        data_dir=Path(args.data_dir) if args.data_dir else None,
        budget=args.budget, budget_over_limit=args.budget_over_limit, engine=dict(args.engine or []),
        memory_limit=parse_size(args.memory_limit) if args.memory_limit else None, max_oom_retries=args.max_oom_retries,
        sample_interval=args.sample_interval, timeout=args.timeout, plot=plot)
    run = BenchRun(options)
    progress = None if args.no_progress else _Progress(Console(stderr=True), len(run.planned))
    run.on_progress = progress.update if progress else None
    try:
        report = run.run()
    except DaemonStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if progress is not None:
            progress.close()
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        Console().print(*render(report, options.out_dir))
    return 0 if report["ok"] else 1


class _Progress:
    """A rich progress bar on stderr: jobs finished, rate, memory, each GPU's utilization, OOM recoveries."""

    def __init__(self, console, total: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn("{task.fields[info]}"), console=console, transient=False)
        self._task = self._progress.add_task("starting", total=total, info="")
        self._progress.start()

    def update(self, run) -> None:
        from ..memory.units import format_size

        done, in_flight = run.counts()
        info = [f"{in_flight} in flight"]
        if run.measure_started_t is not None:
            measured = sum(1 for o in run.outcomes if not o.planned.warmup and o.state == "DONE")
            elapsed = run.now() - run.measure_started_t
            if elapsed > 0:
                info.append(f"{measured / elapsed:.2f} proofs/s")
        sample = run.sampler.samples[-1] if run.sampler and run.sampler.samples else None
        if sample is not None and sample.charged_bytes is not None:
            charged = sample.kernel_charged_bytes  # the kernel's figure where the bench reads it, else the engine's
            if charged is None and sample.engine_reading_source != "rss":
                charged = sample.charged_bytes
            info.append(("RSS " + format_size(sample.charged_bytes) if charged is None else "charged " + format_size(charged))
                        + f" of budget {format_size(sample.budget_total_bytes)}")
        elif sample is not None:
            info.append("engine restarting")
        if sample is not None and sample.gpus:
            info.append("GPU busy " + ", ".join("-" if r.utilization_percent is None else f"{r.utilization_percent:.0f} %"
                                                for _, r in sorted(sample.gpus.items())))
        if run.sampler is not None and run.sampler.tracker.oom_recoveries:
            info.append(f"OOM recoveries {run.sampler.tracker.oom_recoveries}")
        self._progress.update(self._task, completed=done, description=run.phase, info="  ".join(info))

    def close(self) -> None:
        self._progress.stop()
