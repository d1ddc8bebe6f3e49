// A prime field in Montgomery form, generic over its constants.
//
// `P` is a constants struct generated from cuzk.curves (constants.py): N 32-bit limbs,
// INV = -p^-1 mod 2^32, and limb accessors p(i), one(i) (R mod p), r2(i) (R^2 mod p).
// Elements are always fully reduced to [0, p), so equal values have equal limbs: that is
// what makes GPU results bit-for-bit comparable with the reference arithmetic.
// Every field used has spare top bits (p < 2^(32N-1)), so a + b never overflows N limbs.
#pragma once
#include "ptx.cuh"

template <class P>
struct alignas(16) Fp {
    static constexpr int N = P::N;
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

    // Wide fields are multiplied out of line: inlining every 12-limb product of a G2 point
    // formula makes kernels that take NVRTC many minutes to compile, for little speed.
    CUZK_HD friend Fp operator*(const Fp& a, const Fp& b) {
        if constexpr (N > 8) return mul_outlined(a, b);
        else return mul(a, b);
    }
    CUZK_OUTLINE static Fp mul_outlined(const Fp& a, const Fp& b) { return mul(a, b); }

    // Montgomery product a·b·R^-1 mod p: CIOS over 32-bit words, each row one lo and one hi
    // carry chain for a·b_i and the same for m·p. The accumulator stays below 2p between rows.
    CUZK_HD static Fp mul(const Fp& a, const Fp& b) {
        u32 t[N + 2];
#pragma unroll
        for (int i = 0; i < N + 2; i++) t[i] = 0;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const u32 bi = b.v[i];
            t[0] = mad_lo_cc(a.v[0], bi, t[0]);
#pragma unroll
            for (int j = 1; j < N; j++) t[j] = madc_lo_cc(a.v[j], bi, t[j]);
            t[N] = addc_cc(t[N], 0);
            t[N + 1] = addc(t[N + 1], 0);
            t[1] = mad_hi_cc(a.v[0], bi, t[1]);
#pragma unroll
            for (int j = 1; j < N; j++) t[j + 1] = madc_hi_cc(a.v[j], bi, t[j + 1]);
            t[N + 1] = addc(t[N + 1], 0);

            const u32 m = t[0] * P::INV;
            t[0] = mad_lo_cc(m, P::p(0), t[0]);
#pragma unroll
            for (int j = 1; j < N; j++) t[j] = madc_lo_cc(m, P::p(j), t[j]);
            t[N] = addc_cc(t[N], 0);
            t[N + 1] = addc(t[N + 1], 0);
            t[1] = mad_hi_cc(m, P::p(0), t[1]);
#pragma unroll
            for (int j = 1; j < N; j++) t[j + 1] = madc_hi_cc(m, P::p(j), t[j + 1]);
            t[N + 1] = addc(t[N + 1], 0);
#pragma unroll
            for (int j = 0; j < N + 1; j++) t[j] = t[j + 1];
            t[N + 1] = 0;
        }
        // t < 2p: subtract p once unless that borrows.
        Fp r, s;
#pragma unroll
        for (int i = 0; i < N; i++) r.v[i] = t[i];
        s.v[0] = sub_cc(t[0], P::p(0));
#pragma unroll
        for (int i = 1; i < N; i++) s.v[i] = subc_cc(t[i], P::p(i));
        const u32 borrow = subc(t[N], 0);
#pragma unroll
        for (int i = 0; i < N; i++) r.v[i] = borrow ? r.v[i] : s.v[i];
        return r;
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
