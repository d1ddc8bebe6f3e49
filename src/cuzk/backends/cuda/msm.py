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

An MSM never waits for the device before its result: what the scalars decide (entries, the largest
bucket) stays on the device and the host sizes the launches from bounds (``SortShape``). So a small
MSM over a window table is captured once as a CUDA graph and replayed (``MsmGraph``), one launch
where launch latency, not work, was its time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from collections.abc import Callable
from functools import cache

import numpy as np

from ...curves import Curve
from ...curves.ec import Point
from ...formats.zkey import KEY_BASES
from ..base import msm_each
from .device import THREADS, CudaDevice, CudaInputError, Upload, check_vector, grid
from .vram import DeviceBases, VramExhaustedError, VramReservation

SCALAR_LIMBS = 8
MIN_CHUNK_LEN = 8  # the fewest sorted entries one thread sums (each chunk leaves at most two partial sums)
# From 2^20 entries a thread sums at least 32 sorted entries, and more where that keeps the chunks at most
# 2^MAX_CHUNKS_LOG: each chunk's two partial sums are written, read back and added by the joins, while 2^20 threads
# are still ~25 times what the device holds at once. BLS12-381 G1 at 2^24 points, 256 entries a thread instead of 32:
# joins 9.0 -> 1.9 ms, accumulation 84.8 -> 88.7 ms (GPU_NOTES v9).
MAX_CHUNKS_LOG = 20
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
# What one dependent step of the bucket reduction costs, in additions of its bit sums (msm_bit_sums adds about
# bits·segments/2 points over the whole GPU): fitted to the log_g sweeps of GPU_NOTES v7 (fastest: 4 buckets per
# segment at 2^16 points, 8-16 at 2^20, 32 at 2^24, where the shortest chain alone took 1, 4 and 8).
REDUCTION_STEP_ADDS = 20_000
MAX_TABLE_WINDOWS = 32  # msm.cu's thread-local arrays in msm_window_table
MAX_REDUCTION_THREADS = 256
REDUCTION_SMEM_BYTES = 48 * 1024
MAX_BIT_PIECES = 32  # blocks per bit in msm_bit_sums, joined by a pairwise tree in msm_bits_combine
MAX_SEGMENTS = 1 << 18  # segment sums of a window-table MSM's bucket reduction (two rows each: 64 MiB for BN254 G1)
# A table the budget evicted is built again only after this many MSMs over its bases without it, doubled at each
# further eviction: under steady VRAM pressure a rebuild (seconds at 2^24) would be evicted again by the next proof.
TABLE_REBUILD_BACKOFF = 16
SCAN_THREADS = 1024  # a block of msm_scan_counts
SCAN_TILE = 1 << 12  # bucket counts scanned by one block of msm_scan_counts (more tiles: a second level)
SCATTER_STRETCH_LOG = 24  # sorted entries placed by one msm_scatter_table launch
# Window-table MSMs up to this many points replay a captured graph (MsmGraph): at these sizes launch latency, not
# work, is their time. Raised to 2^22 (to save the proving threads' launch time under the GIL at 2^20), the daemon
# proved slower in the same call (2^20, worker process: 25.4 against 29.5 proofs/s, GPU busy 58 against 67 %,
# VRAM peak 13.2 against 10.8 GiB; GPU_NOTES session 8), so above 2^18 the MSM launches its kernels itself.
GRAPH_MAX_POINTS = 1 << 18
# Buckets cut into at most this many chunks are summed by one thread each (msm_join_buckets), wider ones by the pairwise
# tree (the tree's steps leave most lanes idle: 14.0 -> 8.4 ms at 2^24, 1.52 -> 1.41 ms at 2^16; GPU_NOTES v7).
SEQ_JOIN_SPAN = 16
# Blocks per multiprocessor of each msm_join_pieces launch (its threads stride over the chunks): one thread per chunk
# scheduled 24,576 blocks per step at 2^24 (32 entries a chunk) that, with dense scalars, all return at once: 23 such
# steps took ~4.3 ms of BLS12-381 G1's joins, whose launch of 130 registers fits one block per SM (GPU_NOTES v9).
JOIN_TREE_BLOCKS_PER_SM = 4


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
def reduction_plan(log_buckets: int, threads: int, log_g: int | None = None) -> tuple[int, int, int]:
    """(log_g, pieces, depth) of a window-table MSM's bucket reduction over 2^log_buckets buckets: each thread of
    msm_bucket_segments sums 2^log_g buckets (at most ``MAX_SEGMENTS`` segments: their sums are two rows each),
    msm_bit_sums gives each bit ``pieces`` blocks of ``threads`` (at most) — the split with the least cost of its
    chain of dependent point operations (``depth``) through them and msm_bits_combine (pieces and bits joined by
    pairwise trees, bit b doubled b + log_g times: log_buckets - 1 doublings on the longest path whatever the split)
    and of the bit sums' additions (``REDUCTION_STEP_ADDS`` per step of the chain; more segments, more of them).
    ``log_g`` given: the best split with that many buckets per segment (benchmarks sweep it)."""
    best = None
    first = max(0, log_buckets - MAX_SEGMENTS.bit_length() + 1)
    for log_g in range(first, log_buckets + 1) if log_g is None else (max(first, log_g),):
        segments = 1 << (log_buckets - log_g)
        block = min(threads, max(1, segments // 2))
        bits = log_buckets - log_g
        for pieces in (1, 2, 4, 8, 16, MAX_BIT_PIECES):
            if pieces > 1 and pieces * block > segments // 2:
                break
            depth = ((2 << log_g) + -(-segments // (block * pieces)) + block.bit_length() - 1 + pieces.bit_length() - 1
                     + max(0, log_buckets - 1) + bits.bit_length())
            cost = depth * REDUCTION_STEP_ADDS + (bits + 2) * segments // 2
            if best is None or cost < best[0]:
                best = (cost, (log_g, pieces, depth))
    return best[1]


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


@dataclasses.dataclass(frozen=True)
class SortShape:
    """Everything about one MSM chunk's launches that the host decides: sizes from n and c and from bounds of what
    the scalars decide on the device (at most ``windows`` entries per point, a bucket of at most all of them), so
    that the MSM never waits for the device before its result and a captured graph replays it for any scalars."""

    n: int
    c: int
    windows: int
    table: bool  # one set of 2^(c-1) buckets for every window (window tables), else one set per window
    sum_words: int  # uint32 words of one XYZZ bucket sum
    keys: int  # buckets
    entries: int  # bound of the sorted entries
    chunk_len: int  # sorted entries summed by one thread
    chunks: int
    join_steps: int  # bound of the pairwise join's steps (msm_join_pieces skips those past the largest bucket's)
    seq_span: int  # cut buckets of at most this many chunks are summed by one thread each (msm_join_buckets)
    segments_log: int  # windows: log2 of the segments per window (msm_window_segments)
    reduction: tuple[int, int, int]  # table: (log_g, pieces, block) of the bucket reduction
    level_rows: tuple[int, ...]  # rows of each reduction level's buffer

    @property
    def scan_tiles(self) -> int:
        return -(-self.keys // SCAN_TILE)

    @property
    def scatter_passes(self) -> int:
        return max(1, -(-self.entries >> SCATTER_STRETCH_LOG))

    @classmethod
    @cache
    def of(cls, n: int, c: int, scalar_bits: int, sum_words: int, table: bool, chunk_len: int = 0, seq_span: int = 0) -> SortShape:
        """The shape for n points and window c; ``chunk_len`` (at least MIN_CHUNK_LEN) overrides the entries per
        thread, which otherwise are MIN_CHUNK_LEN below 2^20 entries, from there 32 or more (``MAX_CHUNKS_LOG``);
        ``seq_span`` (at least 1: the tree joins every cut bucket) overrides the rule of ``SEQ_JOIN_SPAN``."""
        windows = -(-(scalar_bits + 1) // c)
        log_b = c - 1
        keys = (1 << log_b) * (1 if table else windows)
        entries = n * windows
        if not chunk_len:
            chunk_len = max(32, 1 << max(0, (entries - 1).bit_length() - MAX_CHUNKS_LOG)) if entries >= 1 << 20 else MIN_CHUNK_LEN
        chunk_len = max(MIN_CHUNK_LEN, chunk_len)
        chunks = -(-entries // chunk_len)
        span = (entries + 2 * chunk_len - 2) // chunk_len  # the most chunks one bucket can touch
        join_steps = max(1, (span - 1).bit_length())
        seq_span = seq_span or SEQ_JOIN_SPAN
        if table:
            threads = 1 << (min(MAX_REDUCTION_THREADS, REDUCTION_SMEM_BYTES // (4 * sum_words)).bit_length() - 1)
            log_g, pieces, _ = reduction_plan(log_b, threads)
            segments = 1 << (log_b - log_g)
            reduction = (log_g, pieces, min(threads, max(1, segments // 2)))
            segments_log, levels = 0, (2 * segments, (log_b - log_g + 1) * pieces)
        else:
            log_g = min(log_b, max(3, (keys >> 16).bit_length() - 1))  # ≈ 2^16 threads, at least 8 buckets each
            segments_log, reduction = log_b - log_g, (0, 0, 0)
            per_window, rows = 1 << segments_log, [windows << segments_log]
            while per_window > 1:
                per_window //= min(32, per_window)
                rows.append(windows * per_window)
            levels = tuple(rows)
        return cls(n, c, windows, table, sum_words, keys, entries, chunk_len, chunks, join_steps, seq_span, segments_log, reduction, levels)

    @property
    def work_bytes(self) -> int:
        """Device bytes of its ``MsmWork``."""
        sum_bytes = 4 * self.sum_words
        return (4 * (3 * self.keys + 1) + 4 * (2 * self.scan_tiles + 3) + 4 * (self.scatter_passes + 1) + self.keys * sum_bytes + 4 * self.entries
                + 2 * self.chunks * (4 + sum_bytes) + sum(self.level_rows) * sum_bytes + sum_bytes + 8)


@dataclasses.dataclass
class MsmWork:
    """The device buffers of one MSM chunk (``SortShape``), all allocated before its first launch."""

    counts: object
    offsets: object
    cursor: object
    scan: object  # a scan by tiles' scratch: the tiles' totals, their exclusive scan, two words for its own total and max
    pass_keys: object  # the first key of each window-table scatter pass (msm_pass_keys)
    entries: object
    sums: object
    partial_keys: object
    partial_sums: object
    levels: list
    out: object  # the result's XYZZ row, then the first bad scalar's index, then the largest bucket's entries

    @staticmethod
    def layout(shape: SortShape) -> list:
        """The shapes of its buffers before ``out``, in order (levels last: one per reduction level)."""
        w = shape.sum_words
        return [shape.keys, shape.keys + 1, shape.keys, 2 * shape.scan_tiles + 3, shape.scatter_passes + 1, max(1, shape.entries),
                (shape.keys, w), 2 * shape.chunks, (2 * shape.chunks, w)] + [(rows, w) for rows in shape.level_rows]

    @classmethod
    def allocate(cls, rt, shape: SortShape, arena: MsmArena | None = None, out=None) -> MsmWork:
        """Its buffers from the device's pool, or carved from ``arena`` (``out``, its result row, then given apart)."""
        empty = arena.take if arena is not None else (lambda s: rt.empty(s, np.uint32))
        buffers = [empty(s) for s in cls.layout(shape)]
        return cls(*buffers[:9], buffers[9:], out if out is not None else rt.empty(shape.sum_words + 2, np.uint32))

    @property
    def first_bad(self):
        return self.out[self.sums.shape[1]:][:1]

    @property
    def largest(self):
        return self.out[self.sums.shape[1] + 1:]


class MsmArena:
    """One device buffer that several MSMs queued one after another on a stream carve their ``MsmWork`` from: each
    MSM's kernels run after the previous one's in stream order, so they reuse the same bytes (one working set for the
    proof's MSMs instead of one each, ``CudaMsm.msm_many``)."""

    ALIGN_WORDS = 64  # 256 bytes: kernels load 16-byte vectors; CuPy's own allocations are 512-byte aligned

    def __init__(self, buffer):
        self.buffer, self.at = buffer, 0

    @classmethod
    def words(cls, shape: SortShape) -> int:
        """uint32 words an arena needs for one ``MsmWork`` of ``shape`` (its ``out`` apart)."""
        return sum(cls.aligned(int(np.prod(s))) for s in MsmWork.layout(shape))

    @classmethod
    def aligned(cls, words: int) -> int:
        return -(-words // cls.ALIGN_WORDS) * cls.ALIGN_WORDS

    def take(self, shape):
        words = int(np.prod(shape))
        start, self.at = self.at, self.at + self.aligned(words)
        return self.buffer[start : start + words].reshape(shape)

    def reset(self) -> None:
        self.at = 0


@dataclasses.dataclass
class MsmGraph:
    """A window-table MSM of one shape captured once and replayed (``runtime.capture``): one launch instead of ~30,
    for the small MSMs whose time is launch latency. It owns its buffers (scalars are copied into ``scalars``) and
    their reservation; an idle one waits in its bases' ``graphs`` and is a cache like the table it reads."""

    table: object  # the window table it reads
    shape: SortShape
    work: MsmWork
    scalars: object
    graph: object
    reservation: VramReservation

    @property
    def nbytes(self) -> int:
        return self.reservation.nbytes

    def free(self) -> int:
        self.work = self.scalars = self.graph = self.table = None
        self.reservation.release()
        return self.reservation.nbytes


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
    ``table_window = c`` sets the window of the tables built from then on, ``chunk_len`` and ``join_span`` the
    entries per accumulating thread and the widest cut bucket one thread joins, ``accumulate_threads`` the block
    of msm_accumulate_bases (benchmarks sweep these),
    and ``phase_log = []`` records each MSM phase's time in ms (benchmarks).
    """

    def __init__(self, gpu: CudaDevice, min_chunk: int = MIN_MSM_CHUNK):
        self.gpu = gpu
        self.runtime, self.xp, self.vram = gpu.runtime, gpu.xp, gpu.vram
        self.min_chunk = max(1, int(min_chunk))
        self.window_tables = True  # resident bases get a window table when the budget has room (False: never)
        self.table_window: int | None = None  # the window c of tables built from now on (None: table_window_bits)
        self.table_backoff = TABLE_REBUILD_BACKOFF  # MSMs without a table after its first eviction (tests lower it)
        self.chunk_len = 0  # sorted entries per accumulating thread (0: SortShape's rule; benchmarks sweep it)
        self.join_span = 0  # widest cut bucket summed by one thread (0: SortShape's rule; 1: the tree joins all)
        # Threads per block of msm_accumulate_bases. Above 128 registers a thread (BLS12-381 G1's 172 with its products
        # inline) a block of 256 leaves one block, 8 warps, per SM where smaller blocks fit more (GPU_NOTES v8).
        self.accumulate_threads = THREADS
        self.graphs = True  # small window-table MSMs replay captured graphs (False: they launch their kernels each time)
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
    def working_bytes(self, curve: Curve, group: str, n: int, resident: bool = False, buffers: int = 1, table_bits: int = 0) -> int:
        """Upper bound of an n-point MSM's device working set (window chosen for n, with or without a window
        table; over a table of window ``table_bits`` when given, as a chunk of a larger table's MSM is); ``buffers``
        chunks of bases in flight when they are not resident (2 while the next chunk's upload overlaps this one).
        A window table itself is the resident bases' (``table_bytes``), not the MSM's."""
        bits = curve.r.bit_length()
        per_point = SCALAR_LIMBS * 4 + (0 if resident else buffers * point_words(curve, group) * 4)

        def layout(c: int, table: bool) -> int:
            return self._shape(curve, group, n, c, table).work_bytes + n * per_point

        if table_bits:
            return layout(table_bits, True)
        need = layout(window_bits(n, bits), False)
        if resident and table_window_bits(n, bits):
            need = max(need, layout(table_window_bits(n, bits), True))
        return need

    def table_bytes(self, curve: Curve, group: str, n: int) -> int:
        """VRAM of the window table that n resident bases get on their first MSM (when the budget has room then):
        2^(c·w)·P_i for each of its windows, affine like the bases. Its own reservation, held with the bases."""
        c = table_window_bits(n, curve.r.bit_length())
        return 0 if not c else -(-(curve.r.bit_length() + 1) // c) * n * point_words(curve, group) * 4

    def plan(self, curve: Curve, group: str, n: int, resident: bool = False, table_bits: int = 0) -> MsmPlan:
        """Points per chunk for an MSM of ``n`` points, and their working set reserved in the VRAM budget.

        ``table_bits``: the MSM runs over a window table of that window (its chunks too). Reserves the whole MSM's
        working set if it fits, idle resident keys evicted for it;
        else halves the chunk until its working set (scalars, sorted entries, bucket sums,
        partial sums, and two chunks of bases unless resident: one computing, one uploading)
        fits in what is free, evicting no resident key: when not even ``min_chunk`` points fit, idle
        graphs and window tables (this module's caches) give way first. When they still do not fit, it
        waits for another MSM on the device (another lane's) to give its working set back and
        plans again; VramExhaustedError when no other MSM holds any. Each try reserves or fails
        under the budget's lock, so concurrent MSMs never plan with the same free bytes.
        """
        what = f"MSM working set ({n} {curve.name} {group.upper()} points)"
        while True:
            releases = self.vram.releases
            plan = self._try_plan(curve, group, n, resident, what, table_bits)
            if plan is not None:
                return plan
            if not self.vram.wait_for_release(since=releases):
                smallest = min(n, self.min_chunk)
                need = self.working_bytes(curve, group, smallest, resident, 1 if smallest == n else 2, table_bits)
                raise VramExhaustedError(
                    f"MSM of {n} {curve.name} {group.upper()} points: {self.vram.available_bytes / 2**20:.2f} MiB of VRAM "
                    f"budget left, too little for even {smallest} points ({need / 2**20:.2f} MiB)"
                )

    def _try_plan(self, curve: Curve, group: str, n: int, resident: bool, what: str, table_bits: int) -> MsmPlan | None:
        whole = self.vram.try_reserve(self.working_bytes(curve, group, n, resident, table_bits=table_bits), what, transient=True)
        if whole is not None:
            return MsmPlan(n, whole)
        plan = self._largest_chunk(curve, group, n, resident, what, table_bits)
        if plan is None:
            # Not even the smallest chunk fits beside this module's idle caches (graphs, other bases' window tables,
            # perhaps built in room that was spare then): they give way, resident keys keep theirs.
            smallest = min(n, self.min_chunk)
            need = self.working_bytes(curve, group, smallest, resident, 1 if smallest == n else 2, table_bits)
            if self.evict_idle(need - self.vram.available_bytes):
                plan = self._largest_chunk(curve, group, n, resident, what, table_bits)
        return plan

    def _largest_chunk(self, curve: Curve, group: str, n: int, resident: bool, what: str, table_bits: int) -> MsmPlan | None:
        """The largest chunk (halving down to ``min_chunk``) whose working set fits in what is free, reserved."""
        chunk = min(n, (1 << 31) // 32)
        while True:
            need = self.working_bytes(curve, group, chunk, resident, 1 if chunk == n else 2, table_bits)
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
        and evicted by the budget (``evict_idle``) when no MSM reads it and a reservation needs the room; after an
        eviction, ``TABLE_REBUILD_BACKOFF`` (doubling) MSMs run without it before it is built again. Built on
        the calling lane's stream and waited for, so other lanes may read it at once.
        """
        if not self.window_tables:
            return None
        with self._tables_lock:
            if bases.table is None and bases.table_wait:
                bases.table_wait -= 1
                return None
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
        if not c or nbytes + self.working_bytes(curve, group, n, resident=True, table_bits=c) > self.vram.available_bytes:
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
        """Bytes of window tables no MSM reads now, and of idle MSM graphs (the VRAM budget's evictor protocol)."""
        with self._tables_lock:
            return sum(sum(g.nbytes for g in b.graphs) + (b.table_reservation.nbytes if b.table_reservation is not None
                                                          and not b.table_users else 0) for b in self._tabled)

    def evict_idle(self, nbytes: int) -> int:
        """Free idle MSM graphs (cheap to capture again), then idle window tables, oldest first, until ``nbytes`` are
        given back; the bytes freed."""
        freed = 0
        with self._tables_lock:
            for bases in self._tabled:
                while freed < nbytes and bases.graphs:
                    freed += bases.graphs.pop().free()
            for bases in list(self._tabled):
                if bases.table is None:
                    self._tabled.remove(bases)
                elif freed < nbytes and not bases.table_users:
                    freed += bases.drop_table()
                    bases.table_evictions += 1
                    bases.table_wait = self.table_backoff << min(bases.table_evictions - 1, 16)
                    self._tabled.remove(bases)
        return freed

    # ---------------------------------------------------------------- the MSM
    def msm(self, curve: Curve, group: str, bases, scalars) -> Point:
        """Σ scalars[i]·bases[i] of the group ("g1" or "g2"), from resident, host or device bases."""
        n = check_vector(scalars, SCALAR_LIMBS, "MSM scalars")
        resident = isinstance(bases, DeviceBases)
        if resident:
            self._check_resident(curve, group, bases, n)
        else:
            n_bases = check_bases(curve, group, bases)
            if n_bases != n:
                raise CudaInputError(f"MSM has {n_bases} bases but {n} scalars")
        if n == 0:
            return None
        table = self._acquire_table(bases) if resident else None
        try:
            graph = self._acquire_graph(bases, table) if table is not None else None
            if graph is None:
                return self._msm(curve, group, bases, scalars, n, table)
            try:
                self.runtime.copy(graph.scalars, self.gpu.device_view(scalars)[0])
                self.runtime.replay(graph.graph)
                return self._result(curve, group, graph.shape, graph.work, 0)
            finally:
                self._release_graph(bases, graph)
        finally:
            if table is not None:
                self._release_table(bases)

    def msm_many(self, curve: Curve, msms, checkpoint: Callable[[], None] | None = None) -> list[Point]:
        """The sums of ``msms`` ((group, bases, scalars) each), in order. Over resident bases they are queued back to
        back on the calling lane's stream, their working sets carved in turn from one ``MsmArena`` of the largest (one
        reservation), their results read back in one copy: the lane's stream does not drain between them. (A wait per
        MSM drained it five times a proof, and refilling it waited for the launching thread's turn at the GIL.)
        Otherwise — bases not resident, phases timed, no room for the arena now — each runs as ``msm`` does, with
        ``checkpoint()`` (which may raise to stop) between them."""
        if self.phase_log is None and msms and all(isinstance(bases, DeviceBases) for _, bases, _ in msms):
            queued = self._msm_queued(curve, msms)
            if queued is not None:
                return queued
        return msm_each(msms, lambda group, bases, scalars: self.msm(curve, group, bases, scalars), checkpoint)

    def _msm_queued(self, curve: Curve, msms) -> list[Point] | None:
        """``msm_many`` over resident bases, queued; None (nothing queued, nothing held) when the arena has no room."""
        bits = curve.r.bit_length()
        for group, bases, scalars in msms:
            self._check_resident(curve, group, bases, check_vector(scalars, SCALAR_LIMBS, "MSM scalars"))
        with contextlib.ExitStack() as held:
            tables = []
            for _, bases, _ in msms:
                table = self._acquire_table(bases) if bases.n else None
                if table is not None:
                    held.callback(self._release_table, bases)
                tables.append(table)
            graphs = []
            for (_, bases, _), table in zip(msms, tables):
                graph = self._acquire_graph(bases, table) if table is not None else None
                if graph is not None:
                    held.callback(self._release_graph, bases, graph)
                graphs.append(graph)
            shapes = []
            for (group, bases, _), table, graph in zip(msms, tables, graphs):
                if graph is not None:
                    shapes.append(graph.shape)
                elif bases.n:
                    c = table[1] if table is not None else window_bits(bases.n, bits)
                    shapes.append(self._shape(curve, group, bases.n, c, table is not None))
                else:
                    shapes.append(None)
            arena_words = max((MsmArena.words(sh) for sh, g in zip(shapes, graphs) if sh is not None and g is None), default=0)
            out_words = [MsmArena.aligned(sh.sum_words + 2) if sh is not None else 0 for sh in shapes]  # kernels load 16 bytes at once
            host_bytes = sum(s.nbytes for _, _, s in msms if isinstance(s, np.ndarray))
            reservation = self.vram.try_reserve(4 * (arena_words + sum(out_words)) + host_bytes,
                                                f"MSM working sets ({len(msms)} {curve.name} MSMs in a row)", transient=True)
            if reservation is None:
                return None
            held.callback(reservation.release)
            rt = self.runtime
            arena = MsmArena(rt.empty(max(1, arena_words), np.uint32))
            results = MsmArena(rt.empty(max(1, sum(out_words)), np.uint32))
            for (group, bases, scalars), table, graph, shape in zip(msms, tables, graphs, shapes):
                if shape is None:
                    continue
                out = results.take(shape.sum_words + 2)
                scalars = self.gpu.device_view(scalars)[0]
                if graph is not None:
                    rt.copy(graph.scalars, scalars)
                    rt.replay(graph.graph)
                    rt.copy(out, graph.work.out)
                    continue
                arena.reset()
                work = MsmWork.allocate(rt, shape, arena, out)
                points = table[0] if table is not None else bases.points
                self._launch_msm(rt.module(curve, f"msm_{group}"), shape, work, scalars, points, bases.n if table is not None else 0, 0)
            host = rt.to_host(results.buffer)  # the one wait
        sums, at = [], 0
        for (group, _, _), shape, words in zip(msms, shapes, out_words):
            sums.append(self._sum(curve, group, shape, host[at : at + words], 0) if shape is not None else None)
            at += words
        return sums

    def _shape(self, curve: Curve, group: str, n: int, c: int, table: bool) -> SortShape:
        """The sort and accumulation shape of an MSM of ``n`` points in window ``c`` with this MSM's knobs."""
        return SortShape.of(n, c, curve.r.bit_length(), 2 * point_words(curve, group), table, self.chunk_len, self.join_span)

    def _check_resident(self, curve: Curve, group: str, bases: DeviceBases, n: int) -> None:
        if bases.curve is not curve or bases.group != group or bases.points is None:
            raise CudaInputError(f"resident bases are {bases.curve.name} {bases.group.upper()} (freed: {bases.points is None}), "
                                 f"not {curve.name} {group.upper()}")
        if bases.n != n:
            raise CudaInputError(f"MSM has {bases.n} bases but {n} scalars")

    def _acquire_graph(self, bases: DeviceBases, table) -> MsmGraph | None:
        """An idle captured MSM over ``bases``' window ``table`` (table, c), captured now when none is idle; None when
        graphs are off or do not pay at this size, phases are being timed, or the budget has no room for its buffers
        (then the MSM runs its launches itself)."""
        if not self.graphs or bases.n > GRAPH_MAX_POINTS or self.phase_log is not None:
            return None
        with self._tables_lock:
            if bases.graphs:
                return bases.graphs.pop()
        curve, group, n = bases.curve, bases.group, bases.n
        shape = self._shape(curve, group, n, table[1], True)
        reservation = self.vram.try_reserve(shape.work_bytes + n * SCALAR_LIMBS * 4,
                                            f"{curve.name} {group.upper()} MSM graph ({n} points)", evict=False)
        if reservation is None:
            return None
        try:
            work, scalars = MsmWork.allocate(self.runtime, shape), self.runtime.empty((n, SCALAR_LIMBS), np.uint32)
            mod = self.runtime.module(curve, f"msm_{group}")
            graph = self.runtime.capture(lambda: self._launch_msm(mod, shape, work, scalars, table[0], n, 0))
        except BaseException:
            reservation.release()
            raise
        return MsmGraph(table[0], shape, work, scalars, graph, reservation)

    def _release_graph(self, bases: DeviceBases, graph: MsmGraph) -> None:
        """Back among its bases' idle graphs while the table it reads is still theirs; freed otherwise."""
        with self._tables_lock:
            if bases.table is graph.table:
                bases.graphs.append(graph)
                return
        graph.free()

    def _msm(self, curve: Curve, group: str, bases, scalars, n: int, table) -> Point:
        """The MSM in chunks of its plan, over the window ``table`` (table, c) of resident bases when it has one."""
        G = curve.G1 if group == "g1" else curve.G2
        mod = self.runtime.module(curve, f"msm_{group}")
        words = point_words(curve, group)
        resident = isinstance(bases, DeviceBases)
        from_host = isinstance(bases, np.ndarray)
        lane = self.gpu.lane()  # the copy thread uploads for this proof's lane

        total: Point = None
        with self.plan(curve, group, n, resident, table[1] if table is not None else 0) as plan:  # the reservation covers two chunk buffers when chunked
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
        shape = self._shape(curve, group, int(scalars.shape[0]), c, table_stride > 0)
        work = MsmWork.allocate(self.runtime, shape)
        self._phase("start")
        self._launch_msm(mod, shape, work, self.gpu.device_view(scalars)[0], points, table_stride, offset)
        return self._result(curve, group, shape, work, offset)

    def _launch_msm(self, mod, shape: SortShape, work: MsmWork, scalars, points, table_stride: int, offset: int) -> None:
        """Queue the whole MSM into ``work``'s buffers: launches and memsets only, no allocation and no wait for the
        device, so that it can be captured as a graph. The sizes that depend on the scalars (the entries, the largest
        bucket) stay on the device; the host sizes grids and join steps from their bounds (``SortShape``)."""
        rt, sh = self.runtime, shape
        n, c, windows, keys = sh.n, sh.c, sh.windows, sh.keys
        rt.memset(work.counts, 0)
        rt.memset(work.first_bad, 0xFF)  # none yet
        rt.memset(work.largest, 0)
        blocks = -(-n // THREADS)
        rt.launch(mod, "msm_count", blocks, THREADS, (scalars, np.uint64(n), np.uint32(c), np.uint32(windows),
                                                      np.uint32(0 if table_stride else 0xFFFFFFFF), work.counts, work.first_bad))
        self._phase("count")
        tiles, scan = sh.scan_tiles, work.scan
        rt.launch(mod, "msm_scan_counts", tiles, SCAN_THREADS, (work.counts, np.uint32(keys), np.uint32(SCAN_TILE), work.offsets, work.cursor,
                                                                scan[:tiles], work.largest), shared_bytes=4 * 4 * SCAN_THREADS)
        if tiles > 1:  # scan the tiles' totals, then add them in
            tile_offsets = scan[tiles: 2 * tiles + 1]
            rt.launch(mod, "msm_scan_counts", 1, SCAN_THREADS, (scan[:tiles], np.uint32(tiles), np.uint32(tiles), tile_offsets, tile_offsets,
                                                                scan[2 * tiles + 1:], scan[2 * tiles + 2:]), shared_bytes=4 * 4 * SCAN_THREADS)
            rt.launch(mod, "msm_scan_add", grid(keys + 1), THREADS, (work.offsets, work.cursor, np.uint32(keys), np.uint32(SCAN_TILE),
                                                                     tile_offsets, np.uint32(tiles)))
        self._phase("scan")
        if table_stride:  # one launch per stretch of 2^24 sorted entries (64 MiB, about what L2 holds)
            rt.launch(mod, "msm_pass_keys", grid(sh.scatter_passes + 1), THREADS, (work.offsets, np.uint32(keys), np.uint32(sh.scatter_passes),
                                                                                  np.uint32(SCATTER_STRETCH_LOG), work.pass_keys))
            for p in range(sh.scatter_passes):
                rt.launch(mod, "msm_scatter_table", blocks, THREADS,
                          (scalars, np.uint64(n), np.uint32(c), np.uint32(windows), np.uint64(table_stride), np.uint64(offset),
                           work.pass_keys, np.uint32(p), work.cursor, work.entries))
        else:
            for window in range(windows):
                rt.launch(mod, "msm_scatter", blocks, THREADS, (scalars, np.uint64(n), np.uint32(c), np.uint32(window), work.cursor, work.entries))
        self._phase("scatter")
        rt.memset(work.sums, 0)
        rt.launch(mod, "msm_accumulate_bases", -(-sh.chunks // self.accumulate_threads), self.accumulate_threads,
                  (work.offsets, np.uint32(keys), work.entries, points, np.uint32(sh.chunk_len), work.sums, work.partial_keys, work.partial_sums))
        self._phase("accumulate")
        if sh.seq_span > 1:
            rt.launch(mod, "msm_join_buckets", grid(keys), THREADS, (work.offsets, np.uint32(keys), np.uint32(sh.chunk_len), np.uint32(sh.seq_span),
                                                                    work.partial_sums, work.sums))
        tree_blocks = min(grid(sh.chunks), JOIN_TREE_BLOCKS_PER_SM * rt.multiprocessors)
        for step in range(sh.join_steps):
            rt.launch(mod, "msm_join_pieces", tree_blocks, THREADS, (work.offsets, np.uint32(keys), work.largest, np.uint32(sh.chunk_len),
                                                                    np.uint32(sh.seq_span), np.uint32(step), work.partial_keys, work.partial_sums,
                                                                    work.sums))
        self._phase("partials")
        if table_stride:
            self._reduce_buckets(mod, sh, work)
        else:
            self._reduce_windows(mod, sh, work)
        self._phase("horner")

    def _result(self, curve: Curve, group: str, shape: SortShape, work: MsmWork, offset: int) -> Point:
        """The MSM's one wait for the device: its sum and the first bad scalar, in one copy."""
        out = self.runtime.to_host(work.out)
        if self.phase_log is not None:
            self._flush_phases()
        return self._sum(curve, group, shape, out, offset)

    @staticmethod
    def _sum(curve: Curve, group: str, shape: SortShape, out: np.ndarray, offset: int) -> Point:
        """The affine sum of a result row read back (``MsmWork.out``), or the first bad scalar's error."""
        bad = int(out[shape.sum_words])
        if bad != 0xFFFFFFFF:
            raise ScalarOutOfRangeError(offset + bad, curve)
        return xyzz_to_affine(curve, group, out[: shape.sum_words])

    def _reduce_windows(self, mod, shape: SortShape, work: MsmWork) -> None:
        """Σ_w 2^(c·w)·Σ_b (b + 1)·sums[w·2^(c-1) + b] into work.out: each window's sum, then Horner."""
        rt, sh = self.runtime, shape
        log_b = sh.c - 1
        rt.launch(mod, "msm_window_segments", grid(sh.windows << sh.segments_log), THREADS,
                  (work.sums, np.uint32(sh.windows), np.uint32(log_b), np.uint32(log_b - sh.segments_log), work.levels[0]))
        per_window = 1 << sh.segments_log
        for below, level in zip(work.levels, work.levels[1:]):
            run = min(32, per_window)
            per_window //= run
            rt.launch(mod, "msm_sum_runs", grid(sh.windows * per_window), THREADS,
                      (below, np.uint64(sh.windows * per_window), np.uint32(run), level))
        self._phase("windows")
        rt.launch(mod, "msm_horner", 1, 32, (work.levels[-1], np.uint32(sh.windows), np.uint32(sh.c), work.out))

    def _reduce_buckets(self, mod, shape: SortShape, work: MsmWork) -> None:
        """Σ_b (b + 1)·sums[b] over the 2^(c-1) buckets of a window-table MSM into work.out."""
        rt, sh = self.runtime, shape
        log_g, pieces, block = sh.reduction
        segments = 1 << (sh.c - 1 - log_g)
        rt.launch(mod, "msm_bucket_segments", grid(segments), THREADS, (work.sums, np.uint32(segments), np.uint32(log_g), work.levels[0]))
        bits = sh.c - 1 - log_g
        rt.launch(mod, "msm_bit_sums", (bits + 1) * pieces, block, (work.levels[0], np.uint32(segments), np.uint32(bits), np.uint32(pieces),
                                                                    work.levels[1]), shared_bytes=block * 4 * sh.sum_words)
        self._phase("windows")
        rt.launch(mod, "msm_bits_combine", 1, min(MAX_REDUCTION_THREADS, 1 << ((bits + 1) * pieces).bit_length()),
                  (work.levels[1], np.uint32(bits), np.uint32(pieces), np.uint32(log_g), work.out))


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
