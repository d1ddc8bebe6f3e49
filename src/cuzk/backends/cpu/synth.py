"""Synthesis: A·w and B·w on the domain rows, from the zkey's coefficient section.

Each stored coefficient is c·R² mod r (snarkjs), and the witness is in standard form, so
one Montgomery product mont(c·R², w) = c·w·R is already the Montgomery form of c·w.
Rows are scattered through the section (snarkjs does not sort it), so the first synthesis
with a key orders its entries by (matrix, row) once — a counting sort into a uint32
permutation (``row_order_bytes``, counted in the key's footprint), kept while the key's
coefficient array lives — and each parallel task then sums one contiguous run of
whole rows: no two tasks write the same row, and no task reads entries it does not use
(a scan of the whole section per task cost more than the products on a many-core host).
"""

from __future__ import annotations

import threading
import weakref
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange

from ...curves import Curve
from ...ff.parallel import parallel_kernel
from ...ff.field import FieldConsts, _stack_array, as_u32, field_consts, fp_add, fp_mul, fr_rows, read_only


@njit(cache=True)
def _accumulate(entries, order, first, stop, witness, out, fc):
    """out[matrix, row] += value · witness[signal] for the entries order[first:stop]."""
    n_limbs = witness.shape[1]
    scratch = _stack_array(fc.p, 2, 0)
    value, product = scratch[0], scratch[1]
    for i in range(first, stop):
        e = order[i]
        for k in range(n_limbs):
            value[k] = np.uint64(entries[e, 3 + 2 * k]) | (np.uint64(entries[e, 4 + 2 * k]) << np.uint64(32))
        target = out[entries[e, 0], entries[e, 1]]
        fp_mul(value, witness[entries[e, 2]], product, fc)
        fp_add(target, product, target, fc)


@parallel_kernel(nogil=True)
def _evaluate(entries, order, starts, witness, out, fc):
    p, pinv, one, r2, pm2 = fc
    for t in prange(starts.shape[0] - 1):
        _accumulate(entries, order, starts[t], starts[t + 1], witness, out, FieldConsts(p, pinv, one, r2, pm2))


@njit(cache=True)
def _task_starts(entries, order, n_tasks):
    """n_tasks + 1 boundaries into ``order`` of about equal work, each at the start of a row."""
    n = order.shape[0]
    starts = np.empty(n_tasks + 1, dtype=np.int64)
    starts[0] = 0
    for t in range(1, n_tasks):
        i = max(starts[t - 1], (n * t) // n_tasks)
        while 0 < i < n and entries[order[i], 0] == entries[order[i - 1], 0] and entries[order[i], 1] == entries[order[i - 1], 1]:
            i -= 1
        starts[t] = max(i, starts[t - 1])
    starts[n_tasks] = n
    return starts


@njit(cache=True)
def _order_by_row(entries, domain_size):
    """Entry indices stably ordered by (matrix, row) — a counting sort, O(n) time and 4 bytes a row of scratch —
    and the 2·domain_size + 1 boundaries of the rows (matrix·domain_size + row) in that order."""
    n = entries.shape[0]
    starts = np.zeros(2 * domain_size + 1, np.uint32)
    for e in range(n):
        starts[np.int64(entries[e, 0]) * domain_size + entries[e, 1] + 1] += 1
    for i in range(1, starts.shape[0]):
        starts[i] += starts[i - 1]
    order = np.empty(n, np.uint32)
    for e in range(n):
        row = np.int64(entries[e, 0]) * domain_size + entries[e, 1]
        order[starts[row]] = e
        starts[row] += 1
    for i in range(starts.shape[0] - 1, 0, -1):  # each row's start went to its end, the next row's start
        starts[i] = starts[i - 1]
    starts[0] = 0
    return order, starts


def row_order_bytes(n_coeffs: int) -> int:
    """What the (matrix, row) order of a key's coefficients holds while the key is loaded."""
    return 4 * n_coeffs


class SynthesisInputError(ValueError):
    """Coefficients or a witness that would index outside the domain or the witness."""


def checked_entries(curve: Curve, coeffs: np.ndarray, n_vars: int, domain_size: int) -> np.ndarray:
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


class _RowOrder(NamedTuple):
    entries: np.ndarray  # the checked section, (n, 3 + limbs) uint32
    order: np.ndarray  # uint32 entry indices sorted by (matrix, row)
    n_vars: int
    domain_size: int


# The kernel releases the GIL, so proving threads (the GPUs' launches) run on while it sums; one at a
# time, since it already uses every core (numba's workqueue layer is parallel_kernel's concern).
_evaluate_lock = threading.Lock()
_row_orders: dict[int, tuple[weakref.ref, _RowOrder]] = {}
_row_orders_lock = threading.Lock()


def _row_order(curve: Curve, coeffs: np.ndarray, n_vars: int, domain_size: int) -> _RowOrder:
    """The checked entries of ``coeffs`` and their (matrix, row) order, made once per coefficient array."""
    key = id(coeffs)
    with _row_orders_lock:
        hit = _row_orders.get(key)
    if hit is not None and hit[0]() is coeffs and hit[1].n_vars == n_vars and hit[1].domain_size == domain_size:
        return hit[1]
    entries = checked_entries(curve, coeffs, n_vars, domain_size)
    made = _RowOrder(entries, read_only(_order_by_row(entries, domain_size)[0]), n_vars, domain_size)
    try:
        ref = weakref.ref(coeffs, lambda _, key=key, table=_row_orders: table.pop(key, None))
    except TypeError:  # not weak-referenceable: use it once
        return made
    with _row_orders_lock:
        _row_orders[key] = (ref, made)
    return made


def evaluate_ab(curve: Curve, coeffs: np.ndarray, witness: np.ndarray, domain_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) evaluation vectors, (domain_size, limbs) uint32 Montgomery form.

    ``coeffs`` is the zkey's structured coefficient array (values c·R² mod r);
    ``witness`` is (n_vars, limbs) uint32 in standard form.
    """
    n_limbs64 = curve.Fr.n8 // 8
    w = fr_rows(curve, witness, "witness")
    rows = _row_order(curve, coeffs, w.shape[0], domain_size)
    out = np.zeros((2, domain_size, n_limbs64), dtype=np.uint64)
    n_tasks = max(1, 4 * numba.get_num_threads())  # a few per thread: rows are uneven
    starts = _task_starts(rows.entries, rows.order, n_tasks)
    with _evaluate_lock:
        _evaluate(rows.entries, rows.order, starts, w, out, field_consts(curve.Fr))
    return as_u32(out[0]), as_u32(out[1])
