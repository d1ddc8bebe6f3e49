"""Montgomery arithmetic for every field of the project, generic over the modulus: the one implementation the
CPU backend, the formats' checks (zkey coefficients, r1cs satisfaction) and the pairing all use.

Layout: the project's field vectors are ``(n, limbs32)`` little-endian uint32 arrays
(backends/base.py). On a little-endian machine the same bytes are ``(n, limbs32 // 2)``
little-endian uint64 limbs, and snarkjs's Montgomery radix R = 2^(8·n8) is the same
either way, so the kernels work on a free ``.view(np.uint64)`` of the caller's array.

Why 64-bit limbs rather than 32-bit limbs with 64-bit accumulators: an LLVM intrinsic
gives the full 64×64→128-bit product (one ``mul`` instruction), so a 4-limb product
needs 32 multiplies instead of 128; measured on this machine a BN254 multiplication
costs ~27 ns against ~127 ns for the 32-bit version.

Why the modulus is a tuple and not an array: ``FieldConsts`` carries the modulus as a
``UniTuple(uint64, N)``, so the limb count (4 for both Fr and BN254's Fq, 6 for
BLS12-381's Fq) is part of the type and the arithmetic is generated fully unrolled for
it; with N read from an array at run time the same code is 2× slower. One kernel source
still serves all four moduli.

Why the element operations are LLVM intrinsics rather than @njit functions: numba
compiles every jitted helper separately and re-optimises its whole call tree inside each
caller, and inlining at numba-IR level is slower still; point formulas written over
jitted field helpers took minutes to compile. The ``fe_*`` intrinsics emit a few wide-
integer instructions (add, sub, neg: an N-limb row is loaded as one i(64N) integer) or a
call to one out-of-line function per module (Montgomery product, Fp2 product and square,
inversion), so the point and MSM code compiles in seconds (about 15 s of CPU for one
group's whole MSM) rather than minutes.

Per-element operations take 1-D uint64 rows (Fp) or ``(2, N)`` blocks (Fp2 =
Fp[u]/(u² + 1)), C-contiguous, and write into ``out``, which may alias an input; they
are for use inside ``@njit`` kernels. Copies, zeroing and comparisons take any
C-contiguous uint64 array (the pairing's Fq6 and Fq12 elements too). ``fp_*`` names are
the same operations spelled for code that only handles rows. The ``*_vec`` kernels are
the parallel array versions.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..curves.field import PrimeField
from .parallel import parallel_kernel

if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
    raise ImportError("cuzk's CPU backend reinterprets uint32 limb arrays as uint64 and needs a little-endian machine")


class FieldConsts(NamedTuple):
    """What a kernel needs to know about a prime field; every entry is derived from ``curves``."""

    p: tuple  # modulus, N uint64 limbs
    pinv: np.uint64  # -p^-1 mod 2^64
    one: tuple  # R mod p (Montgomery form of 1)
    r2: tuple  # R^2 mod p (to_mont multiplies by it)
    p_minus_2: tuple  # Fermat inverse exponent


def _u64_limbs(value: int, n: int) -> tuple:
    return tuple(np.uint64((value >> (64 * i)) & 0xFFFFFFFFFFFFFFFF) for i in range(n))


@lru_cache(maxsize=None)
def field_consts(F: PrimeField) -> FieldConsts:
    """Kernel constants of ``F`` (cached: one tuple per field)."""
    n = F.n8 // 8
    p = F.p
    return FieldConsts(
        p=_u64_limbs(p, n),
        pinv=np.uint64((-pow(p, -1, 1 << 64)) % (1 << 64)),
        one=_u64_limbs(F.R, n),
        r2=_u64_limbs(F.R * F.R % p, n),
        p_minus_2=_u64_limbs(p - 2, n),
    )


class FieldVectorError(ValueError):
    """A field vector that does not have the layout of backends/base.py."""


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view: numba compiles one specialisation per (type, writability), and
    inputs arrive both ways (file views are read-only, fresh results are not)."""
    view = a.view()
    view.flags.writeable = False
    return view


def fr_rows(curve, a: np.ndarray, what: str = "field vector") -> np.ndarray:
    """The read-only uint64-limb view of an Fr vector, checked to be (n, limbs) uint32 and made contiguous."""
    limbs = curve.Fr.n8 // 4
    if not isinstance(a, np.ndarray) or a.dtype != np.uint32 or a.ndim != 2 or a.shape[1] != limbs:
        got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
        raise FieldVectorError(f"{curve.name} {what} must be a uint32 array of shape (n, {limbs}), got {got}")
    return read_only(as_u64(np.ascontiguousarray(a)))


