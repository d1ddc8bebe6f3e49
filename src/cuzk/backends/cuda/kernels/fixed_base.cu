// Fixed-base scalar multiplication for a Groth16 setup: k_i·G for many scalars k_i, one base G.
//
// Compiled through modules.group_source (group.cuh's F, Point and Sum for one curve's G1 or G2),
// so this file has no includes of its own. The table is the one the CPU builds
// (backends/cpu/fixed_base.py, FixedBaseTable): table[j][d - 1] = d·2^(w·j)·G, affine Montgomery,
// for d = 1..2^(w-1) and ceil((bits + 1)/w) windows j. A scalar's signed w-bit digits pick one
// entry per window, so a scalar costs one mixed XYZZ addition per non-zero digit and no doubling.
//
// Each thread takes `batch` scalars strided across the launch (so loads and stores coalesce),
// keeps their XYZZ sums in `sums`, and makes them affine with one shared Fermat inversion
// (Montgomery's trick; the running prefix products are parked in the outputs' x slots).
// The result is the CPU path's bytes exactly: affine Montgomery, fully reduced, all-zero for
// infinity.

#define FB_SCALAR_LIMBS 8

// The w-bit window of a standard-form scalar starting at bit `offset` (w <= 32).
CUZK_HD u32 fb_window(const u32* s, u32 offset, u32 w) {
    const u32 limb = offset >> 5, shift = offset & 31;
    u64 chunk = 0;
    if (limb < FB_SCALAR_LIMBS) chunk = s[limb] >> shift;
    if (shift != 0 && limb + 1 < FB_SCALAR_LIMBS) chunk |= (u64)s[limb + 1] << (32 - shift);
    return (u32)(chunk & ((1ull << w) - 1));
}

// a^(p - 2) = 1/a for a != 0 (Fermat), the exponent's bits read from the field's constants.
template <class P>
CUZK_HD Fp<P> fb_inverse(const Fp<P>& a) {
    u32 e[P::N];
    u32 borrow = 2;
    for (int i = 0; i < P::N; i++) {
        const u64 d = (u64)P::p(i) - borrow;
        e[i] = (u32)d;
        borrow = (u32)(d >> 63);
    }
    Fp<P> r = Fp<P>::one();
    for (int i = P::N - 1; i >= 0; i--)
        for (int b = 31; b >= 0; b--) {
            r = r.sqr();
            if ((e[i] >> b) & 1) r = r * a;
        }
    return r;
}

// 1/(c0 + c1·u) = (c0 − c1·u)/(c0² + c1²) in Fq[u]/(u² + 1).
template <class B>
CUZK_HD Fp2<B> fb_inverse(const Fp2<B>& a) {
    const B t = fb_inverse(a.c0.sqr() + a.c1.sqr());
    return {a.c0 * t, -(a.c1 * t)};
}

CUZK_KERNEL void fixed_base_mul(const Point* table, u32 windows, u32 w, const u32* scalars, u64 n, u32 batch,
                                Sum* sums, Point* out) {
    CUZK_THREADS(tid) {
        const u64 t = CUZK_GLOBAL_INDEX(tid);
        const u64 stride = (n + batch - 1) / batch;  // threads in use; thread t takes t, t + stride, ...
        if (t >= stride) continue;
        const u32 half = 1u << (w - 1);
        const u64 full = 1ull << w;
        F prefix = F::one();
        for (u32 k = 0; k < batch; k++) {
            const u64 i = t + (u64)k * stride;
            if (i >= n) break;
            const u32* s = scalars + i * FB_SCALAR_LIMBS;
            Sum sum = Sum::infinity();
            u32 carry = 0;
            for (u32 j = 0; j < windows; j++) {
                const u64 d = (u64)fb_window(s, j * w, w) + carry;
                carry = d > half;
                const u32 magnitude = (u32)(carry ? full - d : d);
                if (magnitude == 0) continue;
                const Point& entry = table[(u64)j * half + magnitude - 1];
                sum = sum.add_affine(entry.x, carry ? -entry.y : entry.y);
            }
            sums[i] = sum;
            out[i].x = prefix;  // the product of the earlier ZZZs of this thread
            if (!sum.is_infinity()) prefix = prefix * sum.zzz;
        }
        F inv = fb_inverse(prefix);  // 1 / Π ZZZ
        for (i32 k = (i32)batch - 1; k >= 0; k--) {
            const u64 i = t + (u64)k * stride;
            if (i >= n) continue;
            const Sum sum = sums[i];
            if (sum.is_infinity()) {
                out[i].x = F::zero();
                out[i].y = F::zero();
                continue;
            }
            const F zzz_inv = inv * out[i].x;
            inv = inv * sum.zzz;
            const F zz_inv = (sum.zz * zzz_inv).sqr();  // ZZ/ZZZ = 1/Z, squared
            out[i].x = sum.x * zz_inv;
            out[i].y = sum.y * zzz_inv;
        }
    }
}
