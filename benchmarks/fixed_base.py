"""Fixed-base scalar multiplication (a setup's heavy part): GPU kernel against the CPU table, points per second.

    python3 benchmarks/fixed_base.py                      # 2^22 scalars on the GPU, 2^18 on the CPU, both curves and groups
    python3 benchmarks/fixed_base.py --gpu-log 20 --cpu-log 16 --curves bn254

Times ``mul`` as a setup calls it: host scalars in, host affine points out (so PCIe transfers
are included), after one warm-up call that pays the kernel's compilation. The table (w = 16,
as for a 2^24-constraint setup) is built once per group and not timed. The GPU result of
the CPU-sized prefix is compared byte for byte with the CPU's.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from cuzk.backends.cpu.fixed_base import FixedBaseTable
from cuzk.backends.cuda import available
from cuzk.backends.cuda.fixed_base import CudaFixedBaseTable
from cuzk.backends.cuda.modules import CupyRuntime
from cuzk.curves import curve_by_name

TABLE_HINT = 1 << 26  # scalars a 2^24-constraint setup multiplies by G1: the window it gets (16)


def random_scalars(curve, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    limbs = rng.integers(0, 1 << 32, size=(n, curve.Fr.limbs32), dtype=np.uint64).astype(np.uint32)
    limbs[:, -1] &= (1 << ((curve.r.bit_length() - 1) % 32)) - 1  # below 2^(bits − 1) < r
    return limbs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu-log", type=int, default=22)
    ap.add_argument("--cpu-log", type=int, default=18)
    ap.add_argument("--curves", default="bn254,bls12-381")
    args = ap.parse_args(argv)
    if not available():
        print("no CuPy or no CUDA device", file=sys.stderr)
        return 1
    runtime = CupyRuntime()
    print(f"device: {runtime.device_name}, {runtime.multiprocessors} SMs")
    for name in args.curves.split(","):
        curve = curve_by_name(name)
        scalars = random_scalars(curve, 1 << args.gpu_log, seed=1)
        for group in (1, 2):
            G = curve.G1 if group == 1 else curve.G2
            cpu = FixedBaseTable(curve, group, G.generator, TABLE_HINT)
            gpu = CudaFixedBaseTable(curve, group, G.generator, TABLE_HINT, runtime)
            gpu.mul(scalars[:1024])  # compile and warm up
            t = time.perf_counter()
            got = gpu.mul(scalars)
            gpu_s = time.perf_counter() - t
            head = scalars[: 1 << args.cpu_log]
            t = time.perf_counter()
            want = cpu.mul(head)
            cpu_s = time.perf_counter() - t
            same = got[: head.shape[0]].tobytes() == want.tobytes()
            print(f"{curve.name} G{group}: GPU 2^{args.gpu_log} in {gpu_s:.3f} s ({scalars.shape[0] / gpu_s / 1e6:.1f} M points/s), "
                  f"CPU 2^{args.cpu_log} in {cpu_s:.3f} s ({head.shape[0] / cpu_s / 1e6:.2f} M points/s), "
                  f"w = {gpu.window}, bytes equal: {same}", flush=True)
            gpu.free()
            if not same:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