def as_u64(a: np.ndarray) -> np.ndarray:
    """The uint64-limb view of a C-contiguous uint32 limb array (no copy)."""
    return a.view(np.uint64)


def as_u32(a: np.ndarray) -> np.ndarray:
    """The uint32-limb view of a uint64-limb array (no copy)."""
    return a.view(np.uint32)


# ----------------------------------------------------------------------------------
# LLVM IR generation. Values are wide integers: an N-limb element is one i(64N) value
# (little-endian limbs = the integer's bytes), which LLVM splits back into registers.

_I64 = ir.IntType(64)
_I128 = ir.IntType(128)


def _element_ndim(*arrays) -> int | None:
    """The common rank of C-contiguous uint64 arrays (None when they are not that or differ in rank)."""
    if not all(isinstance(a, types.Array) and a.dtype == types.uint64 and a.layout == "C" for a in arrays):
        return None
    ndims = {a.ndim for a in arrays}
    return ndims.pop() if len(ndims) == 1 else None


def _field_ndim(*arrays) -> int | None:
    """1 (Fp rows) or 2 (Fp2 blocks): the element shapes the arithmetic takes."""
    ndim = _element_ndim(*arrays)
    return ndim if ndim in (1, 2) else None


def _limbs_of(fc) -> int | None:
    """N for a FieldConsts type."""
    if isinstance(fc, types.BaseNamedTuple) and len(fc) == 5 and isinstance(fc[0], types.UniTuple):
        return fc[0].count
    return None


def _data_ptr(context, builder, arrty, value):
    return context.make_array(arrty)(context, builder, value=value).data


class _Arith:
    """Emits modular arithmetic on i(64N) values for one modulus (given as N i64 values)."""

    def __init__(self, builder: ir.IRBuilder, p_limbs: list, pinv=None):
        self.b = builder
        self.n = len(p_limbs)
        self.w = ir.IntType(64 * self.n)
        self.w1 = ir.IntType(64 * self.n + 64)
        self.p_limbs = p_limbs
        self.pinv = pinv
        self.p = self.join(p_limbs)

    @classmethod
    def from_consts(cls, builder, fc_value, n: int) -> "_Arith":
        p_tuple = builder.extract_value(fc_value, 0)
        return cls(builder, [builder.extract_value(p_tuple, j) for j in range(n)], builder.extract_value(fc_value, 1))

    def join(self, limbs):
        acc = ir.Constant(self.w, 0)
        for j, limb in enumerate(limbs):
            acc = self.b.or_(acc, self.b.shl(self.b.zext(limb, self.w), ir.Constant(self.w, 64 * j)))
        return acc

    def part(self, ptr, k: int):
        """Pointer to coefficient k (0 or 1) of an element at i64* ``ptr``, as i(64N)*."""
        at = self.b.gep(ptr, [ir.Constant(_I64, k * self.n)]) if k else ptr
        return self.b.bitcast(at, self.w.as_pointer())

    def load(self, ptr, k: int = 0):
        return self.b.load(self.part(ptr, k), align=8)

    def store(self, ptr, k: int, value) -> None:
        self.b.store(value, self.part(ptr, k), align=8)

    def _unpredictable(self, condition, if_true, if_false):
        """A select marked ``!unpredictable``, so that LLVM keeps it a conditional move rather than a jump: whether a
        sum of field elements needs its reduction is a coin toss, which a jump mispredicts half the time. Both
        arms are computed whole (no shared term LLVM could pull out of the select, which would drop the mark). An NTT
        butterfly went from 50 to 41 ns, an untabled 2^15 G1 MSM from 122-127 to 110-115 ms on the 2-core machine."""
        chosen = self.b.select(condition, if_true, if_false)
        chosen.set_metadata("unpredictable", self.b.module.add_metadata([]))
        return chosen

    def add(self, x, y):
        b = self.b
        total = b.add(b.zext(x, self.w1), b.zext(y, self.w1))
        reduced = b.sub(total, b.zext(self.p, self.w1))  # negative (its top bit set) when x + y < p
        return b.trunc(self._unpredictable(b.icmp_signed("<", reduced, ir.Constant(self.w1, 0)), total, reduced), self.w)

    def sub(self, x, y):
        b = self.b
        wrapped = b.trunc(b.sub(b.add(b.zext(x, self.w1), b.zext(self.p, self.w1)), b.zext(y, self.w1)), self.w)
        return self._unpredictable(b.icmp_unsigned("<", x, y), wrapped, b.sub(x, y))

    def neg(self, x):
        b = self.b
        zero = ir.Constant(self.w, 0)
        return b.select(b.icmp_unsigned("==", x, zero), zero, b.sub(self.p, x))

    def half(self, x):
        """x/2 mod p: (x + p)/2 when x is odd (the sum fits in N + 1 limbs)."""
        b = self.b
        wide = b.zext(x, self.w1)
        odd = b.trunc(x, ir.IntType(1))
        total = b.select(odd, b.add(wide, b.zext(self.p, self.w1)), wide)
        return b.trunc(b.lshr(total, ir.Constant(self.w1, 1)), self.w)

    def call(self, fn, *ptrs, extra=()):
        self.b.call(fn, list(ptrs) + list(self.p_limbs) + [self.pinv] + list(extra))

    def scratch(self, count: int):
        """``count`` element slots (i64*) in the current function's entry block."""
        slot = cgutils.alloca_once(self.b, ir.ArrayType(_I64, self.n), size=count)
        base = self.b.bitcast(slot, _I64.as_pointer())
        return [self.b.gep(base, [ir.Constant(_I64, i * self.n)]) for i in range(count)]


