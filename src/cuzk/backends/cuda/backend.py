"""The CUDA backend: Fr vector ops, NTTs and MSMs on a GPU through CuPy.

Arrays follow base.py's layout. Host (numpy) arguments give host results; CuPy arrays
are taken without a copy to the host and give CuPy results, so a caller that keeps its
vectors on the device pays no transfers (the prover does: ``to_device``, ``upload_in_background``).

Kernels run on the device's current (legacy default) stream; host→device copies of bases and
vectors run on a separate non-blocking copy stream, from page-locked memory (a hot key's
buffer, or a staging buffer from the engine's pinned pool), so they overlap kernels: an MSM
whose bases are not resident uploads chunk i+1 into one of two device buffers while chunk i
computes from the other. Every copy waits for an event recorded on the compute stream when its
destination was allocated, because CuPy's pool hands a block freed there to the next
allocation at once, trusting that stream's order. The same orchestration runs on the host
emulation runtime (modules.HostRuntime), which is how it is tested without a GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...curves import Curve
from ...curves.ec import Point
from .modules import CupyRuntime, CudaBackendError
from .vram import DeviceBases, VramBudget, VramExhaustedError, VramReservation

THREADS = 256
NTT_LOG_BLOCK_ELEMENTS = 11  # 2^11 Fr elements (64 KiB) of shared memory per NTT block
COSET_SPLIT = 12  # shift^i = hi[i >> 12] · lo[i mod 2^12], as ntt.cu reads it
NO_KEY = 0xFFFFFFFF
SCALAR_LIMBS = 8
PARTIAL_CHUNK = 8  # entries per thread when re-summing partial bucket sums
MIN_MSM_CHUNK = 1 << 12
KEY_BASES = (("a", "g1"), ("b1", "g1"), ("b2", "g2"), ("c", "g1"), ("h", "g1"))  # a zkey's MSM bases (keys/device.py too)


class CudaInputError(ValueError):
    """An argument does not have the layout base.py specifies."""


class ScalarOutOfRangeError(CudaInputError):
    def __init__(self, index: int, curve: Curve):
        super().__init__(f"MSM scalar {index} is not below the {curve.name} scalar field order r")
        self.index = index


def _check_vector(a, limbs: int, what: str) -> int:
    if getattr(a, "ndim", None) != 2 or a.shape[1] != limbs or a.dtype != np.uint32:
        raise CudaInputError(
            f"{what}: expected a uint32 array of shape (n, {limbs}), got {getattr(a, 'dtype', type(a).__name__)} "
            f"{getattr(a, 'shape', '')}"
        )
    return int(a.shape[0])


def _on_device(method):
    """Run a public backend method with its device current, so every array it makes lives there (multi-GPU)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.runtime.activate():
            return method(self, *args, **kwargs)
    return wrapper


class Upload:
    """A host→device copy in flight (``CudaBackend.upload_async``).

    ``result()`` orders the compute stream after the copy (without blocking the host unless a
    staging buffer must go back to its pool) and returns the device array.
    """

    def __init__(self, runtime, array, event, staging=None):
        self._runtime = runtime
        self._array = array
        self._event = event
        self._staging = staging

    def result(self):
        if self._event is not None:
            self._runtime.wait_event(self._event)
            if self._staging is not None:
                self._event.synchronize()  # the pinned buffer is read by the copy until here
            self._event = None
        if self._staging is not None:
            self._staging.release()
            self._staging = None
        return self._array


class _Deferred:
    """An Upload still being started on the copy thread."""

    def __init__(self, future):
        self._future = future

    def result(self):
        return self._future.result().result()


