"""Reading a key's sections chunk by chunk through a small staging ring, leaving nothing in the page cache.

The kernel charges a file's page cache to the cgroup of the process that read it, so a key read
the ordinary way leaves the cgroup charged for the whole file until reclaim gets to it. Measured
here (cgroup v1, a 512 MiB file on ext4, a ring of two slots; ``memory.max_usage_in_bytes`` less
the process and the ring): plain reads +512 MiB (to the limit, under a limit); reads each followed
by ``posix_fadvise(DONTNEED)`` of that chunk +16 MiB with 8 MiB chunks, but +480 MiB with 1 MiB
chunks (the readahead still in flight beyond a chunk is not dropped, and never is); the same with
readahead off (``POSIX_FADV_RANDOM``) at most one chunk; **O_DIRECT into page-aligned slots
+0**, at the same speed. So ``SectionReader`` reads with O_DIRECT, and where the filesystem
refuses it (tmpfs, some FUSE mounts) falls back to reads with readahead off, each chunk's pages
dropped behind it (at most one chunk of cache).

O_DIRECT wants the file offset, the length and the memory aligned to the device's block:
each chunk is read from the ALIGN boundary below it into a slot ALIGN bytes longer than the
chunk on each side, and the caller gets the view of its own bytes (a zkey's sections start
on 4-byte boundaries, so the view is uint32-aligned).

``StagingRing``: ``slots`` buffers of ``slot_bytes`` from a host allocator (page-locked where
CUDA exists, so a device copies straight from a slot while the next one is read). A consumer
that copies from a chunk asynchronously ``hold``s the chunk with the copy's completion event;
the reader waits for it before reading into that slot again, and for every slot when it ends.
The ring is what a device-homed key costs the host (``keys.manager``), and what a hot load
reads through (``keys.host``).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..memory.pinned import HostAllocator
from .errors import KeyFileChanged

ALIGN = 4096  # O_DIRECT's alignment: a multiple of every block device's logical block size
SLOTS = 2  # one slot being read while the other is being copied out


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def slot_bytes(chunk_bytes: int) -> int:
    """A slot's size for chunks of at most ``chunk_bytes``: the chunk and an ALIGN boundary on each side."""
    return _round_up(chunk_bytes, ALIGN) + 2 * ALIGN


def ring_bytes(chunk_bytes: int, slots: int = SLOTS) -> int:
    """Host bytes of a ring of ``slots`` slots for ``chunk_bytes`` chunks (what its reservation must hold)."""
    return slots * _round_up(slot_bytes(chunk_bytes), mmap.PAGESIZE)


class StagedChunk:
    """One chunk's bytes in a ring slot (``array``, uint8), where its section position ``start`` begins."""

    __slots__ = ("array", "start", "_ring", "_slot")

    def __init__(self, array: np.ndarray, start: int, ring: StagingRing, slot: int):
        self.array, self.start, self._ring, self._slot = array, start, ring, slot

    def hold(self, event) -> None:
        """Keep the slot until ``event`` (anything with ``synchronize()``; None: nothing pending) has completed: an
        asynchronous copy is still reading it."""
        if event is not None:
            self._ring._fences[self._slot] = event


class StagingRing:
    """``slots`` staging slots for chunks of ``chunk_bytes``; allocated on entering, freed on leaving, one reader at a
    time (a second one waits for the first: two devices loading one key take turns). Rings given one ``turns`` lock
    take turns with each other too, so that one reservation of the largest covers them all (the key manager's rings of
    device-homed keys)."""

    def __init__(self, allocator: HostAllocator, chunk_bytes: int, slots: int = SLOTS, turns: threading.Lock | None = None):
        if chunk_bytes < ALIGN or slots < 1:
            raise ValueError(f"a staging ring needs chunks of at least {ALIGN} bytes and a slot, got {chunk_bytes} × {slots}")
        self.allocator = allocator
        self.chunk_bytes = chunk_bytes - chunk_bytes % ALIGN
        self.slots = slots
        self.slot_bytes = _round_up(slot_bytes(self.chunk_bytes), mmap.PAGESIZE)
        self.nbytes = ring_bytes(self.chunk_bytes, slots)
        self._lock = turns if turns is not None else threading.Lock()
        self._array: np.ndarray | None = None
        self._handle = None
        self._fences: list = [None] * slots

    def __enter__(self) -> StagingRing:
        self._lock.acquire()
        try:
            self._array, self._handle = self.allocator.allocate(self.nbytes)
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.drain()
        finally:
            self._array = None
            handle, self._handle = self._handle, None
            self.allocator.free(handle)
            self._lock.release()

    def slot(self, i: int) -> np.ndarray:
        """Slot ``i``'s bytes, once nothing reads them any more."""
        fence, self._fences[i] = self._fences[i], None
        if fence is not None:
            fence.synchronize()
        return self._array[i * self.slot_bytes : (i + 1) * self.slot_bytes]

    def drain(self) -> None:
        """Wait until no copy reads any slot."""
        for i in range(self.slots):
            fence, self._fences[i] = self._fences[i], None
            if fence is not None:
                fence.synchronize()


