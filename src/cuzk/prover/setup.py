"""Circuit-specific Groth16 setup: an .r1cs in, a snarkjs-compatible .zkey out.

The key holds what snarkjs's ``zkey new`` plus one ``zkey contribute`` would produce, in
the same sections and encodings, so snarkjs and cuzk both prove with it. For a circuit of
m constraints and p public signals, on the domain of n = 2^k ≥ m + p + 1 rows (snarkjs
adds one A-row per public signal and one for the constant, which binds them):

- u_i, v_i, w_i(τ) = Σ_c A/B/C[c][i]·L_c(τ) for each wire i, with L_c the Lagrange basis
  of the n-domain; the extra A-rows give u_i += L_{m+i}(τ) for i ≤ p;
- A_i = u_i·G1, B1_i = v_i·G1, B2_i = v_i·G2;
- IC_i = (β·u_i + α·v_i + w_i)·G1 for i ≤ p (γ = 1, as snarkjs leaves it), and
  C_i = (β·u_i + α·v_i + w_i)/δ·G1 for the other wires;
- H_j = L'_{2j+1}(τ)/δ·G1, L' the Lagrange basis of the 2n-domain: the prover evaluates
  A·B − C on the odd half of that domain, where it equals h·Z with Z = −2, and
  (A·B − C)(τ) = Σ_odd (A·B − C)(x_j)·L'_j(τ) because the even half vanishes;
- the coefficient section lists A's and B's entries (plus the public A-rows), c·R².

Two sources of τ, α, β:

- **A snarkjs .ptau** (prepared for phase 2): its Lagrange-basis points L_c(τ)·G1/G2 and
  α/β·L_c(τ)·G1 are combined per wire (``sparse_combinations``); τ is never known. A fresh
  δ is applied, as one ``zkey contribute`` would.
- **None**: τ, α, β, δ are sampled here from the OS CSPRNG and forgotten. Whoever runs
  the setup could have kept them and forged proofs, so such a key is **for testing
  only**; the key's contribution record says so, and so does the command's output.
  The points are then g·scalar with known scalars: fixed-base multiplications from one
  precomputed table per group, which is what makes a 2^20 key take minutes on a CPU. With
  the CUDA backend they run on the GPU (backends/cuda/fixed_base.py, the same table and the
  same bytes), and a 2^24 key is bound by the CPU's QAP work and the disk instead.

Section 10 records δ as one ``zkey contribute`` would (ceremony.py): δ·G1, a name that says
where the secrets came from, and the proof of knowledge of δ bound to the circuit hash, so
``snarkjs zkey verify <r1cs> <ptau> <zkey>`` accepts a key made from a .ptau. That hash is
``zkey new``'s, over the points of the key before δ: the sections as they stream (write_zkey
takes them in the hash's order), C before its division by δ, and in the H section's place
the ceremony's (τ^(n+i) − τ^i)·G1 — as many as snarkjs 0.7.6 hashes (``_hashed_h_points``),
the last one past section tauG1 when the domain is the ptau's whole 2^power, as it reads it.
A test-only key has no ceremony to be checked against: its circuit hash is zero, its
contribution otherwise the same.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backends import Backend, get_backend
from ..ff.field import ADD, MUL, SUB, as_u32, as_u64, field_consts, fp_batch_inv_vec, fp_binary_vec, fp_mul_powers_vec, to_mont_int
from ..backends.cpu.fixed_base import FixedBaseTable, column_sums, csr_to_columns, first_invalid_point, sparse_combinations
from ..curves import Curve
from ..curves.serialize import g1_from_bytes, g1_to_bytes, g2_from_bytes
from ..formats.limbs import ints_to_limbs
from ..formats.ptau import Ptau, read_ptau
from ..formats.r1cs import R1CS, SparseMatrix, read_r1cs
from ..formats.zkey import CS_HASH_BYTES, MPCParams, coeff_dtype, encode_coeff_values, write_zkey
from .ceremony import CircuitHash, contribution, wasm_sub_affine

TEST_ONLY_NAME = "cuzk setup, TEST ONLY: toxic waste sampled locally"
CHUNK_POINTS = 1 << 16  # points computed and written per piece of a section


class SetupError(ValueError):
    """The circuit and the ceremony file cannot make a key (curve mismatch, domain too large...)."""


@dataclass
class SetupResult:
    zkey: Path
    curve: Curve
    n_constraints: int
    n_vars: int
    n_public: int
    domain_size: int
    test_only: bool
    contribution_name: str
    backend: str = "cpu"  # what made the fixed-base points ("cpu" also for every .ptau key: see _FromPtau)
    timings: dict[str, float] = field(default_factory=dict)


def domain_power(n_constraints: int, n_public: int) -> int:
    """log2 of snarkjs's domain: the smallest 2^k > constraints + public signals (room for the extra rows)."""
    return max(1, (n_constraints + n_public).bit_length())


