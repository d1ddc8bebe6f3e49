"""Montgomery arithmetic for the CPU backend, generic over the modulus.

Layout: the project's field vectors are ``(n, limbs32)`` little-endian uint32 arrays
(backends/base.py). On a little-endian machine the same bytes are ``(n, limbs32 // 2)``
little-endian uint64 limbs, and snarkjs's Montgomery radix R = 2^(8·n8) is the same
either way, so the kernels work on a free ``.view(np.uint64)`` of the caller's array.

Why 64-bit limbs rather than 32-bit limbs with 64-bit accumulators: an LLVM intrinsic
gives the full 64×64→128-bit product (one ``mul`` instruction), so a 4-limb product
needs 32 multiplies instead of 128; measured on this machine a BN254 multiplication
costs ~26 ns against ~127 ns for the 32-bit version.

Why the modulus is a tuple and not an array: ``FieldConsts`` carries the modulus as a
``UniTuple(uint64, N)``, so numba compiles one specialisation per limb count (4 for both
Fr and BN254's Fq, 6 for BLS12-381's Fq) in which N is a compile-time constant. LLVM
then unrolls the limb loops and keeps the per-call scratch (a stack array, see
``_stack_array``) in registers; with N read from an array at run time the same code is
2× slower. One kernel source still serves all four moduli.

Per-element functions (``fp_*``, ``fp2_*`` and the generic ``fe_*``) take 1-D uint64
rows (Fp) or ``(2, N)`` blocks (Fp2 = Fp[u]/(u² + 1)) and write into ``out``, which may
alias an input. They are meant to be called from other ``@njit`` kernels. The ``*_vec``
kernels are the parallel array versions.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ...curves.field import PrimeField

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


def as_u64(a: np.ndarray) -> np.ndarray:
    """The uint64-limb view of a C-contiguous uint32 limb array (no copy)."""
    return a.view(np.uint64)


def as_u32(a: np.ndarray) -> np.ndarray:
    """The uint32-limb view of a uint64-limb array (no copy)."""
    return a.view(np.uint32)


# ----------------------------------------------------------------------------------
# LLVM intrinsics: the 128-bit product and stack scratch that numba cannot express.


def _row_args_ok(*arrays) -> bool:
    return all(isinstance(a, types.Array) and a.dtype == types.uint64 and a.ndim == 1 and a.layout == "C" for a in arrays)


def _load_wide(context, builder, arrty, value, n_limbs: int, width: int):
    """An N-limb row as one little-endian integer of ``width`` bits (LLVM splits it back into registers)."""
    data = context.make_array(arrty)(context, builder, value=value).data
    row = builder.load(builder.bitcast(data, ir.IntType(64 * n_limbs).as_pointer()), align=8)
    return builder.zext(row, ir.IntType(width)) if width > 64 * n_limbs else row


def _store_wide(context, builder, arrty, value, wide, n_limbs: int) -> None:
    data = context.make_array(arrty)(context, builder, value=value).data
    narrow = builder.trunc(wide, ir.IntType(64 * n_limbs)) if wide.type.width > 64 * n_limbs else wide
    builder.store(narrow, builder.bitcast(data, ir.IntType(64 * n_limbs).as_pointer()), align=8)


def _tuple_wide(builder, tup, n_limbs: int, width: int):
    acc = ir.Constant(ir.IntType(width), 0)
    for j in range(n_limbs):
        limb = builder.zext(builder.extract_value(tup, j), ir.IntType(width))
        acc = builder.or_(acc, builder.shl(limb, ir.Constant(ir.IntType(width), 64 * j)))
    return acc


@intrinsic
def _ir_add(typingctx, a, b, out, p):
    """out = a + b mod p as wide-integer IR: add, trial subtraction, select (no branches)."""
    if not (_row_args_ok(a, b, out) and isinstance(p, types.UniTuple)):
        return None
    n = p.count
    width = 64 * n + 64

    def codegen(context, builder, signature, args):
        va, vb, vout, vp = args
        total = builder.add(_load_wide(context, builder, a, va, n, width), _load_wide(context, builder, b, vb, n, width))
        modulus = _tuple_wide(builder, vp, n, width)
        reduced = builder.select(builder.icmp_unsigned(">=", total, modulus), builder.sub(total, modulus), total)
        _store_wide(context, builder, out, vout, reduced, n)
        return context.get_dummy_value()

    return types.void(a, b, out, p), codegen


@intrinsic
def _ir_sub(typingctx, a, b, out, p):
    """out = a - b mod p: subtract, add p back where it borrowed."""
    if not (_row_args_ok(a, b, out) and isinstance(p, types.UniTuple)):
        return None
    n = p.count
    width = 64 * n

    def codegen(context, builder, signature, args):
        va, vb, vout, vp = args
        x = _load_wide(context, builder, a, va, n, width)
        y = _load_wide(context, builder, b, vb, n, width)
        diff = builder.sub(x, y)
        fixed = builder.add(diff, _tuple_wide(builder, vp, n, width))
        _store_wide(context, builder, out, vout, builder.select(builder.icmp_unsigned("<", x, y), fixed, diff), n)
        return context.get_dummy_value()

    return types.void(a, b, out, p), codegen


@intrinsic
def _ir_neg(typingctx, a, out, p):
    """out = -a mod p (0 stays 0)."""
    if not (_row_args_ok(a, out) and isinstance(p, types.UniTuple)):
        return None
    n = p.count
    width = 64 * n

    def codegen(context, builder, signature, args):
        va, vout, vp = args
        x = _load_wide(context, builder, a, va, n, width)
        negated = builder.sub(_tuple_wide(builder, vp, n, width), x)
        zero = ir.Constant(ir.IntType(width), 0)
        _store_wide(context, builder, out, vout, builder.select(builder.icmp_unsigned("==", x, zero), zero, negated), n)
        return context.get_dummy_value()

    return types.void(a, out, p), codegen


def _mont_mul_function(module: ir.Module, n: int) -> ir.Function:
    """``void cuzk_mont_mul_N(i64* a, i64* b, i64* out, i64 p_0..p_{N-1}, i64 pinv)`` in ``module``.

    CIOS Montgomery multiplication, fully unrolled on SSA values with 64×64→128-bit
    products. Defined once per LLVM module and kept out of line (noinline, linkonce_odr):
    inlining ~800 instructions at every call site made numba's compile times explode.
    """
    name = f"cuzk_mont_mul_{n}"
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    i64, i128 = ir.IntType(64), ir.IntType(128)
    fnty = ir.FunctionType(ir.VoidType(), [i64.as_pointer()] * 3 + [i64] * (n + 1))
    fn = ir.Function(module, fnty, name=name)
    fn.linkage = "linkonce_odr"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    pa, pb, pout = fn.args[:3]
    p = list(fn.args[3 : 3 + n])
    pinv = fn.args[3 + n]
    a = [builder.load(builder.gep(pa, [ir.Constant(i64, j)]), align=8) for j in range(n)]
    b = [builder.load(builder.gep(pb, [ir.Constant(i64, j)]), align=8) for j in range(n)]
    shift = ir.Constant(i128, 64)

    def mac(x, y, acc, carry):
        full = builder.add(builder.add(builder.mul(builder.zext(x, i128), builder.zext(y, i128)), builder.zext(acc, i128)), builder.zext(carry, i128))
        return builder.trunc(full, i64), builder.trunc(builder.lshr(full, shift), i64)

    def add2(x, y):
        full = builder.add(builder.zext(x, i128), builder.zext(y, i128))
        return builder.trunc(full, i64), builder.trunc(builder.lshr(full, shift), i64)

    zero = ir.Constant(i64, 0)
    t = [zero] * (n + 2)
    for i in range(n):
        carry = zero
        for j in range(n):
            t[j], carry = mac(a[j], b[i], t[j], carry)
        t[n], t[n + 1] = add2(t[n], carry)
        m = builder.mul(t[0], pinv)
        _, carry = mac(m, p[0], t[0], zero)
        for j in range(1, n):
            t[j - 1], carry = mac(m, p[j], t[j], carry)
        t[n - 1], hi = add2(t[n], carry)
        t[n] = builder.add(t[n + 1], hi)
    width = 64 * n + 64
    wide_t = ir.Constant(ir.IntType(width), 0)
    wide_p = ir.Constant(ir.IntType(width), 0)
    for j in range(n + 1):
        sh = ir.Constant(ir.IntType(width), 64 * j)
        wide_t = builder.or_(wide_t, builder.shl(builder.zext(t[j], ir.IntType(width)), sh))
        if j < n:
            wide_p = builder.or_(wide_p, builder.shl(builder.zext(p[j], ir.IntType(width)), sh))
    reduced = builder.select(builder.icmp_unsigned(">=", wide_t, wide_p), builder.sub(wide_t, wide_p), wide_t)
    out_wide = builder.trunc(reduced, ir.IntType(64 * n))
    builder.store(out_wide, builder.bitcast(pout, ir.IntType(64 * n).as_pointer()), align=8)
    builder.ret_void()
    return fn


@intrinsic
def _ir_mont_mul(typingctx, a, b, out, p, pinv):
    """out = a·b·R^-1 mod p through the module's out-of-line CIOS function."""
    if not (_row_args_ok(a, b, out) and isinstance(p, types.UniTuple) and pinv == types.uint64):
        return None
    n = p.count

    def codegen(context, builder, signature, args):
        va, vb, vout, vp, vpinv = args
        fn = _mont_mul_function(builder.module, n)
        ptrs = [context.make_array(ty)(context, builder, value=v).data for ty, v in ((a, va), (b, vb), (out, vout))]
        builder.call(fn, ptrs + [builder.extract_value(vp, j) for j in range(n)] + [vpinv])
        return context.get_dummy_value()

    return types.void(a, b, out, p, pinv), codegen


