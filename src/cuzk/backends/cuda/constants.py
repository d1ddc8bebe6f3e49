"""CUDA constants generated from cuzk.curves: a curve is data, so no .cu file retypes a modulus.

Each kernel module is compiled with a prelude from here that defines the constants
structs field.cuh expects (N limbs, -p^-1 mod 2^32, p, R mod p, R^2 mod p as limb
accessors that fold to immediates once the limb loops unroll).
"""

from __future__ import annotations

from ...curves import Curve
from ...curves.field import PrimeField

WORD = 32


def _limbs(value: int, n: int) -> list[int]:
    return [(value >> (WORD * i)) & 0xFFFFFFFF for i in range(n)]


def _accessor(name: str, value: int, n: int) -> str:
    words = ", ".join(f"0x{w:08x}u" for w in _limbs(value, n))
    return f"    CUZK_HD static u32 {name}(int i) {{ const u32 v[{n}] = {{{words}}}; return v[i]; }}\n"


def field_struct(struct_name: str, field: PrimeField) -> str:
    """The C++ constants struct for one prime field (Montgomery R = 2^(32·limbs), as snarkjs)."""
    n = field.limbs32
    p = field.p
    if p >> (WORD * n - 1):
        # field.cuh adds without a carry limb: it needs a spare top bit.
        raise ValueError(f"{struct_name}: modulus has no spare top bit in {n} limbs")
    r = 1 << (WORD * n)
    inv = (-pow(p, -1, 1 << WORD)) % (1 << WORD)
    return (
        f"struct {struct_name} {{\n"
        f"    static constexpr int N = {n};\n"
        f"    static constexpr u32 INV = 0x{inv:08x}u;\n"
        + _accessor("p", p, n)
        + _accessor("one", r % p, n)
        + _accessor("r2", r * r % p, n)
        + "};\n"
    )


def ntt_prelude(curve: Curve) -> str:
    return f"// {curve.name} Fr\n" + field_struct("FrParams", curve.Fr)


def msm_prelude(curve: Curve, group: str) -> str:
    if group not in ("g1", "g2"):
        raise ValueError(f"group must be 'g1' or 'g2', got {group!r}")
    if curve.Fq2.nonresidue != curve.q - 1:
        raise ValueError(f"{curve.name}: fq2.cuh assumes Fq2 = Fq[u]/(u^2 + 1)")
    if curve.Fr.limbs32 != 8:
        raise ValueError(f"{curve.name}: msm.cu reads scalars as 8 limbs")
    define = "#define CUZK_G2\n" if group == "g2" else ""
    return f"// {curve.name} {group.upper()}\n" + define + field_struct("FqParams", curve.Fq) + field_struct("FrParams", curve.Fr)