# ----------------------------------------------------------------------------------
# Wires as columns: the transpose of the r1cs's constraint rows.


@dataclass(frozen=True)
class Columns:
    """Matrix entries grouped by wire: wire i's entries are indptr[i]..indptr[i+1] (rows = constraints)."""

    indptr: np.ndarray  # (n_wires + 1,) int64
    rows: np.ndarray  # (nnz,) int64
    coeffs: np.ndarray  # (nnz, Lr) uint32, standard form


def _columns(M: SparseMatrix, n_wires: int, extra_rows: np.ndarray | None = None, extra_cols: np.ndarray | None = None, one: np.ndarray | None = None) -> Columns:
    return Columns(*csr_to_columns(M.row_ptr, M.col, M.values, n_wires, extra_rows, extra_cols, one))


def _wire_columns(r1cs: R1CS) -> tuple[Columns, Columns, Columns]:
    """A (with snarkjs's extra rows m + i for the public wires i ≤ p), B and C by wire."""
    m, p = r1cs.n_constraints, r1cs.n_public
    one = ints_to_limbs([1], r1cs.curve.Fr.limbs32)[0]
    public = np.arange(p + 1, dtype=np.int64)
    return (
        _columns(r1cs.A, r1cs.n_wires, m + public, public, one),
        _columns(r1cs.B, r1cs.n_wires),
        _columns(r1cs.C, r1cs.n_wires),
    )


def coefficient_section(r1cs: R1CS) -> np.ndarray:
    """Section 4 in snarkjs's order: per constraint its A then B entries, then the public A-rows; values c·R².

    No sort: both matrices are already in row order, so constraint c's A entries start at
    A.row_ptr[c] + B.row_ptr[c] and its B entries right after them.
    """
    A, B = r1cs.A, r1cs.B
    m, p = r1cs.n_constraints, r1cs.n_public
    public = np.arange(p + 1, dtype=np.uint32)
    a_ptr, b_ptr = A.row_ptr.astype(np.int64), B.row_ptr.astype(np.int64)
    a_row = np.repeat(np.arange(m, dtype=np.uint32), np.diff(a_ptr))
    b_row = np.repeat(np.arange(m, dtype=np.uint32), np.diff(b_ptr))
    a_pos = np.arange(A.nnz, dtype=np.int64) + b_ptr[a_row]
    b_pos = np.arange(B.nnz, dtype=np.int64) + a_ptr[b_row.astype(np.int64) + 1]
    out = np.empty(A.nnz + B.nnz + p + 1, dtype=coeff_dtype(r1cs.curve.Fr.n8))
    body = out[: A.nnz + B.nnz]
    body["matrix"][a_pos], body["matrix"][b_pos] = 0, 1
    body["constraint"][a_pos], body["constraint"][b_pos] = a_row, b_row
    body["signal"][a_pos], body["signal"][b_pos] = A.col, B.col
    values = np.empty((A.nnz + B.nnz, A.values.shape[1]), dtype=np.uint32)
    values[a_pos], values[b_pos] = A.values, B.values
    del a_row, b_row, a_pos, b_pos
    tail = out[A.nnz + B.nnz :]
    tail["matrix"], tail["constraint"], tail["signal"] = 0, m + public, public
    out["value"] = encode_coeff_values(r1cs.curve, np.concatenate([values, ints_to_limbs([1] * (p + 1), r1cs.curve.Fr.limbs32)]))
    return out


