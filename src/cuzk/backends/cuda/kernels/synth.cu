// Synthesis on the GPU: a = A·w and b = B·w on the domain rows, a sparse matrix-vector product over Fr.
//
// Built once per curve with the Fr prelude (constants.py). The key's coefficients are kept in a
// row-sorted (CSR) layout made when they are uploaded (cuda/synth.py): row r of the 2N rows
// (A's N, then B's N) owns entries row_starts[r] .. row_starts[r + 1], each a signal index and
// a value c·R² mod r, so one Montgomery product mont(c·R², w) = c·w·R is the Montgomery form
// of c·w (w is in standard form, as .wtns stores it). Every row is written by exactly one
// thread (short rows) or one block (long rows), so no two threads ever add into one element.
#include "field.cuh"

typedef Fp<FrParams> Fr;
#define FR_N (Fr::N)

CUZK_HD Fr row_sum(const u32* signals, const u32* values, const u32* w, u32 first, u32 stop, u32 step) {
    Fr acc = Fr::zero();
    for (u32 e = first; e < stop; e += step) acc = acc + Fr::load(values + (u64)e * FR_N) * Fr::load(w + (u64)signals[e] * FR_N);
    return acc;
}

// One thread per row; rows longer than long_row are left to synth_long_rows (every other row, empty
// ones included, is written here).
CUZK_KERNEL void synth_rows(const u32* row_starts, const u32* signals, const u32* values, const u32* w, u32* out,
                            u64 n_rows, u32 long_row) {
    CUZK_THREADS(tid) {
        for (u64 r = CUZK_GLOBAL_INDEX(tid); r < n_rows; r += (u64)gridDim.x * blockDim.x) {
            const u32 first = row_starts[r], stop = row_starts[r + 1];
            if (stop - first > long_row) continue;
            row_sum(signals, values, w, first, stop, 1).store(out + r * FR_N);
        }
    }
}

// One block (a power of two of threads) per long row: each thread sums a stride of the row into
// shared memory, then a tree reduction between barriers leaves the row's sum in slot 0.
CUZK_KERNEL void synth_long_rows(const u32* long_rows, const u32* row_starts, const u32* signals, const u32* values,
                                 const u32* w, u32* out) {
    CUZK_DYNAMIC_SMEM(Fr, partial);
    const u32 row = long_rows[blockIdx.x];
    const u32 first = row_starts[row], stop = row_starts[row + 1];
    CUZK_THREADS(tid) { partial[tid] = row_sum(signals, values, w, first + tid, stop, blockDim.x); }
    for (u32 half = blockDim.x / 2; half > 0; half /= 2) {
        CUZK_THREADS(tid) {
            if (tid < half) partial[tid] = partial[tid] + partial[tid + half];
        }
    }
    CUZK_THREADS(tid) {
        if (tid == 0) partial[0].store(out + (u64)row * FR_N);
    }
}
