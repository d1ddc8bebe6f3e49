"""Synthesis: A·w and B·w on the domain rows, from the zkey's coefficient section.

Each stored coefficient is c·R² mod r (snarkjs), and the witness is in standard form, so
one Montgomery product mont(c·R², w) = c·w·R is already the Montgomery form of c·w.
Rows are scattered through the section, so each parallel task owns one matrix and a
range of rows and scans the whole section, multiplying only its own entries: no two
tasks ever write the same row, and the scan is cheap next to the products.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from ...curves import Curve
from .field import FieldConsts, _stack_array, as_u32, field_consts, fp_add, fp_mul, fr_rows, read_only


@njit(cache=True)
def _accumulate(entries, witness, out, matrix, lo, hi, fc):
    n_limbs = witness.shape[1]
    scratch = _stack_array(fc.p, 2, 0)
    value, product = scratch[0], scratch[1]
    for e in range(entries.shape[0]):
        if entries[e, 0] != matrix:
            continue
        row = entries[e, 1]
        if row < lo or row >= hi:
            continue
        for k in range(n_limbs):
            value[k] = np.uint64(entries[e, 3 + 2 * k]) | (np.uint64(entries[e, 4 + 2 * k]) << np.uint64(32))
        fp_mul(value, witness[entries[e, 2]], product, fc)
        fp_add(out[matrix, row], product, out[matrix, row], fc)


@njit(cache=True, parallel=True)
def _evaluate(entries, witness, out, ranges, fc):
    p, pinv, one, r2, pm2 = fc
    n_ranges = ranges.shape[0] - 1
    for t in prange(2 * n_ranges):
        matrix = t % 2
        r = t // 2
        _accumulate(entries, witness, out, matrix, ranges[r], ranges[r + 1], FieldConsts(p, pinv, one, r2, pm2))


class SynthesisInputError(ValueError):
    """Coefficients or a witness that would index outside the domain or the witness."""


def _checked_entries(curve: Curve, coeffs: np.ndarray, n_vars: int, domain_size: int) -> np.ndarray:
    """The section as (n, 3 + limbs) uint32 words, after checking every index it holds (vectorised).

    The kernel does not bounds-check, so an out-of-range entry must be refused here.
    """
    limbs = curve.Fr.n8 // 4
    names = getattr(coeffs.dtype, "names", None) or ()
    if not {"matrix", "constraint", "signal", "value"} <= set(names) or coeffs.dtype.itemsize != 4 * (3 + limbs):
        raise SynthesisInputError(f"coefficients must be the zkey's structured array (matrix, constraint, signal, value[{limbs}] u32), got dtype {coeffs.dtype}")
    if len(coeffs):
        for field, bound in (("matrix", 2), ("constraint", domain_size), ("signal", n_vars)):
            top = int(coeffs[field].max())
            if top >= bound:
                i = int(np.argmax(coeffs[field] >= bound))
                raise SynthesisInputError(f"coefficient #{i}: {field} = {int(coeffs[field][i])} is out of range (must be < {bound})")
    return read_only(np.ascontiguousarray(coeffs).view(np.uint32).reshape(len(coeffs), 3 + limbs))


def evaluate_ab(curve: Curve, coeffs: np.ndarray, witness: np.ndarray, domain_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) evaluation vectors, (domain_size, limbs) uint32 Montgomery form.

    ``coeffs`` is the zkey's structured coefficient array (values c·R² mod r);
    ``witness`` is (n_vars, limbs) uint32 in standard form.
    """
    n_limbs64 = curve.Fr.n8 // 8
    w = fr_rows(curve, witness, "witness")
    entries = _checked_entries(curve, coeffs, w.shape[0], domain_size)
    out = np.zeros((2, domain_size, n_limbs64), dtype=np.uint64)
    n_ranges = max(1, numba.get_num_threads() // 2)
    ranges = np.linspace(0, domain_size, n_ranges + 1).astype(np.int64)
    _evaluate(entries, w, out, ranges, field_consts(curve.Fr))
    return as_u32(out[0]), as_u32(out[1])
