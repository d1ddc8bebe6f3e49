"""Synthesis on a CUDA device: A·w and B·w from a key's coefficients resident in VRAM (synth.cu).

The zkey's coefficient section is scattered (snarkjs does not sort it), so uploading it builds
a row-sorted (CSR) layout once, on the device, from two passes over the section in chunks
(``upload_from``: from a staging ring reading the file, ``keys.device``; ``upload``: from a host
key's array): the host holds one chunk at a time, never an order or a sorted copy.
On the device each of the 2N rows (A's, then B's) is summed by one thread, or by one block
when it is longer than ``long_row`` entries: no row is written by two threads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...curves import Curve
from ..cpu.synth import checked_entries
from .device import THREADS, CudaDevice, CudaInputError, check_vector, grid
from .vram import VramReservation

LONG_ROW_ENTRIES = 32  # rows with more entries are summed by a block of LONG_ROW_THREADS, not one thread
LONG_ROW_THREADS = 256  # a power of two (synth.cu's tree reduction)
UPLOAD_CHUNK_ENTRIES = 1 << 20


_ROWS_SCRATCH = 24  # per row: its count, a chunk's count and their sum (int64 each) while the cursors are made


def _chunk_scratch(m: int, record: int) -> int:
    """Device bytes of one chunk of ``m`` entries in the layout's build: the entries, their gathered signals and values
    and a dozen 8-byte temporaries per entry — twice, since the previous chunk's arrays are still referenced while the
    next one is staged."""
    return 2 * m * (2 * 4 * record + 12 * 8)


class HostChunk:
    """Entries already in host memory, handed to ``upload_from`` as a staged chunk would be (nothing to hold: a copy
    from pageable memory has read it when it returns)."""

    def __init__(self, array: np.ndarray, start: int):
        self.array, self.start = array, start

    def hold(self, event) -> None:
        pass


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
        """The zkey's coefficient section (structured array, checked here) resident in VRAM in the row-sorted layout;
        raises VramExhaustedError (nothing reserved) when the budget cannot hold it."""
        entries = checked_entries(curve, coeffs, n_vars, domain_size)

        def chunks():
            for start in range(0, len(entries), UPLOAD_CHUNK_ENTRIES):
                yield HostChunk(entries[start : start + UPLOAD_CHUNK_ENTRIES].reshape(-1).view(np.uint8), start)
        return self.upload_from(curve, len(entries), n_vars, domain_size, chunks)

    def upload_from(self, curve: Curve, n: int, n_vars: int, domain_size: int, passes) -> DeviceCoefficients:
        """``n`` coefficient entries resident in VRAM in the row-sorted layout, built on the device from two passes
        over the section (``passes()``: an iterable of staged chunks of whole entries in file order, whose indices
        the caller has checked): the first counts each row's entries, the second scatters every entry to its row's
        next free place — sorting a chunk by (row, position) keeps the file's order within a row, so the layout is
        the one a host-side stable counting sort gives. The host holds only the chunks; VramExhaustedError (nothing
        kept) when the budget cannot hold the layout and the build's scratch."""
        if n >= 1 << 32:
            raise CudaInputError(f"{n} coefficients: row boundaries are 32-bit, so at most 2^32 - 1")
        xp, limbs, rows = self.xp, curve.Fr.limbs32, 2 * domain_size
        record = 3 + limbs
        nbytes = n * (4 + curve.Fr.n8) + 4 * (rows + 1) + 4 * min(n // 2, rows)  # long rows: at most one per 2 entries
        reservation = self.vram.reserve(nbytes, f"{curve.name} coefficients ({n} entries)")
        try:
            with self.vram.reserve(_ROWS_SCRATCH * rows, "coefficient layout scratch (row counts)", transient=True):
                signals = self.runtime.empty((n,), np.uint32)
                values = self.runtime.empty((n, limbs), np.uint32)
                counts = xp.zeros(rows, dtype=xp.int64)
                for keys, _ in self._staged_rows(passes(), record, domain_size):
                    counts += xp.bincount(keys, minlength=rows)
                row_starts = xp.zeros(rows + 1, dtype=xp.uint32)
                row_starts[1:] = xp.cumsum(counts).astype(xp.uint32)
                cursor = row_starts[:-1].astype(xp.int64)
                del counts
                seen = 0
                for keys, entries in self._staged_rows(passes(), record, domain_size):
                    m = keys.shape[0]
                    ranked = xp.sort((keys.astype(xp.uint64) << xp.uint64(32)) | xp.arange(m, dtype=xp.uint64))
                    sorted_keys = (ranked >> xp.uint64(32)).astype(xp.int64)
                    source = (ranked & xp.uint64(0xFFFFFFFF)).astype(xp.int64)
                    first = xp.searchsorted(sorted_keys, sorted_keys, side="left")
                    place = cursor[sorted_keys] + (xp.arange(m, dtype=xp.int64) - first)
                    signals[place] = entries[source, 2]
                    values[place] = entries[source, 3:]
                    last = xp.flatnonzero(xp.concatenate([sorted_keys[1:] != sorted_keys[:-1], xp.ones(1, dtype=bool)]))
                    cursor[sorted_keys[last]] += last - first[last] + 1
                    seen += m
                if seen != n:
                    raise CudaInputError(f"the coefficient section gave {seen} entries, the key has {n}")
                long_rows = xp.flatnonzero(xp.diff(row_starts) > self.long_row).astype(xp.uint32)
                self.runtime.synchronize_stream()
            return DeviceCoefficients(curve, n_vars, domain_size, row_starts, signals, values, long_rows, self.long_row,
                                      reservation)
        except BaseException:
            reservation.release()
            raise

    @staticmethod
    def layout_scratch_bytes(curve: Curve, domain_size: int, chunk_bytes: int) -> int:
        """Device bytes ``upload_from`` needs beside the layout while it builds it from chunks of ``chunk_bytes``."""
        record = 3 + curve.Fr.limbs32
        return _ROWS_SCRATCH * 2 * domain_size + _chunk_scratch(chunk_bytes // (4 * record), record)

    def _staged_rows(self, chunks, record: int, domain_size: int):
        """Each staged chunk on the device: its entries' row keys (matrix·N + constraint, int64) and its entries
        ((m, record) uint32), with the chunk's scratch (``_chunk_scratch``) reserved while it is in use."""
        for chunk in chunks:
            m = chunk.array.size // (4 * record)
            with self.vram.reserve(_chunk_scratch(m, record), "coefficient layout scratch (one chunk)", transient=True):
                entries = self.runtime.empty((m, record), np.uint32)
                self.gpu.copy_chunks(entries.reshape(-1), [chunk])
                yield entries[:, 0].astype(self.xp.int64) * domain_size + entries[:, 1], entries

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
