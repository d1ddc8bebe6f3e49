"""A key in host memory: what each tier costs, the hot tier's one buffer, and the streaming load that fills it.

The hot tier is one page-aligned allocation holding every big section (coefficients, IC, A,
B1, B2, C, H). Loading reserves the true peak *before* reading — the page-rounded section
sizes plus the staging ring it reads through (``load_peak``) — then reads each section through
the ring (``keys.stream``: O_DIRECT, so no page cache is charged) into the final buffer, so the
peak is final size + the ring, never file + copy. The buffer comes from ``memory.pinned``'s
allocator: page-locked where CUDA exists (DMA straight from it), page-aligned anonymous memory
otherwise.

The device tier (``KeyTier.DEVICE``, a GPU host's home for a key: ``keys.device``) holds no
host copy: its host footprint is the staging ring a load from disk into VRAM reads through,
and the IC points the verifier needs (``device_home_footprint``: what homing it needs; once
homed, the key manager keeps its IC points in its reservation and its ring in the one
reservation all device-homed keys' rings share).

On the CPU backend a hot key may also hold window tables for its five MSMs' bases
(``with_msm_tables``: 2^(wc)·Pᵢ for every window w, ``backends.cpu.msm.WindowTable``): built once
after the load, counted in its footprint (``msm_table_bytes``), freed with the key. They cost
about 20× the bases and save up to a third of a proof's MSM time (small keys: the tables stay
near the cache), so the key manager builds them only where a policy allows
(``KeyManager(msm_tables=...)``, the engine's ``cpu_msm_tables``).

Footprints are computed from the header alone, so a job that could never fit is refused
before anything loads.
"""

from __future__ import annotations

import mmap
import os
import sys
from dataclasses import fields, replace
from enum import Enum
from pathlib import Path

import numpy as np

from ..backends.cpu import msm as cpu_msm
from ..backends.cpu.synth import row_order_bytes
from ..formats import zkey as zkey_format
from ..formats.binfile import BinFile
from ..formats.zkey import KEY_BASES, ZKey, ZKeyHeader
from ..memory.pinned import HostAllocator
from .stream import ALIGN, SectionReader, StagingRing, ring_bytes

PAGE = mmap.PAGESIZE


class KeyTier(str, Enum):
    COLD = "cold"
    WARM = "warm"
    HOT = "hot"
    DEVICE = "device"  # homed in VRAM: loaded from disk onto each device through a staging ring, no host copy


# ZKey array name → (section type, offset of the array inside the section's payload).
_SECTIONS = {
    "ic": (zkey_format.IC, 0),
    "coeffs": (zkey_format.COEFFS, 4),  # after the u32 entry count
    "a": (zkey_format.POINTS_A, 0),
    "b1": (zkey_format.POINTS_B1, 0),
    "b2": (zkey_format.POINTS_B2, 0),
    "c": (zkey_format.POINTS_C, 0),
    "h": (zkey_format.POINTS_H, 0),
}


