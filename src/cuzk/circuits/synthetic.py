"""Synthetic circuits of any size, with a satisfying witness, for benchmarks at 2^16..2^24 constraints.

Real circom circuits are expensive to compile at these sizes; a prover's cost depends on
the shape of the constraint system, not on what it computes. These circuits imitate the
shape circom emits (``--O1``): sparse rows, most of them products, some booleanity
checks, some wide linear rows, and a witness mixing 0/1 values with full-size ones.

Wires: 0 is the constant one, then ``n_public`` public inputs and two private inputs
(random field elements), then exactly one new wire per constraint. Constraint kinds:

- product: ``(a·x_i [+ a'·x_i'])·(b·x_j) = x_k [+ d·x_l]``, so x_k = (…)(…) − d·x_l;
- booleanity: ``x_k·(x_k − 1) = 0`` with x_k a fresh random bit;
- linear: ``0 = Σ c_t·x_t − x_k`` over 2..12 earlier wires (A and B empty, as circom
  writes linear constraints);
- bit recomposition: ``0 = Σ 2^t·b_t − x_k`` over earlier bits (Num2Bits in reverse).

Coefficients are mostly ±1, some small, some full-size. Operands come half from the last
few hundred wires (locality, like a circuit's gadgets) and half from anywhere earlier.

The witness is computed while the constraints are drawn: constraints come in layers
whose operands all precede the layer, so each layer is a handful of vectorised field
operations (ff/field.py kernels, Montgomery form) over its rows. 2^20 constraints take
seconds; memory peaks at about three times the r1cs (~36 bytes per term, about 6.5 terms
per constraint) while the file is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from numba import njit

from ..ff.field import FROM_MONT, TO_MONT, as_u64, field_consts, fp_add, fp_mul, fp_mul_tuple, fp_set_zero, fp_sub, fp_unary_vec
from ..curves import Curve
from ..formats.r1cs import R1CS, SparseMatrix, write_r1cs
from ..formats.wtns import write_wtns

N_PRIVATE_INPUTS = 2
MAX_LAYER = 1 << 16
LOCAL_WINDOW = 256
MAX_CONSTRAINTS = 1 << 28  # beyond any curve's FFT domain anyway
TERMS_PER_CONSTRAINT = 6.5  # A + B + C terms per row, on average, with KIND_SHARES below

PRODUCT, BOOLEAN, LINEAR, BITS = range(4)
KIND_SHARES = np.array([0.5, 0.2, 0.2, 0.1])  # product, booleanity, linear, bit recomposition


class SyntheticError(ValueError):
    """Parameters for which no circuit can be made."""


@dataclass(frozen=True)
class SyntheticCircuit:
    r1cs: R1CS
    witness: np.ndarray  # (n_wires, Lr) uint32, standard form

    @property
    def public_signals(self) -> list[int]:
        rows = self.witness[1 : 1 + self.r1cs.n_public]
        return [int.from_bytes(r.tobytes(), "little") for r in rows]


class _Terms:
    """Entries (row, wire, coefficient) of one matrix drawn for one layer; rows are layer-local."""

    def __init__(self):
        self.rows: list[np.ndarray] = []
        self.wires: list[np.ndarray] = []
        self.coeffs: list[np.ndarray] = []

    def add(self, rows: np.ndarray, wires: np.ndarray, coeffs: np.ndarray) -> None:
        self.rows.append(rows.astype(np.int64))
        self.wires.append(wires.astype(np.int64))
        self.coeffs.append(coeffs)

    def arrays(self, n_limbs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Entries sorted by (row, wire) with repeated wires in a row dropped."""
        if not self.rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, n_limbs), np.uint32)
        rows, wires, coeffs = np.concatenate(self.rows), np.concatenate(self.wires), np.concatenate(self.coeffs)
        order = np.lexsort((wires, rows))
        rows, wires, coeffs = rows[order], wires[order], coeffs[order]
        keep = np.ones(rows.size, dtype=bool)
        keep[1:] = (rows[1:] != rows[:-1]) | (wires[1:] != wires[:-1])
        return rows[keep], wires[keep], coeffs[keep]


