"""Python ints <-> the (n, limbs) little-endian uint32 arrays every layer passes around.

Both directions go through one bytes object, so converting a million values costs a
join and a frombuffer, not a million numpy element writes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np


def ints_to_limbs(values: Iterable[int], n_limbs: int) -> np.ndarray:
    """(n, n_limbs) uint32 little-endian limbs of non-negative ints below 2^(32·n_limbs)."""
    n8 = 4 * n_limbs
    try:
        raw = b"".join(int(v).to_bytes(n8, "little") for v in values)
    except OverflowError:
        raise ValueError(f"a value is negative or does not fit in {n_limbs} 32-bit limbs") from None
    return np.frombuffer(raw, dtype="<u4").reshape(-1, n_limbs).copy()


def limbs_to_ints(limbs: np.ndarray) -> list[int]:
    """The ints held by an (n, n_limbs) uint32 limb array (any layout, any byte order)."""
    arr = np.ascontiguousarray(limbs, dtype="<u4")
    if arr.ndim != 2:
        raise ValueError(f"expected an (n, limbs) array, got shape {arr.shape}")
    n8 = 4 * arr.shape[1]
    raw = arr.tobytes()
    return [int.from_bytes(raw[i : i + n8], "little") for i in range(0, len(raw), n8)]


def limbs_to_int(row: np.ndarray) -> int:
    """The int held by one row of limbs."""
    return int.from_bytes(np.ascontiguousarray(row, dtype="<u4").tobytes(), "little")


CHECK_CHUNK_ROWS = 1 << 20  # rows per pass of the vectorised checks: bounds their temporaries to a few MB


def first_not_below(limbs: np.ndarray, bound: int) -> int | None:
    """Index of the first row whose value is >= bound (e.g. a field element not reduced mod p), or None.

    One pass, top limb first, in a numba kernel that releases the GIL: a 128 MiB witness is
    checked at memory speed while the engine's other threads run (numpy's limb-by-limb
    passes took ~150 ms for it, with the GIL taken between them).
    """
    n_limbs = limbs.shape[1]
    if bound >> (32 * n_limbs):
        return None  # every representable value is below the bound
    bound_limbs = np.array([(bound >> (32 * i)) & 0xFFFFFFFF for i in range(n_limbs)], dtype=np.uint32)
    bad = _scan_kernel()(limbs if limbs.dtype == np.uint32 else limbs.astype(np.uint32), bound_limbs)  # views stay views
    return None if bad < 0 else int(bad)


@functools.cache
def _scan_kernel():
    """The scan, compiled (or loaded from numba's cache) at the first check: numba is imported then, not by a process
    that only converts limbs or writes a witness for the engine to check (``cuzk fullprove``'s client of a daemon)."""
    from numba import njit

    return njit(cache=True, nogil=True)(_first_not_below)


def _first_not_below(limbs, bound_limbs):
    for i in range(limbs.shape[0]):
        below = False
        for k in range(limbs.shape[1] - 1, -1, -1):
            if limbs[i, k] != bound_limbs[k]:
                below = limbs[i, k] < bound_limbs[k]
                break
        if not below:
            return i
    return -1