# ----------------------------------------------------------------------------------
# Fr helpers (ff/field.py kernels on uint64 views).


def _fr_row(curve: Curve, value: int, mont: bool) -> np.ndarray:
    """One Fr element as a uint64 row, Montgomery form or standard form."""
    if mont:
        return to_mont_int(curve.Fr, value)
    return as_u64(ints_to_limbs([value % curve.r], curve.Fr.limbs32))[0]


def _with_constant(curve: Curve, op: int, x: np.ndarray, k: np.ndarray, out: np.ndarray, constant_first: bool = False) -> None:
    """out = x (op) k, or k (op) x, for one element k (uint64 rows), in blocks so the repeated k stays small."""
    n = x.shape[0]
    block = np.ascontiguousarray(np.broadcast_to(k, (min(n, CHUNK_POINTS), k.shape[0])))
    fc = field_consts(curve.Fr)
    for lo in range(0, n, CHUNK_POINTS):
        hi = min(n, lo + CHUNK_POINTS)
        kk = block[: hi - lo]
        fp_binary_vec(kk if constant_first else x[lo:hi], x[lo:hi] if constant_first else kk, out[lo:hi], op, fc)


def lagrange_at(curve: Curve, log_n: int, tau: int, odd_of_double: bool = False) -> np.ndarray:
    """L_c(τ) for c < n = 2^log_n, Montgomery form ``(n, Lr)`` uint32.

    With ``odd_of_double`` the basis is the 2n-domain's, at its odd points ω_2n^(2c+1)
    (the H points' basis). Closed form L_j(τ) = (τ^N − 1)/N · x_j/(τ − x_j) over a
    domain of N points x_j, with one batch inversion.
    """
    Fr = curve.Fr
    fc = field_consts(Fr)
    n = 1 << log_n
    size = 2 * n if odd_of_double else n
    xs = np.empty((n, Fr.limbs64), dtype=np.uint64)
    fp_mul_powers_vec(np.empty((0, Fr.limbs64), np.uint64), _fr_row(curve, curve.fr_root_of_unity(log_n), True), xs, fc)
    if odd_of_double:  # x_j = ω_2n·ω_n^j
        _with_constant(curve, MUL, xs, _fr_row(curve, curve.fr_root_of_unity(log_n + 1), True), xs)
    den = np.empty_like(xs)
    _with_constant(curve, SUB, xs, _fr_row(curve, tau, True), den, constant_first=True)
    fp_batch_inv_vec(den, den, fc)
    fp_binary_vec(xs, den, xs, MUL, fc)
    scale = (pow(tau, size, curve.r) - 1) * pow(size, -1, curve.r) % curve.r
    _with_constant(curve, MUL, xs, _fr_row(curve, scale, True), xs)
    return as_u32(xs)


def _scaled(curve: Curve, values: np.ndarray, k: int, mont_in: bool) -> np.ndarray:
    """values·k: standard in, standard out (k taken in Montgomery form), or Montgomery in, standard out."""
    out = np.empty(values.shape, dtype=np.uint32)
    _with_constant(curve, MUL, as_u64(np.ascontiguousarray(values)), _fr_row(curve, k, not mont_in), as_u64(out))
    return out


def _add(curve: Curve, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape, dtype=np.uint32)
    fp_binary_vec(as_u64(a), as_u64(b), as_u64(out), ADD, field_consts(curve.Fr))
    return out


# ----------------------------------------------------------------------------------
# The two ways to the points.


def _chunks(compute: Callable[[int, int], np.ndarray], n: int, on_done: Callable[[], None] | None = None,
            chunk: int = CHUNK_POINTS) -> Iterator[np.ndarray]:
    """Yield compute(lo, hi) over [0, n) in pieces of ``chunk`` points (a section streams to the file)."""
    for lo in range(0, n, chunk):
        yield compute(lo, min(n, lo + chunk))
    if on_done is not None:
        on_done()