def page_round(n: int) -> int:
    return -(-n // PAGE) * PAGE


def array_shapes(header: ZKeyHeader) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """dtype and shape of each big ZKey array, as ``read_zkey`` returns them."""
    lq = header.limbs_q
    u32 = np.dtype("<u4")
    return {
        "ic": (u32, (header.n_public + 1, 2, lq)),
        "coeffs": (zkey_format.coeff_dtype(header.n8r), (header.n_coeffs,)),
        "a": (u32, (header.n_vars, 2, lq)),
        "b1": (u32, (header.n_vars, 2, lq)),
        "b2": (u32, (header.n_vars, 2, 2, lq)),
        "c": (u32, (header.n_vars - header.n_public - 1, 2, lq)),
        "h": (u32, (header.domain_size, 2, lq)),
    }


def hot_layout(header: ZKeyHeader) -> tuple[dict[str, int], int]:
    """Page-aligned offset of each array in the hot buffer, and the buffer's size."""
    offsets, pos = {}, 0
    for name, nbytes in header.section_nbytes().items():
        offsets[name] = pos
        pos += page_round(nbytes)
    return offsets, pos


def read_chunk_bytes(header: ZKeyHeader, chunk_bytes: int) -> int:
    """The chunk a load of this key reads through its ring: ``chunk_bytes``, or less when its largest section is smaller."""
    return min(chunk_bytes, max(ALIGN, -(-max(header.section_nbytes().values()) // ALIGN) * ALIGN))


# The bases of a proof's MSMs (ZKey array → group), which a hot key on the CPU backend may give window tables.
MSM_BASES = dict(KEY_BASES)


def msm_table_bytes(header: ZKeyHeader) -> int:
    """Bytes of the window tables ``with_msm_tables`` gives the key's MSM bases."""
    shapes = array_shapes(header)
    return sum(cpu_msm.table_bytes(header.curve, group, shapes[name][1][0]) for name, group in MSM_BASES.items())


def msm_table_build_bytes(header: ZKeyHeader) -> int:
    """Scratch ``with_msm_tables`` holds beside the tables while it builds them (one base array at a time)."""
    shapes = array_shapes(header)
    return max(cpu_msm.table_build_scratch_bytes(header.curve, group, shapes[name][1][0]) for name, group in MSM_BASES.items())


def with_msm_tables(zkey: ZKey) -> ZKey:
    """The key with each MSM's bases carrying their window table (``TabledBases``), which the CPU MSM uses."""
    return replace(zkey, **{name: cpu_msm.TabledBases.of(getattr(zkey, name), cpu_msm.window_table(zkey.curve, getattr(zkey, name)))
                            for name in MSM_BASES})


def device_home_footprint(header: ZKeyHeader, chunk_bytes: int) -> int:
    """Host bytes of a key homed on the devices: the staging ring its loads read through, and its IC points."""
    return ring_bytes(read_chunk_bytes(header, chunk_bytes)) + page_round(header.section_nbytes()["ic"])


def footprint(header: ZKeyHeader, tier: KeyTier, *, chunk_bytes: int | None = None, msm_tables: bool = False) -> int:
    """Bytes a key holds in the budget at ``tier`` (the steady state, a hot key without its load's ring): its
    sections (mapped or resident), the (matrix, row) order synthesis derives once per loaded key, and for a hot key
    with ``msm_tables`` their window tables; for a key homed on the devices, its ring (of ``chunk_bytes`` chunks)
    and IC points."""
    if tier is KeyTier.COLD:
        return 0
    if tier is KeyTier.DEVICE:
        if chunk_bytes is None:
            raise ValueError("a device-homed key's footprint is its staging ring: give chunk_bytes")
        return device_home_footprint(header, chunk_bytes)
    order = page_round(row_order_bytes(header.n_coeffs))
    if tier is KeyTier.WARM:
        return sum(header.section_nbytes().values()) + order
    return hot_layout(header)[1] + order + (msm_table_bytes(header) if msm_tables else 0)


def load_peak(header: ZKeyHeader, tier: KeyTier, chunk_bytes: int, msm_tables: bool = False) -> int:
    """Bytes reserved while loading to ``tier``: the footprint, plus the staging ring a hot load reads through (or,
    when larger, the scratch of building its MSM tables after the read)."""
    if tier is KeyTier.HOT:
        transient = ring_bytes(read_chunk_bytes(header, chunk_bytes))
        return footprint(header, tier, msm_tables=msm_tables) + max(transient, msm_table_build_bytes(header) if msm_tables else 0)
    return footprint(header, tier, chunk_bytes=chunk_bytes)


def drop_page_cache(path: Path) -> None:
    """Ask the kernel to forget the file's clean cached pages (uncharging them from our cgroup)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class HostBuffer:
    """One allocation from a host allocator (pinned where CUDA exists), carved into the key's arrays.

    ``close`` frees it only when no array over it is still alive: every view numpy derives
    from ``_array`` (slices, reshapes, dtype views) references it directly, so its reference
    count tells whether anyone still looks at the memory (CPython semantics).
    """

    def __init__(self, nbytes: int, allocator: HostAllocator):
        self.nbytes = nbytes
        self._allocator = allocator
        self._array, self._handle = allocator.allocate(max(nbytes, PAGE))

    def array(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(shape, dtype=object))
        return self._array[offset : offset + count * dtype.itemsize].view(dtype).reshape(shape)

    def view(self, offset: int, nbytes: int) -> memoryview:
        return memoryview(self._array[offset : offset + nbytes])

    def close(self) -> bool:
        """Free the memory; False (nothing freed) while an array over it is still referenced."""
        if self._array is None:
            return True
        if sys.getrefcount(self._array) > 2:  # our attribute + the argument
            return False
        self._array = None
        self._allocator.free(self._handle)
        self._handle = None
        return True


def load_hot(path: Path, header: ZKeyHeader, allocator: HostAllocator, chunk_bytes: int) -> tuple[ZKey, HostBuffer]:
    """The key's arrays in one new host buffer, read through a staging ring (its coefficients checked)."""
    offsets, total = hot_layout(header)
    buffer = HostBuffer(total, allocator)
    try:
        with StagingRing(allocator, read_chunk_bytes(header, chunk_bytes)) as ring, SectionReader(path, ring) as reader:
            for name, (file_pos, nbytes) in section_spans(header).items():
                reader.read_into(file_pos, buffer.array(offsets[name], np.dtype(np.uint8), (nbytes,)))
        shapes = array_shapes(header)
        arrays = {name: buffer.array(offsets[name], *shapes[name]) for name in _SECTIONS}
        for arr in arrays.values():
            arr.flags.writeable = False
        zkey = ZKey(**{fl.name: getattr(header, fl.name) for fl in fields(ZKeyHeader)}, **arrays)
        with BinFile(path, "zkey", zkey_format.ZKEY_MAX_VERSION, zkey_format.SECTION_NAMES) as f:
            zkey_format.check_coeffs(f, header, zkey.coeffs)
    except BaseException:
        arrays = zkey = None
        buffer.close()
        raise
    drop_page_cache(path)  # the header and table pages read outside the ring
    return zkey, buffer


def load_device_home(path: Path, header: ZKeyHeader, ring: StagingRing) -> ZKey:
    """A key homed on the devices, as the host holds it: its header and IC points (the verifier's), no other array."""
    offset, nbytes = section_spans(header)["ic"]
    with ring, SectionReader(path, ring) as reader:
        ic = reader.read(offset, nbytes).view("<u4").reshape(header.n_public + 1, 2, header.limbs_q)
    ic.flags.writeable = False
    return ZKey(**{fl.name: getattr(header, fl.name) for fl in fields(ZKeyHeader)}, ic=ic, coeffs=None,
                a=None, b1=None, b2=None, c=None, h=None)


def section_spans(header: ZKeyHeader) -> dict[str, tuple[int, int]]:
    """Where each big array of the key lies in its file: name → (file offset, bytes)."""
    sections = {s.type: s for s in header.sections}
    sizes = header.section_nbytes()
    return {name: (sections[stype].offset + skip, sizes[name]) for name, (stype, skip) in _SECTIONS.items()}
