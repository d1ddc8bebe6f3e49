// Fr vectors on the GPU: elementwise Montgomery arithmetic and the radix-2 NTT.
//
// Built once per curve; the generated prelude (constants.py) defines FrParams.
// Vectors are (n, Fr::N) little-endian limb rows in Montgomery form.
//
// The forward transform is decimation-in-frequency: natural-order input, bit-reversed
// output, then one in-place bit-reversal pass (which also applies the 1/n of the inverse).
// A DIF pass runs k consecutive stages on groups of 2^k elements held in shared memory,
// so a 2^24 transform is three passes over memory plus the bit reversal. Twiddles come
// from a table of w^i (i < 2^(M-1)) for the largest domain 2^M seen, strided for smaller
// domains (snarkjs's roots are powers of one another, so the table serves them all).
#include "field.cuh"

typedef Fp<FrParams> Fr;
#define FR_N (Fr::N)

// out[i] = base^i for i < count, from pows[b] = base^(2^b) (b < 64).
CUZK_KERNEL void fr_pow_table(const u32* pows, u64 count, u32* out) {
    CUZK_THREADS(tid) {
        for (u64 i = CUZK_GLOBAL_INDEX(tid); i < count; i += (u64)gridDim.x * blockDim.x) {
            Fr r = Fr::one();
            for (u32 b = 0; (i >> b) != 0; b++)
                if ((i >> b) & 1) r = r * Fr::load(pows + b * FR_N);
            r.store(out + i * FR_N);
        }
    }
}

// op: 0 a·b, 1 a - b, 2 a·R^2 (to Montgomery), 3 a·1 (from Montgomery). b is unused for 2 and 3.
CUZK_KERNEL void fr_elementwise(const u32* a, const u32* b, u32* out, u64 n, u32 op) {
    CUZK_THREADS(tid) {
        for (u64 i = CUZK_GLOBAL_INDEX(tid); i < n; i += (u64)gridDim.x * blockDim.x) {
            const Fr x = Fr::load(a + i * FR_N);
            Fr r;
            if (op == 0) r = x * Fr::load(b + i * FR_N);
            else if (op == 1) r = x - Fr::load(b + i * FR_N);
            else if (op == 2) r = x.to_mont();
            else r = x.from_mont();
            r.store(out + i * FR_N);
        }
    }
}

// DIF stages [s0, s0 + k) of a size-2^m transform, in place. Block b transforms the 2^log_t
// groups b·2^log_t ... ; element j of group g sits at
//   ((g >> low) << (m - s0)) | (j << low) | (g mod 2^low),   low = m - s0 - k,
// so consecutive groups of a block are consecutive addresses. Shared memory holds the
// block's E = 2^(k + log_t) elements limb-major (conflict-free column access).
// With `coset`, element i is first multiplied by shift^i = hi[i >> 12] · lo[i mod 4096].
CUZK_KERNEL void ntt_dif_pass(u32* data, const u32* twiddles, u32 m, u32 s0, u32 k, u32 log_t, u32 tw_shift,
                              u32 coset, const u32* coset_hi, const u32* coset_lo) {
    CUZK_DYNAMIC_SMEM(u32, smem);
    const u32 E = 1u << (k + log_t);
    const u32 t_mask = (1u << log_t) - 1;
    const u32 low = m - s0 - k;
    const u64 low_mask = (1ull << low) - 1;
    const u64 group0 = (u64)blockIdx.x << log_t;

    CUZK_THREADS(tid) {
        for (u32 e = tid; e < E; e += blockDim.x) {
            const u64 g = group0 + (e & t_mask);
            const u64 idx = ((g >> low) << (m - s0)) | ((u64)(e >> log_t) << low) | (g & low_mask);
            Fr x = Fr::load(data + idx * FR_N);
            if (coset) x = x * Fr::load(coset_hi + (idx >> 12) * FR_N) * Fr::load(coset_lo + (idx & 4095) * FR_N);
#pragma unroll
            for (int l = 0; l < FR_N; l++) smem[l * E + e] = x.v[l];
        }
    }
    for (u32 t = 0; t < k; t++) {
        CUZK_THREADS(tid) {
            const u32 half_log = k - 1 - t;
            for (u32 b = tid; b < E / 2; b += blockDim.x) {
                const u32 q = b >> log_t;
                const u32 j_low = q & ((1u << half_log) - 1);
                const u32 j = ((q >> half_log) << (half_log + 1)) | j_low;
                const u32 e1 = (j << log_t) | (b & t_mask);
                const u32 e2 = e1 + (1u << (half_log + log_t));
                Fr u, v;
#pragma unroll
                for (int l = 0; l < FR_N; l++) {
                    u.v[l] = smem[l * E + e1];
                    v.v[l] = smem[l * E + e2];
                }
                const u64 g = group0 + (b & t_mask);
                const u64 pos = ((u64)j_low << low) | (g & low_mask);  // index within the half-block
                const Fr w = Fr::load(twiddles + (pos << (s0 + t + tw_shift)) * FR_N);
                const Fr sum = u + v;
                const Fr diff = (u - v) * w;
#pragma unroll
                for (int l = 0; l < FR_N; l++) {
                    smem[l * E + e1] = sum.v[l];
                    smem[l * E + e2] = diff.v[l];
                }
            }
        }
    }
    CUZK_THREADS(tid) {
        for (u32 e = tid; e < E; e += blockDim.x) {
            const u64 g = group0 + (e & t_mask);
            const u64 idx = ((g >> low) << (m - s0)) | ((u64)(e >> log_t) << low) | (g & low_mask);
            Fr x;
#pragma unroll
            for (int l = 0; l < FR_N; l++) x.v[l] = smem[l * E + e];
            x.store(data + idx * FR_N);
        }
    }
}

CUZK_HD u64 reverse_bits(u64 i, u32 m) {
    u64 r = 0;
    for (u32 b = 0; b < m; b++) r |= ((i >> b) & 1) << (m - 1 - b);
    return r;
}

// In-place bit-reversal permutation of 2^m elements; with `scale`, every element is also
// multiplied by *factor (the 1/n of the inverse transform).
CUZK_KERNEL void ntt_bitrev(u32* data, u32 m, u32 scale, const u32* factor) {
    CUZK_THREADS(tid) {
        const u64 n = 1ull << m;
        for (u64 i = CUZK_GLOBAL_INDEX(tid); i < n; i += (u64)gridDim.x * blockDim.x) {
            const u64 r = reverse_bits(i, m);
            if (r < i) continue;
            Fr x = Fr::load(data + i * FR_N);
            Fr y = Fr::load(data + r * FR_N);
            if (scale) {
                const Fr f = Fr::load(factor);
                x = x * f;
                y = y * f;
            }
            y.store(data + i * FR_N);
            x.store(data + r * FR_N);
        }
    }
}
