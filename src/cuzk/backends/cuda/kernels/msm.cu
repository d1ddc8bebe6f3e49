// Pippenger multi-scalar multiplication for one group (G1 or G2 of one curve).
//
// Built once per (curve, group); the generated prelude defines FqParams, FrParams and,
// for G2, CUZK_G2. Scalars are (n, 8) standard-form limb rows, bases affine Montgomery.
//
// 1. msm_count / msm_scatter: each scalar is cut into signed base-2^c digits
//    (digit in (-2^(c-1), 2^(c-1)]); a non-zero digit d of window w is an entry
//    (point index, sign of d) under the key w·2^(c-1) + |d| - 1. A counting sort places
//    the entries grouped by key; the keys themselves are not stored, the bucket offsets
//    (the scan of the counts) say where each key's entries are. Zero digits make no
//    entry, so the 0s and 1s that fill circom witnesses cost (almost) nothing.
// 2. msm_accumulate_*: the sorted entries are cut into equal chunks, one per thread, so a
//    bucket holding millions of entries (all the witness's 1s) is spread over many
//    threads. A run of one key that is a whole bucket is written to `sums`; runs cut by a
//    chunk boundary become partial sums, which are again sorted by key and are summed the
//    same way until none remain.
// 3. msm_window_segments + msm_sum_runs: each window's sum Σ_b b·S_b, by running sums
//    over segments of buckets, the segments combined in parallel.
// 4. msm_horner: Σ_w 2^(c·w)·W_w.
#include "group.cuh"

#define SCALAR_LIMBS 8
#define NO_KEY 0xFFFFFFFFu
#define SIGN_BIT 0x80000000u

struct alignas(16) Scalar {
    u32 v[SCALAR_LIMBS];
};

CUZK_HD bool below_r(const Scalar& s) {
    for (int i = SCALAR_LIMBS - 1; i >= 0; i--)
        if (s.v[i] != FrParams::p(i)) return s.v[i] < FrParams::p(i);
    return false;
}

// Window w's signed digit, given (and updating) the carry out of window w - 1.
CUZK_HD i32 signed_digit(const Scalar& s, u32 w, u32 c, u32& carry) {
    const u32 bit = w * c;
    const u32 limb = bit >> 5, shift = bit & 31;
    u64 chunk = 0;
    if (limb < SCALAR_LIMBS) chunk = s.v[limb] >> shift;
    if (shift != 0 && limb + 1 < SCALAR_LIMBS) chunk |= (u64)s.v[limb + 1] << (32 - shift);
    const u32 d = (u32)(chunk & ((1u << c) - 1)) + carry;
    if (d > (1u << (c - 1))) {
        carry = 1;
        return (i32)d - (i32)(1u << c);
    }
    carry = 0;
    return (i32)d;
}

// atomicAdd(&counters[key], 1) for every active lane; the lanes sharing the first active
// lane's key (a sparse witness sends most lanes to one key) share one atomic. Cheaper than
// grouping every key (__match_any_sync), which dense random scalars never profit from.
// All 32 lanes must call it.
__device__ __forceinline__ u32 warp_increment(u32* counters, u32 key, bool active) {
#ifdef __CUDA_ARCH__
    const u32 mask = __ballot_sync(0xFFFFFFFFu, active);
    if (!active) return 0;
    const u32 leader = __ffs(mask) - 1;
    const u32 leader_key = __shfl_sync(mask, key, leader);
    const u32 peers = __ballot_sync(mask, key == leader_key);
    if (key != leader_key) return atomicAdd(&counters[key], 1);
    const u32 lane = threadIdx.x & 31;
    u32 base = 0;
    if (lane == leader) base = atomicAdd(&counters[key], __popc(peers));
    base = __shfl_sync(peers, base, leader);
    return base + __popc(peers & ((1u << lane) - 1));
#else
    return active ? atomicAdd(&counters[key], 1) : 0;
#endif
}

CUZK_HD Scalar load_scalar(const u32* scalars, u64 i, u64 n) {
    if (i < n) return reinterpret_cast<const Scalar*>(scalars)[i];
    Scalar zero;
    for (int l = 0; l < SCALAR_LIMBS; l++) zero.v[l] = 0;
    return zero;
}