def _out_of_line(module: ir.Module, name: str, n_ptrs: int, n: int, n_extra: int, body) -> ir.Function:
    """``void name(i64* x n_ptrs, i64 p_0..p_{N-1}, i64 pinv, i64 x n_extra)``, defined once per module.

    noinline + linkonce_odr: one copy per module, called from every use site.
    """
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    fnty = ir.FunctionType(ir.VoidType(), [_I64.as_pointer()] * n_ptrs + [_I64] * (n + 1 + n_extra))
    fn = ir.Function(module, fnty, name=name)
    fn.linkage = "linkonce_odr"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    arith = _Arith(builder, list(fn.args[n_ptrs : n_ptrs + n]), fn.args[n_ptrs + n])
    body(builder, arith, fn.args[:n_ptrs], list(fn.args[n_ptrs + n + 1 :]))
    builder.ret_void()
    return fn


def _mont_mul_fn(module: ir.Module, n: int) -> ir.Function:
    """CIOS Montgomery product out = a·b·R⁻¹, unrolled on SSA values with 64×64→128-bit products."""

    def body(b, arith, ptrs, extra):
        pa, pb, pout = ptrs
        limbs = [b.load(b.gep(pa, [ir.Constant(_I64, j)]), align=8) for j in range(n)]
        other = [b.load(b.gep(pb, [ir.Constant(_I64, j)]), align=8) for j in range(n)]
        shift = ir.Constant(_I128, 64)

        def mac(x, y, acc, carry):
            full = b.add(b.add(b.mul(b.zext(x, _I128), b.zext(y, _I128)), b.zext(acc, _I128)), b.zext(carry, _I128))
            return b.trunc(full, _I64), b.trunc(b.lshr(full, shift), _I64)

        def add2(x, y):
            full = b.add(b.zext(x, _I128), b.zext(y, _I128))
            return b.trunc(full, _I64), b.trunc(b.lshr(full, shift), _I64)

        zero = ir.Constant(_I64, 0)
        p = arith.p_limbs
        t = [zero] * (n + 2)
        for i in range(n):
            carry = zero
            for j in range(n):
                t[j], carry = mac(limbs[j], other[i], t[j], carry)
            t[n], t[n + 1] = add2(t[n], carry)
            m = b.mul(t[0], arith.pinv)
            _, carry = mac(m, p[0], t[0], zero)
            for j in range(1, n):
                t[j - 1], carry = mac(m, p[j], t[j], carry)
            t[n - 1], hi = add2(t[n], carry)
            t[n] = b.add(t[n + 1], hi)
        # t < 2p: one conditional subtraction (on n + 1 limbs, t[n] being the carry).
        wide = ir.IntType(64 * n + 64)
        total = ir.Constant(wide, 0)
        for j in range(n + 1):
            total = b.or_(total, b.shl(b.zext(t[j], wide), ir.Constant(wide, 64 * j)))
        p_wide = b.zext(arith.p, wide)
        reduced = b.select(b.icmp_unsigned(">=", total, p_wide), b.sub(total, p_wide), total)
        arith.store(pout, 0, b.trunc(reduced, arith.w))

    return _out_of_line(module, f"cuzk_mont_mul_{n}", 3, n, 0, body)


