"""Multi-scalar multiplication on a CUDA device: Pippenger's buckets over msm.cu, in chunks that fit its VRAM.

An MSM sorts the scalars' window digits into buckets (count, scan, scatter), accumulates
each bucket's bases, then reduces buckets to window sums and windows to one point (Horner).
Bases are either resident (``upload_bases``, a key's ``upload_key``) or come from the host:
then an MSM whose working set does not fit the budget runs in chunks, uploading chunk i+1
into one of two device buffers (on its lane's copy thread and stream) while chunk i
computes from the other. Planning the chunks and reserving their working set are one step
(``plan``), so MSMs of several proofs on one device never both count the same free bytes.

Resident bases stay for hours, so their first MSM gives them a window table when the budget
has room: 2^(c·w)·P_i for every window w, affine. An MSM over it sorts every window's digits
into one set of 2^(c-1) buckets and reduces that set alone: no per-window reductions and no
Horner step, whose ~255 dependent doublings on one thread cost ~2 ms at any size. The table is
reserved apart from the bases (``table_bytes``, not in the key's own footprint) and is a cache:
the VRAM budget evicts it, while no MSM reads it, before it refuses a reservation.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from functools import cache

import numpy as np

from ...curves import Curve
from ...curves.ec import Point
from ...formats.zkey import KEY_BASES
from .device import THREADS, CudaDevice, CudaInputError, Upload, check_vector, grid
from .vram import DeviceBases, VramExhaustedError, VramReservation

SCALAR_LIMBS = 8
MIN_CHUNK_LEN = 8  # the fewest sorted entries one thread sums (each chunk leaves at most two partial sums)
MIN_MSM_CHUNK = 1 << 12


class ScalarOutOfRangeError(CudaInputError):
    def __init__(self, index: int, curve: Curve):
        super().__init__(f"MSM scalar {index} is not below the {curve.name} scalar field order r")
        self.index = index


@cache
def window_bits(n: int, scalar_bits: int) -> int:
    """Pippenger window c minimising windows·(n mixed adds + 2·2^(c-1) full adds ≈ 1.4 mixed each)."""
    best, best_cost = 4, math.inf
    for c in range(4, 23):
        windows = -(-(scalar_bits + 1) // c)
        cost = windows * (n + 2.8 * (1 << (c - 1)))
        if cost < best_cost:
            best, best_cost = c, cost
    return best


# What one dependent point operation of a window-table MSM's bucket reduction costs, in mixed
# additions of its accumulation. Fitted to the window sweep of GPU_NOTES v5 (fastest: c = 16 at
# 2^16, c = 20 at 2^20), not to a thread's latency (~18 µs, ≈ 50,000 additions of the whole GPU):
# the entries a smaller window adds cost more than the accumulation alone (sort, longer joins).
SERIAL_OP_COST = 2_000
MAX_TABLE_WINDOWS = 32  # msm.cu's thread-local arrays in msm_window_table
MAX_REDUCTION_THREADS = 256
REDUCTION_SMEM_BYTES = 48 * 1024
MAX_BIT_PIECES = 32  # blocks per bit in msm_bit_sums, joined by one thread each in msm_bits_horner


@cache
def table_window_bits(n: int, scalar_bits: int) -> int:
    """Window c for bases with a window table: windows·n mixed adds, one set of 2^(c-1) buckets (≈ 1.4 mixed
    adds per full one, two per bucket), and the reduction's dependent chain (``SERIAL_OP_COST`` each). The
    table's rows (windows·n) must stay below 2^31: an entry is a row index and a sign bit."""
    best, best_cost = 0, math.inf
    for c in range(8, 23):
        windows = -(-(scalar_bits + 1) // c)
        if windows > MAX_TABLE_WINDOWS or windows * n >= 1 << 31:
            continue
        cost = windows * n + 2.8 * (1 << (c - 1)) + SERIAL_OP_COST * reduction_plan(c - 1, MAX_REDUCTION_THREADS)[2]
        if cost < best_cost:
            best, best_cost = c, cost
    return best


@cache
def reduction_plan(log_buckets: int, threads: int) -> tuple[int, int, int]:
    """(log_g, pieces, depth) of a window-table MSM's bucket reduction over 2^log_buckets buckets: each thread of
    msm_bucket_segments sums 2^log_g buckets, msm_bit_sums gives each bit ``pieces`` blocks of ``threads`` (at
    most) — the split with the shortest chain of dependent point operations (``depth``) through them and
    msm_bits_horner."""
    best = None
    for log_g in range(log_buckets + 1):
        segments = 1 << (log_buckets - log_g)
        block = min(threads, max(1, segments // 2))
        for pieces in (1, 2, 4, 8, 16, MAX_BIT_PIECES):
            if pieces > 1 and pieces * block > segments // 2:
                break
            depth = ((2 << log_g) + -(-segments // (block * pieces)) + block.bit_length() - 1 + pieces
                     + 2 * (log_buckets - log_g) + log_g + 1)
            if best is None or depth < best[2]:
                best = (log_g, pieces, depth)
    return best


def point_words(curve: Curve, group: str) -> int:
    """uint32 words of one affine base (x, y) of the group."""
    return 2 * curve.Fq.limbs32 * (2 if group == "g2" else 1)


def check_bases(curve: Curve, group: str, bases) -> int:
    lq = curve.Fq.limbs32
    shape = (2, lq) if group == "g1" else (2, 2, lq)
    if getattr(bases, "dtype", None) != np.uint32 or tuple(bases.shape[1:]) != shape:
        raise CudaInputError(
            f"{group.upper()} bases: expected a uint32 array of shape (n, {', '.join(map(str, shape))}), "
            f"got {getattr(bases, 'dtype', type(bases).__name__)} {getattr(bases, 'shape', '')}"
        )
    return int(bases.shape[0])


@dataclasses.dataclass
class MsmPlan:
    """Points per chunk of one MSM and the reservation of its working set (``with`` releases it)."""

    chunk: int
    reservation: VramReservation

    def __enter__(self) -> MsmPlan:
        return self

    def __exit__(self, *exc) -> None:
        self.reservation.release()


class CudaMsm:
    """MSMs and resident bases on ``gpu``.

    ``min_chunk`` (the fewest points an MSM chunk may have) is a tuning knob tests lower to
    reach the many-chunk path at small sizes; ``overlap = False`` turns the prefetching of the
    next chunk off, ``window_tables = False`` keeps resident bases from getting window tables,
    ``table_window = c`` sets the window of the tables built from then on (benchmarks sweep it),
    and ``phase_log = []`` records each MSM phase's time in ms (benchmarks).
    """

    def __init__(self, gpu: CudaDevice, min_chunk: int = MIN_MSM_CHUNK):
        self.gpu = gpu
        self.runtime, self.xp, self.vram = gpu.runtime, gpu.xp, gpu.vram
        self.min_chunk = max(1, int(min_chunk))
        self.window_tables = True  # resident bases get a window table when the budget has room (False: never)
        self.table_window: int | None = None  # the window c of tables built from now on (None: table_window_bits)
        self.overlap = True
        self.phase_log: list[tuple[str, float]] | None = None
        self._local = threading.local()  # .marks: this thread's MSM phase marks (each lane times its own)
        self._tables_lock = threading.Lock()  # every DeviceBases' table, table_users, and _tabled
        self._tabled: list[DeviceBases] = []  # bases that were given a table (pruned as they lose it)
        self.vram.register_evictor(self)  # tables are a cache: the budget evicts idle ones before it refuses room

    def _marks(self) -> list[tuple[str, object]]:
        if not hasattr(self._local, "marks"):
            self._local.marks = []
        return self._local.marks

    def _phase(self, label: str) -> None:
        """Record the end of an MSM phase when phase_log is on (costs one event per phase)."""
        if self.phase_log is not None:
            if label == "start":
                self._marks().clear()
            self._marks().append((label, self.runtime.mark()))

    def _flush_phases(self) -> None:
        marks = self._marks()
        for (_, a), (label, b) in zip(marks, marks[1:]):
            self.phase_log.append((label, self.runtime.elapsed_ms(a, b)))
        marks.clear()

    # ---------------------------------------------------------------- resident bases
    def upload_bases(self, curve: Curve, group: str, bases) -> DeviceBases:
        """Keep ``bases`` resident in VRAM (raises VramExhaustedError when the budget cannot hold them)."""
        if group not in ("g1", "g2"):
            raise CudaInputError(f"group must be 'g1' or 'g2', got {group!r}")
        n = check_bases(curve, group, bases)
        words = point_words(curve, group)
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

    def upload_bases_from(self, curve: Curve, group: str, n: int, chunks) -> DeviceBases:
        """``n`` bases resident in VRAM, filled from staged chunks of their bytes in the file's layout (the device's
        own: ``upload_bases`` copies the same bytes); VramExhaustedError (nothing read) when the budget cannot hold
        them."""
        if group not in ("g1", "g2"):
            raise CudaInputError(f"group must be 'g1' or 'g2', got {group!r}")
        words = point_words(curve, group)
        reservation = self.vram.reserve(n * words * 4, f"{curve.name} {group.upper()} bases ({n} points)")
        try:
            points = self.runtime.empty((n, words), np.uint32)
            self.gpu.copy_chunks(points.reshape(-1), chunks)
        except BaseException:
            reservation.release()
            raise
        return DeviceBases(curve, group, points, reservation)

    def upload_key(self, zkey):
        """A copy of ``zkey`` whose MSM bases (A, B1, B2, C, H) are resident in VRAM.

        The prover takes it in place of the host key, so repeated proofs of one circuit
        upload only their witness. All or nothing: on VramExhaustedError nothing stays
        reserved. It returns once the copies are done, so proofs on other lanes (streams)
        may read the bases at once. Give the memory back with ``free_key``.
        """
        uploaded: dict[str, DeviceBases] = {}
        try:
            for name, group in KEY_BASES:
                uploaded[name] = self.upload_bases(zkey.curve, group, getattr(zkey, name))
            self.runtime.synchronize_stream()
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

    # ---------------------------------------------------------------- sizing
    def working_bytes(self, curve: Curve, group: str, n: int, resident: bool = False, buffers: int = 1) -> int:
        """Upper bound of an n-point MSM's device working set (window chosen for n, with or without a window
        table); ``buffers`` chunks of bases in flight when they are not resident (2 while the next chunk's upload
        overlaps this one). A window table itself is the resident bases' (``table_bytes``), not the MSM's."""
        bits = curve.r.bit_length()
        point_bytes = point_words(curve, group) * 4
        sum_bytes = 2 * point_bytes

        def layout(c: int, table: bool) -> int:
            windows = -(-(bits + 1) // c)
            per_point = SCALAR_LIMBS * 4 + 4 * windows + 2 * (sum_bytes + 4) * windows // MIN_CHUNK_LEN
            per_point += 0 if resident else buffers * point_bytes
            if table:  # one set of buckets, and the reduction's segment sums (at most two per bucket)
                return (1 << (c - 1)) * (12 + 3 * sum_bytes) + n * per_point
            return windows * (1 << (c - 1)) * (12 + sum_bytes) + n * per_point

        need = layout(window_bits(n, bits), False)
        if resident and table_window_bits(n, bits):
            need = max(need, layout(table_window_bits(n, bits), True))
        return need

    def table_bytes(self, curve: Curve, group: str, n: int) -> int:
        """VRAM of the window table that n resident bases get on their first MSM (when the budget has room then):
        2^(c·w)·P_i for each of its windows, affine like the bases. Its own reservation, held with the bases."""
        c = table_window_bits(n, curve.r.bit_length())
        return 0 if not c else -(-(curve.r.bit_length() + 1) // c) * n * point_words(curve, group) * 4

    def plan(self, curve: Curve, group: str, n: int, resident: bool = False) -> MsmPlan:
        """Points per chunk for an MSM of ``n`` points, and their working set reserved in the VRAM budget.

        Reserves the whole MSM's working set if it fits, idle resident keys evicted for it;
        else halves the chunk until its working set (scalars, sorted entries, bucket sums,
        partial sums, and two chunks of bases unless resident: one computing, one uploading)
        fits in what is free, evicting nothing. When even ``min_chunk`` points do not fit, it
        waits for another MSM on the device (another lane's) to give its working set back and
        plans again; VramExhaustedError when no other MSM holds any. Each try reserves or fails
        under the budget's lock, so concurrent MSMs never plan with the same free bytes.
        """
        what = f"MSM working set ({n} {curve.name} {group.upper()} points)"
        while True:
            releases = self.vram.releases
            plan = self._try_plan(curve, group, n, resident, what)
            if plan is not None:
                return plan
            if not self.vram.wait_for_release(since=releases):
                smallest = min(n, self.min_chunk)
                need = self.working_bytes(curve, group, smallest, resident, buffers=1 if smallest == n else 2)
                raise VramExhaustedError(
                    f"MSM of {n} {curve.name} {group.upper()} points: {self.vram.available_bytes / 2**20:.2f} MiB of VRAM "
                    f"budget left, too little for even {smallest} points ({need / 2**20:.2f} MiB)"
                )

    def _try_plan(self, curve: Curve, group: str, n: int, resident: bool, what: str) -> MsmPlan | None:
        whole = self.vram.try_reserve(self.working_bytes(curve, group, n, resident), what, transient=True)
        if whole is not None:
            return MsmPlan(n, whole)
        chunk = min(n, (1 << 31) // 32)
        while True:
            need = self.working_bytes(curve, group, chunk, resident, buffers=1 if chunk == n else 2)
            reservation = self.vram.try_reserve(need, what, evict=False, transient=True)
            if reservation is not None:
                return MsmPlan(chunk, reservation)
            if chunk <= min(n, self.min_chunk):
                return None
            chunk = max(min(n, self.min_chunk), chunk // 2)

    # ---------------------------------------------------------------- window tables
    def _acquire_table(self, bases: DeviceBases):
        """(table, c) of resident ``bases``, built on their first MSM, held (not evictable) until ``_release_table``;
        None when ``window_tables`` is off or the VRAM budget has no room for it beside this MSM's working set (then
        it is tried again next time).

        It is reserved apart from the bases (``table_bytes``), never evicting anything for it, given back with them,
        and evicted by the budget (``evict_idle``) when no MSM reads it and a reservation needs the room. Built on
        the calling lane's stream and waited for, so other lanes may read it at once.
        """
        if not self.window_tables:
            return None
        with self._tables_lock:
            if bases.table is None and not self._build_table(bases):
                return None
            bases.table_users += 1
            return bases.table, bases.table_bits

    def _release_table(self, bases: DeviceBases) -> None:
        with self._tables_lock:
            bases.table_users -= 1

    def _build_table(self, bases: DeviceBases) -> bool:
        if bases.points is None:
            return False
        curve, group, n = bases.curve, bases.group, bases.n
        c = self.table_window or table_window_bits(n, curve.r.bit_length())
        windows = -(-(curve.r.bit_length() + 1) // c) if c else 0
        nbytes = windows * n * point_words(curve, group) * 4
        if not c or nbytes + self.working_bytes(curve, group, n, resident=True) > self.vram.available_bytes:
            return False
        reservation = self.vram.try_reserve(nbytes, f"{curve.name} {group.upper()} window table ({n} points)", evict=False)
        if reservation is None:
            return False
        try:
            table = self.runtime.empty((windows * n, point_words(curve, group)), np.uint32)
            self.runtime.launch(self.runtime.module(curve, f"msm_{group}"), "msm_window_table", grid(n), THREADS,
                                (bases.points, np.uint64(n), np.uint32(c), np.uint32(windows), table))
            self.runtime.synchronize_stream()
        except BaseException:
            reservation.release()
            raise
        bases.table, bases.table_bits, bases.table_reservation = table, c, reservation
        self._tabled.append(bases)
        return True

    def idle_bytes(self) -> int:
        """Bytes of window tables no MSM reads now (the VRAM budget's evictor protocol)."""
        with self._tables_lock:
            return sum(b.table_reservation.nbytes for b in self._tabled if b.table_reservation is not None and not b.table_users)

    def evict_idle(self, nbytes: int) -> int:
        """Free idle window tables, oldest first, until ``nbytes`` are given back; the bytes freed."""
        freed = 0
        with self._tables_lock:
            for bases in list(self._tabled):
                if bases.table is None:
                    self._tabled.remove(bases)
                elif freed < nbytes and not bases.table_users:
                    freed += bases.drop_table()
                    self._tabled.remove(bases)
        return freed

    # ---------------------------------------------------------------- the MSM
    def msm(self, curve: Curve, group: str, bases, scalars) -> Point:
        """Σ scalars[i]·bases[i] of the group ("g1" or "g2"), from resident, host or device bases."""
        n = check_vector(scalars, SCALAR_LIMBS, "MSM scalars")
        resident = isinstance(bases, DeviceBases)
        if resident:
            if bases.curve is not curve or bases.group != group or bases.points is None:
                raise CudaInputError(f"resident bases are {bases.curve.name} {bases.group.upper()} (freed: {bases.points is None}), "
                                     f"not {curve.name} {group.upper()}")
            n_bases = bases.n
        else:
            n_bases = check_bases(curve, group, bases)
        if n_bases != n:
            raise CudaInputError(f"MSM has {n_bases} bases but {n} scalars")
        if n == 0:
            return None
        table = self._acquire_table(bases) if resident else None
        try:
            return self._msm(curve, group, bases, scalars, n, table)
        finally:
            if table is not None:
                self._release_table(bases)

    def _msm(self, curve: Curve, group: str, bases, scalars, n: int, table) -> Point:
        """The MSM in chunks of its plan, over the window ``table`` (table, c) of resident bases when it has one."""
        G = curve.G1 if group == "g1" else curve.G2
        mod = self.runtime.module(curve, f"msm_{group}")
        words = point_words(curve, group)
        resident = isinstance(bases, DeviceBases)
        from_host = isinstance(bases, np.ndarray)
        lane = self.gpu.lane()  # the copy thread uploads for this proof's lane

        total: Point = None
        with self.plan(curve, group, n, resident) as plan:  # the reservation covers two chunk buffers when chunked
            chunk = plan.chunk
            chunks = [(start, min(n, start + chunk)) for start in range(0, n, chunk)]
            buffers = 2 if from_host and len(chunks) > 1 and self.overlap else 1
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
                return self.gpu.upload_async(bases[start:stop].reshape(-1, words), ring[slot][: stop - start], free_after[slot], lane)

            pending = fetch(0)
            for i, (start, stop) in enumerate(chunks):
                points = pending.result()
                last = i + 1 == len(chunks)
                ahead = None if last or buffers == 1 else lane.copier().submit(fetch, i + 1)
                try:
                    if table is not None:
                        part = self._msm_chunk(curve, group, mod, table[0], scalars[start:stop], table[1], start, table_stride=n)
                    else:
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

    def _msm_chunk(self, curve: Curve, group: str, mod, points, scalars, c: int, offset: int, table_stride: int = 0) -> Point:
        """The MSM of the chunk of points from ``offset``. ``table_stride`` > 0: ``points`` is a window table of
        that many points per window (2^(c·w)·P_i in row w·table_stride + i), and every window shares one set of
        buckets; else ``points`` are the chunk's bases and each window has its own buckets, joined by Horner."""
        xp, rt = self.xp, self.runtime
        n = int(scalars.shape[0])
        windows = -(-(curve.r.bit_length() + 1) // c)
        dev_scalars = self.gpu.device_view(scalars)[0]
        buckets = 1 << (c - 1)
        keys_total = buckets if table_stride else windows * buckets
        sum_words = 2 * point_words(curve, group)

        self._phase("start")
        counts = xp.zeros(keys_total, dtype=np.uint32)
        first_bad = xp.full(1, 0xFFFFFFFF, dtype=np.uint32)
        blocks = -(-n // THREADS)
        rt.launch(mod, "msm_count", blocks, THREADS, (dev_scalars, np.uint64(n), np.uint32(c), np.uint32(windows),
                                                      np.uint32(0 if table_stride else 0xFFFFFFFF), counts, first_bad))
        self._phase("count")
        offsets = xp.zeros(keys_total + 1, dtype=np.uint32)
        xp.cumsum(counts, dtype=np.uint32, out=offsets[1:])
        # The MSM's one wait for the device: the first bad scalar, the entries, the largest bucket.
        bad, count, largest = (int(v) for v in rt.to_host(xp.concatenate((first_bad, offsets[-1:], counts.max(keepdims=True)))))
        if bad != 0xFFFFFFFF:
            raise ScalarOutOfRangeError(offset + bad, curve)
        if count == 0:
            self._marks().clear()
            return None
        cursor = offsets[:-1].copy()
        del counts
        entries = xp.empty(count, dtype=np.uint32)
        self._phase("scan")
        if table_stride:  # one launch per stretch of ≤ 2^24 entries (64 MiB, about what L2 holds) of the sorted order
            passes = max(1, count >> 24)
            for p in range(passes):
                rt.launch(mod, "msm_scatter_table", blocks, THREADS,
                          (dev_scalars, np.uint64(n), np.uint32(c), np.uint32(windows), np.uint64(table_stride), np.uint64(offset),
                           np.uint32(p * keys_total // passes), np.uint32((p + 1) * keys_total // passes), cursor, entries))
        else:
            for window in range(windows):
                rt.launch(mod, "msm_scatter", blocks, THREADS, (dev_scalars, np.uint64(n), np.uint32(c), np.uint32(window), cursor, entries))
        del cursor
        self._phase("scatter")

        sums = xp.zeros((keys_total, sum_words), dtype=np.uint32)
        chunk_len = max(MIN_CHUNK_LEN, min(32, 1 << max(0, (count >> 17).bit_length() - 1)))
        chunks = -(-count // chunk_len)
        partial_keys = xp.empty(2 * chunks, dtype=np.uint32)
        partial_sums = xp.empty((2 * chunks, sum_words), dtype=np.uint32)
        rt.launch(mod, "msm_accumulate_bases", grid(chunks), THREADS,
                  (offsets, np.uint32(keys_total), entries, points, np.uint64(count), np.uint32(chunk_len), sums, partial_keys, partial_sums))
        del entries
        self._phase("accumulate")
        span = (largest + 2 * chunk_len - 2) // chunk_len  # the most chunks one bucket touches
        steps = max(1, (span - 1).bit_length())  # a pairwise tree
        for step in range(steps):
            rt.launch(mod, "msm_join_pieces", grid(chunks), THREADS, (offsets, np.uint32(chunk_len), np.uint64(chunks), np.uint32(1 << step),
                                                                       np.uint32(step + 1 == steps), partial_keys, partial_sums, sums))
        del partial_keys, partial_sums, offsets
        self._phase("partials")

        if table_stride:
            result = self._reduce_buckets(mod, sums, c - 1, sum_words)
        else:
            result = self._reduce_windows(mod, sums, windows, c, sum_words)
        self._phase("horner")
        if self.phase_log is not None:
            self._flush_phases()
        return xyzz_to_affine(curve, group, rt.to_host(result)[0])

    def _reduce_windows(self, mod, sums, windows: int, c: int, sum_words: int):
        """Σ_w 2^(c·w)·Σ_b (b + 1)·sums[w·2^(c-1) + b], as one XYZZ row: each window's sum, then Horner."""
        xp, rt = self.xp, self.runtime
        keys_total = windows << (c - 1)
        log_b = c - 1
        log_g = min(log_b, max(3, (keys_total >> 16).bit_length() - 1))  # ≈ 2^16 threads, at least 8 buckets each
        per_window = 1 << (log_b - log_g)
        segments = xp.empty((windows * per_window, sum_words), dtype=np.uint32)
        rt.launch(mod, "msm_window_segments", grid(windows * per_window), THREADS,
                  (sums, np.uint32(windows), np.uint32(log_b), np.uint32(log_g), segments))
        del sums
        while per_window > 1:
            run = min(32, per_window)
            per_window //= run
            reduced = xp.empty((windows * per_window, sum_words), dtype=np.uint32)
            rt.launch(mod, "msm_sum_runs", grid(windows * per_window), THREADS,
                      (segments, np.uint64(windows * per_window), np.uint32(run), reduced))
            segments = reduced
        self._phase("windows")
        result = xp.empty((1, sum_words), dtype=np.uint32)
        rt.launch(mod, "msm_horner", 1, 32, (segments, np.uint32(windows), np.uint32(c), result))
        return result

    def _reduce_buckets(self, mod, sums, log_b: int, sum_words: int):
        """Σ_b (b + 1)·sums[b] over the 2^log_b buckets of a window-table MSM, as one XYZZ row."""
        xp, rt = self.xp, self.runtime
        sum_bytes = 4 * sum_words
        threads = 1 << (min(MAX_REDUCTION_THREADS, REDUCTION_SMEM_BYTES // sum_bytes).bit_length() - 1)
        log_g, pieces, _ = reduction_plan(log_b, threads)
        segments = 1 << (log_b - log_g)
        block = min(threads, max(1, segments // 2))
        parts = xp.empty((2 * segments, sum_words), dtype=np.uint32)
        rt.launch(mod, "msm_bucket_segments", grid(segments), THREADS, (sums, np.uint32(segments), np.uint32(log_g), parts))
        bits = log_b - log_g
        bit_sums = xp.empty(((bits + 1) * pieces, sum_words), dtype=np.uint32)
        rt.launch(mod, "msm_bit_sums", (bits + 1) * pieces, block, (parts, np.uint32(segments), np.uint32(bits), np.uint32(pieces), bit_sums),
                  shared_bytes=block * sum_bytes)
        self._phase("windows")
        result = xp.empty((1, sum_words), dtype=np.uint32)
        rt.launch(mod, "msm_bits_horner", 1, 32, (bit_sums, np.uint32(bits), np.uint32(pieces), np.uint32(log_g), result),
                  shared_bytes=32 * sum_bytes)
        return result


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
