"""Fixed-base scalar multiplication on a CUDA device: the heavy part of a test-only Groth16 setup.

A setup without a ceremony file multiplies each generator by tens of millions of known
scalars. ``CudaFixedBaseTable`` has the CPU table's interface (``mul(scalars)`` → affine
rows in base.py's layout) and gives the CPU table's bytes exactly: it builds the same
signed-window table on the CPU (``cpu.fixed_base.FixedBaseTable``, a few seconds), keeps it
in device memory, and runs kernels/fixed_base.cu, one thread per ``batch`` scalars. The
device work is cheap next to moving the scalars and points over PCIe, so a setup hands it
large pieces (``chunk_points``).

It runs on any runtime of modules.py: a GPU through CuPy, or the host emulation in tests.
"""

from __future__ import annotations

import numpy as np

from ...curves import Curve
from ...curves.ec import Point
from ..cpu.fixed_base import FixedBaseTable, check_scalars
from .modules import KERNEL_DIR, group_source
from .vram import VramBudget

THREADS = 256
MAX_BATCH = 16  # scalars per thread: one Fermat inversion (~380 products) shared by up to 16 points
THREADS_PER_SM = 2048
LAUNCH_POINTS = 1 << 22  # scalars per kernel launch (bounds the device scratch: ~2 GiB for BLS12-381 G2)


class CudaFixedBaseTable:
    """Multiples of one base point on a device; ``group`` is 1 (G1) or 2 (G2), as for FixedBaseTable.

    ``vram``: a budget to reserve the table and each launch's buffers against (the backend's);
    ``batch``: scalars per thread, chosen from the launch size when None; ``launch_points``:
    scalars per launch (tests lower both to reach the ragged, shared-inversion and
    many-launch paths at small sizes).
    """

    chunk_points = 1 << 21

    def __init__(self, curve: Curve, group: int, base: Point, n_scalars: int, runtime, *,
                 vram: VramBudget | None = None, batch: int | None = None, launch_points: int = LAUNCH_POINTS):
        if batch is not None and not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"batch must be in 1..{MAX_BATCH}, got {batch}")
        if launch_points < 1:
            raise ValueError(f"launch_points must be positive, got {launch_points}")
        self.launch_points = launch_points
        host = FixedBaseTable(curve, group, base, n_scalars)
        self.curve, self.group, self.window = curve, group, host.window
        self.runtime, self.vram, self.batch = runtime, vram, batch
        self._windows = host.points.shape[0]
        self._point_shape = host.points.shape[2:]
        self._module = runtime.compile(group_source(curve, f"g{group}", (KERNEL_DIR / "fixed_base.cu").read_text()))
        self._table_reservation = vram.reserve(host.nbytes, f"{curve.name} G{group} fixed-base table") if vram else None
        try:
            self._table = runtime.to_device(host.points)
        except BaseException:
            self.free()
            raise

    @property
    def nbytes(self) -> int:
        return int(self._table.nbytes) if self._table is not None else 0

    def free(self) -> None:
        """Give the table's device memory (and its reservation) back."""
        self._table = None
        if self._table_reservation is not None:
            self._table_reservation.release()
            self._table_reservation = None

    def _batch_for(self, n: int) -> int:
        if self.batch is not None:
            return self.batch
        threads = THREADS_PER_SM * max(1, int(getattr(self.runtime, "multiprocessors", 1)))
        return max(1, min(MAX_BATCH, -(-n // threads)))

    def mul(self, scalars: np.ndarray) -> np.ndarray:
        """scalars[i]·base for every row (standard-form (n, Lr) uint32 below r), as affine rows."""
        if self._table is None:
            raise ValueError("this fixed-base table was freed")
        scalars = check_scalars(self.curve, scalars)
        n = scalars.shape[0]
        out = np.zeros((n,) + self._point_shape, dtype=np.uint32)
        for lo in range(0, n, self.launch_points):
            hi = min(n, lo + self.launch_points)
            out[lo:hi] = self._launch(scalars[lo:hi])
        return out

    def _launch(self, scalars: np.ndarray) -> np.ndarray:
        rt, xp = self.runtime, self.runtime.xp
        n = scalars.shape[0]
        point_words = int(np.prod(self._point_shape))
        need = n * 4 * (scalars.shape[1] + 3 * point_words)  # scalars, XYZZ sums, affine outputs
        reservation = self.vram.reserve(need, f"fixed-base launch of {n} scalars") if self.vram else None
        try:
            dev_scalars = rt.to_device(scalars)
            sums = xp.empty((n, 2 * point_words), dtype=np.uint32)
            out = xp.empty((n, point_words), dtype=np.uint32)
            batch = self._batch_for(n)
            threads = -(-n // batch)
            rt.launch(self._module, "fixed_base_mul", max(1, -(-threads // THREADS)), THREADS,
                      (self._table, np.uint32(self._windows), np.uint32(self.window), dev_scalars, np.uint64(n),
                       np.uint32(batch), sums, out))
            del dev_scalars, sums
            return rt.to_host(out).reshape((n,) + self._point_shape)
        finally:
            if reservation is not None:
                reservation.release()