def _fp2_mul_fn(module: ir.Module, n: int) -> ir.Function:
    """Karatsuba over u² = −1: 3 Montgomery products."""
    mul = _mont_mul_fn(module, n)

    def body(b, arith, ptrs, extra):
        pa, pb, pout = ptrs
        t0, t1, sa, sb = arith.scratch(4)
        arith.call(mul, pa, pb, t0)
        a1, b1 = b.gep(pa, [ir.Constant(_I64, n)]), b.gep(pb, [ir.Constant(_I64, n)])
        arith.call(mul, a1, b1, t1)
        arith.store(sa, 0, arith.add(arith.load(pa, 0), arith.load(pa, 1)))
        arith.store(sb, 0, arith.add(arith.load(pb, 0), arith.load(pb, 1)))
        arith.call(mul, sa, sb, sa)
        x0, x1, cross = arith.load(t0), arith.load(t1), arith.load(sa)
        arith.store(pout, 0, arith.sub(x0, x1))
        arith.store(pout, 1, arith.sub(arith.sub(cross, x0), x1))

    return _out_of_line(module, f"cuzk_fp2_mul_{n}", 3, n, 0, body)


def _fp2_sqr_fn(module: ir.Module, n: int) -> ir.Function:
    """(a0 + a1 u)² = (a0 + a1)(a0 − a1) + 2·a0·a1·u: 2 Montgomery products."""
    mul = _mont_mul_fn(module, n)

    def body(b, arith, ptrs, extra):
        pa, pout = ptrs
        s, d, cross = arith.scratch(3)
        a0, a1 = arith.load(pa, 0), arith.load(pa, 1)
        arith.store(s, 0, arith.add(a0, a1))
        arith.store(d, 0, arith.sub(a0, a1))
        arith.call(mul, pa, b.gep(pa, [ir.Constant(_I64, n)]), cross)
        arith.call(mul, s, d, pout)
        c = arith.load(cross)
        arith.store(pout, 1, arith.add(c, c))

    return _out_of_line(module, f"cuzk_fp2_sqr_{n}", 2, n, 0, body)


def _fp_inv_fn(module: ir.Module, n: int) -> ir.Function:
    """out = a^(p−2) (Fermat; 0 maps to 0) by left-to-right square-and-multiply. Extra args: R mod p limbs."""
    mul = _mont_mul_fn(module, n)

    def body(b, arith, ptrs, one_limbs):
        pa, pout = ptrs
        acc, base = arith.scratch(2)
        arith.store(base, 0, arith.load(pa))
        arith.store(acc, 0, arith.join(one_limbs))
        exponent = b.sub(arith.p, ir.Constant(arith.w, 2))
        entry = b.block
        loop = b.append_basic_block("bit")
        multiply = b.append_basic_block("multiply")
        step = b.append_basic_block("step")
        done = b.append_basic_block("done")
        b.branch(loop)
        b.position_at_end(loop)
        bit = b.phi(_I64)
        bit.add_incoming(ir.Constant(_I64, 64 * n - 1), entry)
        arith.call(mul, acc, acc, acc)
        is_set = b.trunc(b.lshr(exponent, b.zext(bit, arith.w) if arith.w.width > 64 else bit), ir.IntType(1))
        b.cbranch(is_set, multiply, step)
        b.position_at_end(multiply)
        arith.call(mul, acc, base, acc)
        b.branch(step)
        b.position_at_end(step)
        following = b.sub(bit, ir.Constant(_I64, 1))
        bit.add_incoming(following, step)
        b.cbranch(b.icmp_signed("<", following, ir.Constant(_I64, 0)), done, loop)
        b.position_at_end(done)
        arith.store(pout, 0, arith.load(acc))

    return _out_of_line(module, f"cuzk_fp_inv_{n}", 2, n, n, body)


