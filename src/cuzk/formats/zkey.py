"""snarkjs Groth16 proving keys (.zkey).

Container "zkey", version 1, sections:

====  ==============  ==========================================================
  1   header          u32 protocol id (1 = Groth16)
  2   groth16 header  u32 n8q, q, u32 n8r, r, u32 nVars, u32 nPublic, u32 domainSize,
                      alpha1, beta1 (G1), beta2, gamma2 (G2), delta1 (G1), delta2 (G2)
  3   IC              nPublic + 1 G1 points
  4   coefficients    u32 count, then (u32 matrix, u32 constraint, u32 signal, Fr value)
  5   A               nVars G1 points
  6   B1              nVars G1 points
  7   B2              nVars G2 points
  8   C               nVars − nPublic − 1 G1 points (signals after the public ones)
  9   H               domainSize G1 points
 10   contributions   64-byte circuit hash, u32 count, the MPC contributions
====  ==============  ==========================================================

Points are affine, each coordinate n8q bytes little-endian in Montgomery form, G2 as
x.c0 x.c1 y.c0 y.c1, all-zero for infinity — exactly the backends' base layout, so the
arrays below are zero-copy views of the file.

**Coefficient values** are stored as ``c·R² mod r`` (R = 2^(8·n8r)), not as c. Treated as
a Montgomery-form operand, the raw value is the Montgomery form of ``c·R``; hence
``mont_mul(raw, w) = c·w·R = Montgomery form of c·w`` when ``w`` is in *standard* form —
what snarkjs's prover does with the standard-form witness, with no conversion at all.
For arithmetic with Montgomery-form witnesses use :func:`coeff_values_mont` (c·R, the
Montgomery form of c), converted once, vectorised.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from ..curves import Curve
from ..curves.ec import Point
from ..curves.serialize import g1_from_bytes, g1_to_bytes, g2_from_bytes, g2_to_bytes
from ..ff.field import as_u64, field_consts, fp_scale_vec
from .binfile import BinFile, Section, n8_of, section_label, write_binfile
from .errors import FormatError
from .limbs import CHECK_CHUNK_ROWS, first_not_below, ints_to_limbs

ZKEY_VERSION = 1
ZKEY_MAX_VERSION = 2  # what snarkjs's prover accepts
GROTH16_PROTOCOL_ID = 1
OTHER_PROTOCOLS = {2: "PLONK", 10: "FFLONK"}

HEADER, GROTH16_HEADER, IC, COEFFS, POINTS_A, POINTS_B1, POINTS_B2, POINTS_C, POINTS_H, CONTRIBUTIONS = range(1, 11)
SECTION_NAMES = {
    HEADER: "header",
    GROTH16_HEADER: "groth16 header",
    IC: "IC points",
    COEFFS: "coefficients",
    POINTS_A: "A points",
    POINTS_B1: "B1 points",
    POINTS_B2: "B2 points",
    POINTS_C: "C points",
    POINTS_H: "H points",
    CONTRIBUTIONS: "contributions",
}
# The order snarkjs's `zkey new` writes its sections in, and its circuit hash absorbs their points.
ZKEY_NEW_ORDER = (HEADER, GROTH16_HEADER, COEFFS, IC, POINTS_H, POINTS_C, POINTS_A, POINTS_B1, POINTS_B2, CONTRIBUTIONS)
CS_HASH_BYTES = 64
TRANSCRIPT_BYTES = 64


def coeff_dtype(n8r: int) -> np.dtype:
    """One coefficient entry as stored: packed u32 matrix, constraint, signal, then the value's limbs.

    The entries are a whole number of u32 words, so ``coeffs.view('<u4').reshape(n, 3 + n8r // 4)``
    gives a plain uint32 view too (handy for numba kernels).
    """
    return np.dtype([("matrix", "<u4"), ("constraint", "<u4"), ("signal", "<u4"), ("value", "<u4", (n8r // 4,))])


@dataclass(frozen=True)
class ZKeyContribution:
    """One phase-2 contribution as snarkjs records it (points are reference affine points)."""

    delta_after: Point
    g1_s: Point
    g1_sx: Point
    g2_spx: Point
    transcript: bytes
    type: int  # 0 = contribution, 1 = beacon
    name: str | None = None
    num_iterations_exp: int | None = None
    beacon_hash: bytes | None = None


@dataclass(frozen=True)
class MPCParams:
    cs_hash: bytes  # 64-byte hash of the circuit's key before any contribution
    contributions: tuple[ZKeyContribution, ...] = ()


@dataclass(frozen=True)
class ZKeyHeader:
    """Everything about a key except its big arrays: cheap to read, enough to budget memory."""

    path: Path | None
    curve: Curve
    n8q: int
    n8r: int
    n_vars: int
    n_public: int
    domain_size: int
    power: int  # log2(domain_size)
    alpha1: Point
    beta1: Point
    beta2: Point
    gamma2: Point
    delta1: Point
    delta2: Point
    n_coeffs: int
    mpc: MPCParams
    sections: tuple[Section, ...]  # the file's section table, in file order

    @property
    def limbs_q(self) -> int:
        return self.n8q // 4

    @property
    def limbs_r(self) -> int:
        return self.n8r // 4

    def section_nbytes(self) -> dict[str, int]:
        """Bytes each big section (and so each array of :class:`ZKey`) occupies, keyed by array name."""
        g1, g2 = 2 * self.n8q, 4 * self.n8q
        return {
            "ic": (self.n_public + 1) * g1,
            "coeffs": self.n_coeffs * (12 + self.n8r),
            "a": self.n_vars * g1,
            "b1": self.n_vars * g1,
            "b2": self.n_vars * g2,
            "c": (self.n_vars - self.n_public - 1) * g1,
            "h": self.domain_size * g1,
        }


@dataclass(frozen=True, eq=False)  # holds arrays: compare by identity
class ZKey(ZKeyHeader):
    """A whole key: the header plus read-only zero-copy uint32 views of the file's sections."""

    ic: np.ndarray  # (n_public + 1, 2, Lq) Montgomery
    coeffs: np.ndarray  # (n_coeffs,) coeff_dtype(n8r); values raw, c·R² mod r
    a: np.ndarray  # (n_vars, 2, Lq)
    b1: np.ndarray  # (n_vars, 2, Lq)
    b2: np.ndarray  # (n_vars, 2, 2, Lq)
    c: np.ndarray  # (n_vars - n_public - 1, 2, Lq)
    h: np.ndarray  # (domain_size, 2, Lq)

    __eq__ = object.__eq__  # not the header's field comparison: two keys are equal only if they are one
    __hash__ = object.__hash__

    @property
    def header(self) -> ZKeyHeader:
        return ZKeyHeader(**{f.name: getattr(self, f.name) for f in fields(ZKeyHeader)})

    def ic_points(self) -> list[Point]:
        """The IC points as reference affine points (what a verification key lists), each checked to be a point of G1:
        the verification key's points, unlike the proving bases (checked by a proof's self-check), come from here."""
        points, n8 = [], self.n8q
        for i, row in enumerate(self.ic):
            raw = row.tobytes()
            if any(int.from_bytes(raw[k : k + n8], "little") >= self.curve.q for k in (0, n8)):
                raise FormatError(self.path, f"IC[{i}]: a coordinate is not reduced modulo q", section_label(IC, SECTION_NAMES))
            P = g1_from_bytes(self.curve, raw)
            if not self.curve.G1.is_on_curve(P):
                raise FormatError(self.path, f"IC[{i}] is not a point of {self.curve.name} G1", section_label(IC, SECTION_NAMES))
            points.append(P)
        return points


KEY_BASES = (("a", "g1"), ("b1", "g1"), ("b2", "g2"), ("c", "g1"), ("h", "g1"))  # ZKey's MSM bases and their groups


# reading --------------------------------------------------------------------------------
def read_zkey_header(path: str | os.PathLike) -> ZKeyHeader:
    """Read and validate the header, the section table and the section sizes; no big payload is touched."""
    with BinFile(path, "zkey", ZKEY_MAX_VERSION, SECTION_NAMES) as f:
        return _read_header(f)


def read_zkey(path: str | os.PathLike) -> ZKey:
    """Read a Groth16 key: the validated header and memory-mapped views of every section.

    The coefficient entries are checked (vectorised): matrix ∈ {0, 1}, constraint <
    domain_size, signal < n_vars, value < r. Point sections are checked for size only;
    points themselves are not validated here (that would read the whole file).
    """
    with BinFile(path, "zkey", ZKEY_MAX_VERSION, SECTION_NAMES) as f:
        hdr = _read_header(f)
        lq = hdr.limbs_q
        coeffs = f.view(COEFFS, coeff_dtype(hdr.n8r), (hdr.n_coeffs,), offset=4)
        check_coeffs(f, hdr, coeffs)
        return ZKey(
            **{fl.name: getattr(hdr, fl.name) for fl in fields(ZKeyHeader)},
            ic=f.view(IC, "<u4", (hdr.n_public + 1, 2, lq)),
            coeffs=coeffs,
            a=f.view(POINTS_A, "<u4", (hdr.n_vars, 2, lq)),
            b1=f.view(POINTS_B1, "<u4", (hdr.n_vars, 2, lq)),
            b2=f.view(POINTS_B2, "<u4", (hdr.n_vars, 2, 2, lq)),
            c=f.view(POINTS_C, "<u4", (hdr.n_vars - hdr.n_public - 1, 2, lq)),
            h=f.view(POINTS_H, "<u4", (hdr.domain_size, 2, lq)),
        )


class _Cursor:
    """Bounds-checked little-endian reads from one section's bytes."""

    def __init__(self, f: BinFile, stype: int, data: bytes):
        self.f, self.stype, self.data, self.pos = f, stype, data, 0

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.data):
            raise self.f.error(self.stype, f"ends at byte {len(self.data)} while reading {what} ({n} bytes at {self.pos})")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u32(self, what: str) -> int:
        return int.from_bytes(self.take(4, what), "little")