@intrinsic(prefer_literal=True)
def _stack_array(typingctx, like, rows, extra):
    """A ``(rows, len(like) + extra)`` uint64 array on the stack (``like`` a UniTuple, the others literals).

    Heap scratch (np.empty) would cost an allocation per field operation and could never
    live in registers; a fixed-size alloca in the entry block can, once LLVM has unrolled
    the constant-length limb loops.
    """
    if not isinstance(like, types.UniTuple) or not isinstance(rows, types.IntegerLiteral) or not isinstance(extra, types.IntegerLiteral):
        return None
    n_rows = rows.literal_value
    n_cols = like.count + extra.literal_value
    arrty = types.Array(types.uint64, 2, "C")

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        data = cgutils.alloca_once(builder, ir.IntType(64), size=n_rows * n_cols)
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


# ----------------------------------------------------------------------------------
# Fp: one element is a 1-D uint64 row of N limbs.
#
# Small helpers are inlined into their callers at numba-IR level (inline="always"): every
# separately jitted function costs ~0.5 s of compile time, and stack scratch must be
# allocated in the frame that uses it.

inline = njit(inline="always")


@inline
def fp_copy(a, out):
    for j in range(out.shape[0]):
        out[j] = a[j]


@inline
def fp_set_tuple(out, value):
    """out = a constant limb tuple (e.g. ``fc.one``)."""
    for j in range(len(value)):
        out[j] = value[j]


