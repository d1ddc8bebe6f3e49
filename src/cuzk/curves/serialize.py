"""Reference conversions between points and snarkjs's encodings.

Binary (zkey sections): coordinates little-endian in Montgomery form, n8q bytes each,
G1 = x||y, G2 = x.c0||x.c1||y.c0||y.c1; the point at infinity is all zero bytes.
Uncompressed (what snarkjs's circuit hash and ceremony transcripts absorb): standard
coordinates big-endian, G2 = x.c1||x.c0||y.c1||y.c0; infinity all zero bytes too.
JSON (proof.json, verification_key.json): decimal strings of projective coordinates,
written affine with z = 1; infinity as z = 0. The vectorised equivalents live in the
backends; these are the oracle.
"""

from __future__ import annotations

from .curve import Curve
from .ec import Point


def g1_to_bytes(curve: Curve, P: Point) -> bytes:
    if P is None:
        return bytes(2 * curve.Fq.n8)
    return curve.Fq.to_mont_bytes(P[0]) + curve.Fq.to_mont_bytes(P[1])


def g1_from_bytes(curve: Curve, b: bytes) -> Point:
    n8 = curve.Fq.n8
    if len(b) != 2 * n8:
        raise ValueError(f"G1 point needs {2 * n8} bytes, got {len(b)}")
    if not any(b):
        return None
    return (curve.Fq.from_mont_bytes(b[:n8]), curve.Fq.from_mont_bytes(b[n8:]))


def g2_to_bytes(curve: Curve, P: Point) -> bytes:
    if P is None:
        return bytes(4 * curve.Fq.n8)
    F = curve.Fq
    return b"".join(F.to_mont_bytes(c) for c in (P[0][0], P[0][1], P[1][0], P[1][1]))


def g2_from_bytes(curve: Curve, b: bytes) -> Point:
    n8 = curve.Fq.n8
    if len(b) != 4 * n8:
        raise ValueError(f"G2 point needs {4 * n8} bytes, got {len(b)}")
    if not any(b):
        return None
    c = [curve.Fq.from_mont_bytes(b[i * n8 : (i + 1) * n8]) for i in range(4)]
    return ((c[0], c[1]), (c[2], c[3]))


def g1_to_uncompressed(curve: Curve, P: Point) -> bytes:
    n8 = curve.Fq.n8
    if P is None:
        return bytes(2 * n8)
    return P[0].to_bytes(n8, "big") + P[1].to_bytes(n8, "big")


def g2_to_uncompressed(curve: Curve, P: Point) -> bytes:
    n8 = curve.Fq.n8
    if P is None:
        return bytes(4 * n8)
    return b"".join(c.to_bytes(n8, "big") for c in (P[0][1], P[0][0], P[1][1], P[1][0]))


def g1_to_json(P: Point) -> list[str]:
    if P is None:
        return ["0", "1", "0"]
    return [str(P[0]), str(P[1]), "1"]


def g2_to_json(P: Point) -> list[list[str]]:
    if P is None:
        return [["0", "0"], ["1", "0"], ["0", "0"]]
    return [[str(P[0][0]), str(P[0][1])], [str(P[1][0]), str(P[1][1])], ["1", "0"]]


def snarkjs_int(s: str | int) -> int:
    """A number of snarkjs's JSON files as an int, read as its ``unstringifyBigInts`` reads them: a JSON number, a
    string of decimal digits or one of ``0x`` and hex digits; ValueError for any other text.

    Only ASCII digits (a sign is read, for the caller's range check to name it): Python's ``int`` also takes blanks
    around them, a ``+``, ``_`` between digits and other scripts' digits, which snarkjs reads as no number, so a file
    it rejects, or verifies as invalid, would be read here as a valid one. ``0X`` is no hex prefix to snarkjs."""
    if isinstance(s, str):
        if s.startswith("0x") and len(s) > 2 and s.isascii() and all(c in "0123456789abcdefABCDEF" for c in s[2:]):
            return int(s, 16)
        if not (s.isascii() and s.lstrip("-").isdigit() and s.count("-") <= 1):
            raise ValueError(f"{s!r} is not a decimal (or 0x hex) integer")
    try:
        return int(s)
    except ValueError:  # more digits than Python converts (4300): no field element has them
        raise ValueError(f"a {len(s)}-digit number is not a field element") from None


def _parse_int(s: object, p: int, what: str) -> int:
    if not isinstance(s, (str, int)) or isinstance(s, bool):
        raise ValueError(f"{what}: expected a decimal string, got {type(s).__name__}")
    try:
        v = snarkjs_int(s)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    if not 0 <= v < p:
        raise ValueError(f"{what}: {v} is outside the field")
    return v


def g1_from_json(curve: Curve, obj: object, what: str = "G1 point") -> Point:
    """Parse [x, y, z] (Jacobian, as ffjavascript reads it); z = 0 is infinity."""
    F = curve.Fq
    if not isinstance(obj, list) or len(obj) not in (2, 3):
        raise ValueError(f"{what}: expected [x, y, z]")
    x, y = (_parse_int(v, F.p, what) for v in obj[:2])
    z = _parse_int(obj[2], F.p, what) if len(obj) == 3 else 1
    if z == 0:
        return None
    zi = F.inv(z)
    P = (F.mul(x, F.sqr(zi)), F.mul(y, F.mul(F.sqr(zi), zi)))
    if not curve.G1.is_on_curve(P):
        raise ValueError(f"{what}: not on {curve.name} G1")
    return P


def g2_from_json(curve: Curve, obj: object, what: str = "G2 point") -> Point:
    F = curve.Fq
    F2 = curve.Fq2
    if not isinstance(obj, list) or len(obj) not in (2, 3) or not all(isinstance(c, list) and len(c) == 2 for c in obj):
        raise ValueError(f"{what}: expected [[x0, x1], [y0, y1], [z0, z1]]")
    x, y = (tuple(_parse_int(v, F.p, what) for v in c) for c in obj[:2])
    z = tuple(_parse_int(v, F.p, what) for v in obj[2]) if len(obj) == 3 else (1, 0)
    if F2.is_zero(z):
        return None
    zi = F2.inv(z)
    zi2 = F2.sqr(zi)
    P = (F2.mul(x, zi2), F2.mul(y, F2.mul(zi2, zi)))
    if not curve.G2.is_on_curve(P):
        raise ValueError(f"{what}: not on {curve.name} G2")
    return P
