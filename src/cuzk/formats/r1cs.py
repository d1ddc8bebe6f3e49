"""circom .r1cs constraint systems, as CSR matrices, and a vectorised satisfaction check.

Container "r1cs", version 1, sections (circom writes them in the order 2, 1, 3):
1 header: u32 n8, prime r, u32 nWires, u32 nPubOut, u32 nPubIn, u32 nPrvIn, u64 nLabels,
  u32 nConstraints;
2 constraints: for each constraint, for each of A, B, C: u32 k, then k × (u32 wire,
  n8-byte coefficient, standard form);
3 wire → label map: nWires × u64.
Sections 4/5 (custom gates) exist only for PLONK circuits and are rejected.

Every entry is a whole number of 32-bit words, so the constraint section is parsed as a
uint32 array by two numba passes: a serial scan that validates structure and wire
indices and counts each row, then a parallel fill into preallocated CSR arrays.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit, prange

from ..curves import Curve
from ..ff.field import FieldConsts, _stack_array, as_u64, fe_eq, field_consts, fp_add, fp_mul, fp_set_zero, fr_rows
from ..ff.parallel import parallel_kernel
from .binfile import BinFile, n8_of, write_binfile
from .errors import FormatError
from .limbs import first_not_below, ints_to_limbs

R1CS_VERSION = 1
HEADER, CONSTRAINTS, WIRE_TO_LABEL, CUSTOM_GATES_LIST, CUSTOM_GATES_USES = 1, 2, 3, 4, 5
SECTION_NAMES = {
    HEADER: "header",
    CONSTRAINTS: "constraints",
    WIRE_TO_LABEL: "wire-to-label map",
    CUSTOM_GATES_LIST: "custom gates list",
    CUSTOM_GATES_USES: "custom gates uses",
}
MATRIX_NAMES = "ABC"


@dataclass(frozen=True, eq=False)  # holds arrays: compare by identity
class SparseMatrix:
    """CSR rows: row i holds wires ``col[row_ptr[i]:row_ptr[i+1]]`` with coefficients ``values[...]`` (standard form)."""

    row_ptr: np.ndarray  # (n_rows + 1,) int64
    col: np.ndarray  # (nnz,) uint32 wire indices
    values: np.ndarray  # (nnz, Lr) uint32

    @property
    def n_rows(self) -> int:
        return self.row_ptr.shape[0] - 1

    @property
    def nnz(self) -> int:
        return self.col.shape[0]

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[int, int]], n_limbs: int) -> SparseMatrix:
        """Build from one {wire: coefficient} mapping per row (for synthetic circuits and tests)."""
        counts = np.array([len(r) for r in rows], dtype=np.int64)
        row_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=row_ptr[1:])
        col = np.array([w for r in rows for w in r], dtype=np.uint32)
        values = ints_to_limbs((v for r in rows for v in r.values()), n_limbs)
        return cls(row_ptr, col, values)


@dataclass(frozen=True, eq=False)  # holds arrays: compare by identity
class R1CS:
    path: Path | None
    curve: Curve
    n_wires: int
    n_pub_out: int
    n_pub_in: int
    n_prv_in: int
    n_labels: int
    n_constraints: int
    A: SparseMatrix
    B: SparseMatrix
    C: SparseMatrix
    wire_to_label: np.ndarray | None  # (n_wires,) uint64 view of section 3, where present

    @property
    def n_public(self) -> int:
        """Public signals after the constant one: outputs, then public inputs (what a zkey calls nPublic)."""
        return self.n_pub_out + self.n_pub_in


# reading --------------------------------------------------------------------------------
def read_r1cs(path: str | os.PathLike) -> R1CS:
    """Read and validate a constraint system (known prime, exact section sizes, wires < nWires, values < r)."""
    with BinFile(path, "r1cs", R1CS_VERSION, SECTION_NAMES) as f:
        if f.has(CUSTOM_GATES_LIST) or f.has(CUSTOM_GATES_USES):
            raise f.error(CUSTOM_GATES_LIST, "custom gates are a PLONK feature; a Groth16 circuit cannot use them")
        header = f.read(HEADER)
        if len(header) < 4:
            raise f.error(HEADER, f"is {len(header)} bytes; too short to hold n8")
        n8 = int.from_bytes(header[:4], "little")
        if len(header) != n8 + 32:
            raise f.error(HEADER, f"is {len(header)} bytes, but with n8 = {n8} it must be n8 + 32 = {n8 + 32}")
        curve = f.curve_of(HEADER, int.from_bytes(header[4 : 4 + n8], "little"), n8, "r")
        rest = header[4 + n8 :]
        n_wires, n_pub_out, n_pub_in, n_prv_in = (int.from_bytes(rest[i : i + 4], "little") for i in range(0, 16, 4))
        n_labels = int.from_bytes(rest[16:24], "little")
        n_constraints = int.from_bytes(rest[24:28], "little")
        # Only wire 0 and the public signals have fixed places: circom's --O2 may substitute a private input away,
        # leaving nPrvIn above what the wires hold (snarkjs reads such files).
        if 1 + n_pub_out + n_pub_in > n_wires:
            raise f.error(HEADER, f"1 + {n_pub_out} outputs + {n_pub_in} public inputs exceed nWires = {n_wires}")
        wire_to_label = None
        if f.has(WIRE_TO_LABEL):
            f.expect_size(WIRE_TO_LABEL, 8 * n_wires, f"nWires = {n_wires} u64 labels")
            wire_to_label = f.view(WIRE_TO_LABEL, "<u8", (n_wires,))
        A, B, C = _read_constraints(f, curve, n_wires, n_constraints)
        return R1CS(Path(path), curve, n_wires, n_pub_out, n_pub_in, n_prv_in, n_labels, n_constraints, A, B, C, wire_to_label)


def _read_constraints(f: BinFile, curve: Curve, n_wires: int, n_constraints: int) -> tuple[SparseMatrix, SparseMatrix, SparseMatrix]:
    sec = f.section(CONSTRAINTS)
    if sec.size % 4:
        raise f.error(CONSTRAINTS, f"is {sec.size} bytes, not a whole number of 32-bit words")
    if 12 * n_constraints > sec.size:
        raise f.error(CONSTRAINTS, f"is {sec.size} bytes, too small for the header's {n_constraints} constraints (12 bytes each at least)")
    words = f.view(CONSTRAINTS, "<u4", (sec.size // 4,))
    if not words.flags.aligned:
        words = words.copy()
    n_limbs = curve.Fr.limbs32
    row_ptr = np.zeros((3, n_constraints + 1), dtype=np.int64)
    row_start = np.empty(n_constraints, dtype=np.int64)
    status, constraint, matrix, detail = _scan_constraints(words, n_constraints, n_limbs, n_wires, row_ptr, row_start)
    if status:
        where = f"constraint {constraint}, {MATRIX_NAMES[matrix]}"
        raise f.error(CONSTRAINTS, {
            1: f"{where}: the section ends where the term count should be (truncated)",
            2: f"{where}: {detail} terms run past the end of the section",
            3: f"{where}: wire {detail} is out of range (nWires = {n_wires})",
            4: f"has {4 * detail} bytes after the last of the header's {n_constraints} constraints",
        }[status])  # fmt: skip
    nnz = row_ptr[:, -1]
    offsets = np.zeros(4, dtype=np.int64)
    np.cumsum(nnz, out=offsets[1:])
    cols = np.empty(offsets[3], dtype=np.uint32)
    values = np.empty((offsets[3], n_limbs), dtype=np.uint32)
    if n_constraints:
        _fill_constraints(words, n_limbs, row_ptr, row_start, offsets, cols, values)
    bad = first_not_below(values, curve.r)
    if bad is not None:
        m = int(np.searchsorted(offsets, bad, side="right")) - 1
        row = int(np.searchsorted(row_ptr[m], bad - offsets[m], side="right")) - 1
        raise f.error(CONSTRAINTS, f"constraint {row}, {MATRIX_NAMES[m]}: a coefficient is not reduced modulo r")
    return tuple(SparseMatrix(row_ptr[m], cols[offsets[m] : offsets[m + 1]], values[offsets[m] : offsets[m + 1]]) for m in range(3))


@njit(cache=True)
def _scan_constraints(words, n_constraints, n_limbs, n_wires, row_ptr, row_start):
    """Validate the layout, count each row's terms; returns (status, constraint, matrix, detail), status 0 = fine."""
    n_words = words.shape[0]
    stride = 1 + n_limbs
    pos = 0
    for c in range(n_constraints):
        row_start[c] = pos
        for m in range(3):
            if pos >= n_words:
                return 1, c, m, 0
            k = np.int64(words[pos])
            pos += 1
            if k * stride > n_words - pos:
                return 2, c, m, k
            for e in range(k):
                wire = np.int64(words[pos + e * stride])
                if wire >= n_wires:
                    return 3, c, m, wire
            row_ptr[m, c + 1] = row_ptr[m, c] + k
            pos += k * stride
    if pos != n_words:
        return 4, n_constraints, 0, n_words - pos
    return 0, 0, 0, 0