// counts[key] += number of entries with that key; first_bad = least index of a scalar >= r.
CUZK_KERNEL void msm_count(const u32* scalars, u64 n, u32 c, u32 windows, u32* counts, u32* first_bad) {
    CUZK_THREADS(tid) {
        const u64 i = CUZK_GLOBAL_INDEX(tid);
        const Scalar s = load_scalar(scalars, i, n);
        bool live = i < n;
        if (live && !below_r(s)) {
            atomicMin(first_bad, (u32)i);
            live = false;
        }
        u32 carry = 0;
        for (u32 w = 0; w < windows; w++) {
            const i32 d = signed_digit(s, w, c, carry);
            const u32 key = (w << (c - 1)) + (u32)(d < 0 ? -d : d) - 1;
            warp_increment(counts, key, live && d != 0);
        }
    }
}

// Places window `window`'s entries at cursor[key]++ (cursor starts as the exclusive scan of
// counts). One window per launch: its entries fill one contiguous stretch of `entries`, so
// the scattered 4-byte writes of a launch stay within a region the L2 cache can hold.
CUZK_KERNEL void msm_scatter(const u32* scalars, u64 n, u32 c, u32 window, u32* cursor, u32* entries) {
    CUZK_THREADS(tid) {
        const u64 i = CUZK_GLOBAL_INDEX(tid);
        const Scalar s = load_scalar(scalars, i, n);
        const bool live = i < n && below_r(s);
        u32 carry = 0;
        i32 d = 0;
        for (u32 w = 0; w <= window; w++) d = signed_digit(s, w, c, carry);
        const u32 key = (window << (c - 1)) + (u32)(d < 0 ? -d : d) - 1;
        const bool active = live && d != 0;
        const u32 pos = warp_increment(cursor, key, active);
        if (active) entries[pos] = (u32)i | (d < 0 ? SIGN_BIT : 0);
    }
}

// A run [a, b] of key k inside the chunk [start, end): a whole bucket goes to sums[k], a
// piece of one to the chunk's partial slot 0 (the run that began before the chunk) or 1
// (the run that goes on after it).
CUZK_HD void emit_run(const u32* keys, u64 count, u64 start, u64 a, u64 b, u32 k, const Sum& acc, Sum* sums,
                      u32* partial_keys, Sum* partial_sums, u64 chunk) {
    const bool whole = (a == 0 || keys[a - 1] != k) && (b + 1 == count || keys[b + 1] != k);
    if (whole) {
        sums[k] = acc;
    } else {
        const u64 slot = 2 * chunk + (a == start ? 0 : 1);
        partial_keys[slot] = k;
        partial_sums[slot] = acc;
    }
}

struct BaseEntries {
    const u32* entries;
    const Point* bases;
    CUZK_HD Sum add(const Sum& acc, u64 i) const {
        const u32 e = entries[i];
        Point p = bases[e & ~SIGN_BIT];
        if (p.is_infinity()) return acc;
        if (e & SIGN_BIT) p = -p;
        return acc.add_affine(p.x, p.y);
    }
};

// Levels >= 1: partial sums with their keys stored alongside.
CUZK_HD void accumulate_partials_chunk(const u32* keys, const Sum* points, u64 count, u32 chunk_len, Sum* sums,
                                       u32* partial_keys, Sum* partial_sums, u64 chunk) {
    const u64 start = chunk * chunk_len;
    const u64 end = start + chunk_len < count ? start + chunk_len : count;
    partial_keys[2 * chunk] = NO_KEY;
    partial_keys[2 * chunk + 1] = NO_KEY;
    u32 k = keys[start];
    u64 run = start;
    Sum acc = Sum::infinity();
    for (u64 i = start; i < end; i++) {
        const u32 ki = keys[i];
        if (ki != k) {
            emit_run(keys, count, start, run, i - 1, k, acc, sums, partial_keys, partial_sums, chunk);
            k = ki;
            run = i;
            acc = Sum::infinity();
        }
        acc = acc.add(points[i]);
    }
    emit_run(keys, count, start, run, end - 1, k, acc, sums, partial_keys, partial_sums, chunk);
}

// The key (bucket) of sorted entry i: the k with offsets[k] <= i < offsets[k + 1].
CUZK_HD u32 bucket_of(const u32* offsets, u32 keys_total, u64 i) {
    u32 lo = 0, hi = keys_total;  // offsets[lo] <= i < offsets[hi]
    while (hi - lo > 1) {
        const u32 mid = lo + (hi - lo) / 2;
        if (offsets[mid] <= i) lo = mid;
        else hi = mid;
    }
    return lo;
}

