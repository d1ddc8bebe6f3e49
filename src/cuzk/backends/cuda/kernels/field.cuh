// A prime field in Montgomery form, generic over its constants.
//
// `P` is a constants struct generated from cuzk.curves (constants.py): N 32-bit limbs,
// INV = -p^-1 mod 2^32, and limb accessors p(i), one(i) (R mod p), r2(i) (R^2 mod p).
// Elements are always fully reduced to [0, p), so equal values have equal limbs: that is
// what makes GPU results bit-for-bit comparable with the reference arithmetic.
// Every field used has spare top bits (p < 2^(32N-1)), so a + b never overflows N limbs.
#pragma once
#include "ptx.cuh"

//
// `Inline` says whether products are inlined where they are used. Narrow fields (8 limbs) always
// are; a wide field's product (12 limbs, ~400 instructions) is out of line by default, because
// ptxas compiles every kernel with its own copy of each inlined point formula: a BLS12-381 G1
// MSM module with every product inline takes ~60-120 s of nvcc/NVRTC against ~4 s. The kernels
// that make nearly all of an MSM's additions use the inline type instead (group.cuh's HotPoint,
// HotSum); a call per product costs them the 768-byte stack frame of caller-saved registers.
template <class P, bool Inline = (P::N <= 8)>
struct alignas(16) Fp {
    static constexpr int N = P::N;
    static_assert(N % 2 == 0, "mul works on pairs of limbs");
    u32 v[N];

    CUZK_HD static Fp zero() {
        Fp r;
#pragma unroll
        for (int i = 0; i < N; i++) r.v[i] = 0;
        return r;
    }
    CUZK_HD static Fp one() {
        Fp r;
#pragma unroll
        for (int i = 0; i < N; i++) r.v[i] = P::one(i);
        return r;
    }
    CUZK_HD static Fp r2() {
        Fp r;
#pragma unroll
        for (int i = 0; i < N; i++) r.v[i] = P::r2(i);
        return r;
    }

    CUZK_HD bool is_zero() const {
        u32 acc = 0;
#pragma unroll
        for (int i = 0; i < N; i++) acc |= v[i];
        return acc == 0;
    }

    // (a + b) mod p
    CUZK_HD friend Fp operator+(const Fp& a, const Fp& b) {
        Fp s, t;
        s.v[0] = add_cc(a.v[0], b.v[0]);
#pragma unroll
        for (int i = 1; i < N; i++) s.v[i] = addc_cc(a.v[i], b.v[i]);
        // t = s - p; keep s when that borrows (s < p).
        t.v[0] = sub_cc(s.v[0], P::p(0));
#pragma unroll
        for (int i = 1; i < N; i++) t.v[i] = subc_cc(s.v[i], P::p(i));
        const u32 borrow = subc(0, 0);
#pragma unroll
        for (int i = 0; i < N; i++) s.v[i] = borrow ? s.v[i] : t.v[i];
        return s;
    }

    // (a - b) mod p
    CUZK_HD friend Fp operator-(const Fp& a, const Fp& b) {
        Fp d;
        d.v[0] = sub_cc(a.v[0], b.v[0]);
#pragma unroll
        for (int i = 1; i < N; i++) d.v[i] = subc_cc(a.v[i], b.v[i]);
        const u32 mask = subc(0, 0);  // all ones when a < b: add p back
        d.v[0] = add_cc(d.v[0], P::p(0) & mask);
#pragma unroll
        for (int i = 1; i < N; i++) d.v[i] = addc_cc(d.v[i], P::p(i) & mask);
        return d;
    }

    CUZK_HD Fp operator-() const { return zero() - *this; }

    CUZK_HD Fp dbl() const { return *this + *this; }

    CUZK_HD friend Fp operator*(const Fp& a, const Fp& b) {
        if constexpr (Inline) return mul(a, b);
        else return mul_outlined(a, b);
    }
    CUZK_OUTLINE static Fp mul_outlined(const Fp& a, const Fp& b) { return mul(a, b); }