def _fp2_inv_fn(module: ir.Module, n: int) -> ir.Function:
    """1/(a0 + a1 u) = (a0 − a1 u)/(a0² + a1²); 0 maps to 0."""
    mul = _mont_mul_fn(module, n)
    inv = _fp_inv_fn(module, n)

    def body(b, arith, ptrs, one_limbs):
        pa, pout = ptrs
        a1 = b.gep(pa, [ir.Constant(_I64, n)])
        x, y = arith.scratch(2)
        arith.call(mul, pa, pa, x)
        arith.call(mul, a1, a1, y)
        arith.store(x, 0, arith.add(arith.load(x), arith.load(y)))
        arith.call(inv, x, x, extra=one_limbs)
        arith.call(mul, a1, x, y)
        arith.call(mul, pa, x, pout)
        arith.store(pout, 1, arith.neg(arith.load(y)))

    return _out_of_line(module, f"cuzk_fp2_inv_{n}", 2, n, n, body)


def _one_limbs(builder, fc_value, n: int) -> list:
    one = builder.extract_value(fc_value, 2)
    return [builder.extract_value(one, j) for j in range(n)]


def _elementwise(name: str, n_arrays: int, emit):
    """An intrinsic ``name(arrays..., fc)`` over Fp rows or Fp2 blocks; ``emit(arith, ptrs, parts, fc_value, module)``."""

    def typed(args):
        arrays, fc = args[:n_arrays], args[n_arrays]
        ndim = _field_ndim(*arrays)
        n = _limbs_of(fc)
        if ndim is None or n is None:
            return None

        def codegen(context, builder, signature, values):
            ptrs = [_data_ptr(context, builder, ty, v) for ty, v in zip(arrays, values[:n_arrays])]
            emit(_Arith.from_consts(builder, values[n_arrays], n), ptrs, ndim, values[n_arrays], builder.module)
            return context.get_dummy_value()

        return types.void(*args), codegen

    # numba intrinsics need a fixed arity
    if n_arrays == 1:

        def typer(typingctx, out, fc):
            return typed((out, fc))

    elif n_arrays == 2:

        def typer(typingctx, a, out, fc):
            return typed((a, out, fc))

    else:

        def typer(typingctx, a, b, out, fc):
            return typed((a, b, out, fc))

    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


def _emit_add(arith, ptrs, parts, fc_value, module):
    pa, pb, pout = ptrs
    for k in range(parts):
        arith.store(pout, k, arith.add(arith.load(pa, k), arith.load(pb, k)))


def _emit_sub(arith, ptrs, parts, fc_value, module):
    pa, pb, pout = ptrs
    for k in range(parts):
        arith.store(pout, k, arith.sub(arith.load(pa, k), arith.load(pb, k)))


def _emit_neg(arith, ptrs, parts, fc_value, module):
    pa, pout = ptrs
    for k in range(parts):
        arith.store(pout, k, arith.neg(arith.load(pa, k)))


def _emit_double(arith, ptrs, parts, fc_value, module):
    pa, pout = ptrs
    for k in range(parts):
        x = arith.load(pa, k)
        arith.store(pout, k, arith.add(x, x))


def _emit_half(arith, ptrs, parts, fc_value, module):
    pa, pout = ptrs
    for k in range(parts):
        arith.store(pout, k, arith.half(arith.load(pa, k)))


def _emit_mul(arith, ptrs, parts, fc_value, module):
    arith.call(_mont_mul_fn(module, arith.n) if parts == 1 else _fp2_mul_fn(module, arith.n), *ptrs)


def _emit_sqr(arith, ptrs, parts, fc_value, module):
    pa, pout = ptrs
    if parts == 1:
        arith.call(_mont_mul_fn(module, arith.n), pa, pa, pout)
    else:
        arith.call(_fp2_sqr_fn(module, arith.n), pa, pout)


def _emit_inv(arith, ptrs, parts, fc_value, module):
    fn = _fp_inv_fn(module, arith.n) if parts == 1 else _fp2_inv_fn(module, arith.n)
    arith.call(fn, *ptrs, extra=_one_limbs(arith.b, fc_value, arith.n))


def _emit_set_one(arith, ptrs, parts, fc_value, module):
    (pout,) = ptrs
    arith.store(pout, 0, arith.join(_one_limbs(arith.b, fc_value, arith.n)))
    if parts == 2:
        arith.store(pout, 1, ir.Constant(arith.w, 0))