class SectionReader:
    """An open key file read through a ``StagingRing`` (entered by the caller) with O_DIRECT, or with readahead off
    and each chunk's cache dropped where O_DIRECT is refused (see the module docstring). ``direct`` says which."""

    def __init__(self, path: Path, ring: StagingRing):
        self.path = Path(path)
        self.ring = ring
        self._next_slot = 0
        try:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
            self.direct = hasattr(os, "O_DIRECT")
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self._fd, self.direct = os.open(self.path, os.O_RDONLY), False
        if not self.direct:
            self._buffered()

    def _buffered(self) -> None:
        if self.direct:
            os.close(self._fd)
            self._fd, self.direct = os.open(self.path, os.O_RDONLY), False
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: nothing is cached beyond the chunk read

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SectionReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def chunks(self, offset: int, nbytes: int, record_bytes: int = 4) -> Iterator[StagedChunk]:
        """The ``nbytes`` at file ``offset`` in consecutive chunks of whole ``record_bytes`` records, each in the next
        slot of the ring (valid until the ring comes back to that slot)."""
        per_chunk = max(record_bytes, self.ring.chunk_bytes // record_bytes * record_bytes)
        if per_chunk > self.ring.chunk_bytes:
            raise ValueError(f"a record of {record_bytes} bytes does not fit a {self.ring.chunk_bytes}-byte chunk")
        done = 0
        while done < nbytes:
            n = min(per_chunk, nbytes - done)
            slot = self._next_slot
            self._next_slot = (slot + 1) % self.ring.slots
            yield StagedChunk(self._read(self.ring.slot(slot), offset + done, n), done, self.ring, slot)
            done += n

    def read(self, offset: int, nbytes: int) -> np.ndarray:
        """A small section (the IC points) in an array of its own."""
        out = np.empty(nbytes, dtype=np.uint8)
        self.read_into(offset, out)
        return out

    def read_into(self, offset: int, out: np.ndarray) -> None:
        """Fill ``out`` (uint8) from the file's bytes at ``offset``. No view of a ring slot outlives the call, so the
        ring can be unmapped as soon as its load ends."""
        for chunk in self.chunks(offset, len(out)):
            out[chunk.start : chunk.start + len(chunk.array)] = chunk.array

    def _read(self, slot: np.ndarray, pos: int, n: int) -> np.ndarray:
        if self.direct:
            lead = pos % ALIGN
            try:
                self._fill(slot, pos - lead, _round_up(lead + n, ALIGN), lead + n)
                return slot[lead : lead + n]
            except OSError as exc:  # a filesystem that opens with O_DIRECT but refuses the read itself
                if exc.errno != errno.EINVAL:
                    raise
                self._buffered()
        self._fill(slot, pos, n, n)
        os.posix_fadvise(self._fd, pos, n, os.POSIX_FADV_DONTNEED)
        return slot[:n]

    def _fill(self, slot: np.ndarray, pos: int, length: int, needed: int) -> None:
        """Read ``length`` bytes at ``pos`` into the start of ``slot``; the file must hold at least ``needed`` of them."""
        got = 0
        view = memoryview(slot)
        while got < needed:
            n = os.preadv(self._fd, [view[got:length]], pos + got)
            if n == 0:
                raise KeyFileChanged(f"{self.path}: file ended at byte {pos + got} while loading (truncated since "
                                     "registration?)")
            got += n
