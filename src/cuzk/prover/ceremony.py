"""snarkjs's phase-2 ceremony record, reproduced so that ``snarkjs zkey verify`` accepts cuzk's keys.

``zkey verify`` rebuilds the key that ``zkey new`` makes from the circuit and the .ptau, and
checks the key's section 10 against it:

- the circuit hash (csHash): blake2b-512 over ``zkey new``'s points in snarkjs's uncompressed
  form (curves/serialize.py), each point section after its u32 big-endian count
  (:class:`CircuitHash`; setup.py feeds it as the sections stream). One of its points can come
  from zkey new's wasm arithmetic on unreduced input (:func:`wasm_sub_affine`);
- each contribution's proof of knowledge of its δ: (s·G1, δ·s·G1) and δ·g2_sp, where g2_sp is
  the contribution's transcript hashed to G2 by ffjavascript's own map — a ChaCha20 stream
  seeded with the transcript, a point drawn from it, times the cofactor (:func:`hash_to_g2`).
  The verifier recomputes g2_sp, so the map has to be reproduced bit for bit.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from collections.abc import Iterator

import numpy as np

from ..curves import Curve
from ..curves.ec import Point
from ..curves.serialize import g1_from_bytes, g1_to_uncompressed, g2_to_uncompressed
from ..ff.field import FROM_MONT, as_u64, field_consts, fp_unary_vec
from ..formats.limbs import limbs_to_ints
from ..formats.zkey import CS_HASH_BYTES, TRANSCRIPT_BYTES, ZKeyContribution

_WORD = 0xFFFFFFFF
_CHACHA_CONSTANTS = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k"
_COLUMNS_THEN_DIAGONALS = ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                           (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14))  # fmt: skip


def _chacha_words(seed: tuple[int, ...]) -> Iterator[int]:
    """ChaCha20's output words: the seed words as the key, a 128-bit block counter in words 12..15, no nonce."""
    counter = 0
    while True:
        state = [*_CHACHA_CONSTANTS, *seed, *((counter >> (32 * i)) & _WORD for i in range(4))]
        x = list(state)
        for _ in range(10):
            for a, b, c, d in _COLUMNS_THEN_DIAGONALS:
                for p, q, r, shift in ((a, b, d, 16), (c, d, b, 12), (a, b, d, 8), (c, d, b, 7)):
                    x[p] = (x[p] + x[q]) & _WORD
                    x[r] ^= x[p]
                    x[r] = ((x[r] << shift) | (x[r] >> (32 - shift))) & _WORD
        yield from ((v + s) & _WORD for v, s in zip(x, state))
        counter = (counter + 1) & ((1 << 128) - 1)


class ChaCha:
    """ffjavascript's ``ChaCha`` random source: 32-bit words, 64-bit draws high word first, booleans from a word's low bit."""

    def __init__(self, seed: tuple[int, ...]):
        if len(seed) != 8 or not all(0 <= w <= _WORD for w in seed):
            raise ValueError("a ChaCha seed is 8 32-bit words")
        self._words = _chacha_words(tuple(seed))

    def next_u32(self) -> int:
        return next(self._words)

    def next_u64(self) -> int:
        high = self.next_u32()
        return (high << 32) | self.next_u32()

    def next_bool(self) -> bool:
        return bool(self.next_u32() & 1)


def _fq_from_rng(curve: Curve, rng: ChaCha) -> int:
    """ffjavascript's ``F1.fromRng``: 64-bit draws, lowest first, masked to q's bit length and redrawn until below q —
    and then taken as the element's *Montgomery* form (the number lands in the element's bytes as is)."""
    Fq = curve.Fq
    mask = (1 << Fq.p.bit_length()) - 1
    while True:
        v = 0
        for i in range(Fq.limbs64):
            v |= rng.next_u64() << (64 * i)
        v &= mask
        if v < Fq.p:
            return Fq.from_mont(v)


def _is_negative(curve: Curve, a: tuple[int, int]) -> bool:
    """ffjavascript's Fq2 sign: that of c1, or of c0 when c1 is zero; an Fq element is negative above (q − 1)/2."""
    return (a[1] or a[0]) > (curve.q - 1) // 2


def hash_to_g2(curve: Curve, digest: bytes) -> Point:
    """snarkjs's ``hashToG2``: ChaCha seeded with the digest's first 8 big-endian words, then ``G2.fromRng`` —
    x drawn (c0 then c1, then the sign bit) until x³ + b is a square, y its root of that sign, times the cofactor."""
    rng = ChaCha(struct.unpack(">8I", digest[:32]))
    F2, G2 = curve.Fq2, curve.G2
    while True:
        x = (_fq_from_rng(curve, rng), _fq_from_rng(curve, rng))
        negative = rng.next_bool()
        y = F2.sqrt(F2.add(F2.mul(F2.sqr(x), x), G2.b))
        if y is not None:
            break
    if _is_negative(curve, y) != negative:
        y = F2.neg(y)
    return G2.mul((x, y), G2.cofactor)