@inline
def fp_set_zero(out):
    for j in range(out.shape[0]):
        out[j] = 0


@inline
def fp_is_zero(a):
    acc = np.uint64(0)
    for j in range(a.shape[0]):
        acc |= a[j]
    return acc == 0


@inline
def fp_eq(a, b):
    acc = np.uint64(0)
    for j in range(a.shape[0]):
        acc |= a[j] ^ b[j]
    return acc == 0


@inline
def fp_add(a, b, out, fc):
    _ir_add(a, b, out, fc.p)


@inline
def fp_sub(a, b, out, fc):
    _ir_sub(a, b, out, fc.p)


@inline
def fp_neg(a, out, fc):
    _ir_neg(a, out, fc.p)


@inline
def fp_double(a, out, fc):
    _ir_add(a, a, out, fc.p)


@inline
def fp_mul(a, b, out, fc):
    """out = a·b·R^-1 mod p. Needs a, b < p; out may alias a or b."""
    _ir_mont_mul(a, b, out, fc.p, fc.pinv)


@inline
def fp_sqr(a, out, fc):
    _ir_mont_mul(a, a, out, fc.p, fc.pinv)


@inline
def fp_mul_tuple(a, value, out, fc):
    """out = a·value·R^-1 for a constant limb tuple (to_mont with ``fc.r2``)."""
    b = _stack_array(fc.p, 1, 0)[0]
    fp_set_tuple(b, value)
    _ir_mont_mul(a, b, out, fc.p, fc.pinv)


@inline
def fp_from_mont(a, out, fc):
    """out = a·R^-1 (Montgomery multiplication by the plain integer 1)."""
    b = _stack_array(fc.p, 1, 0)[0]
    fp_set_zero(b)
    b[0] = 1
    _ir_mont_mul(a, b, out, fc.p, fc.pinv)


@njit(cache=True)
def fp_pow_tuple(a, exponent, out, fc):
    """out = a^exponent for an exponent given as uint64 limbs (left-to-right square-and-multiply)."""
    acc = _stack_array(fc.p, 2, 0)
    fp_copy(a, acc[1])
    fp_set_tuple(acc[0], fc.one)
    for k in range(len(exponent) - 1, -1, -1):
        e = exponent[k]
        for bit in range(63, -1, -1):
            fp_sqr(acc[0], acc[0], fc)
            if (e >> np.uint64(bit)) & np.uint64(1):
                fp_mul(acc[0], acc[1], acc[0], fc)
    fp_copy(acc[0], out)


