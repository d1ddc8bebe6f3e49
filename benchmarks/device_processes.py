"""The engine in-process versus with a worker process per device (``device_processes = true``), in one run.

    PYTHONPATH=src python3 benchmarks/device_processes.py [--backend cpu|cuda] [--log-n 10] [--proofs 16] [--gpus 1]

The same synthetic BN254 circuit (``multi_gpu.circuit``) proved end to end by the engine both
ways (``multi_gpu.engine_run``: warm-up jobs first, then --proofs jobs submitted at once);
prints proofs/s of each and the ratio processes ÷ threads. On the CPU it measures what the
process boundary costs per proof (spawn once, a pipe message each way, the witness read from
the journal's file by the child); on GPUs the same command compares the two on real devices.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multi_gpu import circuit, engine_run  # noqa: E402 — the one engine run and circuit cache of the benchmarks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--log-n", type=int, default=10, help="circuit domain 2^log_n (default 10)")
    ap.add_argument("--proofs", type=int, default=16, help="proofs per measured run (default 16)")
    ap.add_argument("--gpus", type=int, default=1, help="GPUs (cuda backend; default 1)")
    ap.add_argument("--synth-workers", default="auto", type=lambda v: v if v == "auto" else int(v))
    ap.add_argument("--verify", action="store_true", help="self-verify every proof, as the daemon does")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "cuzk-multi-gpu", help="circuit cache")
    args = ap.parse_args(argv)

    zkey, wtns = circuit(args.dir, args.log_n)
    rows = [engine_run(zkey, wtns, args.gpus, args.proofs, args.synth_workers, args.verify, backend=args.backend,
                       device_processes=processes) for processes in (False, True)]
    for row in rows:
        print(json.dumps(row), flush=True)
    threads, processes = rows
    where = "the CPU" if args.backend == "cpu" else f"{args.gpus} GPU(s)"
    print(f"2^{args.log_n} BN254 on {where}, {args.proofs} proofs: in-process {threads['proofs_per_s']:.2f} proofs/s, "
          f"device_processes {processes['proofs_per_s']:.2f} proofs/s: ratio {processes['proofs_per_s'] / threads['proofs_per_s']:.2f}")
    return 0 if all(r["done"] == r["proofs"] and r["verified"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