def uncompressed_points(curve: Curve, points: np.ndarray) -> bytes:
    """A chunk of zkey-layout points (``(n, 2, L)`` G1 or ``(n, 2, 2, L)`` G2 Montgomery limbs) in the uncompressed
    form, vectorised: each coordinate out of Montgomery form, then each G1 coordinate or Fq2 element byte-reversed."""
    n = points.shape[0]
    limbs = np.ascontiguousarray(points, dtype=np.uint32).reshape(-1, curve.Fq.limbs32)
    standard = np.empty_like(limbs)
    fp_unary_vec(as_u64(limbs), as_u64(standard), FROM_MONT, field_consts(curve.Fq))
    return standard.view(np.uint8).reshape(n, 2, -1)[:, :, ::-1].tobytes()


def wasm_sub_affine(curve: Curve, raw: np.ndarray, Q: Point) -> Point:
    """P − Q (Q a point, not infinity) as ffjavascript's wasm ``g1m_subAffine`` computes it for a P given as raw
    Montgomery limbs ``(2, L)``, which may be unreduced (up to 2^(8·n8) − 1): its additions and subtractions then wrap
    modulo 2^(8·n8) and stop agreeing with arithmetic modulo q. zkey new hashes one such point (prover/setup.py)."""
    q, R = curve.q, 1 << (8 * curve.Fq.n8)
    x1, y1 = limbs_to_ints(raw.reshape(2, -1))
    if x1 < q and y1 < q:  # coordinates any arithmetic agrees on
        return curve.G1.sub(g1_from_bytes(curve, raw.tobytes()), Q)
    q_inv = pow(q, -1, R)

    def fold(t: int) -> int:  # a sum or Montgomery product, bits past 2^(8·n8) dropped by its one subtraction of q
        return (t - R - q) % R if t >= R else t - q if t >= q else t

    def add(a: int, b: int) -> int:
        return fold(a + b)

    def sub(a: int, b: int) -> int:
        return a - b if a >= b else (a - b + R + q) % R

    def mul(a: int, b: int) -> int:
        return fold((a * b + (-a * b * q_inv % R) * q) // R)

    Fq = curve.Fq
    x2, y2 = Fq.to_mont(Q[0]), sub(0, Fq.to_mont(Q[1]))
    h, dy = sub(x2, x1), sub(y2, y1)  # addAffine's formulas, operation by operation
    hh = mul(h, h)
    i = add(add(hh, hh), add(hh, hh))
    j, r, v = mul(h, i), add(dy, dy), mul(x1, i)
    x3 = sub(sub(mul(r, r), j), add(v, v))
    y1j = mul(y1, j)
    y3 = sub(mul(sub(v, x3), r), add(y1j, y1j))
    z = Fq.from_mont(add(h, h))  # batchToAffine only multiplies and inverts from here: arithmetic modulo q again
    if z == 0:
        return None
    z_inv = Fq.inv(z)
    return Fq.mul(Fq.from_mont(x3), Fq.sqr(z_inv)), Fq.mul(Fq.from_mont(y3), Fq.pow(z_inv, 3))


class CircuitHash:
    """``zkey new``'s circuit hash, fed in its order: the header's points (α1, β1, β2, then γ2, δ1, δ2 as the
    generators), then the IC, H, C, A, B1 and B2 sections of the key before any contribution, each after its count
    (in H's place, the powers of tau that make it: (τ^(n+i) − τ^i)·G1)."""

    def __init__(self, curve: Curve):
        self.curve = curve
        self._hasher = hashlib.blake2b(digest_size=CS_HASH_BYTES)

    def point(self, P: Point, group: int) -> None:
        self._hasher.update(g1_to_uncompressed(self.curve, P) if group == 1 else g2_to_uncompressed(self.curve, P))

    def count(self, n: int) -> None:
        self._hasher.update(n.to_bytes(4, "big"))

    def points(self, chunk: np.ndarray) -> None:
        self._hasher.update(uncompressed_points(self.curve, chunk))

    def digest(self) -> bytes:
        return self._hasher.digest()


def contribution(curve: Curve, delta: int, name: str, cs_hash: bytes) -> ZKeyContribution:
    """δ's record as ``zkey contribute`` writes the first contribution to a key of circuit hash ``cs_hash``.

    transcript = blake2b-512(cs_hash ‖ s·G1 ‖ δ·s·G1), s random; g2_spx = δ·hash_to_g2(transcript); deltaAfter = δ·G1.
    """
    G1, G2 = curve.G1, curve.G2
    g1_s = G1.mul(G1.generator, 1 + secrets.randbelow(curve.r - 1))
    g1_sx = G1.mul(g1_s, delta)
    transcript = hashlib.blake2b(cs_hash + g1_to_uncompressed(curve, g1_s) + g1_to_uncompressed(curve, g1_sx), digest_size=TRANSCRIPT_BYTES).digest()
    g2_spx = G2.mul(hash_to_g2(curve, transcript), delta)
    return ZKeyContribution(G1.mul(G1.generator, delta), g1_s, g1_sx, g2_spx, transcript, 0, name)