@njit(cache=True)
def fp_pow_u64(a, exponent, out, fc):
    """out = a^exponent for a machine-word exponent (twiddle and coset powers)."""
    acc = _stack_array(fc.p, 2, 0)
    fp_copy(a, acc[1])
    fp_set_tuple(acc[0], fc.one)
    e = np.uint64(exponent)
    while e != 0:
        if e & np.uint64(1):
            fp_mul(acc[0], acc[1], acc[0], fc)
        fp_sqr(acc[1], acc[1], fc)
        e >>= np.uint64(1)
    fp_copy(acc[0], out)


@inline
def fp_inv(a, out, fc):
    """out = a^-1 by Fermat (a^(p-2)); the inverse of 0 comes out as 0."""
    fp_pow_tuple(a, fc.p_minus_2, out, fc)


# ----------------------------------------------------------------------------------
# Fp2 = Fp[u]/(u^2 + 1) (both curves): one element is a (2, N) block, rows c0 and c1.


@inline
def fp2_copy(a, out):
    fp_copy(a[0], out[0])
    fp_copy(a[1], out[1])


@inline
def fp2_set_zero(out):
    fp_set_zero(out[0])
    fp_set_zero(out[1])


@inline
def fp2_set_one(out, fc):
    fp_set_tuple(out[0], fc.one)
    fp_set_zero(out[1])


@inline
def fp2_is_zero(a):
    return fp_is_zero(a[0]) and fp_is_zero(a[1])


@inline
def fp2_eq(a, b):
    return fp_eq(a[0], b[0]) and fp_eq(a[1], b[1])


@inline
def fp2_add(a, b, out, fc):
    fp_add(a[0], b[0], out[0], fc)
    fp_add(a[1], b[1], out[1], fc)


@inline
def fp2_sub(a, b, out, fc):
    fp_sub(a[0], b[0], out[0], fc)
    fp_sub(a[1], b[1], out[1], fc)


@inline
def fp2_neg(a, out, fc):
    fp_neg(a[0], out[0], fc)
    fp_neg(a[1], out[1], fc)


@inline
def fp2_double(a, out, fc):
    fp_add(a[0], a[0], out[0], fc)
    fp_add(a[1], a[1], out[1], fc)


@inline
def fp2_mul(a, b, out, fc):
    """Karatsuba: 3 Fp products. out may alias a or b."""
    t = _stack_array(fc.p, 4, 0)
    fp_mul(a[0], b[0], t[0], fc)
    fp_mul(a[1], b[1], t[1], fc)
    fp_add(a[0], a[1], t[2], fc)
    fp_add(b[0], b[1], t[3], fc)
    fp_mul(t[2], t[3], t[2], fc)
    fp_sub(t[0], t[1], out[0], fc)
    fp_sub(t[2], t[0], t[2], fc)
    fp_sub(t[2], t[1], out[1], fc)


@inline
def fp2_sqr(a, out, fc):
    """(a0 + a1 u)^2 = (a0 + a1)(a0 - a1) + 2 a0 a1 u: 2 Fp products."""
    t = _stack_array(fc.p, 3, 0)
    fp_add(a[0], a[1], t[0], fc)
    fp_sub(a[0], a[1], t[1], fc)
    fp_mul(a[0], a[1], t[2], fc)
    fp_mul(t[0], t[1], out[0], fc)
    fp_add(t[2], t[2], out[1], fc)


@njit(cache=True)
def fp2_inv(a, out, fc):
    """1/(a0 + a1 u) = (a0 - a1 u)/(a0^2 + a1^2); the inverse of 0 comes out as 0."""
    t = _stack_array(fc.p, 2, 0)
    fp_sqr(a[0], t[0], fc)
    fp_sqr(a[1], t[1], fc)
    fp_add(t[0], t[1], t[0], fc)
    fp_inv(t[0], t[0], fc)
    fp_mul(a[0], t[0], out[0], fc)
    fp_mul(a[1], t[0], t[1], fc)
    fp_neg(t[1], out[1], fc)


# ----------------------------------------------------------------------------------
# fe_*: one name for Fp (1-D element) and Fp2 (2-D element), so curve code is written once.


def _pick(a, fp_impl, fp2_impl):
    if not isinstance(a, types.Array):
        return None
    return fp_impl if a.ndim == 1 else fp2_impl


