"""The iden3 binary container shared by .zkey, .wtns and .r1cs files.

Layout (little-endian): 4-byte magic ("zkey" / "wtns" / "r1cs"), u32 version, u32 number
of sections, then that many sections of (u32 type, u64 size, payload). Readers open the
section table without touching payloads and check every size against the file's real
length before anything is allocated, so a corrupt or hostile count is an error message,
never a 2^40-element allocation. Big payloads are exposed as zero-copy numpy views of a
read-only memory map.
"""

from __future__ import annotations

import io
import mmap
import os
import shutil
import struct
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..curves import Curve, UnknownCurveError, curve_by_q, curve_by_r
from ..json_text import OutputError
from .errors import FormatError

FILE_HEADER = struct.Struct("<4sII")
SECTION_HEADER = struct.Struct("<IQ")


@dataclass(frozen=True)
class Section:
    type: int
    offset: int  # of the payload, from the start of the file
    size: int  # payload bytes


class BinFile:
    """An iden3 container whose section table has been read and validated.

    Use as a context manager; views handed out by :meth:`view` stay valid after close
    (they keep the memory map alive themselves).
    """

    def __init__(self, path: str | os.PathLike, magic: str, max_version: int, section_names: Mapping[int, str] = {}):
        self.path = Path(path)
        self.magic = magic
        self.section_names = dict(section_names)
        self._mmap: mmap.mmap | None = None
        try:
            self._file = open(self.path, "rb")
        except OSError as exc:
            raise FormatError(self.path, f"cannot open: {exc.strerror or exc}") from exc
        try:
            self.file_size = os.fstat(self._file.fileno()).st_size
            self.version, self.sections = self._read_table(max_version)
        except BaseException:
            self._file.close()
            raise

    def _read_table(self, max_version: int) -> tuple[int, tuple[Section, ...]]:
        if self.file_size < FILE_HEADER.size:
            raise FormatError(self.path, f"file is {self.file_size} bytes, shorter than the {FILE_HEADER.size}-byte {self.magic} header (truncated?)")
        magic, version, n_sections = FILE_HEADER.unpack(self._file.read(FILE_HEADER.size))
        if magic != self.magic.encode():
            raise FormatError(self.path, f"not a .{self.magic} file: it starts with {magic!r}, expected {self.magic.encode()!r}")
        if not 1 <= version <= max_version:
            raise FormatError(self.path, f"{self.magic} version {version} is not supported (this reader knows versions 1..{max_version})")
        table_bytes = n_sections * SECTION_HEADER.size
        if FILE_HEADER.size + table_bytes > self.file_size:
            raise FormatError(
                self.path,
                f"header claims {n_sections} sections, which need at least {table_bytes} bytes of section headers, "
                f"but the file has only {self.file_size - FILE_HEADER.size} bytes after its header (truncated or corrupt)",
            )
        sections = []
        pos = FILE_HEADER.size
        for index in range(n_sections):
            if pos + SECTION_HEADER.size > self.file_size:
                raise FormatError(self.path, f"file ends at byte {self.file_size} where the header of section #{index + 1} of {n_sections} should be (truncated)")
            self._file.seek(pos)
            stype, size = SECTION_HEADER.unpack(self._file.read(SECTION_HEADER.size))
            payload = pos + SECTION_HEADER.size
            if payload + size > self.file_size:
                raise FormatError(
                    self.path,
                    f"claims {size} bytes at offset {payload}, but only {self.file_size - payload} bytes remain in the file (truncated or corrupt)",
                    self.describe(stype),
                )
            sections.append(Section(stype, payload, size))
            pos = payload + size
        return version, tuple(sections)

    # context management -------------------------------------------------------------
    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> BinFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # sections -----------------------------------------------------------------------
    def describe(self, stype: int) -> str:
        return section_label(stype, self.section_names)

    def error(self, stype: int | None, problem: str) -> FormatError:
        """A FormatError naming this file and (when given) the section."""
        return FormatError(self.path, problem, None if stype is None else self.describe(stype))

    def curve_of(self, stype: int, prime: int, n8: int, field: str) -> Curve:
        """The curve whose scalar (``field="r"``) or base (``"q"``) field this prime is, its element size checked against ``n8``."""
        try:
            curve = curve_by_r(prime) if field == "r" else curve_by_q(prime)
        except UnknownCurveError as exc:
            raise self.error(stype, str(exc)) from None
        elements = curve.Fr if field == "r" else curve.Fq
        if n8 != elements.n8:
            kind = "scalar" if field == "r" else "base"
            raise self.error(stype, f"n8{'' if field == 'r' else 'q'} = {n8}, but {curve.name}'s {kind} field takes {elements.n8} bytes")
        return curve

    def has(self, stype: int) -> bool:
        return any(s.type == stype for s in self.sections)

    def section(self, stype: int) -> Section:
        """The one section of this type (missing or duplicated is an error, as in snarkjs)."""
        found = [s for s in self.sections if s.type == stype]
        if not found:
            raise self.error(stype, "missing")
        if len(found) > 1:
            raise self.error(stype, f"appears {len(found)} times; expected once")
        return found[0]

    def expect_size(self, stype: int, expected: int, why: str) -> Section:
        """The section, checked to be exactly ``expected`` bytes (``why`` says what implies that size)."""
        sec = self.section(stype)
        if sec.size != expected:
            raise self.error(stype, f"is {sec.size} bytes, but {why} needs exactly {expected}")
        return sec

    def read(self, stype: int, offset: int = 0, length: int | None = None) -> bytes:
        """A copy of (part of) a small section's payload."""
        sec = self.section(stype)
        if length is None:
            length = sec.size - offset
        if offset < 0 or length < 0 or offset + length > sec.size:
            raise self.error(stype, f"needs bytes {offset}..{offset + length} but holds only {sec.size}")
        self._file.seek(sec.offset + offset)
        return self._file.read(length)

    def read_at(self, offset: int, length: int) -> bytes:
        """A copy of bytes anywhere in the file, whichever sections they belong to."""
        if offset < 0 or length < 0 or offset + length > self.file_size:
            raise self.error(None, f"needs bytes {offset}..{offset + length} but the file has {self.file_size}")
        self._file.seek(offset)
        return self._file.read(length)

    def view(self, stype: int, dtype: np.dtype | str, shape: tuple[int, ...], offset: int = 0) -> np.ndarray:
        """A read-only zero-copy array of ``shape`` over the section's payload from ``offset``."""
        sec = self.section(stype)
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=object))
        nbytes = count * dtype.itemsize
        if offset + nbytes > sec.size:
            raise self.error(stype, f"needs {offset + nbytes} bytes for {shape} × {dtype} but holds only {sec.size}")
        if count == 0:
            return np.zeros(shape, dtype=dtype)
        return np.frombuffer(self._map(), dtype=dtype, count=count, offset=sec.offset + offset).reshape(shape)

    def drop_resident(self, stype: int, offset: int, length: int) -> None:
        """Take (part of) a section's pages out of this process's resident set (madvise DONTNEED on the mapping): a
        later read of them faults them back in from the page cache, which keeps them."""
        sec = self.section(stype)
        start = sec.offset + offset
        aligned = start - start % mmap.PAGESIZE
        self._map().madvise(mmap.MADV_DONTNEED, aligned, start + length - aligned)

    def _map(self) -> mmap.mmap:
        if self._mmap is None:
            self._mmap = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        return self._mmap

    def u32(self, stype: int, offset: int = 0) -> int:
        return struct.unpack("<I", self.read(stype, offset, 4))[0]