# fe_add(a, b, out, fc), fe_sub(a, b, out, fc), fe_mul(a, b, out, fc) (Montgomery product in
# Fp, Karatsuba in Fp2; inputs < p), fe_neg(a, out, fc), fe_double(a, out, fc),
# fe_half(a, out, fc), fe_sqr(a, out, fc), fe_inv(a, out, fc) (0 maps to 0), fe_set_one(out, fc).
fe_add = _elementwise("fe_add", 3, _emit_add)
fe_sub = _elementwise("fe_sub", 3, _emit_sub)
fe_mul = _elementwise("fe_mul", 3, _emit_mul)
fe_neg = _elementwise("fe_neg", 2, _emit_neg)
fe_double = _elementwise("fe_double", 2, _emit_double)
fe_half = _elementwise("fe_half", 2, _emit_half)
fe_sqr = _elementwise("fe_sqr", 2, _emit_sqr)
fe_inv = _elementwise("fe_inv", 2, _emit_inv)
fe_set_one = _elementwise("fe_set_one", 1, _emit_set_one)


def _flat_words(context, builder, arrty, value):
    """(i64* data, number of uint64 words) of an element array."""
    ary = context.make_array(arrty)(context, builder, value=value)
    return ary.data, ary.nitems


@intrinsic
def fe_copy(typingctx, a, out):
    """out = a (any C-contiguous uint64 array: an Fp row, an Fp2 block, a tower element)."""
    if _element_ndim(a, out) is None:
        return None

    def codegen(context, builder, signature, args):
        src, count = _flat_words(context, builder, a, args[0])
        dst, _ = _flat_words(context, builder, out, args[1])
        with cgutils.for_range(builder, count) as loop:
            builder.store(builder.load(builder.gep(src, [loop.index])), builder.gep(dst, [loop.index]))
        return context.get_dummy_value()

    return types.void(a, out), codegen


@intrinsic
def fe_set_zero(typingctx, out):
    """out = 0 (any element shape)."""
    if _element_ndim(out) is None:
        return None

    def codegen(context, builder, signature, args):
        dst, count = _flat_words(context, builder, out, args[0])
        with cgutils.for_range(builder, count) as loop:
            builder.store(ir.Constant(_I64, 0), builder.gep(dst, [loop.index]))
        return context.get_dummy_value()

    return types.void(out), codegen


def _fold_words(context, builder, arrays, values, combine):
    ptrs = [_flat_words(context, builder, t, v) for t, v in zip(arrays, values)]
    acc = cgutils.alloca_once_value(builder, ir.Constant(_I64, 0))
    with cgutils.for_range(builder, ptrs[0][1]) as loop:
        words = [builder.load(builder.gep(p, [loop.index])) for p, _ in ptrs]
        builder.store(builder.or_(builder.load(acc), combine(builder, *words)), acc)
    return builder.icmp_unsigned("==", builder.load(acc), ir.Constant(_I64, 0))


@intrinsic
def fe_is_zero(typingctx, a):
    """a == 0 (any element shape)."""
    if _element_ndim(a) is None:
        return None

    def codegen(context, builder, signature, args):
        return _fold_words(context, builder, [a], args, lambda b, x: x)

    return types.boolean(a), codegen


@intrinsic
def fe_eq(typingctx, a, b):
    """a == b; elements are kept fully reduced, so equal values have equal words."""
    if _element_ndim(a, b) is None:
        return None

    def codegen(context, builder, signature, args):
        return _fold_words(context, builder, [a, b], args, lambda bld, x, y: bld.xor(x, y))

    return types.boolean(a, b), codegen


@intrinsic
def fp_set_tuple(typingctx, out, value):
    """out = a constant limb tuple (e.g. ``fc.one``)."""
    if _element_ndim(out) != 1 or not isinstance(value, types.UniTuple):
        return None

    def codegen(context, builder, signature, args):
        arith = _Arith(builder, [builder.extract_value(args[1], j) for j in range(value.count)])
        arith.store(_data_ptr(context, builder, out, args[0]), 0, arith.p)
        return context.get_dummy_value()

    return types.void(out, value), codegen


