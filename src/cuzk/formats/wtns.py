"""snarkjs .wtns witness files.

Layout: container "wtns", version 2, two sections —
1 header: u32 n8, prime r (n8 bytes), u32 number of values;
2 values: that many field elements, n8 bytes each, little-endian standard form.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..curves import Curve
from .binfile import BinFile, binfile_bytes, n8_of, write_binfile
from .limbs import first_not_below, ints_to_limbs

WTNS_VERSION = 2
HEADER, VALUES = 1, 2
SECTION_NAMES = {HEADER: "header", VALUES: "witness values"}


@dataclass(frozen=True, eq=False)  # holds arrays: compare by identity
class Witness:
    path: Path | None
    curve: Curve
    values: np.ndarray  # (n, Fr limbs) uint32, standard form, a read-only view of the file

    def __len__(self) -> int:
        return self.values.shape[0]


# Values range-checked at a time by a check that keeps none of them resident (``read_wtns(resident=False)``).
CHECK_CHUNK_BYTES = 8 << 20


def read_wtns(path: str | os.PathLike, *, resident: bool = True) -> Witness:
    """Read and validate a witness: known scalar field, n8 matching it, every value < r.

    ``resident=False`` (a file only checked, as the engine's intake checks the journal's copy): the values are checked
    ``CHECK_CHUNK_BYTES`` at a time, each chunk's pages taken out of the process's resident set once checked (the page
    cache keeps them for the worker that maps the file later). Mapped whole, a 128 MiB witness would raise the
    daemon's resident set by 128 MiB while it is checked, which admission's peak probe would attribute to the jobs
    running then."""
    with BinFile(path, "wtns", WTNS_VERSION, SECTION_NAMES) as f:
        header = f.read(HEADER)
        if len(header) < 4:
            raise f.error(HEADER, f"is {len(header)} bytes; too short to hold n8")
        n8 = int.from_bytes(header[:4], "little")
        if n8 == 0 or n8 % 8 or len(header) != 4 + n8 + 4:
            raise f.error(HEADER, f"is {len(header)} bytes with n8 = {n8}; expected n8 a positive multiple of 8 and 4 + n8 + 4 bytes")
        curve = f.curve_of(HEADER, int.from_bytes(header[4 : 4 + n8], "little"), n8, "r")
        n_values = int.from_bytes(header[4 + n8 :], "little")
        f.expect_size(VALUES, n_values * n8, f"the header's {n_values} values × {n8} bytes")
        values = f.view(VALUES, "<u4", (n_values, n8 // 4))
        bad = first_not_below(values, curve.r) if resident else _first_unreduced_dropping(f, values, curve.r, n8)
        if bad is not None:
            raise f.error(VALUES, f"value #{bad} is not reduced modulo the {curve.name} scalar field prime")
        return Witness(Path(path), curve, values)


def _first_unreduced_dropping(f: BinFile, values: np.ndarray, r: int, n8: int) -> int | None:
    rows = max(1, CHECK_CHUNK_BYTES // n8)
    for start in range(0, len(values), rows):
        chunk = values[start : start + rows]
        bad = first_not_below(chunk, r)
        if bad is not None:
            return start + bad
        f.drop_resident(VALUES, start * n8, len(chunk) * n8)
    return None


def wtns_file_size(curve: Curve, n_values: int) -> int:
    """Bytes of a .wtns file of ``n_values`` values as snarkjs writes it: magic, version, two sections."""
    n8 = n8_of(curve.r)
    return 12 + 2 * 12 + (4 + n8 + 4) + n_values * n8


def write_wtns(path: str | os.PathLike, curve: Curve, values: np.ndarray | Sequence[int]) -> None:
    """Write a witness as snarkjs does (version 2); ``values`` are ints or an (n, limbs) uint32 array, standard form,
    each checked to be below r: the file may go to any prover."""
    arr = _limbs(curve, values)
    bad = first_not_below(arr, curve.r)
    if bad is not None:
        raise ValueError(f"witness value #{bad} is not reduced modulo the {curve.name} scalar field prime")
    write_binfile(path, "wtns", WTNS_VERSION, _sections(curve, arr))


def wtns_bytes(curve: Curve, values: np.ndarray | Sequence[int]) -> bytes:
    """The .wtns file :func:`write_wtns` writes, as bytes, for the engine (the daemon's, or this machine's by
    ``cuzk fullprove``), whose intake reads them with :func:`read_wtns` and so checks each value there."""
    return binfile_bytes("wtns", WTNS_VERSION, _sections(curve, _limbs(curve, values)))


def _limbs(curve: Curve, values: np.ndarray | Sequence[int]) -> np.ndarray:
    n_limbs = curve.Fr.limbs32
    arr = values if isinstance(values, np.ndarray) else ints_to_limbs(values, n_limbs)
    if arr.dtype != np.uint32 or arr.ndim != 2 or arr.shape[1] != n_limbs:
        raise ValueError(f"witness values must be an (n, {n_limbs}) uint32 array for {curve.name}, got {arr.dtype} {arr.shape}")
    return arr


def _sections(curve: Curve, arr: np.ndarray) -> list:
    n8 = n8_of(curve.r)
    header = n8.to_bytes(4, "little") + curve.r.to_bytes(n8, "little") + arr.shape[0].to_bytes(4, "little")
    return [(HEADER, [header]), (VALUES, [arr.astype("<u4", copy=False)])]