class _Generator:
    def __init__(self, curve: Curve, n_constraints: int, n_public: int, seed: int | None):
        self.curve = curve
        self.rng = np.random.default_rng(seed)
        self.fc = field_consts(curve.Fr)
        self.L = curve.Fr.limbs32
        self.n_constraints, self.n_public = n_constraints, n_public
        self.first_gate_wire = 1 + n_public + N_PRIVATE_INPUTS
        self.n_wires = self.first_gate_wire + n_constraints
        self.values = np.zeros((self.n_wires, self.L), dtype=np.uint32)  # Montgomery form
        self.bits = np.zeros(0, dtype=np.int64)  # wires known to hold 0/1
        self.entries = {m: ([], [], []) for m in "ABC"}
        self.one = self._const(1)
        self.minus_one = self._const(curve.r - 1)

    # field elements ------------------------------------------------------------------
    def _const(self, v: int) -> np.ndarray:
        return np.frombuffer((v % self.curve.r).to_bytes(4 * self.L, "little"), dtype="<u4").copy()

    def random_elements(self, n: int) -> np.ndarray:
        """Uniform-ish values below r: random limbs with the top limb kept under r's."""
        out = self.rng.integers(0, 1 << 32, size=(n, self.L), dtype=np.uint64).astype(np.uint32)
        out[:, -1] = self.rng.integers(0, self.curve.r >> (32 * (self.L - 1)), size=n, dtype=np.uint64)
        return out

    def coefficients(self, n: int) -> np.ndarray:
        """Mostly 1 and −1, some small, some full-size: the mix circom circuits have."""
        kind = self.rng.choice(4, size=n, p=[0.6, 0.15, 0.1, 0.15])
        out = np.zeros((n, self.L), dtype=np.uint32)
        out[kind == 0] = self.one
        out[kind == 1] = self.minus_one
        small = kind == 2
        out[small, 0] = self.rng.integers(2, 1000, size=int(small.sum()))
        full = kind == 3
        out[full] = self.random_elements(int(full.sum()))
        return out

    def _convert(self, values: np.ndarray, op: int) -> np.ndarray:
        """TO_MONT or FROM_MONT over rows."""
        out = np.empty(values.shape, dtype=np.uint32)
        fp_unary_vec(as_u64(np.ascontiguousarray(values)), as_u64(out), op, self.fc)
        return out

    # operands ------------------------------------------------------------------------
    def operands(self, n: int, below: int, lowest: int = 1) -> np.ndarray:
        """Earlier wires in [lowest, below): half from the last LOCAL_WINDOW, half from anywhere."""
        uniform = self.rng.integers(lowest, below, size=n)
        local = below - self.rng.integers(1, min(LOCAL_WINDOW, below - lowest) + 1, size=n)
        return np.where(self.rng.random(n) < 0.5, local, uniform)

    # layers --------------------------------------------------------------------------
    def run(self) -> SyntheticCircuit:
        inputs = slice(1, self.first_gate_wire)
        self.values[0] = self._convert(self.one[None], TO_MONT)[0]
        self.values[inputs] = self._convert(self.random_elements(self.first_gate_wire - 1), TO_MONT)
        done = 0
        while done < self.n_constraints:
            base = self.first_gate_wire + done
            size = min(self.n_constraints - done, MAX_LAYER, base)
            self.layer(done, size)
            done += size
        standard = self._convert(self.values, FROM_MONT)
        matrices = [self._matrix(m) for m in "ABC"]  # each frees its pieces as it is assembled
        r1cs = R1CS(None, self.curve, self.n_wires, 0, self.n_public, N_PRIVATE_INPUTS, self.n_wires, self.n_constraints, *matrices, None)
        return SyntheticCircuit(r1cs, standard)

    def layer(self, first_row: int, size: int) -> None:
        rng = self.rng
        base = self.first_gate_wire + first_row  # every operand of this layer is below it
        new_wire = base + np.arange(size)
        kind = rng.choice(4, size=size, p=KIND_SHARES)
        if self.bits.size < 4:
            kind[kind == BITS] = LINEAR
        A, B, C = _Terms(), _Terms(), _Terms()

        rows = np.flatnonzero(kind == PRODUCT)
        if rows.size:
            left = self.operands(rows.size, base)
            public_rows = first_row + rows < self.n_public  # the first products read each public input
            left[public_rows] = 1 + first_row + rows[public_rows]
            A.add(rows, left, self.coefficients(rows.size))
            second = rows[rng.random(rows.size) < 0.2]
            if second.size:
                A.add(second, self.operands(second.size, base), self.coefficients(second.size))
            B.add(rows, self.operands(rows.size, base), np.where(rng.random((rows.size, 1)) < 0.8, self.one, self.coefficients(rows.size)))
            C.add(rows, new_wire[rows], np.broadcast_to(self.one, (rows.size, self.L)))
            extra = rows[rng.random(rows.size) < 0.3]
            if extra.size:
                C.add(extra, self.operands(extra.size, base, lowest=0), self.coefficients(extra.size))

        rows = np.flatnonzero(kind == BOOLEAN)
        if rows.size:
            A.add(rows, new_wire[rows], np.broadcast_to(self.one, (rows.size, self.L)))
            B.add(rows, new_wire[rows], np.broadcast_to(self.one, (rows.size, self.L)))
            B.add(rows, np.zeros(rows.size, np.int64), np.broadcast_to(self.minus_one, (rows.size, self.L)))

        rows = np.flatnonzero(kind == LINEAR)
        if rows.size:
            n_terms = rng.integers(2, 13, size=rows.size)
            term_rows = np.repeat(rows, n_terms)
            C.add(term_rows, self.operands(term_rows.size, base, lowest=0), self.coefficients(term_rows.size))
            C.add(rows, new_wire[rows], np.broadcast_to(self.minus_one, (rows.size, self.L)))

        rows = np.flatnonzero(kind == BITS)
        if rows.size:
            n_terms = rng.integers(4, min(32, self.bits.size) + 1, size=rows.size)
            term_rows = np.repeat(rows, n_terms)
            exponent = np.arange(term_rows.size) - np.repeat(np.cumsum(n_terms) - n_terms, n_terms)
            powers = np.zeros((term_rows.size, self.L), dtype=np.uint32)
            powers[:, 0] = np.uint32(1) << exponent.astype(np.uint32)
            C.add(term_rows, self.bits[rng.integers(0, self.bits.size, size=term_rows.size)], powers)
            C.add(rows, new_wire[rows], np.broadcast_to(self.minus_one, (rows.size, self.L)))

        a, b, c = (t.arrays(self.L) for t in (A, B, C))
        self._values(kind, new_wire, a, b, c, size)
        for name, (r, w, v) in zip("ABC", (a, b, c)):  # kept compact: 4-byte rows and wires
            self.entries[name][0].append((r + first_row).astype(np.uint32))
            self.entries[name][1].append(w.astype(np.uint32))
            self.entries[name][2].append(v)
        self.bits = np.concatenate([self.bits, new_wire[kind == BOOLEAN]])

    def _values(self, kind: np.ndarray, new_wire: np.ndarray, a, b, c, size: int) -> None:
        """x_k for each row: a random bit, or solved from (A·w)(B·w) = C·w, the new wire's term left out."""
        csr = []
        for rows, wires, coeffs in (a, b, c):
            known = wires < new_wire[0]
            row_ptr = np.zeros(size + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows[known], minlength=size), out=row_ptr[1:])
            csr += [row_ptr, wires[known], as_u64(np.ascontiguousarray(coeffs[known]))]
        solved = np.empty((size, self.L), dtype=np.uint32)
        _solve_rows(*csr, kind != PRODUCT, as_u64(self.values), as_u64(solved), self.fc)  # linear rows carry x_k with −1
        boolean = kind == BOOLEAN
        bits = self.rng.integers(0, 2, size=int(boolean.sum()))
        solved[boolean] = np.where(bits[:, None] == 1, self.values[0], 0)
        self.values[new_wire] = solved

    def _matrix(self, name: str) -> SparseMatrix:
        rows, wires, coeffs = (np.concatenate(parts) for parts in self.entries.pop(name))
        row_ptr = np.zeros(self.n_constraints + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.n_constraints), out=row_ptr[1:])
        return SparseMatrix(row_ptr, wires, np.ascontiguousarray(coeffs, dtype=np.uint32))