def _read_header(f: BinFile) -> ZKeyHeader:
    f.expect_size(HEADER, 4, "the protocol id")
    protocol = f.u32(HEADER)
    if protocol != GROTH16_PROTOCOL_ID:
        kind = OTHER_PROTOCOLS.get(protocol, "unknown")
        raise f.error(HEADER, f"protocol id {protocol} ({kind}) is not Groth16 (1); cuzk proves Groth16 keys only")

    cur = _Cursor(f, GROTH16_HEADER, f.read(GROTH16_HEADER))
    n8q = cur.u32("n8q")
    q = int.from_bytes(cur.take(n8q, "the base field prime q"), "little")
    curve = f.curve_of(GROTH16_HEADER, q, n8q, "q")
    n8r = cur.u32("n8r")
    if n8r != curve.Fr.n8:
        raise f.error(GROTH16_HEADER, f"n8r = {n8r}, but {curve.name}'s scalar field takes {curve.Fr.n8} bytes")
    r = int.from_bytes(cur.take(n8r, "the scalar field prime r"), "little")
    if r != curve.r:
        raise f.error(GROTH16_HEADER, f"scalar field prime {r:#x} is not {curve.name}'s r (the base field says {curve.name})")
    n_vars, n_public, domain_size = (cur.u32(w) for w in ("nVars", "nPublic", "domainSize"))
    expected = cur.pos + 3 * 2 * n8q + 3 * 4 * n8q
    if len(cur.data) != expected:
        raise f.error(GROTH16_HEADER, f"is {len(cur.data)} bytes, but a {curve.name} Groth16 header is exactly {expected}")
    alpha1 = _point(f, cur, curve, 1, "alpha1")
    beta1 = _point(f, cur, curve, 1, "beta1")
    beta2 = _point(f, cur, curve, 2, "beta2")
    gamma2 = _point(f, cur, curve, 2, "gamma2")
    delta1 = _point(f, cur, curve, 1, "delta1")
    delta2 = _point(f, cur, curve, 2, "delta2")

    if n_public + 1 > n_vars:
        raise f.error(GROTH16_HEADER, f"nPublic = {n_public} needs at least {n_public + 1} signals (with the constant one), but nVars = {n_vars}")
    if domain_size == 0 or domain_size & (domain_size - 1):
        raise f.error(GROTH16_HEADER, f"domainSize = {domain_size} is not a power of two")
    power = domain_size.bit_length() - 1
    if power > curve.fr_two_adicity:
        raise f.error(GROTH16_HEADER, f"domainSize = 2^{power} exceeds {curve.name}'s largest FFT domain 2^{curve.fr_two_adicity}")
    if domain_size < n_public + 1:
        raise f.error(GROTH16_HEADER, f"domainSize = {domain_size} cannot hold the {n_public + 1} rows snarkjs adds for the public signals")

    g1, g2 = 2 * n8q, 4 * n8q
    f.expect_size(IC, (n_public + 1) * g1, f"nPublic + 1 = {n_public + 1} G1 points")
    coeffs_sec = f.section(COEFFS)
    if coeffs_sec.size < 4:
        raise f.error(COEFFS, f"is {coeffs_sec.size} bytes; too short to hold the entry count")
    n_coeffs = f.u32(COEFFS)
    f.expect_size(COEFFS, 4 + n_coeffs * (12 + n8r), f"the count of {n_coeffs} entries × {12 + n8r} bytes (+ 4)")
    f.expect_size(POINTS_A, n_vars * g1, f"nVars = {n_vars} G1 points")
    f.expect_size(POINTS_B1, n_vars * g1, f"nVars = {n_vars} G1 points")
    f.expect_size(POINTS_B2, n_vars * g2, f"nVars = {n_vars} G2 points")
    f.expect_size(POINTS_C, (n_vars - n_public - 1) * g1, f"nVars − nPublic − 1 = {n_vars - n_public - 1} G1 points")
    f.expect_size(POINTS_H, domain_size * g1, f"domainSize = {domain_size} G1 points")
    mpc = _read_mpc(f, curve)

    return ZKeyHeader(
        path=f.path, curve=curve, n8q=n8q, n8r=n8r, n_vars=n_vars, n_public=n_public,
        domain_size=domain_size, power=power, alpha1=alpha1, beta1=beta1, beta2=beta2,
        gamma2=gamma2, delta1=delta1, delta2=delta2, n_coeffs=n_coeffs, mpc=mpc, sections=f.sections,
    )  # fmt: skip


