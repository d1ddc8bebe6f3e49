"""CPU backend timings: MSM G1/G2 and NTT at 2^12, 2^15, 2^16 on both curves (JIT warm).

    .venv/bin/python benchmarks/cpu_ops.py [--sizes 12 15 16] [--curves bn128 bls12381] [--repeat 3]

Prints the cold compile time of each kernel family first (the first call of each), then
the best of ``--repeat`` warm runs. Threads: numba's default (NUMBA_NUM_THREADS, all
cores). Bases are a chain P_i = P_{i-1} + S from a random S (cheap to make with the
reference arithmetic, and as good as random points for timing), cached under
.bench-cache/ so a second run starts at once; scalars are uniform in [0, r) (the H-MSM
case; witness MSMs with many 0/1 values are cheaper, see the ``bool`` rows).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np

from cuzk.backends.cpu import CpuBackend
from cuzk.curves import curve_by_name
from cuzk.curves.serialize import g1_to_bytes, g2_to_bytes
from cuzk.formats.limbs import ints_to_limbs

CACHE = Path(__file__).resolve().parents[1] / ".bench-cache"


def chain_bases(curve, group: str, n: int) -> np.ndarray:
    """(n, 2, L) or (n, 2, 2, L) uint32 affine Montgomery points, cached on disk."""
    path = CACHE / f"cpu_ops_{curve.name}_{group}_{n}.npy"
    if path.exists():
        return np.load(path)
    G = getattr(curve, group)
    step = G.mul(G.generator, random.Random(n).randrange(1, curve.r))
    P = step
    encode = g1_to_bytes if group == "G1" else g2_to_bytes
    raw = []
    for _ in range(n):
        raw.append(encode(curve, P))
        P = G.add(P, step)
    limbs = curve.Fq.n8 // 4
    shape = (n, 2, limbs) if group == "G1" else (n, 2, 2, limbs)
    arr = np.frombuffer(b"".join(raw), dtype="<u4").reshape(shape).copy()
    CACHE.mkdir(exist_ok=True)
    np.save(path, arr)
    return arr


def best_of(fn, repeat: int) -> tuple[float, float]:
    """(wall, process CPU) seconds of the fastest of ``repeat`` runs; CPU time (all threads)
    is the steadier number on a machine shared with other work."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - t, time.process_time() - c))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[12, 15, 16], help="log2 sizes")
    ap.add_argument("--curves", nargs="+", default=["bn128", "bls12381"])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import numba

    backend = CpuBackend()
    print(f"threads: {numba.get_num_threads()}")
    for name in args.curves:
        curve = curve_by_name(name)
        rng = random.Random(1)
        limbs_r = curve.Fr.n8 // 4
        small = 1 << min(args.sizes)
        # Cold compile: the first call of each kernel family on this curve.
        warm_scalars = ints_to_limbs([rng.randrange(curve.r) for _ in range(4)], limbs_r)
        for label, fn in (
            ("msm_g1", lambda: backend.msm_g1(curve, chain_bases(curve, "G1", small)[:4], warm_scalars)),
            ("msm_g2", lambda: backend.msm_g2(curve, chain_bases(curve, "G2", small)[:4], warm_scalars)),
            ("ntt+intt+coset", lambda: backend.coset_ntt(curve, backend.intt(curve, backend.ntt(curve, warm_scalars)), 5)),
            ("fr_mul/sub/mont", lambda: backend.fr_from_mont(curve, backend.fr_to_mont(curve, backend.fr_sub(curve, backend.fr_mul(curve, warm_scalars, warm_scalars), warm_scalars)))),
        ):
            t, c = time.perf_counter(), time.process_time()
            fn()
            print(f"{curve.name:9s} first call (compile or cache load) {label:16s} {time.perf_counter() - t:7.2f} s wall {time.process_time() - c:7.2f} s cpu")
        for log_n in args.sizes:
            n = 1 << log_n
            scalars = ints_to_limbs([rng.randrange(curve.r) for _ in range(n)], limbs_r)
            booleans = ints_to_limbs([rng.randrange(2) for _ in range(n)], limbs_r)
            g1 = chain_bases(curve, "G1", n)
            g2 = chain_bases(curve, "G2", n)
            evals = backend.fr_to_mont(curve, scalars)
            rows = [
                ("msm_g1", best_of(lambda: backend.msm_g1(curve, g1, scalars), args.repeat)),
                ("msm_g1 bool", best_of(lambda: backend.msm_g1(curve, g1, booleans), args.repeat)),
                ("msm_g2", best_of(lambda: backend.msm_g2(curve, g2, scalars), args.repeat)),
                ("msm_g2 bool", best_of(lambda: backend.msm_g2(curve, g2, booleans), args.repeat)),
                ("ntt", best_of(lambda: backend.ntt(curve, evals), args.repeat)),
                ("intt", best_of(lambda: backend.intt(curve, evals), args.repeat)),
                ("coset_ntt", best_of(lambda: backend.coset_ntt(curve, evals, 7), args.repeat)),
            ]
            for label, (wall, cpu) in rows:
                print(f"{curve.name:9s} 2^{log_n:<3d} {label:12s} {wall * 1e3:9.1f} ms wall {cpu * 1e3:9.1f} ms cpu")


if __name__ == "__main__":
    main()
