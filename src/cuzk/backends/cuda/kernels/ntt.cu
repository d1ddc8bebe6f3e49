// Fr vectors on the GPU: elementwise Montgomery arithmetic and the radix-2 NTT.
//
// Built once per curve; the generated prelude (constants.py) defines FrParams.
// Vectors are (n, Fr::N) little-endian limb rows in Montgomery form.
//
// The forward transform is decimation-in-frequency: natural-order input, bit-reversed
// output, then one in-place bit-reversal pass (which also applies the 1/n of the inverse).
// A DIF pass runs k consecutive stages on groups of 2^k elements held in shared memory,
// so a 2^24 transform is three passes over memory plus the bit reversal. The first pass
// reads the caller's vector and writes the result's (no copy pass), the last stage's
// twiddles are all 1 (no product), and the bit reversal moves tiles through shared memory
// so that every global access is coalesced. Twiddles come
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
// Elements are read from `src` (the caller's vector in the first pass, else `data`) and written to `data`.
CUZK_KERNEL void ntt_dif_pass(const u32* src, u32* data, const u32* twiddles, u32 m, u32 s0, u32 k, u32 log_t, u32 tw_shift,
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
            Fr x = Fr::load(src + idx * FR_N);
            if (coset) x = x * Fr::load(coset_hi + (idx >> 12) * FR_N) * Fr::load(coset_lo + (idx & 4095) * FR_N);
#pragma unroll
            for (int l = 0; l < FR_N; l++) smem[l * E + e] = x.v[l];
        }
    }
    for (u32 t = 0; t < k; t++) {
        const bool unit = s0 + t + 1 == m;  // the transform's last stage: every twiddle is w^0
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
                const Fr sum = u + v;
                Fr diff = u - v;
                if (!unit) {
                    const u64 g = group0 + (b & t_mask);
                    const u64 pos = ((u64)j_low << low) | (g & low_mask);  // index within the half-block
                    diff = diff * Fr::load(twiddles + (pos << (s0 + t + tw_shift)) * FR_N);
                }
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

CUZK_HD u32 reverse_bits(u32 i, u32 bits) {
#ifdef __CUDA_ARCH__
    return bits ? __brev(i) >> (32 - bits) : 0;  // one instruction: the loop made the tiled pass ALU-bound
#else
    u32 r = 0;
    for (u32 b = 0; b < bits; b++) r |= ((i >> b) & 1) << (bits - 1 - b);
    return r;
#endif
}

// In-place bit-reversal permutation of 2^m elements, an index read as (hi: a bits, mid: m - 2a bits, lo: a bits)
// so that rev(hi, mid, lo) = (rev lo, rev mid, rev hi). Block `mid` with mid <= rev(mid) = mid2 loads the 2^a x 2^a
// tiles x[., mid, .] and x[., mid2, .] (rows hi, each row 2^a consecutive elements: coalesced), then writes
// x[hi, mid, lo] = tile2[rev lo][rev hi] and x[hi, mid2, lo] = tile[rev lo][rev hi] (coalesced again); blocks with
// mid > mid2 return (their pair is another block's). Shared memory holds both tiles limb-major, rows padded to
// 2^a + 1 elements so that reading a column is conflict-free. With `scale`, every element is also multiplied by
// *factor (the 1/n of the inverse transform).
CUZK_KERNEL void ntt_bitrev(u32* data, u32 m, u32 a, u32 scale, const u32* factor) {
    CUZK_DYNAMIC_SMEM(u32, smem);
    const u32 side = 1u << a, mid_bits = m - 2 * a;
    const u32 mid = blockIdx.x, mid2 = reverse_bits(mid, mid_bits);
    if (mid > mid2) return;
    const u32 tiles = mid == mid2 ? 1 : 2;
    const u32 stride = side * (side + 1);  // elements per tile in shared memory, per limb: stride * tiles
    const u32 E = tiles * side * side;
    CUZK_THREADS(tid) {
        for (u32 e = tid; e < E; e += blockDim.x) {
            const u32 tile = e >> (2 * a), hi = (e >> a) & (side - 1), lo = e & (side - 1);
            const u64 idx = ((u64)hi << (m - a)) | ((u64)(tile ? mid2 : mid) << a) | lo;
            const Fr x = Fr::load(data + idx * FR_N);
#pragma unroll
            for (int l = 0; l < FR_N; l++) smem[l * stride * tiles + tile * stride + hi * (side + 1) + lo] = x.v[l];
        }
    }
    CUZK_THREADS(tid) {
        const Fr f = scale ? Fr::load(factor) : Fr::one();
        for (u32 e = tid; e < E; e += blockDim.x) {
            const u32 tile = e >> (2 * a), hi = (e >> a) & (side - 1), lo = e & (side - 1);
            const u32 from = tiles - 1 - tile;  // x[., mid, .] takes its values from tile mid2 and the other way round
            Fr x;
#pragma unroll
            for (int l = 0; l < FR_N; l++)
                x.v[l] = smem[l * stride * tiles + from * stride + reverse_bits(lo, a) * (side + 1) + reverse_bits(hi, a)];
            if (scale) x = x * f;
            const u64 idx = ((u64)hi << (m - a)) | ((u64)(tile ? mid2 : mid) << a) | lo;
            x.store(data + idx * FR_N);
        }
    }
}