def _point(f: BinFile, cur: _Cursor, curve: Curve, group: int, what: str, check: bool = True) -> Point:
    """A G1 (group=1) or G2 (group=2) point in snarkjs's binary layout, checked on the curve."""
    n8 = curve.Fq.n8
    raw = cur.take(2 * group * n8, what)
    coords = [int.from_bytes(raw[i : i + n8], "little") for i in range(0, len(raw), n8)]
    if any(c >= curve.q for c in coords):
        raise f.error(cur.stype, f"{what}: a coordinate is not reduced modulo q")
    P = g1_from_bytes(curve, raw) if group == 1 else g2_from_bytes(curve, raw)
    G = curve.G1 if group == 1 else curve.G2
    if check and not G.is_on_curve(P):
        raise f.error(cur.stype, f"{what} is not a point of {curve.name} G{group}")
    return P


def _read_mpc(f: BinFile, curve: Curve) -> MPCParams:
    """Parse section 10 as snarkjs's readMPCParams does, bounds-checked."""
    cur = _Cursor(f, CONTRIBUTIONS, f.read(CONTRIBUTIONS))
    cs_hash = cur.take(CS_HASH_BYTES, "the circuit hash")
    n = cur.u32("the contribution count")
    if n * (6 * curve.Fq.n8 + 4 * curve.Fq.n8 + TRANSCRIPT_BYTES + 8) > len(cur.data) - cur.pos:
        raise f.error(CONTRIBUTIONS, f"claims {n} contributions, more than its {len(cur.data)} bytes can hold")
    contributions = []
    for i in range(n):
        what = f"contribution #{i + 1}"
        points = [_point(f, cur, curve, g, f"{what} {name}", check=False) for g, name in ((1, "deltaAfter"), (1, "g1_s"), (1, "g1_sx"), (2, "g2_spx"))]
        transcript = cur.take(TRANSCRIPT_BYTES, f"{what} transcript")
        ctype = cur.u32(f"{what} type")
        params = _Cursor(f, CONTRIBUTIONS, cur.take(cur.u32(f"{what} parameter length"), f"{what} parameters"))
        name = exp = beacon = None
        last = 0
        while params.pos < len(params.data):
            ptype = params.take(1, f"{what} parameter type")[0]
            if ptype <= last:
                raise f.error(CONTRIBUTIONS, f"{what}: parameters are not sorted by type ({ptype} after {last})")
            last = ptype
            if ptype == 1:
                name = params.take(params.take(1, "name length")[0], f"{what} name").decode("utf-8", "replace")
            elif ptype == 2:
                exp = params.take(1, f"{what} iteration exponent")[0]
            elif ptype == 3:
                beacon = params.take(params.take(1, "beacon hash length")[0], f"{what} beacon hash")
            else:
                raise f.error(CONTRIBUTIONS, f"{what}: unknown parameter type {ptype}")
        contributions.append(ZKeyContribution(*points, transcript, ctype, name, exp, beacon))
    if cur.pos != len(cur.data):
        raise f.error(CONTRIBUTIONS, f"has {len(cur.data) - cur.pos} bytes after its last contribution")
    return MPCParams(cs_hash, tuple(contributions))


