"""Milliseconds per Groth16 verification of each corpus circuit (numba JIT warm, prepared key).

    .venv/bin/python benchmarks/verify_speed.py [--repeat 50] [--corpus DIR]

Prints, per circuit, the median and fastest wall time of `--repeat` calls of ``verify`` on the
corpus proof, the median CPU time of this process per call (steadier than wall time when other
work shares the cores), the one-time ``prepare_vkey`` cost and one ``verify`` given the
unprepared key (which prepares it on the way).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from cuzk.formats.json_io import read_proof, read_public, read_vkey
from cuzk.prover.verify import prepare_vkey, verify

DEFAULT_CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = ap.parse_args()
    circuits = sorted(d for d in args.corpus.iterdir() if (d / "verification_key.json").exists()) if args.corpus.is_dir() else []
    if not circuits:
        raise SystemExit(f"no corpus circuits under {args.corpus}")
    print(f"{'circuit':<28} {'curve':<9} {'public':>6} {'median ms':>10} {'min ms':>8} {'cpu ms':>7} {'prepare ms':>11} {'unprepared ms':>14}")
    for d in circuits:
        vk = read_vkey(d / "verification_key.json")
        public = read_public(d / "public.json", vk.curve, vk.n_public)
        proof = read_proof(d / "proof.json", vk.curve)
        if not verify(prepare_vkey(vk), public, proof):  # also loads (or compiles) the numba kernels
            raise SystemExit(f"{d.name}: the corpus proof does not verify")
        t = time.perf_counter()
        pvk = prepare_vkey(vk)
        prepare_ms = (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        verify(vk, public, proof)
        unprepared_ms = (time.perf_counter() - t) * 1e3
        wall, cpu = [], []
        for _ in range(args.repeat):
            t, c = time.perf_counter(), time.process_time()
            verify(pvk, public, proof)
            wall.append((time.perf_counter() - t) * 1e3)
            cpu.append((time.process_time() - c) * 1e3)
        print(
            f"{d.name:<28} {vk.curve.name:<9} {vk.n_public:>6} {statistics.median(wall):>10.2f} {min(wall):>8.2f}"
            f" {statistics.median(cpu):>7.2f} {prepare_ms:>11.1f} {unprepared_ms:>14.1f}"
        )


if __name__ == "__main__":
    main()