def _random_scalar(curve: Curve) -> int:
    return 1 + secrets.randbelow(curve.r - 1)


class _Sections:
    """The point sections of one key as lazily computed chunks, plus the header points."""

    def __init__(self, r1cs: R1CS, log_n: int, delta: int, timings: dict[str, float]):
        self.r1cs, self.curve, self.log_n, self.delta = r1cs, r1cs.curve, log_n, delta
        self.n_public = r1cs.n_public
        self.timings = timings
        self._clock = time.perf_counter()

    def close(self) -> None:
        """Give back what the sections held outside host memory (device tables)."""

    def circuit_hash(self) -> bytes:
        """``zkey new``'s circuit hash of these sections, once all are written; zero where no ceremony defines one."""
        return bytes(CS_HASH_BYTES)

    def _lap(self, name: str) -> Callable[[], None]:
        def done() -> None:
            now = time.perf_counter()
            self.timings[name] = self.timings.get(name, 0.0) + now - self._clock
            self._clock = now

        return done


def _fixed_base_tables(backend: Backend) -> tuple[Callable, int]:
    """A FixedBaseTable-like constructor (curve, group, base, n_scalars) for ``backend`` (the GPU's or the
    CPU's), and the points per chunk it wants (a GPU launch must be large to fill the device)."""
    if backend.name == "cuda":
        from ..backends.cuda.fixed_base import CudaFixedBaseTable

        return (lambda curve, group, base, n: CudaFixedBaseTable(curve, group, base, n, backend.runtime, vram=backend.vram),
                CudaFixedBaseTable.chunk_points)
    return FixedBaseTable, FixedBaseTable.chunk_points


class _FromToxicWaste(_Sections):
    """τ, α, β known: every point is a fixed-base multiple of a generator."""

    def __init__(self, r1cs: R1CS, log_n: int, timings: dict[str, float], tables: Callable = FixedBaseTable):
        curve = r1cs.curve
        n = 1 << log_n
        while True:
            tau = _random_scalar(curve)
            if pow(tau, 2 * n, curve.r) != 1:  # τ on the domain would make a Lagrange denominator zero
                break
        self.alpha, self.beta = _random_scalar(curve), _random_scalar(curve)
        super().__init__(r1cs, log_n, _random_scalar(curve), timings)
        G1, G2 = curve.G1, curve.G2
        self.alpha1, self.beta1, self.beta2 = G1.mul(G1.generator, self.alpha), G1.mul(G1.generator, self.beta), G2.mul(G2.generator, self.beta)

        t = time.perf_counter()
        lag = lagrange_at(curve, log_n, tau)
        cols_a, cols_b, cols_c = _wire_columns(r1cs)
        self.u = column_sums(curve, cols_a.indptr, cols_a.rows, cols_a.coeffs, lag)
        self.v = column_sums(curve, cols_b.indptr, cols_b.rows, cols_b.coeffs, lag)
        w = column_sums(curve, cols_c.indptr, cols_c.rows, cols_c.coeffs, lag)
        self.k = _add(curve, _add(curve, _scaled(curve, self.u, self.beta, False), _scaled(curve, self.v, self.alpha, False)), w)
        self.h_lagrange = lagrange_at(curve, log_n, tau, odd_of_double=True)
        del lag, w
        timings["qap"] = time.perf_counter() - t

        t = time.perf_counter()
        n_g1 = 3 * r1cs.n_wires + n
        self.g1 = self.g2 = None
        try:
            self.g1 = tables(curve, 1, G1.generator, n_g1)
            self.g2 = tables(curve, 2, G2.generator, r1cs.n_wires)
        except BaseException:
            self.close()  # e.g. the G2 table did not fit in VRAM: give the G1 one back
            raise
        timings["tables"] = time.perf_counter() - t
        self._clock = time.perf_counter()

    def close(self) -> None:
        for table in (self.g1, self.g2):
            if table is not None and hasattr(table, "free"):
                table.free()

    def _g1(self, compute, n: int, name: str):
        return _chunks(compute, n, self._lap(name), self.g1.chunk_points)

    def ic(self):
        return self._g1(lambda lo, hi: self.g1.mul(self.k[lo:hi]), self.n_public + 1, "ic")

    def a(self):
        return self._g1(lambda lo, hi: self.g1.mul(self.u[lo:hi]), self.r1cs.n_wires, "a")

    def b1(self):
        return self._g1(lambda lo, hi: self.g1.mul(self.v[lo:hi]), self.r1cs.n_wires, "b1")

    def b2(self):
        return _chunks(lambda lo, hi: self.g2.mul(self.v[lo:hi]), self.r1cs.n_wires, self._lap("b2"), self.g2.chunk_points)

    def c(self):
        d_inv = pow(self.delta, -1, self.curve.r)
        first = self.n_public + 1
        return self._g1(lambda lo, hi: self.g1.mul(_scaled(self.curve, self.k[first + lo : first + hi], d_inv, False)), self.r1cs.n_wires - first, "c")

    def h(self):
        d_inv = pow(self.delta, -1, self.curve.r)
        return self._g1(lambda lo, hi: self.g1.mul(_scaled(self.curve, self.h_lagrange[lo:hi], d_inv, True)), 1 << self.log_n, "h")