def check_coeffs(f: BinFile, hdr: ZKeyHeader, coeffs: np.ndarray, first: int = 0) -> None:
    """Validate coefficient entries (vectorised): matrix ∈ {0, 1}, constraint < domain_size, signal < n_vars, value < r.

    Public so a loader that copies the section into its own buffers can check the copy, or each chunk of it as it
    passes (``first``: the index of the chunk's first entry in the section, for the error).
    """
    for field, bound, why in (
        ("matrix", 2, "must be 0 (A) or 1 (B)"),
        ("constraint", hdr.domain_size, f"must be < domainSize = {hdr.domain_size}"),
        ("signal", hdr.n_vars, f"must be < nVars = {hdr.n_vars}"),
    ):
        column = coeffs[field]
        for start in range(0, column.shape[0], CHECK_CHUNK_ROWS):
            bad = np.flatnonzero(column[start : start + CHECK_CHUNK_ROWS] >= bound)
            if bad.size:
                i = start + int(bad[0])
                raise f.error(COEFFS, f"entry #{first + i}: {field} = {int(column[i])} {why}")
    bad = first_not_below(coeffs["value"], hdr.curve.r)
    if bad is not None:
        raise f.error(COEFFS, f"entry #{first + bad}: value is not reduced modulo r")



# coefficient value conversions ---------------------------------------------------------
def _scale(curve: Curve, values: np.ndarray, k: int) -> np.ndarray:
    """values·k·R⁻¹ mod r for every row, in place on a contiguous copy (the file's rows are 44-byte records)."""
    L = curve.Fr.limbs32
    out = np.array(values, dtype=np.uint32, order="C")
    rows = as_u64(out)
    fp_scale_vec(rows, as_u64(ints_to_limbs([k], L))[0], rows, field_consts(curve.Fr))
    return out