@njit(cache=True)
def _row_dot(row_ptr, wires, coeffs, i, values, acc, t, fc):
    """acc = Σ coefficient·value over row i (coefficients standard form, values Montgomery: so is acc)."""
    fp_set_zero(acc)
    for e in range(row_ptr[i], row_ptr[i + 1]):
        fp_mul_tuple(coeffs[e], fc.r2, t, fc)
        fp_mul(t, values[wires[e]], t, fc)
        fp_add(acc, t, acc, fc)


@njit(cache=True)
def _solve_rows(a_ptr, a_wires, a_coeffs, b_ptr, b_wires, b_coeffs, c_ptr, c_wires, c_coeffs, negate, values, out, fc):
    """out[i] = ±((A_i·w)(B_i·w) − C_i·w) over the known terms: the new wire's value (its coefficient is ±1)."""
    scratch = np.zeros((4, values.shape[1]), dtype=np.uint64)
    aw, bw, cw, t = scratch[0], scratch[1], scratch[2], scratch[3]
    for i in range(out.shape[0]):
        _row_dot(a_ptr, a_wires, a_coeffs, i, values, aw, t, fc)
        _row_dot(b_ptr, b_wires, b_coeffs, i, values, bw, t, fc)
        _row_dot(c_ptr, c_wires, c_coeffs, i, values, cw, t, fc)
        fp_mul(aw, bw, aw, fc)
        if negate[i]:
            fp_sub(cw, aw, out[i], fc)
        else:
            fp_sub(aw, cw, out[i], fc)