@parallel_kernel
def _fill_constraints(words, n_limbs, row_ptr, row_start, offsets, cols, values):
    """Copy each constraint's terms into the CSR arrays (matrix m's entries start at offsets[m])."""
    stride = 1 + n_limbs
    for c in prange(row_start.shape[0]):
        pos = row_start[c]
        for m in range(3):
            k = np.int64(words[pos])
            pos += 1
            dst = offsets[m] + row_ptr[m, c]
            for e in range(k):
                cols[dst + e] = words[pos]
                for j in range(n_limbs):
                    values[dst + e, j] = words[pos + 1 + j]
                pos += stride


# writing --------------------------------------------------------------------------------
def write_r1cs(
    path: str | os.PathLike,
    curve: Curve,
    n_pub_out: int,
    n_pub_in: int,
    n_prv_in: int,
    A: SparseMatrix,
    B: SparseMatrix,
    C: SparseMatrix,
    *,
    n_wires: int | None = None,
    n_labels: int | None = None,
    wire_to_label: np.ndarray | None = None,
) -> None:
    """Write a constraint system as circom does (sections 2, 1, 3).

    ``n_wires`` defaults to the larger of 1 + inputs + outputs and the highest wire used
    + 1; ``wire_to_label`` defaults to the identity map and ``n_labels`` to ``n_wires``.
    """
    n_constraints = A.n_rows
    if B.n_rows != n_constraints or C.n_rows != n_constraints:
        raise ValueError(f"A, B, C must have the same number of rows, got {A.n_rows}, {B.n_rows}, {C.n_rows}")
    n_limbs = curve.Fr.limbs32
    for name, M in zip(MATRIX_NAMES, (A, B, C)):
        if M.values.dtype != np.uint32 or M.values.shape != (M.nnz, n_limbs):
            raise ValueError(f"{name}.values must be an ({M.nnz}, {n_limbs}) uint32 array, got {M.values.dtype} {M.values.shape}")
        if M.row_ptr[0] != 0 or M.row_ptr[-1] != M.nnz or np.any(np.diff(M.row_ptr) < 0):
            raise ValueError(f"{name}.row_ptr is not a valid CSR row pointer for {M.nnz} entries")
        bad = first_not_below(M.values, curve.r)
        if bad is not None:
            raise ValueError(f"{name}: coefficient #{bad} is not reduced modulo r")
    highest = max((int(M.col.max()) for M in (A, B, C) if M.nnz), default=0)
    if n_wires is None:
        n_wires = max(1 + n_pub_out + n_pub_in + n_prv_in, highest + 1)
    if highest >= n_wires:
        raise ValueError(f"wire {highest} is out of range for n_wires = {n_wires}")
    if wire_to_label is None:
        wire_to_label = np.arange(n_wires, dtype="<u8")
    if wire_to_label.shape != (n_wires,):
        raise ValueError(f"wire_to_label must have {n_wires} entries, got {wire_to_label.shape}")
    n_labels = n_wires if n_labels is None else n_labels

    n8 = n8_of(curve.r)
    header = b"".join([
        n8.to_bytes(4, "little"), curve.r.to_bytes(n8, "little"),
        *(v.to_bytes(4, "little") for v in (n_wires, n_pub_out, n_pub_in, n_prv_in)),
        n_labels.to_bytes(8, "little"), n_constraints.to_bytes(4, "little"),
    ])  # fmt: skip
    write_binfile(path, "r1cs", R1CS_VERSION, [
        (CONSTRAINTS, [_encode_constraints(A, B, C, n_limbs)]),
        (HEADER, [header]),
        (WIRE_TO_LABEL, [wire_to_label.astype("<u8", copy=False)]),
    ])  # fmt: skip


