"""Fr vectors on a CUDA device: elementwise ops and NTTs, both from the ntt.cu module.

A transform runs as shared-memory passes of ``ntt_dif_pass`` (each up to 2^log_block
elements per block, the first reading the caller's device vector straight into the result's)
and one tiled ``ntt_bitrev``; the twiddle and coset-factor tables it reads are
computed on the device once and kept there, each holding a reservation of the VRAM budget.
Proofs on several lanes (streams) read them at once: a table is built under the lock and
published only once its kernels are done, and never written after. One outgrown by a larger
domain is kept, not freed, because a kernel queued on another lane may still read it, and
CuPy's pool would hand its block to the next allocation of the stream that made it
(the kept tables of a geometric series of sizes add up to at most the current one's size).
"""

from __future__ import annotations

import threading

import numpy as np

from ...curves import Curve
from .device import THREADS, CudaDevice, CudaInputError, check_vector, grid
from .vram import VramReservation

NTT_MAX_LOG_BLOCK = 11  # 2^11 Fr elements (64 KiB for 8 limbs) of shared memory per NTT block at most
# 2^10 by default: 32 KiB a block lets 4 blocks (32 warps, the register limit) share an SM where 64 KiB allowed 3, and
# 2^24 still takes three passes (GPU_NOTES v7: 7.09 against 7.31 ms at 2^24, 0.48 against 0.50 at 2^20).
NTT_LOG_BLOCK_ELEMENTS = 10
COSET_SPLIT = 12  # shift^i = hi[i >> 12] · lo[i mod 2^12], as ntt.cu reads it
BITREV_TILE_LOG = 5  # ntt_bitrev swaps tiles of 2^5 x 2^5 elements (two per block: 66 KiB of shared memory for Fr of 8 limbs)