class _FromPtau(_Sections):
    """A ceremony's Lagrange-basis points: every point is a sparse combination of them.

    These are variable-base sums (Straus, on the CPU whatever the backend): short sums of
    small coefficients, far cheaper per point than the fixed-base path's full-size scalars.
    The circuit hash absorbs each chunk as it passes (see the module docstring).
    """

    def __init__(self, r1cs: R1CS, log_n: int, ptau: Ptau, timings: dict[str, float]):
        super().__init__(r1cs, log_n, _random_scalar(r1cs.curve), timings)
        curve = r1cs.curve

        def valid(points: np.ndarray, what: str) -> np.ndarray:
            return _valid_points(ptau, curve, points, what)

        self.alpha1 = g1_from_bytes(curve, valid(ptau.alpha_g1()[None], "alpha·G1 (section alphaTauG1)").tobytes())
        self.beta1 = g1_from_bytes(curve, valid(ptau.beta_g1()[None], "beta·G1 (section betaTauG1)").tobytes())
        self.beta2 = g2_from_bytes(curve, valid(ptau.beta_g2()[None], "beta·G2 (section betaG2)").tobytes())
        self.tau_g1 = valid(ptau.lagrange("tau_g1", log_n), f"the 2^{log_n} Lagrange basis of section lagrange tauG1")
        self.tau_g2 = valid(ptau.lagrange("tau_g2", log_n), f"the 2^{log_n} Lagrange basis of section lagrange tauG2")
        alpha_tau = valid(ptau.lagrange("alpha_tau_g1", log_n), f"the 2^{log_n} Lagrange basis of section lagrange alphaTauG1")
        beta_tau = valid(ptau.lagrange("beta_tau_g1", log_n), f"the 2^{log_n} Lagrange basis of section lagrange betaTauG1")
        # One array for the C/IC combinations: [L·G1 | α·L·G1 | β·L·G1].
        self.abc_g1 = np.concatenate([self.tau_g1, alpha_tau, beta_tau])
        self.h_basis = valid(ptau.lagrange("tau_g1", log_n + 1), f"the 2^{log_n + 1} Lagrange basis of section lagrange tauG1")[1::2]
        self.cols = _wire_columns(r1cs)
        n = 1 << log_n
        # C_i/IC_i = Σ A[c][i]·β·L_c + B[c][i]·α·L_c + C[c][i]·L_c: merge the three column sets.
        a, b, c = self.cols
        self.k_cols = _merge_columns([(a, 2 * n), (b, n), (c, 0)], r1cs.n_wires)
        # τ^i·G1 up to i = n + (the H points zkey new hashes) − 1. For a domain of 2^power > 2^14 the last lies
        # one past the section: zkey new reads the bytes that follow it in the file as that point.
        wanted, in_section = n + _hashed_h_points(log_n), 2 * (1 << ptau.header.power) - 1
        self.tau_powers = valid(ptau.tau_g1(min(wanted, in_section)), "the powers of section tauG1")
        self.past_tau_g1 = ptau.past_tau_g1() if wanted > in_section else None
        G1, G2 = curve.G1, curve.G2
        self._hash = CircuitHash(curve)
        for P, group in ((self.alpha1, 1), (self.beta1, 1), (self.beta2, 2), (G2.generator, 2), (G1.generator, 1), (G2.generator, 2)):
            self._hash.point(P, group)  # γ2, δ1, δ2 as zkey new leaves them
        self._clock = time.perf_counter()

    def circuit_hash(self) -> bytes:
        return self._hash.digest()

    def _combine(self, points: np.ndarray, cols: Columns, lo: int, hi: int) -> np.ndarray:
        s, e = cols.indptr[lo], cols.indptr[hi]
        return sparse_combinations(self.curve, points, cols.indptr[lo : hi + 1] - s, cols.rows[s:e], cols.coeffs[s:e])

    def _combined(self, name: str, points: np.ndarray, cols: Columns, n: int) -> Iterator[np.ndarray]:
        """A section of per-wire combinations as zkey new writes it too, absorbed by the circuit hash as it passes."""
        self._hash.count(n)
        for chunk in _chunks(lambda lo, hi: self._combine(points, cols, lo, hi), n, self._lap(name)):
            self._hash.points(chunk)
            yield chunk

    def ic(self):
        return self._combined("ic", self.abc_g1, self.k_cols, self.n_public + 1)

    def a(self):
        return self._combined("a", self.tau_g1, self.cols[0], self.r1cs.n_wires)

    def b1(self):
        return self._combined("b1", self.tau_g1, self.cols[1], self.r1cs.n_wires)

    def b2(self):
        return self._combined("b2", self.tau_g2, self.cols[1], self.r1cs.n_wires)

    def _over_delta(self, points: np.ndarray) -> np.ndarray:
        """points/δ: each point times δ⁻¹ (a one-term sparse combination)."""
        n = points.shape[0]
        d_inv = ints_to_limbs([pow(self.delta, -1, self.curve.r)], self.curve.Fr.limbs32)
        coeffs = np.ascontiguousarray(np.broadcast_to(d_inv, (n, d_inv.shape[1])))
        return sparse_combinations(self.curve, points, np.arange(n + 1), np.arange(n), coeffs)

    def c(self):
        # Combining first and scaling once costs one full-size multiplication per wire;
        # folding δ⁻¹ into the coefficients would make every term full-size.
        first = self.n_public + 1

        def compute(lo: int, hi: int) -> np.ndarray:
            combined = self._combine(self.abc_g1, self.k_cols, first + lo, first + hi)
            self._hash.points(combined)  # zkey new's C, before δ
            return self._over_delta(combined)

        self._hash.count(self.r1cs.n_wires - first)
        yield from _chunks(compute, self.r1cs.n_wires - first, self._lap("c"))

    def h(self):
        n, hashed = 1 << self.log_n, _hashed_h_points(self.log_n)

        def compute(lo: int, hi: int) -> np.ndarray:
            if lo < hashed:
                self._hash.points(self._tau_differences(lo, min(hi, hashed)))
            return self._over_delta(np.ascontiguousarray(self.h_basis[lo:hi]))

        self._hash.count(n - 1)
        yield from _chunks(compute, n, self._lap("h"))

    def _tau_differences(self, lo: int, hi: int) -> np.ndarray:
        """(τ^(n+i) − τ^i)·G1 for i in [lo, hi): what zkey new's circuit hash absorbs where the H points go."""
        curve, n = self.curve, 1 << self.log_n
        m = min(hi, self.tau_powers.shape[0] - n) - lo  # the last τ^(n+i) may lie past section tauG1
        points = np.concatenate([self.tau_powers[n + lo : n + lo + m], self.tau_powers[lo : lo + m]])
        index = np.stack([np.arange(m), m + np.arange(m)], axis=1).ravel()
        plus_minus = ints_to_limbs([1, curve.r - 1], curve.Fr.limbs32)[np.tile([0, 1], m)]
        out = sparse_combinations(curve, points, np.arange(0, 2 * m + 1, 2), index, plus_minus)
        if lo + m == hi:
            return out
        past = wasm_sub_affine(curve, self.past_tau_g1, g1_from_bytes(curve, self.tau_powers[hi - 1].tobytes()))
        return np.concatenate([out, np.frombuffer(g1_to_bytes(curve, past), "<u4").reshape(1, 2, -1)])