    // Montgomery product a·b·R^-1 mod p: CIOS over 32-bit words with the accumulator split in two
    // (sppark's mont_t layout). `e` takes the products of the even limbs of a (and of p), each
    // (lo, hi) pair at words (2k, 2k+1); `o` those of the odd limbs, one word higher. Every row is
    // then two carry chains of whole pairs, each pair one IMAD.WIDE.U32 on sm_90, and the row's
    // shift by a word is a renaming: after it `o` is word-aligned (the next row's even
    // accumulator) and e[2..] is one word off (the next odd one), with e[1] folded into the chain.
    // The accumulator T stays below 2p between rows, so with p < 2^(32N-1) T·2^32 fits in N+1
    // words: the odd chains' top carries are zero and the even chains' carries land in o[N-1].
    CUZK_HD static Fp mul(const Fp& a, const Fp& b) {
        u32 e[N], o[N];
#pragma unroll
        for (int j = 0; j < N; j += 2) {
            const u64 even = (u64)a.v[j] * b.v[0], odd = (u64)a.v[j + 1] * b.v[0];
            e[j] = (u32)even;
            e[j + 1] = (u32)(even >> 32);
            o[j] = (u32)odd;
            o[j + 1] = (u32)(odd >> 32);
        }
        reduce_row(e, o);
#pragma unroll
        for (int i = 1; i < N; i++) {
            const u32 bi = b.v[i];
            u32 n[N];
            // n = e[2..] + odd products (one word off); o = o + e[1] + even products.
            o[0] = add_cc(o[0], e[1]);
#pragma unroll
            for (int j = 0; j < N - 2; j += 2) madc_wide_cc(n[j], n[j + 1], a.v[j + 1], bi, e[j + 2], e[j + 3]);
            madc_wide(n[N - 2], n[N - 1], a.v[N - 1], bi);
            mad_wide_cc(o[0], o[1], a.v[0], bi);
#pragma unroll
            for (int j = 2; j < N; j += 2) madc_wide_cc(o[j], o[j + 1], a.v[j], bi, o[j], o[j + 1]);
            n[N - 1] = addc(n[N - 1], 0);
            reduce_row(o, n);
#pragma unroll
            for (int j = 0; j < N; j++) {
                e[j] = o[j];
                o[j] = n[j];
            }
        }
        // T = e/2^32 + o (e[0] is 0 after the last reduction), T < 2p < 2^(32N): subtract p once
        // unless that borrows.
        Fp r, s;
        r.v[0] = add_cc(o[0], e[1]);
#pragma unroll
        for (int j = 1; j < N - 1; j++) r.v[j] = addc_cc(o[j], e[j + 1]);
        r.v[N - 1] = addc(o[N - 1], 0);
        s.v[0] = sub_cc(r.v[0], P::p(0));
#pragma unroll
        for (int i = 1; i < N; i++) s.v[i] = subc_cc(r.v[i], P::p(i));
        const u32 borrow = subc(0, 0);
#pragma unroll
        for (int i = 0; i < N; i++) r.v[i] = borrow ? r.v[i] : s.v[i];
        return r;
    }

    // One Montgomery reduction step on the split accumulator: m = e[0]·(-p^-1) makes e[0] zero
    // once m·p is added, the odd limbs of p into o, the even ones into e, e's top carry into o.
    CUZK_HD static void reduce_row(u32* e, u32* o) {
        const u32 m = e[0] * P::INV;
        mad_wide_cc(o[0], o[1], P::p(1), m);
#pragma unroll
        for (int j = 2; j < N; j += 2) madc_wide_cc(o[j], o[j + 1], P::p(j + 1), m, o[j], o[j + 1]);
        mad_wide_cc(e[0], e[1], P::p(0), m);
#pragma unroll
        for (int j = 2; j < N; j += 2) madc_wide_cc(e[j], e[j + 1], P::p(j), m, e[j], e[j + 1]);
        o[N - 1] = addc(o[N - 1], 0);
    }

    CUZK_HD Fp sqr() const { return *this * *this; }

    // this^(p-2) = this^-1 (0 for 0), by Fermat. Products out of line: an inlined 254-step
    // exponentiation takes NVVM minutes to compile, and nothing calls it in a hot loop.
    CUZK_HD Fp inverse() const {
        Fp r = one();
        for (int i = N - 1; i >= 0; i--) {
            const u32 e = P::p(i) - (i == 0 ? 2u : 0u);
            for (int b = 31; b >= 0; b--) {
                r = mul_outlined(r, r);
                if ((e >> b) & 1) r = mul_outlined(r, *this);
            }
        }
        return r;
    }

    CUZK_HD Fp to_mont() const { return *this * r2(); }
    CUZK_HD Fp from_mont() const {
        Fp unit = zero();
        unit.v[0] = 1;
        return *this * unit;
    }

    // Raw limb I/O at a global address (limbs little-endian, as in the project's arrays).
    CUZK_HD static Fp load(const u32* src) { return *reinterpret_cast<const Fp*>(src); }
    CUZK_HD void store(u32* dst) const { *reinterpret_cast<Fp*>(dst) = *this; }
};