def estimated_memory(curve: Curve, n_constraints: int) -> int:
    """Peak bytes to generate and write a circuit: the terms three times over (the matrices, then
    the r1cs writer's concatenation and encoded words; measured 1.1 GB at 2^20), the witness twice."""
    per_term = 4 + curve.Fr.n8
    return int(3 * TERMS_PER_CONSTRAINT * n_constraints * per_term + 2 * n_constraints * curve.Fr.n8) + (256 << 20)


def synthesize(curve: Curve, n_constraints: int, n_public: int = 1, seed: int | None = None) -> SyntheticCircuit:
    """A circuit of exactly ``n_constraints`` constraints and ``n_public`` public inputs, with its witness."""
    if not 1 <= n_constraints <= MAX_CONSTRAINTS:
        raise SyntheticError(f"constraints must be in 1..{MAX_CONSTRAINTS}, got {n_constraints}")
    if not 0 <= n_public <= n_constraints:
        raise SyntheticError(f"public inputs must be in 0..{n_constraints} (the constraint count), got {n_public}")
    need = estimated_memory(curve, n_constraints)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > total:
        raise SyntheticError(f"{n_constraints} constraints need about {need / 2**30:.1f} GiB to generate, more than this machine's {total / 2**30:.1f} GiB")
    return _Generator(curve, n_constraints, n_public, seed).run()


def write_synthetic(out_dir: str | os.PathLike, circuit: SyntheticCircuit) -> tuple[Path, Path]:
    """Write ``circuit.r1cs`` and ``witness.wtns`` into ``out_dir`` (created if needed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    r1cs = circuit.r1cs
    r1cs_path, wtns_path = out / "circuit.r1cs", out / "witness.wtns"
    write_r1cs(r1cs_path, r1cs.curve, r1cs.n_pub_out, r1cs.n_pub_in, r1cs.n_prv_in, r1cs.A, r1cs.B, r1cs.C, n_wires=r1cs.n_wires)
    write_wtns(wtns_path, r1cs.curve, circuit.witness)
    return r1cs_path, wtns_path