def fe_add(a, b, out, fc):
    """Numba-only: Fp or Fp2 addition by the element's shape."""


def fe_sub(a, b, out, fc):
    """Numba-only: Fp or Fp2 subtraction."""


def fe_mul(a, b, out, fc):
    """Numba-only: Fp or Fp2 product."""


def fe_sqr(a, out, fc):
    """Numba-only: Fp or Fp2 square."""


def fe_neg(a, out, fc):
    """Numba-only: Fp or Fp2 negation."""


def fe_double(a, out, fc):
    """Numba-only: Fp or Fp2 doubling."""


def fe_inv(a, out, fc):
    """Numba-only: Fp or Fp2 inverse (0 for 0)."""


def fe_copy(a, out):
    """Numba-only: copy an Fp or Fp2 element."""


def fe_set_zero(out):
    """Numba-only: out = 0."""


def fe_set_one(out, fc):
    """Numba-only: out = 1 (Montgomery)."""


def fe_is_zero(a):
    """Numba-only: a == 0."""


def fe_eq(a, b):
    """Numba-only: a == b (elements are kept fully reduced, so limbs compare)."""


@overload(fe_add, inline="always")
def _fe_add(a, b, out, fc):
    return _pick(a, lambda a, b, out, fc: fp_add(a, b, out, fc), lambda a, b, out, fc: fp2_add(a, b, out, fc))


@overload(fe_sub, inline="always")
def _fe_sub(a, b, out, fc):
    return _pick(a, lambda a, b, out, fc: fp_sub(a, b, out, fc), lambda a, b, out, fc: fp2_sub(a, b, out, fc))


@overload(fe_mul, inline="always")
def _fe_mul(a, b, out, fc):
    return _pick(a, lambda a, b, out, fc: fp_mul(a, b, out, fc), lambda a, b, out, fc: fp2_mul(a, b, out, fc))


@overload(fe_sqr, inline="always")
def _fe_sqr(a, out, fc):
    return _pick(a, lambda a, out, fc: fp_sqr(a, out, fc), lambda a, out, fc: fp2_sqr(a, out, fc))


@overload(fe_neg, inline="always")
def _fe_neg(a, out, fc):
    return _pick(a, lambda a, out, fc: fp_neg(a, out, fc), lambda a, out, fc: fp2_neg(a, out, fc))


@overload(fe_double, inline="always")
def _fe_double(a, out, fc):
    return _pick(a, lambda a, out, fc: fp_double(a, out, fc), lambda a, out, fc: fp2_double(a, out, fc))


@overload(fe_inv, inline="always")
def _fe_inv(a, out, fc):
    return _pick(a, lambda a, out, fc: fp_inv(a, out, fc), lambda a, out, fc: fp2_inv(a, out, fc))


@overload(fe_copy, inline="always")
def _fe_copy(a, out):
    return _pick(a, lambda a, out: fp_copy(a, out), lambda a, out: fp2_copy(a, out))


@overload(fe_set_zero, inline="always")
def _fe_set_zero(out):
    return _pick(out, lambda out: fp_set_zero(out), lambda out: fp2_set_zero(out))


@overload(fe_set_one, inline="always")
def _fe_set_one(out, fc):
    return _pick(out, lambda out, fc: fp_set_tuple(out, fc.one), lambda out, fc: fp2_set_one(out, fc))


@overload(fe_is_zero, inline="always")
def _fe_is_zero(a):
    return _pick(a, lambda a: fp_is_zero(a), lambda a: fp2_is_zero(a))


@overload(fe_eq, inline="always")
def _fe_eq(a, b):
    return _pick(a, lambda a, b: fp_eq(a, b), lambda a, b: fp2_eq(a, b))


# ----------------------------------------------------------------------------------
# Parallel array kernels over (n, N) uint64 rows. One kernel per arity with an operation
# code keeps the number of separately compiled parallel functions (slow to compile) low.
#
# A parallel loop body cannot capture a tuple of tuples (numba expands only one level of
# tuple into the worker's arguments), so each parallel kernel unpacks ``fc`` into flat
# tuples before its prange and rebuilds it inside with ``FieldConsts(...)``.

MUL, ADD, SUB = 0, 1, 2
NEG, SQR, TO_MONT, FROM_MONT = 0, 1, 2, 3


@njit(cache=True, parallel=True)
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


@njit(cache=True, parallel=True)
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


@njit(cache=True, parallel=True)
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


@njit(cache=True, parallel=True)
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