def window_bits(n: int, scalar_bits: int) -> int:
    """Pippenger window c minimising windows·(n mixed adds + 2·2^(c-1) full adds ≈ 1.4 mixed each)."""
    best, best_cost = 4, math.inf
    for c in range(4, 23):
        windows = -(-(scalar_bits + 1) // c)
        cost = windows * (n + 2.8 * (1 << (c - 1)))
        if cost < best_cost:
            best, best_cost = c, cost
    return best


def ntt_passes(m: int, log_block: int = NTT_LOG_BLOCK_ELEMENTS) -> list[tuple[int, int]]:
    """(first stage, stage count) of each shared-memory pass of a 2^m DIF transform."""
    count = -(-m // log_block)
    sizes = [m // count + (1 if i < m % count else 0) for i in range(count)]
    out, s0 = [], 0
    for k in sizes:
        out.append((s0, k))
        s0 += k
    return out


class CudaBackend:
    """Backend protocol implementation on one CUDA device (``runtime`` overrides it, e.g. the host emulation).

    ``ntt_log_block`` (elements per NTT block, log2) and ``min_msm_chunk`` (the fewest
    points an MSM chunk may have) are tuning knobs; tests lower them to reach the
    many-pass and many-chunk paths at small sizes.

    ``staging`` (set by the engine over its ``memory.pinned.PinnedPool``: ``get(nbytes, label)``
    gives a buffer with ``array`` and ``release()``, or None) lends page-locked buffers for
    copies from pageable host memory, so they run asynchronously on the copy stream and
    overlap kernels; without it such copies are synchronous. Sources already page-locked
    (hot keys) are copied directly. ``overlap = False`` turns the prefetching off (benchmarks).
    """

    name = "cuda"

    def __init__(self, device: int = 0, runtime=None, vram_budget: VramBudget | None = None,
                 ntt_log_block: int = NTT_LOG_BLOCK_ELEMENTS, min_msm_chunk: int = MIN_MSM_CHUNK):
        if not 1 <= ntt_log_block <= NTT_LOG_BLOCK_ELEMENTS:
            raise ValueError(f"ntt_log_block must be in 1..{NTT_LOG_BLOCK_ELEMENTS}, got {ntt_log_block}")
        self.ntt_log_block = ntt_log_block
        self.min_msm_chunk = max(1, int(min_msm_chunk))
        self.runtime = runtime if runtime is not None else CupyRuntime(device)
        self.xp = self.runtime.xp
        if vram_budget is None:
            self.runtime.free_cached()
            free, _total = self.runtime.memory_info()
            vram_budget = VramBudget.from_free_memory(free, device)
        self.vram = vram_budget
        self._lock = threading.Lock()
        self.staging = None
        self.overlap = True
        self._copier: ThreadPoolExecutor | None = None
        self.phase_log: list[tuple[str, float]] | None = None  # set to [] to record MSM phase times (ms)
        self._marks: list[tuple[str, object]] = []
        self._twiddles: dict[str, tuple[int, object, object, VramReservation]] = {}
        self._coset_tables: dict[tuple[str, int], tuple[int, object, object, VramReservation]] = {}

    # ---------------------------------------------------------------- array plumbing
    def _device_copy(self, a):
        """A device copy of ``a`` (host or device) and whether the caller gave a host array."""
        if isinstance(a, np.ndarray):
            return self.runtime.to_device(np.ascontiguousarray(a)), True
        return self.xp.ascontiguousarray(a).copy(), False

    def _device_view(self, a):
        if isinstance(a, np.ndarray):
            return self.runtime.to_device(np.ascontiguousarray(a)), True
        return self.xp.ascontiguousarray(a), False

    @_on_device
    def upload_async(self, a, out=None, after=None) -> Upload:
        """Start copying host array ``a`` to the device (device arrays pass through); see ``Upload``.

        ``out`` (a device array of ``a``'s shape) receives it, with ``after`` the compute-stream event
        the copy must wait for (see ``CupyRuntime.compute_event``); by default a new array, allocated
        here on the calling thread.
        """
        if not isinstance(a, np.ndarray):
            return Upload(self.runtime, a, None)
        a = np.ascontiguousarray(a)
        if out is None:
            out = self.runtime.empty(a.shape, a.dtype)
            after = self.runtime.compute_event()
        buffer = None
        if self.staging is not None and a.nbytes and not self.runtime.is_pinned(a):
            buffer = self.staging.get(a.nbytes, label=f"staging for device {self.vram.device}")
        if buffer is None:  # page-locked already (hot keys), or no host memory to spare: straight from ``a``
            return Upload(self.runtime, out, self.runtime.copy_async(out, a, after))
        try:
            view = buffer.array[: a.nbytes].view(a.dtype).reshape(a.shape)
            np.copyto(view, a)
            event = self.runtime.copy_async(out, view, after)
        except BaseException:
            buffer.release()
            raise
        return Upload(self.runtime, out, event, buffer)

    @_on_device
    def upload_in_background(self, a) -> Upload | _Deferred:
        """``upload_async`` run on the copy thread, so staging ``a`` (a host memcpy) overlaps the caller's kernels.

        The destination is allocated here, on the caller's thread and stream, so the copy is
        ordered after exactly the work queued before this call.
        """
        if not isinstance(a, np.ndarray):
            return Upload(self.runtime, a, None)
        out = self.runtime.empty(a.shape, a.dtype)
        return _Deferred(self._copy_thread().submit(self.upload_async, a, out, self.runtime.compute_event()))

    def try_reserve(self, nbytes: int, what: str) -> VramReservation | None:
        """``nbytes`` of the VRAM budget (idle resident keys evicted for it), or None when they do not fit."""
        try:
            return self.vram.reserve(nbytes, what)
        except VramExhaustedError:
            return None

    def to_device(self, a):
        """A device copy of ``a`` (for a caller that keeps its vectors on the device across calls)."""
        return self.upload_async(a).result()

    def _result(self, dev, to_host: bool):
        return self.runtime.to_host(dev) if to_host else dev

    def _fr_rows(self, curve: Curve, values: list[int]):
        from ...formats.limbs import ints_to_limbs

        return self.runtime.to_device(ints_to_limbs(values, curve.Fr.limbs32))

    def _phase(self, label: str) -> None:
        """Record the end of an MSM phase when phase_log is on (costs one event per phase)."""
        if self.phase_log is not None:
            if label == "start":
                self._marks.clear()
            self._marks.append((label, self.runtime.mark()))

    def _flush_phases(self) -> None:
        for (_, a), (label, b) in zip(self._marks, self._marks[1:]):
            self.phase_log.append((label, self.runtime.elapsed_ms(a, b)))
        self._marks.clear()

    @staticmethod
    def _grid(n: int) -> int:
        return max(1, -(-n // THREADS))

    # ---------------------------------------------------------------- Fr vectors
    def _elementwise(self, curve: Curve, op: int, a, b=None):
        limbs = curve.Fr.limbs32
        n = _check_vector(a, limbs, "a")
        if b is not None and _check_vector(b, limbs, "b") != n:
            raise CudaInputError(f"vectors differ in length: {n} and {b.shape[0]}")
        da, host = self._device_view(a)
        db = self._device_view(b)[0] if b is not None else da
        out = self.xp.empty_like(da)
        if n:
            mod = self.runtime.module(curve, "ntt")
            self.runtime.launch(mod, "fr_elementwise", self._grid(n), THREADS, (da, db, out, np.uint64(n), np.uint32(op)))
        return self._result(out, host)

    @_on_device
    def fr_mul(self, curve: Curve, a, b):
        return self._elementwise(curve, 0, a, b)

    @_on_device
    def fr_sub(self, curve: Curve, a, b):
        return self._elementwise(curve, 1, a, b)

    @_on_device
    def fr_to_mont(self, curve: Curve, a):
        return self._elementwise(curve, 2, a)

    @_on_device
    def fr_from_mont(self, curve: Curve, a):
        return self._elementwise(curve, 3, a)

    # ---------------------------------------------------------------- NTT
    def _pow_table(self, curve: Curve, base: int, count: int):
        """Device table of base^i (Montgomery) for i < count, computed on the device."""
        Fr = curve.Fr
        pows, x = [], base % Fr.p
        for _ in range(max(1, count.bit_length())):
            pows.append(Fr.to_mont(x))
            x = x * x % Fr.p
        out = self.xp.empty((count, Fr.limbs32), dtype=np.uint32)
        mod = self.runtime.module(curve, "ntt")
        self.runtime.launch(mod, "fr_pow_table", self._grid(count), THREADS, (self._fr_rows(curve, pows), np.uint64(count), out))
        return out

    def _twiddle_tables(self, curve: Curve, m: int):
        """(log size M >= m, forward table, inverse table) of w_M^(±i), i < 2^(M-1), cached per curve."""
        with self._lock:
            cached = self._twiddles.get(curve.name)
            if cached is not None and cached[0] >= m:
                return cached[:3]
            count = 1 << (m - 1)
            reservation = self.vram.reserve(2 * count * curve.Fr.n8, f"{curve.name} twiddles for 2^{m}")
            if cached is not None:
                cached[3].release()
            w = curve.fr_root_of_unity(m)
            entry = (m, self._pow_table(curve, w, count), self._pow_table(curve, pow(w, -1, curve.r), count), reservation)
            self._twiddles[curve.name] = entry
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
            if cached is not None:
                cached[3].release()
            hi = self._pow_table(curve, pow(shift, 1 << COSET_SPLIT, curve.r), n_hi)
            entry = (n, hi, self._pow_table(curve, shift, n_lo), reservation)
            self._coset_tables[key] = entry
            return entry[1:3]

    def _transform(self, curve: Curve, a, inverse: bool, shift: int | None):
        limbs = curve.Fr.limbs32
        n = _check_vector(a, limbs, "a")
        if n == 0 or n & (n - 1):
            raise CudaInputError(f"NTT length must be a power of two, got {n}")
        m = n.bit_length() - 1
        if m > curve.fr_two_adicity:
            raise CudaInputError(f"{curve.name} has no 2^{m} roots of unity (two-adicity {curve.fr_two_adicity})")
        if shift is not None and shift % curve.r == 0:
            raise CudaInputError("coset shift must be non-zero")
        data, host = self._device_copy(a)
        if m == 0:
            return self._result(data, host)
        mod = self.runtime.module(curve, "ntt")
        log_max, forward, backward = self._twiddle_tables(curve, m)
        if shift is not None:
            hi, lo = self._coset_factors(curve, shift % curve.r, n)
        else:
            hi = lo = data  # not read
        for s0, k in ntt_passes(m, self.ntt_log_block):
            log_t = min(self.ntt_log_block - k, m - k)
            elements = 1 << (k + log_t)
            self.runtime.launch(
                mod,
                "ntt_dif_pass",
                1 << (m - k - log_t),
                min(THREADS, max(32, elements // 2)),
                (data, backward if inverse else forward, np.uint32(m), np.uint32(s0), np.uint32(k), np.uint32(log_t),
                 np.uint32(log_max - m), np.uint32(shift is not None and s0 == 0), hi, lo),
                shared_bytes=elements * curve.Fr.n8,
            )
        factor = self._fr_rows(curve, [curve.Fr.to_mont(pow(n, -1, curve.r))])
        self.runtime.launch(mod, "ntt_bitrev", self._grid(n), THREADS, (data, np.uint32(m), np.uint32(inverse), factor))
        return self._result(data, host)

    @_on_device
    def ntt(self, curve: Curve, a):
        return self._transform(curve, a, inverse=False, shift=None)

    @_on_device
    def intt(self, curve: Curve, a):
        return self._transform(curve, a, inverse=True, shift=None)

    @_on_device
    def coset_ntt(self, curve: Curve, a, shift: int):
        return self._transform(curve, a, inverse=False, shift=shift)

    # ---------------------------------------------------------------- MSM
    @staticmethod
    def _point_words(curve: Curve, group: str) -> int:
        """uint32 words of one affine base (x, y) of the group."""
        return 2 * curve.Fq.limbs32 * (2 if group == "g2" else 1)

    def _check_bases(self, curve: Curve, group: str, bases) -> int:
        lq = curve.Fq.limbs32
        shape = (2, lq) if group == "g1" else (2, 2, lq)
        if getattr(bases, "dtype", None) != np.uint32 or tuple(bases.shape[1:]) != shape:
            raise CudaInputError(
                f"{group.upper()} bases: expected a uint32 array of shape (n, {', '.join(map(str, shape))}), "
                f"got {getattr(bases, 'dtype', type(bases).__name__)} {getattr(bases, 'shape', '')}"
            )
        return int(bases.shape[0])

    @_on_device
    def upload_bases(self, curve: Curve, group: str, bases) -> DeviceBases:
        """Keep ``bases`` resident in VRAM (raises VramExhaustedError when the budget cannot hold them)."""
        if group not in ("g1", "g2"):
            raise CudaInputError(f"group must be 'g1' or 'g2', got {group!r}")
        n = self._check_bases(curve, group, bases)
        words = self._point_words(curve, group)
        reservation = self.vram.reserve(n * words * 4, f"{curve.name} {group.upper()} bases ({n} points)")
        try:
            if isinstance(bases, np.ndarray):
                points = self.runtime.to_device(np.ascontiguousarray(bases).reshape(n, words))
            else:
                points = self.xp.ascontiguousarray(bases).reshape(n, words)
        except BaseException:
            reservation.release()
            raise
        return DeviceBases(curve, group, points, reservation)

    @_on_device
    def upload_key(self, zkey):
        """A copy of ``zkey`` whose MSM bases (A, B1, B2, C, H) are resident in VRAM.

        The prover takes it in place of the host key, so repeated proofs of one circuit
        upload only their witness. All or nothing: on VramExhaustedError nothing stays
        reserved. Give the memory back with ``free_key``.
        """
        uploaded: dict[str, DeviceBases] = {}
        try:
            for name, group in KEY_BASES:
                uploaded[name] = self.upload_bases(zkey.curve, group, getattr(zkey, name))
        except BaseException:
            for bases in uploaded.values():
                bases.free()
            raise
        return dataclasses.replace(zkey, **uploaded)

    @staticmethod
    def free_key(key) -> None:
        for name, _ in KEY_BASES:
            bases = getattr(key, name)
            if isinstance(bases, DeviceBases):
                bases.free()

    @_on_device
    def msm_g1(self, curve: Curve, bases, scalars) -> Point:
        return self._msm(curve, "g1", bases, scalars)

    @_on_device
    def msm_g2(self, curve: Curve, bases, scalars) -> Point:
        return self._msm(curve, "g2", bases, scalars)

    def msm_working_bytes(self, curve: Curve, group: str, n: int, resident: bool = False, buffers: int = 1) -> int:
        """Upper bound of an n-point MSM's device working set (window chosen for n); ``buffers`` chunks of
        bases in flight when they are not resident (2 while the next chunk's upload overlaps this one)."""
        return self._msm_bytes(curve, group, n, window_bits(n, curve.r.bit_length()), resident, buffers)

    def _msm_bytes(self, curve: Curve, group: str, n: int, c: int, resident: bool, buffers: int = 1) -> int:
        windows = -(-(curve.r.bit_length() + 1) // c)
        point_bytes = self._point_words(curve, group) * 4
        sum_bytes = 2 * point_bytes
        per_point = SCALAR_LIMBS * 4 + 4 * windows + 2 * (sum_bytes + 4) * windows // PARTIAL_CHUNK
        per_point += 0 if resident else buffers * point_bytes
        return windows * (1 << (c - 1)) * (12 + sum_bytes) + n * per_point

    def msm_plan(self, curve: Curve, group: str, n: int, resident: bool = False) -> int:
        """Points per chunk for an MSM of ``n`` points within the VRAM budget left.

        Asks the budget's evictors (idle resident keys) for room for the whole MSM first; then
        halves the chunk until its working set (scalars, sorted entries, bucket sums, partial
        sums, and two chunks of bases unless resident: one computing, one uploading) fits;
        raises VramExhaustedError when even ``min_msm_chunk`` points do not.
        """
        whole = self.msm_working_bytes(curve, group, n, resident)
        if whole <= self.vram.available_bytes or self.vram.make_room(whole):
            return n
        available = self.vram.available_bytes
        chunk = min(n, (1 << 31) // 32)
        while True:
            need = self.msm_working_bytes(curve, group, chunk, resident, buffers=1 if chunk == n else 2)
            if need <= available:
                return chunk
            if chunk <= min(n, self.min_msm_chunk):
                raise VramExhaustedError(
                    f"MSM of {n} {curve.name} {group.upper()} points: {available / 2**20:.2f} MiB of VRAM budget left, "
                    f"too little for even {chunk} points ({need / 2**20:.2f} MiB)"
                )
            chunk = max(min(n, self.min_msm_chunk), chunk // 2)

    def _msm(self, curve: Curve, group: str, bases, scalars) -> Point:
        n = _check_vector(scalars, SCALAR_LIMBS, "MSM scalars")
        resident = isinstance(bases, DeviceBases)
        if resident:
            if bases.curve is not curve or bases.group != group or bases.points is None:
                raise CudaInputError(f"resident bases are {bases.curve.name} {bases.group.upper()} (freed: {bases.points is None}), "
                                     f"not {curve.name} {group.upper()}")
            n_bases = bases.n
        else:
            n_bases = self._check_bases(curve, group, bases)
        if n_bases != n:
            raise CudaInputError(f"MSM has {n_bases} bases but {n} scalars")
        G = curve.G1 if group == "g1" else curve.G2
        if n == 0:
            return None
        mod = self.runtime.module(curve, f"msm_{group}")
        chunk = self.msm_plan(curve, group, n, resident)
        words = self._point_words(curve, group)
        chunks = [(start, min(n, start + chunk)) for start in range(0, n, chunk)]
        from_host = isinstance(bases, np.ndarray)
        buffers = 2 if from_host and len(chunks) > 1 and self.overlap else 1
        c_max = window_bits(chunk, curve.r.bit_length())

        total: Point = None
        with self.vram.reserve(self._msm_bytes(curve, group, chunk, c_max, resident, buffers), "MSM working set"):
            if from_host:  # a ring of chunk buffers: chunk i+1 uploads into one while chunk i computes from the other
                ring = [self.runtime.empty((chunk, words), np.uint32) for _ in range(buffers)]
                free_after = [self.runtime.compute_event()] * buffers  # when each slot's last reader is done

            def fetch(i: int) -> Upload:
                start, stop = chunks[i]
                if resident:
                    return Upload(self.runtime, bases.points[start:stop], None)
                if not from_host:
                    return Upload(self.runtime, self.xp.ascontiguousarray(bases[start:stop]).reshape(-1, words), None)
                slot = i % buffers
                return self.upload_async(bases[start:stop].reshape(-1, words), ring[slot][: stop - start], free_after[slot])

            pending = fetch(0)
            for i, (start, stop) in enumerate(chunks):
                points = pending.result()
                last = i + 1 == len(chunks)
                ahead = None if last or buffers == 1 else self._copy_thread().submit(fetch, i + 1)
                try:
                    c = window_bits(stop - start, curve.r.bit_length())
                    part = self._msm_chunk(curve, group, mod, points, scalars[start:stop], c, start)
                except BaseException:
                    if ahead is not None:  # let the copy finish and its staging buffer go back to the pool
                        ahead.result().result()
                    raise
                del points
                if from_host:
                    free_after[i % buffers] = self.runtime.compute_event()
                total = G.add(total, part)
                if not last:
                    pending = ahead.result() if ahead is not None else fetch(i + 1)
        return total

    def _copy_thread(self) -> ThreadPoolExecutor:
        """One thread that stages and starts the next chunk's upload while the proving thread drives kernels."""
        with self._lock:
            if self._copier is None:
                self._copier = ThreadPoolExecutor(1, thread_name_prefix=f"cuzk-copy-{self.vram.device}")
            return self._copier

    def _msm_chunk(self, curve: Curve, group: str, mod, points, scalars, c: int, offset: int) -> Point:
        xp, rt = self.xp, self.runtime
        n = int(scalars.shape[0])
        windows = -(-(curve.r.bit_length() + 1) // c)
        dev_scalars = self._device_view(scalars)[0]
        buckets = 1 << (c - 1)
        keys_total = windows * buckets
        sum_words = 2 * self._point_words(curve, group)

        self._phase("start")
        counts = xp.zeros(keys_total, dtype=np.uint32)
        first_bad = xp.full(1, 0xFFFFFFFF, dtype=np.uint32)
        grid = -(-n // THREADS)
        rt.launch(mod, "msm_count", grid, THREADS, (dev_scalars, np.uint64(n), np.uint32(c), np.uint32(windows), counts, first_bad))
        self._phase("count")
        offsets = xp.zeros(keys_total + 1, dtype=np.uint32)
        xp.cumsum(counts, dtype=np.uint32, out=offsets[1:])
        bad = int(first_bad[0])
        if bad != 0xFFFFFFFF:
            raise ScalarOutOfRangeError(offset + bad, curve)
        count = int(offsets[-1])
        if count == 0:
            self._marks.clear()
            return None
        cursor = offsets[:-1].copy()
        del counts
        entries = xp.empty(count, dtype=np.uint32)
        self._phase("scan")
        for window in range(windows):
            rt.launch(mod, "msm_scatter", grid, THREADS, (dev_scalars, np.uint64(n), np.uint32(c), np.uint32(window), cursor, entries))
        del cursor
        self._phase("scatter")

        sums = xp.zeros((keys_total, sum_words), dtype=np.uint32)
        chunk_len = max(8, min(32, 1 << max(0, (count >> 17).bit_length() - 1)))
        chunks = -(-count // chunk_len)
        partial_keys = xp.empty(2 * chunks, dtype=np.uint32)
        partial_sums = xp.empty((2 * chunks, sum_words), dtype=np.uint32)
        rt.launch(mod, "msm_accumulate_bases", self._grid(chunks), THREADS,
                  (offsets, np.uint32(keys_total), entries, points, np.uint64(count), np.uint32(chunk_len), sums, partial_keys, partial_sums))
        del entries, offsets
        self._phase("accumulate")
        while True:
            live = xp.flatnonzero(partial_keys != NO_KEY)
            remaining = int(live.shape[0])
            if remaining == 0:
                break
            keys, points_in = partial_keys[live], partial_sums[live]
            chunks = -(-remaining // PARTIAL_CHUNK)
            partial_keys = xp.empty(2 * chunks, dtype=np.uint32)
            partial_sums = xp.empty((2 * chunks, sum_words), dtype=np.uint32)
            rt.launch(mod, "msm_accumulate_partials", self._grid(chunks), THREADS,
                      (keys, points_in, np.uint64(remaining), np.uint32(PARTIAL_CHUNK), sums, partial_keys, partial_sums))
        del partial_keys, partial_sums
        self._phase("partials")

        log_b = c - 1
        log_g = min(log_b, max(3, (keys_total >> 16).bit_length() - 1))  # ≈ 2^16 threads, at least 8 buckets each
        per_window = 1 << (log_b - log_g)
        segments = xp.empty((windows * per_window, sum_words), dtype=np.uint32)
        rt.launch(mod, "msm_window_segments", self._grid(windows * per_window), THREADS,
                  (sums, np.uint32(windows), np.uint32(log_b), np.uint32(log_g), segments))
        del sums
        while per_window > 1:
            run = min(32, per_window)
            per_window //= run
            reduced = xp.empty((windows * per_window, sum_words), dtype=np.uint32)
            rt.launch(mod, "msm_sum_runs", self._grid(windows * per_window), THREADS,
                      (segments, np.uint64(windows * per_window), np.uint32(run), reduced))
            segments = reduced
        self._phase("windows")
        result = xp.empty((1, sum_words), dtype=np.uint32)
        rt.launch(mod, "msm_horner", 1, 32, (segments, np.uint32(windows), np.uint32(c), result))
        self._phase("horner")
        if self.phase_log is not None:
            self._flush_phases()
        return xyzz_to_affine(curve, group, rt.to_host(result)[0])


def xyzz_to_affine(curve: Curve, group: str, words: np.ndarray) -> Point:
    """The reference affine point of one XYZZ sum row (Montgomery limbs, as msm.cu writes it)."""
    from ...formats.limbs import limbs_to_ints

    Fq = curve.Fq
    coords = [Fq.from_mont(v) for v in limbs_to_ints(words.reshape(-1, Fq.limbs32))]
    if group == "g1":
        x, y, zz, zzz = coords
        F = Fq
    else:
        x, y, zz, zzz = (tuple(coords[i : i + 2]) for i in range(0, 8, 2))
        F = curve.Fq2
    if F.is_zero(zz):
        return None
    return (F.mul(x, F.inv(zz)), F.mul(y, F.inv(zzz)))


__all__ = ["CudaBackend", "CudaBackendError", "CudaInputError", "ScalarOutOfRangeError", "DeviceBases", "VramExhaustedError"]