def _encode_constraints(A: SparseMatrix, B: SparseMatrix, C: SparseMatrix, n_limbs: int) -> np.ndarray:
    mats = (A, B, C)
    row_ptr = np.stack([M.row_ptr.astype(np.int64) for M in mats])
    offsets = np.zeros(4, dtype=np.int64)
    np.cumsum([M.nnz for M in mats], out=offsets[1:])
    cols = np.concatenate([M.col for M in mats]).astype(np.uint32)
    values = np.concatenate([M.values for M in mats])
    row_words = 3 + (1 + n_limbs) * (row_ptr[:, 1:] - row_ptr[:, :-1]).sum(axis=0)
    row_start = np.zeros(A.n_rows + 1, dtype=np.int64)
    np.cumsum(row_words, out=row_start[1:])
    words = np.empty(row_start[-1], dtype="<u4")
    if A.n_rows:
        _encode_kernel(row_ptr, offsets, cols, values, row_start, words)
    return words


@parallel_kernel
def _encode_kernel(row_ptr, offsets, cols, values, row_start, words):
    n_limbs = values.shape[1]
    for c in prange(row_start.shape[0] - 1):
        pos = row_start[c]
        for m in range(3):
            lo = offsets[m] + row_ptr[m, c]
            k = row_ptr[m, c + 1] - row_ptr[m, c]
            words[pos] = k
            pos += 1
            for e in range(lo, lo + k):
                words[pos] = cols[e]
                for j in range(n_limbs):
                    words[pos + 1 + j] = values[e, j]
                pos += 1 + n_limbs


