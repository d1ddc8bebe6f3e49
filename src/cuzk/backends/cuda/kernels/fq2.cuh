// Fq2 = Fq[u]/(u^2 + 1), the field of G2 coordinates on both curves (constants.py checks
// that each curve's non-residue is -1). Same interface as Fp, so point code is generic.
#pragma once
#include "field.cuh"

template <class F>
struct alignas(16) Fp2 {
    F c0, c1;

    CUZK_HD static Fp2 zero() { return {F::zero(), F::zero()}; }
    CUZK_HD static Fp2 one() { return {F::one(), F::zero()}; }
    CUZK_HD bool is_zero() const { return c0.is_zero() && c1.is_zero(); }

    CUZK_HD friend Fp2 operator+(const Fp2& a, const Fp2& b) { return {a.c0 + b.c0, a.c1 + b.c1}; }
    CUZK_HD friend Fp2 operator-(const Fp2& a, const Fp2& b) { return {a.c0 - b.c0, a.c1 - b.c1}; }
    CUZK_HD Fp2 operator-() const { return {-c0, -c1}; }
    CUZK_HD Fp2 dbl() const { return {c0.dbl(), c1.dbl()}; }

    // Karatsuba: three base-field products. Out of line, like wide Fp products (field.cuh).
    CUZK_HD friend Fp2 operator*(const Fp2& a, const Fp2& b) { return mul(a, b); }
    CUZK_OUTLINE static Fp2 mul(const Fp2& a, const Fp2& b) {
        const F t0 = a.c0 * b.c0;
        const F t1 = a.c1 * b.c1;
        const F t2 = (a.c0 + a.c1) * (b.c0 + b.c1);
        return {t0 - t1, t2 - t0 - t1};
    }

    // (c0 - c1 u) / (c0^2 + c1^2): one base-field inversion.
    CUZK_HD Fp2 inverse() const {
        const F t = (c0.sqr() + c1.sqr()).inverse();
        return {c0 * t, -(c1 * t)};
    }

    // (c0 + c1 u)^2 = (c0 + c1)(c0 - c1) + 2 c0 c1 u: two products.
    CUZK_HD Fp2 sqr() const { return square(*this); }
    CUZK_OUTLINE static Fp2 square(const Fp2& a) {
        const F t = a.c0 * a.c1;
        return {(a.c0 + a.c1) * (a.c0 - a.c1), t.dbl()};
    }
};
