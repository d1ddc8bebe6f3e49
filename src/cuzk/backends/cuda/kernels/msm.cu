// Pippenger multi-scalar multiplication for one group (G1 or G2 of one curve).
//
// Built once per (curve, group); the generated prelude defines FqParams, FrParams and,
// for G2, CUZK_G2. Scalars are (n, 8) standard-form limb rows, bases affine Montgomery.
//
// 1. msm_count / msm_scan_counts / msm_scatter: each scalar is cut into signed base-2^c digits
//    (digit in (-2^(c-1), 2^(c-1)]); a non-zero digit d of window w is an entry
//    (point index, sign of d) under the key w·2^(c-1) + |d| - 1. A counting sort places
//    the entries grouped by key; the keys themselves are not stored, the bucket offsets
//    (the scan of the counts) say where each key's entries are. Zero digits make no
//    entry, so the 0s and 1s that fill circom witnesses cost (almost) nothing. The entry
//    count and the largest bucket stay on the device: later kernels read them, and the host
//    sizes their grids from bounds, so an MSM is one sequence of launches without a wait.
// 2. msm_accumulate_bases + msm_join_buckets / msm_join_pieces: the sorted entries are cut into
//    equal chunks, one per thread, so a bucket holding millions of entries (all the witness's
//    1s) is spread over many threads. A run of one key that is a whole bucket is written to
//    `sums`; a bucket cut by chunk boundaries leaves one partial sum per chunk it touches,
//    added in order by one thread of its own when it touches few chunks, else joined by a
//    pairwise tree in log2(its span) steps, without the host looking at them.
// 3. msm_window_segments + msm_sum_runs: each window's sum Σ_b b·S_b, by running sums
//    over segments of buckets, the segments combined in parallel.
// 4. msm_horner: Σ_w 2^(c·w)·W_w.
//
// Resident bases may carry a window table (msm_window_table: 2^(c·w)·P_i for every window w,
// affine, built once). Then every window's digits go to one set of 2^(c-1) buckets, each
// entry naming its window's multiple (msm_scatter_table), and steps 3-4 become one bucket
// reduction (msm_bucket_segments, msm_bit_sums, msm_bits_combine) whose longest chain of
// dependent operations is ~c doublings instead of the ~255 of step 4's Horner.
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
// window_mask = 0 sends every window to one set of buckets (window tables), all ones keeps them apart.
CUZK_KERNEL void msm_count(const u32* scalars, u64 n, u32 c, u32 windows, u32 window_mask, u32* counts, u32* first_bad) {
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
            const u32 key = ((w & window_mask) << (c - 1)) + (u32)(d < 0 ? -d : d) - 1;
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

// The least key k <= keys with offsets[k] >= at (offsets[keys] is the entry count).
CUZK_HD u32 first_key_from(const u32* offsets, u32 keys, u64 at) {
    u32 lo = 0, hi = keys;  // the answer is in [lo, hi]
    while (lo < hi) {
        const u32 mid = lo + (hi - lo) / 2;
        if (offsets[mid] >= at) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

// pass_keys[p] = the least key whose entries start at or after p·2^stretch_log of the sorted order
// (keys when none), p <= passes: the key range of each msm_scatter_table launch, found once.
CUZK_KERNEL void msm_pass_keys(const u32* offsets, u32 keys, u32 passes, u32 stretch_log, u32* pass_keys) {
    CUZK_THREADS(tid) {
        const u64 p = CUZK_GLOBAL_INDEX(tid);
        if (p <= passes) pass_keys[p] = first_key_from(offsets, keys, p << stretch_log);
    }
}

// Window-table form of msm_scatter: every window's entries under the one set of keys |d| - 1, each
// entry the table row of its base's multiple (w·stride + first + i, stride = the table's points
// per window, first = this chunk's first point). Launch `pass` places only the keys in
// [pass_keys[pass], pass_keys[pass + 1]) (msm_pass_keys: those whose entries start in its stretch
// of the sorted order), so its scattered writes stay within one stretch of `entries`; the host
// launches passes for a bound of the entries, and those past the real count return at once.
CUZK_KERNEL void msm_scatter_table(const u32* scalars, u64 n, u32 c, u32 windows, u64 stride, u64 first, const u32* pass_keys,
                                   u32 pass, u32* cursor, u32* entries) {
    const u32 key_lo = pass_keys[pass], key_hi = pass_keys[pass + 1];
    if (key_lo >= key_hi) return;
    CUZK_THREADS(tid) {
        const u64 i = CUZK_GLOBAL_INDEX(tid);
        const Scalar s = load_scalar(scalars, i, n);
        const bool live = i < n && below_r(s);
        u32 carry = 0;
        for (u32 w = 0; w < windows; w++) {
            const i32 d = signed_digit(s, w, c, carry);
            const u32 key = (u32)(d < 0 ? -d : d) - 1;
            const bool active = live && d != 0 && key >= key_lo && key < key_hi;
            const u32 pos = warp_increment(cursor, key, active);
            if (active) entries[pos] = (u32)(w * stride + first + i) | (d < 0 ? SIGN_BIT : 0);
        }
    }
}

// Exclusive scan of counts[0 .. keys) by tiles of `tile` keys, one block (blockDim.x a power of two,
// 4·blockDim.x u32 of shared memory: two ping-pong pairs of per-thread sums and maxima for a
// Hillis-Steele scan) per tile, each thread a stretch of it: offsets[k] = the sum of the tile's
// counts before k, tile_sums[b] = tile b's total, largest[0] = max(largest[0], its largest count)
// when largest is given. With one tile (gridDim.x = 1) the scan is complete: it also writes
// offsets[keys] (the entries) and cursor[k] = offsets[k]; with several, msm_scan_counts on
// tile_sums and msm_scan_add finish it. The counts, entries and largest bucket stay on the device:
// the scatter, accumulation and joins read them, so the host never waits for them.
CUZK_KERNEL void msm_scan_counts(const u32* counts, u32 keys, u32 tile, u32* offsets, u32* cursor, u32* tile_sums, u32* largest) {
    CUZK_DYNAMIC_SMEM(u32, smem);
    const u32 first = blockIdx.x * tile, last = first + tile < keys ? first + tile : keys;
    const u32 per = (tile + blockDim.x - 1) / blockDim.x;
    CUZK_THREADS(tid) {
        u32 sum = 0, most = 0;
        const u32 lo = first + tid * per, hi = lo + per < last ? lo + per : last;
        for (u32 k = lo; k < hi; k++) {
            const u32 v = counts[k];
            sum += v;
            most = v > most ? v : most;
        }
        smem[tid] = sum;
        smem[2 * blockDim.x + tid] = most;
    }
    u32 src = 0;
    for (u32 d = 1; d < blockDim.x; d <<= 1) {
        CUZK_THREADS(tid) {
            const u32* sums_in = smem + src * blockDim.x;
            const u32* most_in = smem + (2 + src) * blockDim.x;
            const u32 m = tid >= d ? most_in[tid - d] : 0;
            smem[(1 - src) * blockDim.x + tid] = sums_in[tid] + (tid >= d ? sums_in[tid - d] : 0);
            smem[(3 - src) * blockDim.x + tid] = most_in[tid] > m ? most_in[tid] : m;
        }
        src = 1 - src;
    }
    CUZK_THREADS(tid) {
        const u32* inclusive = smem + src * blockDim.x;
        u32 run = tid ? inclusive[tid - 1] : 0;
        const u32 lo = first + tid * per, hi = lo + per < last ? lo + per : last;
        for (u32 k = lo; k < hi; k++) {
            offsets[k] = run;
            if (gridDim.x == 1) cursor[k] = run;
            run += counts[k];
        }
        if (tid == blockDim.x - 1) {
            tile_sums[blockIdx.x] = inclusive[tid];
            if (gridDim.x == 1) offsets[keys] = inclusive[tid];
            if (largest) atomicMax(largest, smem[(2 + src) * blockDim.x + tid]);
        }
    }
}

// The second half of a scan by tiles: offsets[k] += tile_offsets[k / tile] (the exclusive scan of the
// tiles' totals, tile_offsets[tiles] = the entries), cursor[k] = offsets[k], offsets[keys] = the entries.
CUZK_KERNEL void msm_scan_add(u32* offsets, u32* cursor, u32 keys, u32 tile, const u32* tile_offsets, u32 tiles) {
    CUZK_THREADS(tid) {
        const u64 k = CUZK_GLOBAL_INDEX(tid);
        if (k > keys) continue;
        const u32 v = k == keys ? tile_offsets[tiles] : offsets[k] + tile_offsets[k / tile];
        offsets[k] = v;
        if (k < keys) cursor[k] = v;
    }
}

struct BaseEntries {
    const u32* entries;
    const HotPoint* bases;
    CUZK_HD HotSum add(const HotSum& acc, u64 i) const {
        const u32 e = entries[i];
        HotPoint p = bases[e & ~SIGN_BIT];
        if (p.is_infinity()) return acc;
        if (e & SIGN_BIT) p = -p;
        return acc.add_affine(p.x, p.y);
    }
};

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
CUZK_HD void emit_bucket(u32 k, const HotSum& acc, u64 first, u64 stop, u64 start, u64 end, HotSum* sums, u32* partial_keys,
                         HotSum* partial_sums, u64 chunk) {
    if (first >= start && stop <= end) {
        sums[k] = acc;
    } else {
        const u64 slot = 2 * chunk + (first < start ? 0 : 1);
        partial_keys[slot] = k;
        partial_sums[slot] = acc;
    }
}

// The entry count is offsets[keys_total] (the grid covers a bound of it, not the count itself).
CUZK_KERNEL void msm_accumulate_bases(const u32* offsets, u32 keys_total, const u32* entries, const HotPoint* bases,
                                      u32 chunk_len, HotSum* sums, u32* partial_keys, HotSum* partial_sums) {
    CUZK_THREADS(tid) {
        const u64 count = offsets[keys_total];
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
        HotSum acc = HotSum::infinity();
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
                acc = HotSum::infinity();
            }
            acc = src.add(acc, i);
        }
        emit_bucket(k, acc, first, stop, start, end, sums, partial_keys, partial_sums, chunk);
    }
}

// One step of joining the pieces of the buckets that chunk boundaries cut. Bucket k's pieces are
// the slot-1 partial sum of chunk j0, the chunk of its first entry (piece 0), and the slot-0
// partial sums of the chunks after it up to the chunk j1 of its last entry (piece j - j0 at
// chunk j). Steps half = 1, 2, 4, ... form a pairwise tree: piece i (i a multiple of 2·half)
// takes in piece i + half, which no thread writes in this step; the last step (half at least
// the longest span, read off the largest bucket on the device) writes piece 0, the bucket's sum, to
// sums[k]. The host launches steps for a bound of that span; the steps past the last do nothing. Each
// thread takes every (grid size)-th chunk: a grid that fills the device once, not one thread per chunk, because
// with dense scalars every step returns at once and a launch's time is the blocks it schedules.
// (A fan-in of 4 halves the steps but idles three lanes in four while the fourth adds three
// times: at 2^24 it took 20.6 ms against this one's 13.3, GPU_NOTES v5.)
// Buckets of at most `seq_span` chunks are msm_join_buckets' (the tree takes only wider ones, and none at all
// when the largest bucket is not wider).
CUZK_KERNEL void msm_join_pieces(const u32* offsets, u32 keys_total, const u32* largest, u32 chunk_len, u32 seq_span, u32 step,
                                 const u32* partial_keys, Sum* partial_sums, Sum* sums) {
    const u64 span = ((u64)largest[0] + 2 * (u64)chunk_len - 2) / chunk_len;  // the most chunks one bucket touches
    if (span <= seq_span) return;
    u32 steps = 1;
    while ((1ull << steps) < span) steps++;
    if (step >= steps) return;  // the whole launch: a step past the largest bucket's
    const u32 half = 1u << step;
    const bool last = step + 1 == steps;
    CUZK_THREADS(tid) {
        const u64 count = offsets[keys_total], stride = (u64)gridDim.x * blockDim.x;
        for (u64 j = CUZK_GLOBAL_INDEX(tid); j * chunk_len < count; j += stride) {
            for (u32 slot = 0; slot < 2; slot++) {
                const u32 k = partial_keys[2 * j + slot];
                if (k == NO_KEY) continue;
                const u64 j0 = offsets[k] / chunk_len, j1 = (offsets[k + 1] - 1) / chunk_len;
                if (j1 - j0 < seq_span) continue;
                const u64 i = j - j0;
                if (i % (2 * (u64)half) != 0) continue;
                Sum acc = partial_sums[2 * j + slot];
                if (j + half <= j1) {
                    acc = acc.add(partial_sums[2 * (j + half)]);
                    partial_sums[2 * j + slot] = acc;
                }
                if (last && i == 0) sums[k] = acc;
            }
        }
    }
}

// Bucket k, cut by chunk boundaries into at most `seq_span` pieces (chunks j0 .. j1), summed by thread k in
// order: piece 0 is chunk j0's slot-1 partial sum, the others the slot-0 ones of the chunks after it. Where
// buckets hold a few chunks each (dense scalars at large n) this is one launch with every lane adding, where
// the tree's steps left most lanes idle (its 13 ms at 2^24 were ~4x the additions' cost, GPU_NOTES v5).
CUZK_KERNEL void msm_join_buckets(const u32* offsets, u32 keys_total, u32 chunk_len, u32 seq_span, const HotSum* partial_sums,
                                  HotSum* sums) {
    CUZK_THREADS(tid) {
        const u64 k = CUZK_GLOBAL_INDEX(tid);
        if (k >= keys_total) continue;
        const u64 first = offsets[k], stop = offsets[k + 1];
        if (first == stop) continue;
        const u64 j0 = first / chunk_len, j1 = (stop - 1) / chunk_len;
        if (j0 == j1 || j1 - j0 >= seq_span) continue;
        HotSum acc = partial_sums[2 * j0 + 1];
        for (u64 j = j0 + 1; j <= j1; j++) acc = acc.add(partial_sums[2 * j]);
        sums[k] = acc;
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

// ---------------------------------------------------------------- window tables
#define MAX_TABLE_WINDOWS 32

// table[w·n + i] = 2^(c·w)·bases[i] for w < windows (affine, infinity all-zero), one thread per
// base: c doublings per window in XYZZ, then all windows made affine with one inversion
// (Montgomery's trick; x = X·ZZZ/(ZZ·ZZZ), y = Y·ZZ/(ZZ·ZZZ), the running products of
// ZZ·ZZZ in thread-local memory). Built once per resident bases, so plain Fermat inversion.
CUZK_KERNEL void msm_window_table(const Point* bases, u64 n, u32 c, u32 windows, Point* table) {
    CUZK_THREADS(tid) {
        const u64 i = CUZK_GLOBAL_INDEX(tid);
        if (i >= n) continue;
        F prefix[MAX_TABLE_WINDOWS], denominators[MAX_TABLE_WINDOWS];
        u32 infinite = 0;  // bit w: the multiple of window w is infinity (only for a point of order 2^k)
        Sum acc = Sum::from_affine(bases[i]);
        F running = F::one();
        for (u32 w = 0; w < windows; w++) {
            if (w > 0)
                for (u32 b = 0; b < c; b++) acc = acc.dbl();
            const bool inf = acc.is_infinity();
            infinite |= (inf ? 1u : 0u) << w;
            const F d = inf ? F::one() : acc.zz * acc.zzz;
            table[w * n + i] = {acc.x * acc.zzz, acc.y * acc.zz};
            denominators[w] = d;
            running = running * d;
            prefix[w] = running;
        }
        F inv = running.inverse();  // 1 / (d_0 ... d_w) for the w below
        for (i32 w = (i32)windows - 1; w >= 0; w--) {
            const F d_inv = w > 0 ? inv * prefix[w - 1] : inv;
            inv = inv * denominators[w];
            const Point scaled = table[w * n + i];
            Point p;
            p.x = (infinite >> w) & 1 ? F::zero() : scaled.x * d_inv;
            p.y = (infinite >> w) & 1 ? F::zero() : scaled.y * d_inv;
            table[w * n + i] = p;
        }
    }
}

// The one window of a window-table MSM: bucket k weighs k + 1. Thread s takes the segment of
// 2^log_g buckets from s·2^log_g: parts[s] = Σ_j (j + 1)·S_j and parts[segments + s] = Σ_j S_j,
// by running sums from the top bucket down. The MSM is Σ_s parts[s] + 2^log_g·Σ_s s·parts[segments + s].
CUZK_KERNEL void msm_bucket_segments(const Sum* sums, u32 segments, u32 log_g, Sum* parts) {
    CUZK_THREADS(tid) {
        const u64 s = CUZK_GLOBAL_INDEX(tid);
        if (s >= segments) continue;
        const Sum* seg = sums + (s << log_g);
        Sum run = Sum::infinity(), acc = Sum::infinity();
        for (i32 j = (1 << log_g) - 1; j >= 0; j--) {
            run = run.add(seg[j]);
            acc = acc.add(run);
        }
        parts[s] = acc;
        parts[segments + s] = run;
    }
}

// Σ_s s·R_s = Σ_b 2^b·(Σ of the R_s whose index s has bit b set), a sum without weights per bit.
// Blocks b·pieces .. b·pieces + pieces - 1 (b < bits) sum the terms of bit b, blocks of b = bits
// the parts[s]; block q of them takes every pieces-th stretch of blockDim.x terms from the q-th
// (each thread one term per stretch), then halves its partial sums in shared memory (blockDim.x
// a power of two, blockDim.x Sums of it) and writes out[blockIdx.x].
CUZK_KERNEL void msm_bit_sums(const Sum* parts, u32 segments, u32 bits, u32 pieces, Sum* out) {
    CUZK_DYNAMIC_SMEM(Sum, partial);
    CUZK_THREADS(tid) {
        const u32 b = blockIdx.x / pieces, q = blockIdx.x % pieces;
        const u32 stride = pieces * blockDim.x;
        Sum acc = Sum::infinity();
        if (b == bits) {
            for (u32 s = q * blockDim.x + tid; s < segments; s += stride) acc = acc.add(parts[s]);
        } else {
            for (u32 j = q * blockDim.x + tid; j < segments / 2; j += stride) {  // the j-th index with bit b set
                const u32 s = ((j >> b) << (b + 1)) | (1u << b) | (j & ((1u << b) - 1));
                acc = acc.add(parts[segments + s]);
            }
        }
        partial[tid] = acc;
    }
    for (u32 half = blockDim.x / 2; half > 0; half >>= 1) {
        CUZK_THREADS(tid) {
            if (tid < half) partial[tid] = partial[tid].add(partial[tid + half]);
        }
    }
    CUZK_THREADS(tid) {
        if (tid == 0) out[blockIdx.x] = partial[0];
    }
}

// out[0] = 2^log_g·Σ_b 2^b·T_b + A, T_b the sum of bit b's `pieces` partial sums and A that of the
// last `pieces` (msm_bit_sums), with no long chain on one thread: the pieces of each bit joined by a
// pairwise tree, each T_b doubled b + log_g times by a thread of its own, then a pairwise tree over
// the bits (the Horner it replaced ran 2·bits dependent operations on one thread). One block of
// any size; bit_sums is its scratch (a block's global writes are seen by its threads after each
// phase's barrier).
CUZK_KERNEL void msm_bits_combine(Sum* bit_sums, u32 bits, u32 pieces, u32 log_g, Sum* out) {
    const u32 items = (bits + 1) * pieces;
    for (u32 half = 1; half < pieces; half <<= 1) {  // pieces is a power of two: a pair never straddles two bits
        CUZK_THREADS(tid) {
            for (u32 i = tid * 2 * half; i < items; i += blockDim.x * 2 * half) bit_sums[i] = bit_sums[i].add(bit_sums[i + half]);
        }
    }
    CUZK_THREADS(tid) {
        for (u32 b = tid; b < bits; b += blockDim.x) {
            Sum acc = bit_sums[b * pieces];
            for (u32 k = 0; k < b + log_g; k++) acc = acc.dbl();
            bit_sums[b * pieces] = acc;
        }
    }
    for (u32 half = 1; half <= bits; half <<= 1) {
        CUZK_THREADS(tid) {
            for (u32 b = tid * 2 * half; b + half <= bits; b += blockDim.x * 2 * half)
                bit_sums[b * pieces] = bit_sums[b * pieces].add(bit_sums[(b + half) * pieces]);
        }
    }
    CUZK_THREADS(tid) {
        if (tid == 0) out[0] = bit_sums[0];
    }
}