# satisfaction ---------------------------------------------------------------------------
def check_satisfied(r1cs: R1CS, witness) -> int | None:
    """Index of the first constraint with (A·w)(B·w) ≠ C·w mod r, or None when all hold.

    ``witness`` is a :class:`~cuzk.formats.wtns.Witness` or an (n_wires, Lr) uint32 array of
    standard-form values < r. Evaluated in parallel by a numba kernel on the CPU backend's field.
    """
    curve = r1cs.curve
    values = getattr(witness, "values", witness)
    wcurve = getattr(witness, "curve", curve)
    if wcurve.r != curve.r:
        raise FormatError(getattr(witness, "path", None), f"witness is over {wcurve.name}'s scalar field but the r1cs ({r1cs.path}) is {curve.name}")
    n_limbs = curve.Fr.limbs32
    if not isinstance(values, np.ndarray) or values.dtype != np.uint32 or values.shape != (r1cs.n_wires, n_limbs):
        shape = getattr(values, "shape", None)
        raise FormatError(getattr(witness, "path", None), f"witness must be ({r1cs.n_wires}, {n_limbs}) uint32 for the r1cs {r1cs.path}, got shape {shape}")
    if r1cs.n_constraints == 0:
        return None
    A, B, C = ((M.row_ptr, M.col, fr_rows(curve, M.values, "coefficients")) for M in (r1cs.A, r1cs.B, r1cs.C))
    r_inv = as_u64(ints_to_limbs([curve.Fr.R_inv], n_limbs))[0]
    failing = np.zeros(r1cs.n_constraints, dtype=np.bool_)
    _unsatisfied_rows(*A, *B, *C, fr_rows(curve, values, "witness"), r_inv, failing, field_consts(curve.Fr))
    bad = np.flatnonzero(failing)
    return int(bad[0]) if bad.size else None


@njit(cache=True)
def _dot_row(row_ptr, col, coeffs, i, w, acc, prod, fc) -> None:
    """acc = Σ_k coeff_k·w[col_k]·R⁻¹ over row i = (row · w)·R⁻¹."""
    fp_set_zero(acc)
    for k in range(row_ptr[i], row_ptr[i + 1]):
        fp_mul(coeffs[k], w[col[k]], prod, fc)
        fp_add(acc, prod, acc, fc)


@njit(cache=True)
def _unsatisfied_range(a_ptr, a_col, a_val, b_ptr, b_col, b_val, c_ptr, c_col, c_val, w, r_inv, failing, lo, hi, fc):
    """Rows [lo, hi) of :func:`_unsatisfied_rows`, with the temporaries on the stack."""
    t = _stack_array(fc.p, 4, 0)
    aw, bw, cw, prod = t[0], t[1], t[2], t[3]
    for i in range(lo, hi):
        _dot_row(a_ptr, a_col, a_val, i, w, aw, prod, fc)
        _dot_row(b_ptr, b_col, b_val, i, w, bw, prod, fc)
        _dot_row(c_ptr, c_col, c_val, i, w, cw, prod, fc)
        fp_mul(aw, bw, aw, fc)
        fp_mul(cw, r_inv, cw, fc)
        failing[i] = not fe_eq(aw, cw)


@parallel_kernel
def _unsatisfied_rows(a_ptr, a_col, a_val, b_ptr, b_col, b_val, c_ptr, c_col, c_val, w, r_inv, failing, fc):
    """failing[i] = (A_i·w)(B_i·w) ≠ C_i·w, on the CPU backend's Montgomery arithmetic.

    Each row sum comes out times R⁻¹, so the check compares (Aw·R⁻¹)(Bw·R⁻¹)·R⁻¹ = AwBw·R⁻³
    with (Cw·R⁻¹)·R⁻¹·R⁻¹ = Cw·R⁻³.
    """
    n = failing.shape[0]
    n_chunks = min(n, 256)
    p, pinv, one, r2, pm2 = fc
    for chunk in prange(n_chunks):
        lo, hi = chunk * n // n_chunks, (chunk + 1) * n // n_chunks
        _unsatisfied_range(a_ptr, a_col, a_val, b_ptr, b_col, b_val, c_ptr, c_col, c_val, w, r_inv, failing, lo, hi,
                           FieldConsts(p, pinv, one, r2, pm2))  # fmt: skip