// Level 0: the entries, sorted by key, with the keys given by the bucket offsets (the
// exclusive scan of the counts, keys_total + 1 values) rather than stored per entry.
// One flat loop over the chunk keeps the warp's additions in step; at a bucket boundary
// the next bucket is almost always k + 1, whose end was loaded ahead, and a binary search
// is needed only after empty buckets.
CUZK_HD void emit_bucket(u32 k, const Sum& acc, u64 first, u64 stop, u64 start, u64 end, Sum* sums, u32* partial_keys,
                         Sum* partial_sums, u64 chunk) {
    if (first >= start && stop <= end) {
        sums[k] = acc;
    } else {
        const u64 slot = 2 * chunk + (first < start ? 0 : 1);
        partial_keys[slot] = k;
        partial_sums[slot] = acc;
    }
}

CUZK_KERNEL void msm_accumulate_bases(const u32* offsets, u32 keys_total, const u32* entries, const Point* bases, u64 count,
                                      u32 chunk_len, Sum* sums, u32* partial_keys, Sum* partial_sums) {
    CUZK_THREADS(tid) {
        const u64 chunk = CUZK_GLOBAL_INDEX(tid);
        const u64 start = chunk * chunk_len;
        if (start >= count) continue;
        const u64 end = start + chunk_len < count ? start + chunk_len : count;
        const BaseEntries src = {entries, bases};
        partial_keys[2 * chunk] = NO_KEY;
        partial_keys[2 * chunk + 1] = NO_KEY;
        u32 k = bucket_of(offsets, keys_total, start);
        u64 first = offsets[k], stop = offsets[k + 1];
        u64 next_stop = k + 1 < keys_total ? offsets[k + 2] : stop;
        Sum acc = Sum::infinity();
        for (u64 i = start; i < end; i++) {
            if (i == stop) {
                emit_bucket(k, acc, first, stop, start, end, sums, partial_keys, partial_sums, chunk);
                if (next_stop > i) {
                    k++;
                } else {
                    k = bucket_of(offsets, keys_total, i);
                    next_stop = offsets[k + 1];
                }
                first = i;
                stop = next_stop;
                next_stop = k + 1 < keys_total ? offsets[k + 2] : stop;
                acc = Sum::infinity();
            }
            acc = src.add(acc, i);
        }
        emit_bucket(k, acc, first, stop, start, end, sums, partial_keys, partial_sums, chunk);
    }
}

CUZK_KERNEL void msm_accumulate_partials(const u32* keys, const Sum* points, u64 count, u32 chunk_len, Sum* sums,
                                         u32* partial_keys, Sum* partial_sums) {
    CUZK_THREADS(tid) {
        const u64 chunk = CUZK_GLOBAL_INDEX(tid);
        if (chunk * chunk_len >= count) continue;
        accumulate_partials_chunk(keys, points, count, chunk_len, sums, partial_keys, partial_sums, chunk);
    }
}

// Thread t = (window w, segment s) of 2^log_g buckets: out[t] = Σ_j (s·2^log_g + j + 1)·S_j
// over the segment's buckets S_j, by a running sum from the top bucket down.
CUZK_KERNEL void msm_window_segments(const Sum* sums, u32 windows, u32 log_buckets, u32 log_g, Sum* out) {
    CUZK_THREADS(tid) {
        const u64 t = CUZK_GLOBAL_INDEX(tid);
        const u32 log_segments = log_buckets - log_g;
        if (t >= ((u64)windows << log_segments)) continue;
        const u32 s = (u32)(t & ((1u << log_segments) - 1));
        const Sum* seg = sums + (t << log_g);
        Sum run = Sum::infinity(), acc = Sum::infinity();
        for (i32 j = (1 << log_g) - 1; j >= 0; j--) {
            run = run.add(seg[j]);
            acc = acc.add(run);
        }
        out[t] = acc.add(run.mul_small(s << log_g));
    }
}

// out[t] = in[t·run] + ... + in[t·run + run - 1]
CUZK_KERNEL void msm_sum_runs(const Sum* in, u64 count_out, u32 run, Sum* out) {
    CUZK_THREADS(tid) {
        const u64 t = CUZK_GLOBAL_INDEX(tid);
        if (t >= count_out) continue;
        Sum acc = in[t * run];
        for (u32 j = 1; j < run; j++) acc = acc.add(in[t * run + j]);
        out[t] = acc;
    }
}

// out[0] = Σ_w 2^(c·w)·window_sums[w] (one thread; Horner from the top window).
CUZK_KERNEL void msm_horner(const Sum* window_sums, u32 windows, u32 c, Sum* out) {
    CUZK_THREADS(tid) {
        if (tid != 0 || blockIdx.x != 0) continue;
        Sum acc = window_sums[windows - 1];
        for (i32 w = (i32)windows - 2; w >= 0; w--) {
            for (u32 b = 0; b < c; b++) acc = acc.dbl();
            acc = acc.add(window_sums[w]);
        }
        out[0] = acc;
    }
}