def coeff_values_mont(zkey: ZKey) -> np.ndarray:
    """The coefficients in Montgomery form (c·R mod r), (n_coeffs, Lr) uint32: raw·R⁻¹, one pass."""
    return _scale(zkey.curve, zkey.coeffs["value"], 1)


def coeff_values_standard(zkey: ZKey) -> np.ndarray:
    """The coefficients as plain field elements c (as the .r1cs stores them): raw·R⁻², one pass."""
    return _scale(zkey.curve, zkey.coeffs["value"], zkey.curve.Fr.R_inv)


def encode_coeff_values(curve: Curve, values: np.ndarray) -> np.ndarray:
    """Standard-form coefficients c → the stored c·R² mod r (what :func:`write_zkey` expects in ``coeffs``)."""
    return _scale(curve, values, pow(curve.Fr.R, 3, curve.r))


# writing --------------------------------------------------------------------------------
PointArrays = np.ndarray | Iterable[np.ndarray]


def write_zkey(
    path: str | os.PathLike,
    curve: Curve,
    *,
    n_vars: int,
    n_public: int,
    domain_size: int,
    alpha1: Point,
    beta1: Point,
    beta2: Point,
    gamma2: Point,
    delta1: Point,
    delta2: Point,
    ic: PointArrays,
    coeffs: np.ndarray,
    a: PointArrays,
    b1: PointArrays,
    b2: PointArrays,
    c: PointArrays,
    h: PointArrays,
    mpc: MPCParams | Callable[[], MPCParams] | None = None,
) -> None:
    """Write a Groth16 key in snarkjs's layout (sections 1..10 in order, as `zkey contribute` leaves them).

    Point sections are uint32 arrays in the layout :func:`read_zkey` returns, or iterables
    of such chunks (streamed; a large setup never holds a whole section). They are taken in
    the order `zkey new` computes them (coefficients, IC, H, C, A, B1, B2), which is the order
    its circuit hash absorbs them, so a setup hashes its points as they stream; each is
    written in its place. ``coeffs`` uses :func:`coeff_dtype` with raw values (see
    :func:`encode_coeff_values`). ``mpc``, or what a function returns once the point
    sections are written, defaults to an all-zero circuit hash and no contributions:
    snarkjs proves with and exports such a key, but `zkey verify` would reject the hash.
    """
    n8q, n8r = n8_of(curve.q), n8_of(curve.r)
    if domain_size <= 0 or domain_size & (domain_size - 1):
        raise ValueError(f"domain_size {domain_size} is not a power of two")
    if n_public + 1 > n_vars:
        raise ValueError(f"n_public = {n_public} needs n_vars >= {n_public + 1}, got {n_vars}")
    coeffs = np.asarray(coeffs)
    if coeffs.dtype != coeff_dtype(n8r):
        raise ValueError(f"coeffs must have dtype coeff_dtype({n8r}), got {coeffs.dtype}")
    lq = n8q // 4
    groth16_header = b"".join([
        n8q.to_bytes(4, "little"), curve.q.to_bytes(n8q, "little"),
        n8r.to_bytes(4, "little"), curve.r.to_bytes(n8r, "little"),
        n_vars.to_bytes(4, "little"), n_public.to_bytes(4, "little"), domain_size.to_bytes(4, "little"),
        g1_to_bytes(curve, alpha1), g1_to_bytes(curve, beta1), g2_to_bytes(curve, beta2),
        g2_to_bytes(curve, gamma2), g1_to_bytes(curve, delta1), g2_to_bytes(curve, delta2),
    ])  # fmt: skip
    g1, g2 = 2 * n8q, 4 * n8q
    n_c = n_vars - n_public - 1
    write_binfile(path, "zkey", ZKEY_VERSION, [
        (HEADER, [GROTH16_PROTOCOL_ID.to_bytes(4, "little")], 4),
        (GROTH16_HEADER, [groth16_header], len(groth16_header)),
        (IC, _points("ic", ic, n_public + 1, (2, lq)), (n_public + 1) * g1),
        (COEFFS, [len(coeffs).to_bytes(4, "little"), coeffs], 4 + coeffs.nbytes),
        (POINTS_A, _points("a", a, n_vars, (2, lq)), n_vars * g1),
        (POINTS_B1, _points("b1", b1, n_vars, (2, lq)), n_vars * g1),
        (POINTS_B2, _points("b2", b2, n_vars, (2, 2, lq)), n_vars * g2),
        (POINTS_C, _points("c", c, n_c, (2, lq)), n_c * g1),
        (POINTS_H, _points("h", h, domain_size, (2, lq)), domain_size * g1),
        (CONTRIBUTIONS, _mpc_section(curve, mpc or MPCParams(bytes(CS_HASH_BYTES)))),
    ], fill_order=[stype - 1 for stype in ZKEY_NEW_ORDER])  # fmt: skip


