"""`cuzk memcheck` and `cuzk memprobe`: what memory this process really has, and what it can really use."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .units import MiB, format_size, parse_size

if TYPE_CHECKING:  # the rest is imported by the commands that use it: `cuzk prove` builds this parser too
    from .limits import MemoryLimits
    from .plan import BudgetPlan
    from .reconcile import ReconcileReading


def _size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_memory_commands(subparsers) -> None:
    p = subparsers.add_parser("memcheck", help="show the real memory limit, current usage and the budget that follows")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--budget", type=_size_arg, help="configured budget cap (e.g. 64GiB); the real limit still wins if lower")
    p.add_argument("--budget-over-limit", action="store_true", help="trust --budget even above the real limit (as the daemon's flag)")
    p.add_argument("--margin", type=_size_arg, help="margin kept out of the budget (default: from memprobe, else 5 %% + 5 %%)")
    p.add_argument("--probe-file", type=Path, action="append", dest="probe_files",
                   help="memprobe result(s) to take the margin from (default: memprobe.json and memprobe-pinned.json in "
                        "$CUZK_STATE_DIR, else ~/.local/state/cuzk)")
    p.set_defaults(func=_cmd_memcheck)

    p = subparsers.add_parser("memprobe", help="measure usable memory by allocating up to a safety distance below the limit")
    p.add_argument("--chunk-mib", type=int, default=1024, help="allocation chunk (default 1024)")
    p.add_argument("--margin-mib", type=int, default=2048, help="safety distance kept below the limit (default 2048)")
    p.add_argument("--pinned", action="store_true", help="probe page-locked host memory through CuPy instead of anonymous memory")
    p.add_argument("--max-mib", type=int, help="stop after allocating this much")
    p.add_argument("--limit-mib", type=int, help="probe against this limit instead of the detected one (for a limit the process cannot see)")
    p.add_argument("--save", type=Path, help="where to save the result for memcheck and the daemon (default: the memprobe path in $CUZK_STATE_DIR)")
    p.add_argument("--no-save", action="store_true", help="print the result only")
    p.set_defaults(func=_cmd_memprobe)


def check_memory(budget_bytes: int | None = None, margin_bytes: int | None = None,
                 probe_files: list[Path] | None = None,
                 trust_configured: bool = False) -> tuple[MemoryLimits, BudgetPlan, ReconcileReading, list[str]]:
    """The limits, the plan they give, and one reconciler reading of how much of the budget is usable now."""
    from .budget import MemoryBudget
    from .limits import read_limits
    from .plan import plan_budget
    from .probe import load_saved_probes
    from .reconcile import Reconciler

    limits = read_limits()
    probes, used = load_saved_probes(probe_files)
    plan = plan_budget(limits, configured_bytes=budget_bytes, margin_bytes=margin_bytes, probes=probes,
                       trust_configured=trust_configured)
    reading = Reconciler(MemoryBudget(plan.total_bytes), plan).preview()
    return limits, plan, reading, used


def _cmd_memcheck(args: argparse.Namespace) -> int:
    limits, plan, reading, used = check_memory(args.budget, args.margin, args.probe_files, trust_configured=args.budget_over_limit)
    if args.json:
        print(json.dumps({"limits": limits.to_dict(), "plan": plan.to_dict(), "now": reading.to_dict(),
                          "probe_files": used}, indent=2))
        return 0
    rows = []
    cg, info = limits.cgroup, limits.meminfo
    if cg is None:
        rows.append(("memory cgroup", "none visible"))
    else:
        rows.append(("memory cgroup", f"v{cg.version} {cg.path} ({cg.resolution}; mount {cg.mount})"))
        rows.append(("  limit", f"{format_size(cg.limit_bytes)}" + (f"  ({cg.limit_source})" if cg.limit_source else "")))
        if cg.version == 2:
            rows.append(("  high", f"{format_size(cg.high_bytes)}" + (f"  ({cg.high_source})" if cg.high_source else "")))
        if cg.usage_bytes is not None:
            rows.append(("  usage", f"{format_size(cg.usage_bytes)}, charged {format_size(cg.charged_bytes)} "
                                    f"(less {format_size(cg.inactive_file_bytes)} inactive file cache; {cg.usage_source})"))
        if cg.peak_bytes is not None:
            rows.append(("  peak", format_size(cg.peak_bytes)))
        rows.append(("  OOM kills", "unknown" if cg.oom_kills is None else str(cg.oom_kills)))
        for i, level in enumerate(cg.levels):
            rows.append(("  levels" if i == 0 else "", f"{level.path}: limit {format_size(level.limit_bytes)}"
                         + (f", high {format_size(level.high_bytes)}" if level.high_bytes is not None else "")
                         + (f", usage {format_size(level.usage_bytes)}" if level.usage_bytes is not None else "")))
    rows.append(("MemTotal", f"{format_size(info.total_bytes)} (available {format_size(info.available_bytes)}, "
                             f"swap {format_size(info.swap_total_bytes)})"))
    rows.append(("ceiling", f"{format_size(plan.ceiling_bytes)}  ({plan.ceiling_source})"))
    rows.append(("margin", f"{format_size(plan.margin_bytes)} = headroom {format_size(plan.headroom_bytes)} + untracked "
                           f"allowance {format_size(plan.untracked_allowance_bytes)}  ({plan.margin_source})"))
    rows.append(("budget total", f"{format_size(plan.total_bytes)}  (ceiling − margin)"))
    rows.append(("usable now", f"{format_size(reading.effective_total_bytes)}  (actual {format_size(reading.actual_bytes)} by "
                               f"{reading.source}, untracked {format_size(reading.untracked_bytes)}, this process's RSS "
                               f"{format_size(reading.rss_bytes)})"))
    if used:
        rows.append(("memprobe results", ", ".join(used)))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for note in plan.notes:
        print(f"note: {note}")
    return 0


def _cmd_memprobe(args: argparse.Namespace) -> int:
    from .probe import ProbeError, default_probe_path, run_probe

    for name in ("chunk_mib", "margin_mib", "max_mib", "limit_mib"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "margin_mib" else 1):
            raise ValueError(f"--{name.replace('_', '-')} must be {'>= 0' if name == 'margin_mib' else 'positive'}, got {value}")
    try:
        result = run_probe(chunk_bytes=args.chunk_mib * MiB, safety_bytes=args.margin_mib * MiB,
                           max_bytes=args.max_mib * MiB if args.max_mib else None, pinned=args.pinned,
                           assumed_limit_bytes=args.limit_mib * MiB if args.limit_mib else None)
    except ProbeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result.to_dict(), indent=2))
    if result.oom_killed or result.child_exit_status != 0:
        print(f"memprobe: the probe child did not finish ({result.stop_reason}); result not saved", file=sys.stderr)
        return 3
    if not args.no_save:
        path = args.save or default_probe_path(args.pinned)
        result.save(path)
        print(f"memprobe: saved to {path}", file=sys.stderr)
    return 0
