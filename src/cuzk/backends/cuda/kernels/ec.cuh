// Points on y^2 = x^3 + b (a = 0 on both curves), generic over the coordinate field F.
//
// Affine points are what keys store: (x, y), the all-zero pair meaning infinity (it is on
// neither curve, so the encoding is unambiguous). Sums are kept in XYZZ coordinates
// (x = X/ZZ, y = Y/ZZZ, ZZ^3 = ZZZ^2), whose mixed addition costs 8M + 2S with no
// inversion; ZZ = 0 is infinity. Formulas: add-2008-s, madd-2008-s, dbl-2008-s-1 and
// mdbl-2008-s-1 from the Explicit-Formulas Database, with their exceptional cases
// (equal points, opposite points, infinity) handled explicitly.
#pragma once
#include "fq2.cuh"

template <class F>
struct Affine {
    F x, y;
    CUZK_HD bool is_infinity() const { return x.is_zero() && y.is_zero(); }
    CUZK_HD Affine operator-() const { return {x, -y}; }
};

template <class F>
struct XYZZ {
    F x, y, zz, zzz;

    CUZK_HD static XYZZ infinity() { return {F::zero(), F::zero(), F::zero(), F::zero()}; }
    CUZK_HD static XYZZ from_affine(const Affine<F>& a) {
        if (a.is_infinity()) return infinity();
        return {a.x, a.y, F::one(), F::one()};
    }
    CUZK_HD bool is_infinity() const { return zz.is_zero(); }

    // 2·(x, y) for an affine point (mdbl-2008-s-1). Out of line, like `doubled`: additions
    // reach it only in their exceptional case, and inlining it there doubles their code.
    CUZK_OUTLINE static XYZZ dbl_affine(const F& x1, const F& y1) {
        if (y1.is_zero()) return infinity();
        const F u = y1.dbl();
        const F v = u.sqr();
        const F w = u * v;
        const F s = x1 * v;
        const F x2 = x1.sqr();
        const F m = x2.dbl() + x2;
        const F x3 = m.sqr() - s.dbl();
        const F y3 = m * (s - x3) - w * y1;
        return {x3, y3, v, w};
    }

    // 2·this (dbl-2008-s-1).
    CUZK_HD XYZZ dbl() const { return doubled(*this); }
    CUZK_OUTLINE static XYZZ doubled(const XYZZ& p) {
        if (p.is_infinity() || p.y.is_zero()) return infinity();
        const F u = p.y.dbl();
        const F v = u.sqr();
        const F w = u * v;
        const F s = p.x * v;
        const F x2 = p.x.sqr();
        const F m = x2.dbl() + x2;
        const F x3 = m.sqr() - s.dbl();
        const F y3 = m * (s - x3) - w * p.y;
        return {x3, y3, v * p.zz, w * p.zzz};
    }

    // this + (x2, y2) for a finite affine point (madd-2008-s).
    CUZK_HD XYZZ add_affine(const F& x2, const F& y2) const {
        if (is_infinity()) return {x2, y2, F::one(), F::one()};
        const F u2 = x2 * zz;
        const F s2 = y2 * zzz;
        const F p = u2 - x;
        const F r = s2 - y;
        if (p.is_zero()) {
            if (r.is_zero()) return dbl_affine(x2, y2);
            return infinity();
        }
        return sum(x, y, p, r, zz, zzz);
    }

    // this + o (add-2008-s).
    CUZK_HD XYZZ add(const XYZZ& o) const {
        if (is_infinity()) return o;
        if (o.is_infinity()) return *this;
        const F u1 = x * o.zz;
        const F u2 = o.x * zz;
        const F s1 = y * o.zzz;
        const F s2 = o.y * zzz;
        const F p = u2 - u1;
        const F r = s2 - s1;
        if (p.is_zero()) {
            if (r.is_zero()) return dbl();
            return infinity();
        }
        return sum(u1, s1, p, r, zz * o.zz, zzz * o.zzz);
    }

    // The common end of both additions (add-2008-s): u1, s1 the first operand's scaled x and y,
    // p = u2 − u1 ≠ 0, r = s2 − s1, zz and zzz the products of the operands' ZZ and ZZZ.
    CUZK_HD static XYZZ sum(const F& u1, const F& s1, const F& p, const F& r, const F& zz, const F& zzz) {
        const F pp = p.sqr();
        const F ppp = p * pp;
        const F q = u1 * pp;
        const F x3 = r.sqr() - ppp - q.dbl();
        const F y3 = r * (q - x3) - s1 * ppp;
        return {x3, y3, zz * pp, zzz * ppp};
    }

    // k·this for a small public k (double-and-add from the top bit).
    CUZK_HD XYZZ mul_small(u32 k) const {
        if (k == 0) return infinity();
        int top = 31;
        while (!((k >> top) & 1)) top--;
        XYZZ acc = *this;
        for (int b = top - 1; b >= 0; b--) {
            acc = acc.dbl();
            if ((k >> b) & 1) acc = acc.add(*this);
        }
        return acc;
    }
};