def _points(name: str, arrays: PointArrays, count: int, point_shape: tuple[int, ...]) -> Iterable[np.ndarray]:
    """Yield the chunks of one point section, checking their shape and total count as they stream."""
    chunks = [arrays] if isinstance(arrays, np.ndarray) else arrays
    seen = 0
    for chunk in chunks:
        if chunk.dtype != np.uint32 or chunk.shape[1:] != point_shape:
            raise ValueError(f"{name}: expected uint32 chunks of shape (n, {', '.join(map(str, point_shape))}), got {chunk.dtype} {chunk.shape}")
        seen += chunk.shape[0]
        if seen > count:
            break
        yield chunk
    if seen != count:
        raise ValueError(f"{name}: expected {count} points, got {seen}{'+' if seen > count else ''}")


def _mpc_section(curve: Curve, mpc: MPCParams | Callable[[], MPCParams]) -> Iterable[bytes]:
    yield _encode_mpc(curve, mpc() if callable(mpc) else mpc)


def _encode_mpc(curve: Curve, mpc: MPCParams) -> bytes:
    if len(mpc.cs_hash) != CS_HASH_BYTES:
        raise ValueError(f"cs_hash must be {CS_HASH_BYTES} bytes, got {len(mpc.cs_hash)}")
    out = [mpc.cs_hash, len(mpc.contributions).to_bytes(4, "little")]
    for c in mpc.contributions:
        params = b""
        if c.name:
            name = c.name[:64].encode()
            params += bytes([1, len(name)]) + name
        if c.type == 1:
            params += bytes([2, c.num_iterations_exp or 0, 3, len(c.beacon_hash or b"")]) + (c.beacon_hash or b"")
        out += [
            g1_to_bytes(curve, c.delta_after), g1_to_bytes(curve, c.g1_s), g1_to_bytes(curve, c.g1_sx),
            g2_to_bytes(curve, c.g2_spx), c.transcript, c.type.to_bytes(4, "little"),
            len(params).to_bytes(4, "little"), params,
        ]  # fmt: skip
    return b"".join(out)