@intrinsic
def fp_mul_tuple(typingctx, a, value, out, fc):
    """out = a·value·R⁻¹ for a constant limb tuple (``fc.r2`` gives to_mont)."""
    n = _limbs_of(fc)
    if _element_ndim(a, out) != 1 or not isinstance(value, types.UniTuple) or n is None or value.count != n:
        return None

    def codegen(context, builder, signature, args):
        arith = _Arith.from_consts(builder, args[3], n)
        (slot,) = arith.scratch(1)
        arith.store(slot, 0, arith.join([builder.extract_value(args[1], j) for j in range(n)]))
        arith.call(_mont_mul_fn(builder.module, n), _data_ptr(context, builder, a, args[0]), slot, _data_ptr(context, builder, out, args[2]))
        return context.get_dummy_value()

    return types.void(a, value, out, fc), codegen


@intrinsic
def fp_from_mont(typingctx, a, out, fc):
    """out = a·R⁻¹ (Montgomery product with the plain integer 1)."""
    n = _limbs_of(fc)
    if _element_ndim(a, out) != 1 or n is None:
        return None

    def codegen(context, builder, signature, args):
        arith = _Arith.from_consts(builder, args[2], n)
        (slot,) = arith.scratch(1)
        arith.store(slot, 0, ir.Constant(arith.w, 1))
        arith.call(_mont_mul_fn(builder.module, n), _data_ptr(context, builder, a, args[0]), slot, _data_ptr(context, builder, out, args[1]))
        return context.get_dummy_value()

    return types.void(a, out, fc), codegen


@intrinsic(prefer_literal=True)
def _stack_array(typingctx, like, rows, extra):
    """A ``(rows, len(like) + extra)`` uint64 array on the stack (``like`` a UniTuple, the others literals).

    For scratch elements inside kernels: no allocation, and the memory is the calling
    frame's, so it must never be returned from the function that creates it.
    """
    if not isinstance(like, types.UniTuple) or not isinstance(rows, types.IntegerLiteral) or not isinstance(extra, types.IntegerLiteral):
        return None
    n_rows = rows.literal_value
    n_cols = like.count + extra.literal_value
    arrty = types.Array(types.uint64, 2, "C")

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        data = cgutils.alloca_once(builder, _I64, size=n_rows * n_cols)
        ary = context.make_array(arrty)(context, builder)
        context.populate_array(
            ary,
            data=data,
            shape=[ir.Constant(intp, n_rows), ir.Constant(intp, n_cols)],
            strides=[ir.Constant(intp, 8 * n_cols), ir.Constant(intp, 8)],
            itemsize=ir.Constant(intp, 8),
            meminfo=None,
        )
        return ary._getvalue()

    return arrty(like, rows, extra), codegen


# The Fp spellings, for code that only ever handles rows.
fp_add, fp_sub, fp_neg, fp_mul, fp_sqr, fp_inv = fe_add, fe_sub, fe_neg, fe_mul, fe_sqr, fe_inv
fp_copy, fp_set_zero, fp_is_zero = fe_copy, fe_set_zero, fe_is_zero


@njit(cache=True)
def fp_pow_u64(a, exponent, out, fc):
    """out = a^exponent for a machine-word exponent (twiddle and coset powers)."""
    acc = _stack_array(fc.p, 2, 0)
    fe_copy(a, acc[1])
    fe_set_one(acc[0], fc)
    e = np.uint64(exponent)
    while e != 0:
        if e & np.uint64(1):
            fe_mul(acc[0], acc[1], acc[0], fc)
        fe_sqr(acc[1], acc[1], fc)
        e >>= np.uint64(1)
    fe_copy(acc[0], out)


# ----------------------------------------------------------------------------------
# Parallel array kernels over (n, N) uint64 rows. One kernel per arity with an operation
# code keeps the number of separately compiled parallel functions (slow to compile) low.
#
# A parallel loop body cannot capture a tuple of tuples (numba expands only one level of
# tuple into the worker's arguments), so each parallel kernel unpacks ``fc`` into flat
# tuples before its prange and rebuilds it inside with ``FieldConsts(...)``.

MUL, ADD, SUB = 0, 1, 2
NEG, SQR, TO_MONT, FROM_MONT = 0, 1, 2, 3


@parallel_kernel
def fp_binary_vec(a, b, out, op, fc):
    """out[i] = a[i] (op) b[i] for op in MUL, ADD, SUB; out may be a or b."""
    p, pinv, one, r2, pm2 = fc
    for i in prange(a.shape[0]):
        f = FieldConsts(p, pinv, one, r2, pm2)
        if op == MUL:
            fp_mul(a[i], b[i], out[i], f)
        elif op == ADD:
            fp_add(a[i], b[i], out[i], f)
        else:
            fp_sub(a[i], b[i], out[i], f)


