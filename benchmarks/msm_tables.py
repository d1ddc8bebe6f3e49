"""CPU proofs of one key with and without MSM window tables, alternated in one process (same load on the cores).

    .venv/bin/python benchmarks/msm_tables.py [--key DIR] [--repeat 7]

DIR holds circuit.zkey and witness.wtns (default: the corpus's poseidon_chain_16). Prints the tables' build time
and size, then per variant the median and spread of each proof's MSM phase and of each of its five MSMs, and the
ratio plain / tabled. Every proof is checked with cuzk's verifier. Other processes may load the cores: read the
spreads, and repeat.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from cuzk.backends.cpu import CpuBackend
from cuzk.formats.wtns import read_wtns
from cuzk.formats.zkey import read_zkey
from cuzk.keys.host import MSM_BASES, msm_table_bytes, with_msm_tables
from cuzk.memory.units import format_size
from cuzk.prover.groth16 import prove
from cuzk.prover.verify import prepare_zkey, verify

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


class TimedBackend(CpuBackend):
    """The CPU backend, recording each MSM's seconds under its call order (A, B1, B2, C, H)."""

    def __init__(self):
        self.msm_seconds: list[float] = []

    def msm_g1(self, curve, bases, scalars):
        t = time.perf_counter()
        out = super().msm_g1(curve, bases, scalars)
        self.msm_seconds.append(time.perf_counter() - t)
        return out

    def msm_g2(self, curve, bases, scalars):
        t = time.perf_counter()
        out = super().msm_g2(curve, bases, scalars)
        self.msm_seconds.append(time.perf_counter() - t)
        return out


def spread(xs: list[float]) -> str:
    return f"{1e3 * statistics.median(xs):7.1f} ms ({1e3 * min(xs):.1f}–{1e3 * max(xs):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--key", type=Path, default=CORPUS / "poseidon_chain_16")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    zkey = read_zkey(args.key / "circuit.zkey")
    witness = read_wtns(args.key / "witness.wtns")
    pvk = prepare_zkey(zkey, single_proof=True)
    t = time.perf_counter()
    tabled = with_msm_tables(zkey)
    first = time.perf_counter() - t  # includes the kernels' JIT (or cache load) in a fresh process
    t = time.perf_counter()
    tabled = with_msm_tables(zkey)
    build = time.perf_counter() - t
    bases = sum(getattr(zkey, name).nbytes for name in MSM_BASES)
    print(f"{args.key.name}: 2^{zkey.power} domain, {zkey.n_vars} signals; tables {format_size(msm_table_bytes(zkey))} "
          f"(bases {format_size(bases)}), built in {build:.2f} s (first call {first:.2f} s)")
    backend = TimedBackend()
    runs = {"plain": [], "tables": []}
    for _ in range(args.repeat + 1):  # the first round warms up
        for name, key in (("plain", zkey), ("tables", tabled)):
            backend.msm_seconds = []
            proof = prove(backend, key, witness)
            assert verify(pvk, proof.public_signals, proof), f"{name}: the proof does not verify"
            runs[name].append((proof.timings["msm"], backend.msm_seconds))
    for name, rows in runs.items():
        rows = rows[1:]
        per = " ".join(f"{m} {spread([r[1][i] for r in rows])}" for i, m in enumerate(("A", "B1", "B2", "C", "H")))
        print(f"{name:7s} msm phase {spread([r[0] for r in rows])}   {per}")
    plain, tables = (statistics.median(r[0] for r in runs[k][1:]) for k in ("plain", "tables"))
    print(f"plain / tables (msm phase medians): {plain / tables:.2f}; build pays back after {build / max(plain - tables, 1e-9):.0f} proofs")


if __name__ == "__main__":
    main()