def ntt_passes(m: int, log_block: int = NTT_LOG_BLOCK_ELEMENTS) -> list[tuple[int, int]]:
    """(first stage, stage count) of each shared-memory pass of a 2^m DIF transform."""
    count = -(-m // log_block)
    sizes = [m // count + (1 if i < m % count else 0) for i in range(count)]
    out, s0 = [], 0
    for k in sizes:
        out.append((s0, k))
        s0 += k
    return out


class CudaNtt:
    """Elementwise Fr ops and transforms on ``gpu``; ``log_block`` (elements per NTT block, log2) is a tuning
    knob tests lower to reach the many-pass path at small sizes."""

    def __init__(self, gpu: CudaDevice, log_block: int = NTT_LOG_BLOCK_ELEMENTS):
        if not 1 <= log_block <= NTT_MAX_LOG_BLOCK:
            raise ValueError(f"ntt_log_block must be in 1..{NTT_MAX_LOG_BLOCK}, got {log_block}")
        self.gpu = gpu
        self.runtime, self.xp, self.vram = gpu.runtime, gpu.xp, gpu.vram
        self.log_block = log_block
        self._lock = threading.Lock()
        self._twiddles: dict[str, tuple[int, object, object, VramReservation]] = {}
        self._coset_tables: dict[tuple[str, int], tuple[int, object, object, VramReservation]] = {}
        self._outgrown: list[tuple] = []  # tables replaced by larger ones: see the module docstring
        self._inverse_factors: dict[tuple[str, int], object] = {}

    @staticmethod
    def table_bytes(curve: Curve, n: int) -> int:
        """Device bytes of the tables an n-point transform (and its coset scaling) leaves cached on the device: the
        twiddles of both directions (n/2 elements each) and the coset factors' hi and lo halves."""
        if n < 2:
            return 0
        return (n + min(n, 1 << COSET_SPLIT) + max(1, n >> COSET_SPLIT)) * curve.Fr.n8

    def _fr_rows(self, curve: Curve, values: list[int]):
        from ...formats.limbs import ints_to_limbs

        return self.runtime.to_device(ints_to_limbs(values, curve.Fr.limbs32))

    def elementwise(self, curve: Curve, op: int, a, b=None):
        """ntt.cu's ``fr_elementwise`` op (0 mul, 1 sub, 2 to Montgomery, 3 from Montgomery) over a (and b)."""
        limbs = curve.Fr.limbs32
        n = check_vector(a, limbs, "a")
        if b is not None and check_vector(b, limbs, "b") != n:
            raise CudaInputError(f"vectors differ in length: {n} and {b.shape[0]}")
        with self.gpu.host_copies((a, b, a), "an Fr vector op's host operands and result"):
            da, host = self.gpu.device_view(a)
            db = self.gpu.device_view(b)[0] if b is not None else da
            out = self.xp.empty_like(da)
            if n:
                mod = self.runtime.module(curve, "ntt")
                self.runtime.launch(mod, "fr_elementwise", grid(n), THREADS, (da, db, out, np.uint64(n), np.uint32(op)))
            return self.gpu.result(out, host)

    def _pow_table(self, curve: Curve, base: int, count: int):
        """Device table of base^i (Montgomery) for i < count, computed on the device."""
        Fr = curve.Fr
        pows, x = [], base % Fr.p
        for _ in range(max(1, count.bit_length())):
            pows.append(Fr.to_mont(x))
            x = x * x % Fr.p
        out = self.xp.empty((count, Fr.limbs32), dtype=np.uint32)
        mod = self.runtime.module(curve, "ntt")
        self.runtime.launch(mod, "fr_pow_table", grid(count), THREADS, (self._fr_rows(curve, pows), np.uint64(count), out))
        return out

    def _inverse_factor(self, curve: Curve, m: int):
        """1/2^m (Montgomery) as a device row, uploaded once: a per-transform upload was a synchronous copy (and GIL
        time) six times a proof. 32 bytes each, at most one per curve and size: not worth a VRAM reservation."""
        key = (curve.name, m)
        with self._lock:
            row = self._inverse_factors.get(key)
            if row is None:
                row = self._fr_rows(curve, [curve.Fr.to_mont(pow(1 << m, -1, curve.r))])
                self._publish(self._inverse_factors, key, row)
        return row

    def _twiddle_tables(self, curve: Curve, m: int):
        """(log size M >= m, forward table, inverse table) of w_M^(±i), i < 2^(M-1), cached per curve."""
        with self._lock:
            cached = self._twiddles.get(curve.name)
            if cached is not None and cached[0] >= m:
                return cached[:3]
            count = 1 << (m - 1)
            reservation = self.vram.reserve(2 * count * curve.Fr.n8, f"{curve.name} twiddles for 2^{m}")
            w = curve.fr_root_of_unity(m)
            entry = (m, self._pow_table(curve, w, count), self._pow_table(curve, pow(w, -1, curve.r), count), reservation)
            self._publish(self._twiddles, curve.name, entry)
            return entry[:3]

    def _coset_factors(self, curve: Curve, shift: int, n: int):
        """(hi, lo) tables with shift^i = hi[i >> 12] · lo[i mod 2^12], cached per (curve, shift)."""
        key = (curve.name, shift)
        with self._lock:
            cached = self._coset_tables.get(key)
            if cached is not None and cached[0] >= n:
                return cached[1:3]
            n_lo = min(n, 1 << COSET_SPLIT)
            n_hi = max(1, n >> COSET_SPLIT)
            reservation = self.vram.reserve((n_lo + n_hi) * curve.Fr.n8, f"{curve.name} coset factors")
            hi = self._pow_table(curve, pow(shift, 1 << COSET_SPLIT, curve.r), n_hi)
            entry = (n, hi, self._pow_table(curve, shift, n_lo), reservation)
            self._publish(self._coset_tables, key, entry)
            return entry[1:3]

    def _publish(self, cache: dict, key, entry) -> None:
        """Make a table built on this thread's stream visible to every lane (under ``_lock``), once it is computed."""
        self.runtime.synchronize_stream()
        outgrown = cache.get(key)
        if outgrown is not None:
            self._outgrown.append(outgrown)
        cache[key] = entry

    def transform(self, curve: Curve, a, inverse: bool, shift: int | None):
        """The NTT of ``a`` (inverse: the INTT), its coefficients first scaled by shift^i when ``shift`` is given."""
        limbs = curve.Fr.limbs32
        n = check_vector(a, limbs, "a")
        if n == 0 or n & (n - 1):
            raise CudaInputError(f"NTT length must be a power of two, got {n}")
        m = n.bit_length() - 1
        if m > curve.fr_two_adicity:
            raise CudaInputError(f"{curve.name} has no 2^{m} roots of unity (two-adicity {curve.fr_two_adicity})")
        if shift is not None and shift % curve.r == 0:
            raise CudaInputError("coset shift must be non-zero")
        with self.gpu.host_copies((a,), "an NTT's host vector"):
            return self._transform(curve, a, inverse, shift, m)

    def _transform(self, curve: Curve, a, inverse: bool, shift: int | None, m: int):
        n = 1 << m
        if m == 0:
            data, host = self.gpu.device_copy(a)
            return self.gpu.result(data, host)
        src, host = self.gpu.device_view(a)
        data = src if host else self.xp.empty_like(src)  # a host vector's upload is ours to transform in place
        mod = self.runtime.module(curve, "ntt")
        log_max, forward, backward = self._twiddle_tables(curve, m)
        if shift is not None:
            hi, lo = self._coset_factors(curve, shift % curve.r, n)
        else:
            hi = lo = data  # not read
        for s0, k in ntt_passes(m, self.log_block):
            log_t = min(self.log_block - k, m - k)
            elements = 1 << (k + log_t)
            self.runtime.launch(
                mod,
                "ntt_dif_pass",
                1 << (m - k - log_t),
                min(THREADS, max(32, elements // 2)),
                (src if s0 == 0 else data, data, backward if inverse else forward, np.uint32(m), np.uint32(s0), np.uint32(k),
                 np.uint32(log_t), np.uint32(log_max - m), np.uint32(shift is not None and s0 == 0), hi, lo),
                shared_bytes=elements * curve.Fr.n8,
            )
        factor = self._inverse_factor(curve, m) if inverse else data  # not read by a forward transform
        tile_log = min(BITREV_TILE_LOG, m // 2)
        self.runtime.launch(mod, "ntt_bitrev", 1 << (m - 2 * tile_log), THREADS, (data, np.uint32(m), np.uint32(tile_log), np.uint32(inverse), factor),
                            shared_bytes=2 * (1 << tile_log) * ((1 << tile_log) + 1) * curve.Fr.n8)
        return self.gpu.result(data, host)