def _hashed_h_points(log_n: int) -> int:
    """How many (τ^(n+i) − τ^i)·G1 zkey new hashes: it counts n − 1, but (snarkjs 0.7.6) hashes them in chunks of
    2^14 points each, so above 2^14 it hashes n."""
    return (1 << log_n) - 1 if log_n <= 14 else 1 << log_n


def _valid_points(ptau: Ptau, curve: Curve, points: np.ndarray, what: str) -> np.ndarray:
    """``points`` unchanged, or a SetupError naming the first one a corrupted file got wrong."""
    bad = first_invalid_point(curve, points)
    if bad is not None:
        raise SetupError(f"{ptau.path}: {what}: point {bad[0]} {bad[1]} (a corrupted ceremony file?)")
    return points


def _merge_columns(parts: list[tuple[Columns, int]], n_wires: int) -> Columns:
    """One column set from several, each part's rows shifted by its offset (wire by wire, parts in order)."""
    counts = sum(np.diff(c.indptr) for c, _ in parts)
    indptr = np.zeros(n_wires + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    wires = np.concatenate([np.repeat(np.arange(n_wires), np.diff(c.indptr)) for c, _ in parts])
    order = np.argsort(wires, kind="stable")
    rows = np.concatenate([c.rows + off for c, off in parts])[order]
    coeffs = np.concatenate([c.coeffs for c, _ in parts])[order]
    return Columns(indptr, rows, np.ascontiguousarray(coeffs))


# ----------------------------------------------------------------------------------
# The whole setup.


def working_memory(r1cs: R1CS, log_n: int, chunk_points: int = CHUNK_POINTS) -> int:
    """Bytes a setup holds at its peak: the r1cs, its columns by wire, per-wire scalars, Lagrange vectors, one chunk.

    The point sections stream to the file chunk by chunk, so the peak grows with the circuit's
    terms and wires (about 1.2 KB per BN254 constraint: 1.35 GiB measured at 2^20), not with
    the key's size. ``chunk_points``: the fixed-base chunk (larger on a GPU).
    """
    nnz = r1cs.A.nnz + r1cs.B.nnz + r1cs.C.nnz
    fr, fq = r1cs.curve.Fr.n8, r1cs.curve.Fq.n8
    per_wire = 4 * fr + 4 * 8  # u, v, w, k and the column pointers
    per_term = (4 + fr) + 2 * (8 + fr) + 12 + fr  # the r1cs's entry, two column copies and the coefficient entry
    per_row = 3 * 8  # the r1cs's row pointers
    chunk = chunk_points * (2 * fr + 4 * 4 * fq)  # scalars in, G2 points out, their copy into the file, the circuit hash's two
    return r1cs.n_wires * per_wire + nnz * per_term + r1cs.n_constraints * per_row + (3 << log_n) * fr + chunk + (256 << 20)


def _check_memory(r1cs: R1CS, log_n: int, chunk_points: int, budget: int | None, budget_source: str) -> None:
    """Refuse up front what could never fit (e.g. a header claiming 2^32 wires), before any large allocation."""
    need = working_memory(r1cs, log_n, chunk_points)
    if budget is None:
        budget, budget_source = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's physical memory"
    if need > budget:
        raise SetupError(f"{r1cs.path}: {r1cs.n_wires} wires and {r1cs.n_constraints} constraints need about {need / 2**30:.1f} GiB "
                         f"to set up, more than the {budget / 2**30:.1f} GiB of {budget_source}")


def setup(
    r1cs: R1CS | str | os.PathLike,
    zkey_path: str | os.PathLike,
    *,
    ptau: str | os.PathLike | None = None,
    name: str | None = None,
    backend: str | Backend = "cpu",
    memory_budget: int | None = None,
    memory_budget_source: str = "the memory budget",
) -> SetupResult:
    """Write a Groth16 proving key for ``r1cs`` to ``zkey_path`` (see the module docstring).

    ``backend``: "cpu", "cuda", "auto" (the GPU when there is one) or a Backend; with CUDA the
    fixed-base points of a test-only key are computed on the device. ``memory_budget``: the
    bytes this setup may hold (the CLI passes the memory plan's budget, the cgroup limit less
    the margin); a circuit whose setup would need more is refused before anything large is
    allocated. Without one, the bound is the machine's physical memory.
    """
    timings: dict[str, float] = {}
    t = time.perf_counter()
    if not isinstance(r1cs, R1CS):
        r1cs = read_r1cs(r1cs)
    curve = r1cs.curve
    log_n = domain_power(r1cs.n_constraints, r1cs.n_public)
    if log_n + 1 > curve.fr_two_adicity:
        raise SetupError(f"{r1cs.path}: {r1cs.n_constraints} constraints need a 2^{log_n} domain, and {curve.name} has roots of unity only up to 2^{curve.fr_two_adicity} (H needs 2^{log_n + 1})")
    if ptau is None:
        backend = get_backend(backend) if isinstance(backend, str) else backend
        tables, chunk_points = _fixed_base_tables(backend)
    else:  # a .ptau key needs no fixed-base tables
        backend, tables, chunk_points = None, None, CHUNK_POINTS
    _check_memory(r1cs, log_n, chunk_points, memory_budget, memory_budget_source)
    timings["read"] = time.perf_counter() - t

    if ptau is None:
        sections: _Sections = _FromToxicWaste(r1cs, log_n, timings, tables)
        name = name or TEST_ONLY_NAME
        test_only = True
    else:
        with read_ptau(ptau) as ceremony:  # the point views outlive the file handle
            if ceremony.curve.r != curve.r:
                raise SetupError(f"{ptau}: the ceremony is for {ceremony.curve.name} but {r1cs.path} is a {curve.name} circuit")
            ceremony.require_domain(log_n)
            sections = _FromPtau(r1cs, log_n, ceremony, timings)
        name = name or f"cuzk setup from {Path(ptau).name}"
        test_only = False

    # After the sections' QAP work, whose column copies are gone by now: the two never coexist.
    t = time.perf_counter()
    coeffs = coefficient_section(r1cs)
    timings["coefficients"] = time.perf_counter() - t
    sections._clock = time.perf_counter()
    G1, G2 = curve.G1, curve.G2

    def mpc() -> MPCParams:  # called once the point sections are written: the circuit hash is complete then
        cs_hash = sections.circuit_hash()
        return MPCParams(cs_hash, (contribution(curve, sections.delta, name, cs_hash),))

    try:
        write_zkey(
            zkey_path, curve, n_vars=r1cs.n_wires, n_public=r1cs.n_public, domain_size=1 << log_n,
            alpha1=sections.alpha1, beta1=sections.beta1, beta2=sections.beta2, gamma2=G2.generator,
            delta1=G1.mul(G1.generator, sections.delta), delta2=G2.mul(G2.generator, sections.delta),
            ic=sections.ic(), coeffs=coeffs, a=sections.a(), b1=sections.b1(), b2=sections.b2(),
            c=sections.c(), h=sections.h(), mpc=mpc,
        )  # fmt: skip
    finally:
        sections.close()
    return SetupResult(Path(zkey_path), curve, r1cs.n_constraints, r1cs.n_wires, r1cs.n_public, 1 << log_n, test_only, name,
                       backend.name if backend is not None else "cpu", timings)