def section_label(stype: int, names: Mapping[int, str]) -> str:
    """How errors name a section: "section 3 (IC points)"."""
    name = names.get(stype)
    return f"section {stype} ({name})" if name else f"section {stype}"


def n8_of(prime: int) -> int:
    """Bytes per element snarkjs uses for a prime: its bit length rounded up to 64-bit words."""
    return ((prime.bit_length() - 1) // 64 + 1) * 8


Payload = bytes | bytearray | memoryview | np.ndarray


def write_binfile(path: str | os.PathLike, magic: str, version: int, sections: Iterable[tuple], fill_order: Iterable[int] | None = None) -> None:
    """Write an iden3 container: each section is (type, pieces of payload), streamed in order.

    Section sizes are patched in after each section's pieces are written, so a piece may
    come from a generator and the whole payload never needs to exist at once. The file
    appears atomically (written next to ``path`` and renamed), so a reader never sees
    half a key.

    ``fill_order`` (indices into ``sections``) takes the sections' pieces in another order
    than the file's, each written in its place: every section but the file's last then
    comes as (type, pieces, size), so that the layout is known before the first piece.
    """
    path = Path(os.path.realpath(path))  # through a symlink: the link stays, its file is replaced
    in_place = path.exists() and not path.is_file()  # /dev/stdout, a pipe: never replaced by a file
    tmp = (Path(tempfile.gettempdir()) if in_place else path.parent) / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as f:  # seekable: section sizes are patched in
            _write_container(f, magic, version, sections, fill_order)
        if in_place:
            with open(tmp, "rb") as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            tmp.unlink()
        else:
            os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename not in (None, str(tmp), str(path)):  # another file's, read for a section's pieces
            raise
        raise OutputError(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def binfile_bytes(magic: str, version: int, sections: Iterable[tuple[int, Iterable[Payload]]]) -> bytes:
    """The bytes :func:`write_binfile` would write (for a container that goes over the wire, not to a file)."""
    buf = io.BytesIO()
    _write_container(buf, magic, version, sections)
    return buf.getvalue()


def _write_container(f: BinaryIO, magic: str, version: int, sections: Iterable[tuple], fill_order: Iterable[int] | None = None) -> None:
    sections = list(sections)
    f.write(FILE_HEADER.pack(magic.encode(), version, len(sections)))
    if fill_order is None:
        for stype, pieces in sections:
            _write_section(f, stype, pieces)
        return
    fill_order = list(fill_order)
    if sorted(fill_order) != list(range(len(sections))):
        raise ValueError(f"fill_order {fill_order} is not an order of the {len(sections)} sections")
    offsets = [f.tell()]
    for _, _, size in sections[:-1]:
        offsets.append(offsets[-1] + SECTION_HEADER.size + size)
    for i in fill_order:
        f.seek(offsets[i])
        stype, pieces, *declared = sections[i]
        size = _write_section(f, stype, pieces)
        if declared and size != declared[0]:
            raise ValueError(f"section {stype}: {size} bytes written where {declared[0]} were laid out")


def _write_section(f: BinaryIO, stype: int, pieces: Iterable[Payload]) -> int:
    """One section at the file's position: its header, its pieces, then its size patched in; the payload's bytes."""
    header_at = f.tell()
    f.write(SECTION_HEADER.pack(stype, 0))
    size = 0
    for piece in pieces:
        buf = _as_le_bytes(piece)
        f.write(buf)
        size += buf.nbytes
    end = f.tell()
    f.seek(header_at)
    f.write(SECTION_HEADER.pack(stype, size))
    f.seek(end)
    return size


def _as_le_bytes(piece: Payload) -> memoryview:
    if isinstance(piece, np.ndarray):
        if piece.dtype.fields is None and piece.dtype.byteorder == ">":
            piece = piece.astype(piece.dtype.newbyteorder("<"))
        return memoryview(np.ascontiguousarray(piece).reshape(-1).view(np.uint8))
    return memoryview(piece).cast("B")