@parallel_kernel
def fp_unary_vec(a, out, op, fc):
    """out[i] = op(a[i]) for op in NEG, SQR, TO_MONT, FROM_MONT; out may be a."""
    p, pinv, one, r2, pm2 = fc
    for i in prange(a.shape[0]):
        f = FieldConsts(p, pinv, one, r2, pm2)
        if op == NEG:
            fp_neg(a[i], out[i], f)
        elif op == SQR:
            fp_sqr(a[i], out[i], f)
        elif op == TO_MONT:
            fp_mul_tuple(a[i], r2, out[i], f)
        else:
            fp_from_mont(a[i], out[i], f)


@parallel_kernel
def fp_scale_vec(a, k, out, fc):
    """out[i] = a[i]·k·R⁻¹ for one row k; out may be a (k in standard form keeps a's form)."""
    p, pinv, one, r2, pm2 = fc
    for i in prange(a.shape[0]):
        fp_mul(a[i], k, out[i], FieldConsts(p, pinv, one, r2, pm2))


@njit(cache=True)
def _batch_inv_range(a, out, prefix, lo, hi, fc):
    """Montgomery's trick on rows [lo, hi): one inversion and 3 products per element; zeros map to zero."""
    acc = _stack_array(fc.p, 2, 0)
    fp_set_tuple(acc[0], fc.one)
    for i in range(lo, hi):
        fp_copy(acc[0], prefix[i])
        if not fp_is_zero(a[i]):
            fp_mul(acc[0], a[i], acc[0], fc)
    fp_inv(acc[0], acc[0], fc)
    for i in range(hi - 1, lo - 1, -1):
        if fp_is_zero(a[i]):
            fp_set_zero(out[i])
            continue
        fp_mul(acc[0], prefix[i], acc[1], fc)  # 1/a[i]
        fp_mul(acc[0], a[i], acc[0], fc)
        fp_copy(acc[1], out[i])


@parallel_kernel
def fp_batch_inv_vec(a, out, fc):
    """out[i] = 1/a[i] (0 for 0); a and out may be the same array. Chunks run in parallel."""
    n = a.shape[0]
    prefix = np.empty_like(a)
    n_chunks = max(1, min(64, n // 1024))  # each chunk pays one ~400-product inversion
    p, pinv, one, r2, pm2 = fc
    for c in prange(n_chunks):
        _batch_inv_range(a, out, prefix, c * n // n_chunks, (c + 1) * n // n_chunks, FieldConsts(p, pinv, one, r2, pm2))


@njit(cache=True)
def _mul_powers_range(a, base, out, lo, hi, fc):
    power = _stack_array(fc.p, 1, 0)[0]
    fp_pow_u64(base, lo, power, fc)
    for i in range(lo, hi):
        if a.shape[0] == 0:
            fp_copy(power, out[i])
        else:
            fp_mul(a[i], power, out[i], fc)
        fp_mul(power, base, power, fc)


@parallel_kernel
def fp_mul_powers_vec(a, base, out, fc):
    """out[i] = a[i]·base^i, or base^i itself when ``a`` is empty (twiddle tables, coset shifts).

    Chunks start from base^lo and run in parallel.
    """
    n = out.shape[0]
    n_chunks = max(1, min(64, n // 256))
    p, pinv, one, r2, pm2 = fc
    for c in prange(n_chunks):
        _mul_powers_range(a, base, out, c * n // n_chunks, (c + 1) * n // n_chunks, FieldConsts(p, pinv, one, r2, pm2))


# ----------------------------------------------------------------------------------
# Conversions between Python ints and uint64-limb rows (results, tests, constants).


def to_mont_int(F: PrimeField, value: int) -> np.ndarray:
    """One Montgomery-form element as a uint64 row (for kernel constants such as a coset shift)."""
    return np.array(_u64_limbs(F.to_mont(value % F.p), F.n8 // 8), dtype=np.uint64)


def from_mont_row(F: PrimeField, row: np.ndarray) -> int:
    """The standard int of one Montgomery-form uint64 row."""
    return F.from_mont(int.from_bytes(np.ascontiguousarray(row, dtype="<u8").tobytes(), "little"))
