"""A pool of reusable host buffers for GPU transfers whose bytes stay in the budget while idle.

Page-locked (pinned) host memory is slow to allocate (cudaHostAlloc maps and locks every
page), so buffers are kept for reuse. A pool that kept them *outside* the budget would be
exactly the memory nobody accounts for; here each buffer holds a "pinned" reservation for
its whole life, idle or not. When the budget is short, the pool's evictor frees idle buffers
(least recently returned first) and releases each buffer's reservation right after its memory
is freed, so the budget never shows room that is still allocated.

Buffers come from CuPy's page-locked allocation where a CUDA device exists, otherwise from
anonymous mmap (page-aligned, populated up front so that, like pinned memory, the whole
buffer is resident and charged from the start).

Sizes are rounded up to size classes (whole pages; above 1 MiB, steps of 1/16 of the power
of two below the size, so at most 6.25 % is wasted) so that buffers are actually reused.
"""

from __future__ import annotations

import logging
import mmap
import threading
import time
from collections import OrderedDict
from typing import Protocol

import numpy as np

from .budget import AcquireTimeout, BudgetExceededError, MemoryBudget, Reservation
from .units import MiB, format_size

log = logging.getLogger(__name__)


class HostAllocator(Protocol):
    kind: str

    def allocate(self, nbytes: int) -> tuple[np.ndarray, object]:
        """A uint8 array of ``nbytes`` and the handle that owns its memory."""
        ...

    def free(self, handle: object) -> None:
        """Free the memory behind ``handle``; the caller has dropped its array first."""
        ...


class PageAlignedAllocator:
    """Anonymous private mmap: page-aligned, and populated at once (MAP_POPULATE) so it is charged at once."""

    kind = "page-aligned"

    def allocate(self, nbytes: int) -> tuple[np.ndarray, object]:
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
        region = mmap.mmap(-1, nbytes, flags=flags)
        return np.frombuffer(region, dtype=np.uint8, count=nbytes), region

    def free(self, handle: object) -> None:
        try:
            handle.close()
        except BufferError:
            # Someone still holds a view of a buffer they returned: the mapping goes when that view does.
            log.warning("a returned pool buffer is still referenced; its %s are unmapped only when the reference dies",
                        format_size(len(handle)))


class CudaPinnedAllocator:
    """cudaHostAlloc through CuPy, bypassing CuPy's own pinned pool (which would keep freed blocks outside our budget)."""

    kind = "cuda-pinned"

    def __init__(self):
        import cupy

        self._cuda = cupy.cuda

    def allocate(self, nbytes: int) -> tuple[np.ndarray, object]:
        memory = self._cuda.PinnedMemory(nbytes)
        pointer = self._cuda.PinnedMemoryPointer(memory, 0)
        return np.frombuffer(pointer, dtype=np.uint8, count=nbytes), memory

    def free(self, handle: object) -> None:
        # cudaFreeHost runs when the last reference to the PinnedMemory goes: the pool's are gone once this returns.
        del handle


def cuda_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device: all mean "no CUDA here"
        return False


def default_allocator() -> HostAllocator:
    return CudaPinnedAllocator() if cuda_available() else PageAlignedAllocator()


