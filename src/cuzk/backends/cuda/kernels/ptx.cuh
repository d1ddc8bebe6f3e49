// Carry-chain primitives: one PTX instruction each on the GPU (a product pair two), an exact
// emulation on the host.
//
// Multi-precision arithmetic is written as explicit chains of these (add.cc / addc.cc / the
// mad.lo.cc + madc.hi.cc pairs ...), which is what makes a Montgomery multiplication about
// 150 IMAD.WIDEs rather than a generic bigint loop. The host versions keep the carry flag in a
// variable with PTX's semantics (for subtraction the flag is the borrow), so the host
// emulation executes the same instruction sequence.
#pragma once
#include "common.cuh"

#ifdef __CUDA_ARCH__

#define CUZK_PTX2(name, op)                                                         \
    __device__ __forceinline__ u32 name(u32 a, u32 b) {                             \
        u32 r;                                                                      \
        asm volatile(op " %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));                 \
        return r;                                                                   \
    }

CUZK_PTX2(add_cc, "add.cc.u32")
CUZK_PTX2(addc_cc, "addc.cc.u32")
CUZK_PTX2(addc, "addc.u32")
CUZK_PTX2(sub_cc, "sub.cc.u32")
CUZK_PTX2(subc_cc, "subc.cc.u32")
CUZK_PTX2(subc, "subc.u32")

// Both halves of one 32x32-bit product added into a pair of words in ONE asm statement, lo then
// hi, so the pair can never be split: ptxas turns each such pair into a single IMAD.WIDE.U32
// (with carry in and out), where a lo chain followed by a hi chain costs an IMAD plus an IADD3.X
// for every word.
// (lo, hi) += a·b, carry out.
__device__ __forceinline__ void mad_wide_cc(u32& lo, u32& hi, u32 a, u32 b) {
    asm volatile("mad.lo.cc.u32 %0, %2, %3, %0;\n\tmadc.hi.cc.u32 %1, %2, %3, %1;"
                 : "+r"(lo), "+r"(hi) : "r"(a), "r"(b));
}
// (lo, hi) = a·b + (c_lo, c_hi) + carry, carry out.
__device__ __forceinline__ void madc_wide_cc(u32& lo, u32& hi, u32 a, u32 b, u32 c_lo, u32 c_hi) {
    asm volatile("madc.lo.cc.u32 %0, %2, %3, %4;\n\tmadc.hi.cc.u32 %1, %2, %3, %5;"
                 : "=r"(lo), "=r"(hi) : "r"(a), "r"(b), "r"(c_lo), "r"(c_hi));
}
// (lo, hi) = a·b + carry, where the sum is known to fit in two words (no carry out).
__device__ __forceinline__ void madc_wide(u32& lo, u32& hi, u32 a, u32 b) {
    asm volatile("madc.lo.cc.u32 %0, %2, %3, 0;\n\tmadc.hi.u32 %1, %2, %3, 0;"
                 : "=r"(lo), "=r"(hi) : "r"(a), "r"(b));
}

#undef CUZK_PTX2

#else

static thread_local u32 cuzk_carry_flag;

inline u32 add_cc(u32 a, u32 b) { u64 s = (u64)a + b; cuzk_carry_flag = (u32)(s >> 32); return (u32)s; }
inline u32 addc_cc(u32 a, u32 b) { u64 s = (u64)a + b + cuzk_carry_flag; cuzk_carry_flag = (u32)(s >> 32); return (u32)s; }
inline u32 addc(u32 a, u32 b) { return a + b + cuzk_carry_flag; }
inline u32 sub_cc(u32 a, u32 b) { u64 d = (u64)a - b; cuzk_carry_flag = (u32)(d >> 63); return (u32)d; }
inline u32 subc_cc(u32 a, u32 b) { u64 d = (u64)a - b - cuzk_carry_flag; cuzk_carry_flag = (u32)(d >> 63); return (u32)d; }
inline u32 subc(u32 a, u32 b) { return a - b - cuzk_carry_flag; }
// The product pairs as their two PTX instructions.
inline u32 mad_lo_cc(u32 a, u32 b, u32 c) { return add_cc(a * b, c); }
inline u32 madc_lo_cc(u32 a, u32 b, u32 c) { return addc_cc(a * b, c); }
inline u32 madc_hi_cc(u32 a, u32 b, u32 c) { return addc_cc((u32)(((u64)a * b) >> 32), c); }
inline void mad_wide_cc(u32& lo, u32& hi, u32 a, u32 b) { lo = mad_lo_cc(a, b, lo); hi = madc_hi_cc(a, b, hi); }
inline void madc_wide_cc(u32& lo, u32& hi, u32 a, u32 b, u32 c_lo, u32 c_hi) {
    lo = madc_lo_cc(a, b, c_lo);
    hi = madc_hi_cc(a, b, c_hi);
}
inline void madc_wide(u32& lo, u32& hi, u32 a, u32 b) {
    lo = madc_lo_cc(a, b, 0);
    hi = addc((u32)(((u64)a * b) >> 32), 0);
}

#endif
