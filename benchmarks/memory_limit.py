"""The same `cuzk bench` without and with a memory limit: throughput ratio, and peak charged ÷ peak reserved.

    PYTHONPATH=src python3 benchmarks/memory_limit.py --limit 1GiB [--rounds 2] [--out DIR] -- BENCH_ARGS...
    e.g. ... --limit 1GiB -- --circuit ../shared/corpus/sha256_32B --jobs 48 --concurrency 6 --engine backend=cpu

Each round runs the one bench command twice, back to back (so both see the same load on a
shared machine; the order alternates from round to round): once in a memory cgroup whose limit
is twice the machine's memory (it never binds; the cgroup is there so that "charged" is the
kernel's figure for the daemon alone, not the whole machine's use), and once under
``--memory-limit LIMIT``. The table shows, per run, proofs/s, jobs done, OOM kills, the
kernel's peak charge and the engine's peak reservation and their ratio; the last lines give
the limited run's throughput ÷ the unlimited one's (the median over rounds of each round's
ratio) and the limited runs' lowest charged ÷ reserved. The issue's targets: throughput
within 10 % (ratio ≥ 0.9) and charged ÷ reserved ≥ 0.8. Needs a writable memory cgroup (v1 or
v2; `cuzk bench --memory-limit` creates it). Each bench's results.json stays under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from cuzk.memory.limits import read_meminfo  # noqa: E402
from cuzk.memory.units import format_size, parse_size  # noqa: E402


def run_bench(bench_args: list[str], limit_bytes: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "cuzk.cli", "bench", *bench_args, "--memory-limit", str(limit_bytes), "--out", str(out),
           "--json", "--no-progress", "--no-plot"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if not proc.stdout.strip().startswith("{"):
        raise SystemExit(f"cuzk bench failed (status {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def size(nbytes: int | None) -> str:
    return "-" if nbytes is None else format_size(nbytes)


def row(name: str, report: dict) -> list[str]:
    mem, jobs = report["memory"], report["jobs"]
    rate = report["proofs_per_s"]
    source = mem.get("charged_source")
    return [name, "-" if rate is None else f"{rate:.3f}", f"{jobs['done']}/{jobs['submitted']}", str(report["oom"]["oom_kills"]),
            size(mem.get("peak_charged_bytes")) + ("" if source == "kernel" else f" ({source})"),
            size(mem.get("peak_reserved_bytes")),
            "-" if mem.get("peak_charged_of_reserved") is None else f"{mem['peak_charged_of_reserved']:.2f}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", required=True, help="the memory limit of the limited run, e.g. 1GiB")
    ap.add_argument("--rounds", type=int, default=1, help="pairs of runs (default 1)")
    ap.add_argument("--out", default="memory-limit-bench", help="each bench's output folder goes under here")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then the arguments of cuzk bench")
    args = ap.parse_args()
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    if any(a.startswith(("--memory-limit", "--out", "--json")) for a in bench_args):
        ap.error("--memory-limit, --out and --json are the script's to set")
    limit = parse_size(args.limit)
    unbound = 2 * read_meminfo().total_bytes
    out = Path(args.out)
    runs: list[tuple[str, dict]] = []
    pairs: list[float] = []  # each round's limited ÷ unlimited throughput
    for r in range(args.rounds):
        order = [("unlimited", unbound), (f"limit {format_size(limit)}", limit)]
        rates = {}
        for name, nbytes in order if r % 2 == 0 else order[::-1]:
            report = run_bench(bench_args, nbytes, out / f"{name.split()[0]}-{r}")
            runs.append((name, report))
            rates[nbytes] = report["proofs_per_s"] or 0.0
            print(" | ".join(row(name, report)), flush=True)
        pairs.append(rates[limit] / rates[unbound] if rates[unbound] else float("nan"))
    header = ["run", "proofs/s", "done", "OOM kills", "peak charged", "peak reserved", "charged ÷ reserved"]
    table = [header] + [row(name, rep) for name, rep in runs]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print()
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    ratios = [rep["memory"].get("peak_charged_of_reserved") for name, rep in runs if name != "unlimited"]
    print(f"\nthroughput limited ÷ unlimited: {statistics.median(pairs):.3f}, median of the rounds' "
          f"{', '.join(f'{p:.3f}' for p in pairs)} (target ≥ 0.90)")
    print(f"limited runs' peak charged ÷ peak reserved, lowest: "
          f"{min((x for x in ratios if x is not None), default=float('nan')):.3f} (target ≥ 0.80)")
    ok = all(rep["ok"] for _, rep in runs)
    if not ok:
        print("some run did not finish every job (see its results.json)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
