// Carry-chain primitives: one PTX instruction each on the GPU, an exact emulation on the host.
//
// Multi-precision arithmetic is written as explicit chains of these (add.cc / addc.cc /
// mad.lo.cc / madc.hi.cc ...), which is what makes a Montgomery multiplication a few hundred
// IMADs rather than a generic bigint loop. The host versions keep the carry flag in a
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
#define CUZK_PTX3(name, op)                                                         \
    __device__ __forceinline__ u32 name(u32 a, u32 b, u32 c) {                      \
        u32 r;                                                                      \
        asm volatile(op " %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));     \
        return r;                                                                   \
    }

CUZK_PTX2(add_cc, "add.cc.u32")
CUZK_PTX2(addc_cc, "addc.cc.u32")
CUZK_PTX2(addc, "addc.u32")
CUZK_PTX2(sub_cc, "sub.cc.u32")
CUZK_PTX2(subc_cc, "subc.cc.u32")
CUZK_PTX2(subc, "subc.u32")
CUZK_PTX3(mad_lo_cc, "mad.lo.cc.u32")
CUZK_PTX3(madc_lo_cc, "madc.lo.cc.u32")
CUZK_PTX3(mad_hi_cc, "mad.hi.cc.u32")
CUZK_PTX3(madc_hi_cc, "madc.hi.cc.u32")

#undef CUZK_PTX2
#undef CUZK_PTX3

#else

static thread_local u32 cuzk_carry_flag;

inline u32 add_cc(u32 a, u32 b) { u64 s = (u64)a + b; cuzk_carry_flag = (u32)(s >> 32); return (u32)s; }
inline u32 addc_cc(u32 a, u32 b) { u64 s = (u64)a + b + cuzk_carry_flag; cuzk_carry_flag = (u32)(s >> 32); return (u32)s; }
inline u32 addc(u32 a, u32 b) { return a + b + cuzk_carry_flag; }
inline u32 sub_cc(u32 a, u32 b) { u64 d = (u64)a - b; cuzk_carry_flag = (u32)(d >> 63); return (u32)d; }
inline u32 subc_cc(u32 a, u32 b) { u64 d = (u64)a - b - cuzk_carry_flag; cuzk_carry_flag = (u32)(d >> 63); return (u32)d; }
inline u32 subc(u32 a, u32 b) { return a - b - cuzk_carry_flag; }
inline u32 mad_lo_cc(u32 a, u32 b, u32 c) { return add_cc(a * b, c); }
inline u32 madc_lo_cc(u32 a, u32 b, u32 c) { return addc_cc(a * b, c); }
inline u32 mad_hi_cc(u32 a, u32 b, u32 c) { return add_cc((u32)(((u64)a * b) >> 32), c); }
inline u32 madc_hi_cc(u32 a, u32 b, u32 c) { return addc_cc((u32)(((u64)a * b) >> 32), c); }

#endif
