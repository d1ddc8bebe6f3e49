"""Synthesis on a CUDA device: A·w and B·w from a key's coefficients resident in VRAM (synth.cu).

The zkey's coefficient section is scattered (snarkjs does not sort it), so uploading it builds
a row-sorted (CSR) layout once, on the host: the CPU synthesis's counting sort gives the
order and the rows' boundaries, and the signals and values are gathered in that order a chunk
at a time and copied through the device's upload path (staged from the pinned pool), so the
host holds the 4-byte order and one chunk beside the key, never a sorted copy of the section.
On the device each of the 2N rows (A's, then B's) is summed by one thread, or by one block
when it is longer than ``long_row`` entries: no row is written by two threads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...curves import Curve
from ..cpu.synth import rows_by_matrix_row
from .device import THREADS, CudaDevice, CudaInputError, check_vector, grid
from .vram import VramReservation

LONG_ROW_ENTRIES = 32  # rows with more entries are summed by a block of LONG_ROW_THREADS, not one thread
LONG_ROW_THREADS = 256  # a power of two (synth.cu's tree reduction)
UPLOAD_CHUNK_ENTRIES = 1 << 20


@dataclass
class DeviceCoefficients:
    """A key's A and B coefficients resident in VRAM, row-sorted (see the module docstring).

    ``row_starts`` (2N + 1 uint32) bounds each row's entries in ``signals`` (uint32) and
    ``values`` ((n, limbs) uint32, c·R² mod r as the zkey stores them); ``long_rows`` lists the
    rows a block sums (those of more than ``long_row`` entries). ``free()`` gives the memory and its reservation back.
    """

    curve: Curve
    n_vars: int
    domain_size: int
    row_starts: object
    signals: object
    values: object
    long_rows: object
    long_row: int
    reservation: VramReservation

    @property
    def nbytes(self) -> int:
        return self.reservation.nbytes

    def free(self) -> None:
        self.row_starts = self.signals = self.values = self.long_rows = None
        self.reservation.release()


class CudaSynthesis:
    """Coefficient uploads and A·w, B·w on ``gpu``; ``long_row`` (entries above which a block sums a row) is a
    tuning knob tests lower to reach the block path with small circuits."""

    def __init__(self, gpu: CudaDevice, long_row: int = LONG_ROW_ENTRIES):
        if long_row < 1:
            raise ValueError(f"long_row must be at least 1, got {long_row}")
        self.gpu = gpu
        self.runtime, self.xp, self.vram = gpu.runtime, gpu.xp, gpu.vram
        self.long_row = long_row

    def upload(self, curve: Curve, coeffs: np.ndarray, n_vars: int, domain_size: int) -> DeviceCoefficients:
        """The zkey's coefficient section (structured array) resident in VRAM in the row-sorted layout; raises
        VramExhaustedError (nothing reserved) when the budget cannot hold it."""
        entries, order, row_starts = rows_by_matrix_row(curve, coeffs, n_vars, domain_size)
        long_rows = np.flatnonzero(np.diff(row_starts) > self.long_row).astype(np.uint32)
        n, limbs = len(order), curve.Fr.limbs32
        nbytes = n * (4 + curve.Fr.n8) + row_starts.nbytes + long_rows.nbytes
        reservation = self.vram.reserve(nbytes, f"{curve.name} coefficients ({n} entries)")
        try:
            signals = self.runtime.empty((n,), np.uint32)
            values = self.runtime.empty((n, limbs), np.uint32)
            allocated = self.runtime.compute_event()
            for start in range(0, n, UPLOAD_CHUNK_ENTRIES):
                stop = min(n, start + UPLOAD_CHUNK_ENTRIES)
                chunk = entries[order[start:stop]]
                copies = [self.gpu.upload_async(np.ascontiguousarray(chunk[:, 2]), signals[start:stop], allocated),
                          self.gpu.upload_async(np.ascontiguousarray(chunk[:, 3:]), values[start:stop], allocated)]
                for copy in copies:
                    copy.result()
            return DeviceCoefficients(curve, n_vars, domain_size, self.gpu.to_device(row_starts), signals, values,
                                      self.gpu.to_device(long_rows), self.long_row, reservation)
        except BaseException:
            reservation.release()
            raise

    def evaluate(self, curve: Curve, coeffs: DeviceCoefficients, w):
        """(A·w, B·w), each (domain_size, limbs) Montgomery form, halves of one array; ``w`` is the witness
        (n_vars, limbs) in standard form, host or device (a host ``w`` gives host results)."""
        if coeffs.curve is not curve or coeffs.values is None:
            raise CudaInputError(f"coefficients are {coeffs.curve.name} (freed: {coeffs.values is None}), not {curve.name}")
        if check_vector(w, curve.Fr.limbs32, "witness") != coeffs.n_vars:
            raise CudaInputError(f"witness has {w.shape[0]} values but the key has {coeffs.n_vars} signals")
        dw, host = self.gpu.device_view(w)
        rows = 2 * coeffs.domain_size
        out = self.xp.empty((rows, curve.Fr.limbs32), dtype=np.uint32)
        mod = self.runtime.module(curve, "synth")
        resident = (coeffs.row_starts, coeffs.signals, coeffs.values)
        self.runtime.launch(mod, "synth_rows", grid(rows), THREADS, (*resident, dw, out, np.uint64(rows), np.uint32(coeffs.long_row)))
        n_long = int(coeffs.long_rows.shape[0])
        if n_long:
            self.runtime.launch(mod, "synth_long_rows", n_long, LONG_ROW_THREADS,
                                (coeffs.long_rows, *resident, dw, out),
                                shared_bytes=LONG_ROW_THREADS * curve.Fr.n8)
        out = self.gpu.result(out, host)
        return out[: coeffs.domain_size], out[coeffs.domain_size :]

    @staticmethod
    def free_key(key) -> None:
        """Give back a key's resident coefficients, if it has them."""
        if isinstance(key.coeffs, DeviceCoefficients):
            key.coeffs.free()