def size_class(nbytes: int) -> int:
    """The buffer size actually allocated for a request of ``nbytes``."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise ValueError(f"buffer size must be a positive number of bytes, got {nbytes!r}")
    page = mmap.PAGESIZE
    rounded = -(-nbytes // page) * page
    if rounded <= MiB:
        return rounded
    step = 1 << max(0, (rounded - 1).bit_length() - 5)
    return -(-rounded // step) * step


class PinnedBuffer:
    """A host buffer lent by the pool. ``array`` spans the whole size class; return it with ``release()``.

    After ``release()`` the buffer belongs to the pool again: keep no views of it.
    """

    __slots__ = ("pool", "nbytes", "array", "_handle", "_reservation", "_in_use", "_returned_at")

    def __init__(self, pool: "PinnedPool", array: np.ndarray, handle: object, reservation: Reservation):
        self.pool = pool
        self.nbytes = reservation.nbytes
        self.array = array
        self._handle = handle
        self._reservation = reservation
        self._in_use = True
        self._returned_at = 0.0

    def release(self) -> None:
        self.pool._put(self)

    def __enter__(self) -> "PinnedBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"PinnedBuffer({format_size(self.nbytes)}, {'in use' if self._in_use else 'idle'})"


class PinnedPool:
    """Reusable host buffers whose reservations live in ``budget`` for as long as the buffers exist."""

    def __init__(self, budget: MemoryBudget, allocator: HostAllocator | None = None, max_idle_bytes: int | None = None):
        self.budget = budget
        self.allocator = allocator if allocator is not None else default_allocator()
        self.max_idle_bytes = max_idle_bytes
        self._lock = threading.Lock()
        self._idle: OrderedDict[int, PinnedBuffer] = OrderedDict()  # least recently returned first
        self._idle_bytes = 0
        self._in_use: dict[int, PinnedBuffer] = {}
        self._in_use_bytes = 0
        self._hits = self._misses = self._trimmed_buffers = self._trimmed_bytes = 0
        self._closed = False
        budget.register_evictor(self.trim)

    @property
    def kind(self) -> str:
        return self.allocator.kind

    def get(self, nbytes: int, timeout: float | None = None, label: str = "", reservation: Reservation | None = None) -> PinnedBuffer:
        """A buffer of at least ``nbytes``: an idle one of the same size class, or a new one reserved first.

        With ``reservation`` (a job's own, taken beforehand for everything it needs) a new buffer's
        bytes are split off it instead of waiting on the budget; on a hit, where the idle buffer
        already holds its bytes, the same amount is released from it. Either way the job's
        reservation shrinks by ``size_class(nbytes)``, which it must hold.
        """
        capacity = size_class(nbytes)
        if reservation is not None and reservation.nbytes < capacity:
            raise ValueError(f"{reservation!r} cannot cover a {format_size(capacity)} buffer")
        with self._lock:
            if self._closed:
                raise RuntimeError("the pinned pool is closed")
            for key in reversed(self._idle):  # most recently returned first: its pages are warmest
                buffer = self._idle[key]
                if buffer.nbytes == capacity:
                    del self._idle[key]
                    self._idle_bytes -= capacity
                    self._lend_locked(buffer)
                    self._hits += 1
                    break
            else:
                buffer = None
                self._misses += 1
        if buffer is not None:
            if reservation is not None:
                reservation.release(capacity)
            return buffer
        label = label or "pinned buffer"
        if reservation is not None:
            reservation = reservation.split(capacity, "pinned", label)
        else:
            reservation = self.budget.acquire(capacity, "pinned", timeout=timeout, label=label)
        try:
            array, handle = self.allocator.allocate(capacity)
        except BaseException:
            reservation.release()
            raise
        buffer = PinnedBuffer(self, array, handle, reservation)
        with self._lock:
            self._lend_locked(buffer)
        return buffer

    def try_get(self, nbytes: int, label: str = "") -> PinnedBuffer | None:
        """A buffer as ``get`` gives it when the budget has room now, else None (never waits): a device's staging
        source (``backends.base.StagingSource``), whose proving thread may be what would free the memory."""
        try:
            return self.get(nbytes, timeout=0, label=label)
        except (AcquireTimeout, BudgetExceededError):
            return None

    def trim(self, nbytes_needed: int | None = None) -> int:
        """Free idle buffers, least recently returned first, until ``nbytes_needed`` (default: all) are freed.

        This is the pool's budget evictor. Returns the bytes freed, which are exactly the bytes
        whose reservations it released.
        """
        victims = []
        with self._lock:
            freed = 0
            while self._idle and (nbytes_needed is None or freed < nbytes_needed):
                _, buffer = self._idle.popitem(last=False)
                self._idle_bytes -= buffer.nbytes
                victims.append(buffer)
                freed += buffer.nbytes
            self._trimmed_buffers += len(victims)
            self._trimmed_bytes += freed
        for buffer in victims:
            self._destroy(buffer)
        return freed

    def stats(self) -> dict:
        with self._lock:
            return {
                "kind": self.allocator.kind,
                "pooled_buffers": len(self._idle),
                "pooled_bytes": self._idle_bytes,
                "in_use_buffers": len(self._in_use),
                "in_use_bytes": self._in_use_bytes,
                "hits": self._hits,
                "misses": self._misses,
                "trimmed_buffers": self._trimmed_buffers,
                "trimmed_bytes": self._trimmed_bytes,
            }

    def close(self) -> None:
        """Free every idle buffer and stop pooling; buffers still lent are freed when they come back."""
        with self._lock:
            self._closed = True
        self.trim()
        try:
            self.budget.unregister_evictor(self.trim)
        except ValueError:
            pass

    def __enter__(self) -> "PinnedPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _lend_locked(self, buffer: PinnedBuffer) -> None:
        buffer._in_use = True
        self._in_use[id(buffer)] = buffer
        self._in_use_bytes += buffer.nbytes

    def _put(self, buffer: PinnedBuffer) -> None:
        victims = []
        with self._lock:
            if self._in_use.pop(id(buffer), None) is None:
                raise ValueError(f"{buffer!r} was already returned to the pool")
            buffer._in_use = False
            self._in_use_bytes -= buffer.nbytes
            if self._closed:
                victims.append(buffer)
            else:
                buffer._returned_at = time.monotonic()
                self._idle[id(buffer)] = buffer
                self._idle_bytes += buffer.nbytes
                while self.max_idle_bytes is not None and self._idle_bytes > self.max_idle_bytes:
                    _, oldest = self._idle.popitem(last=False)
                    self._idle_bytes -= oldest.nbytes
                    victims.append(oldest)
        for victim in victims:
            self._destroy(victim)
        if not self._closed:
            self.budget.notify_idle()  # a queued request may want this buffer's bytes

    def _destroy(self, buffer: PinnedBuffer) -> None:
        """Free the memory first, then release its reservation: the budget must never show room still allocated."""
        handle = buffer._handle
        buffer.array = buffer._handle = None  # drop the pool's view before unmapping what it looks at
        self.allocator.free(handle)
        del handle
        buffer._reservation.release()
