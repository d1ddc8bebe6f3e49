"""Time the CUDA backend's NTT, MSM (G1, G2) and synthesis on both curves, and full corpus proofs.

    PYTHONPATH=src python3 benchmarks/gpu_ops.py [--sizes 16,20,22,24] [--cpu-max-log 20]
    PYTHONPATH=src python3 benchmarks/gpu_ops.py --prebuild DIR   # nvcc-build the cubins (no GPU needed)
    PYTHONPATH=src python3 benchmarks/gpu_ops.py --sizes 22,24 --curves bn254 --ops msm_g1 --host-bases 8   # upload overlap
    PYTHONPATH=src python3 benchmarks/gpu_ops.py --sizes 20,22 --ops synth   # A·w, B·w on the device and on the CPU
    PYTHONPATH=src python3 benchmarks/gpu_ops.py --sizes 16 --ops msm_g1 --table-sweep 10,12,13,14   # window-table c
    PYTHONPATH=src python3 benchmarks/gpu_ops.py --sizes 16 --ops msm_g1 --chunk-sweep 8,16,32   # entries per thread
    PYTHONPATH=src python3 benchmarks/gpu_ops.py --sizes 20 --ops msm_g1 --join-sweep 1,4,16   # cut buckets one thread joins
    PYTHONPATH=src python3 benchmarks/gpu_ops.py --sizes 24 --ops ntt --ntt-block-sweep 9,10,11   # NTT elements per block
    PYTHONPATH=src python3 benchmarks/gpu_ops.py --sizes 24 --curves bls12_381 --ops msm_g1 --accumulate-block-sweep 64,128,256

Inputs are made on the device so that 2^24-point runs need no host-side curve arithmetic:
bases P_i = B + i·A for random multiples A = a·G, B = b·G (a small kernel appended to the
MSM module, reusing its field and point types), scalars uniform below 2^253. Every MSM
result is checked against the closed form (a·Σ i·s_i + b·Σ s_i)·G; every NTT is checked by
its inverse. Synthesis (op "synth", not run by default: it draws a synthetic circuit of
2^log_n constraints on the host first) evaluates A·w and B·w from resident coefficients and
is checked against, and timed next to, the CPU's synthesis. Times are medians of CUDA-event-timed runs after a warm-up; MSM bases are
resident (uploaded once, as the key manager keeps them), scalars already on the device; each
MSM is timed with the bases' window table (built by the first MSM, its time reported apart)
and without it (``ms_no_table``, the path MSMs of non-resident bases take).
Where the CPU backend is importable, it runs on the same inputs up to 2^cpu-max-log and
the ratio is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from cuzk.backends.base import point_rows
from cuzk.backends.cuda import CudaBackend, window_bits
from cuzk.backends.cuda.modules import KERNEL_DIR, PREBUILT_ENV, group_source, module_source, prebuild
from cuzk.backends.cuda.msm import point_words
from cuzk.curves import BLS12_381, BN254, curve_by_name

GENERATOR_KERNEL = r"""
// Benchmark inputs: out[i] = affine(B + i·A), 64 consecutive points per thread.
CUZK_KERNEL void bench_progression(const Point* a, const Point* b, u64 n, Point* out) {
    CUZK_THREADS(tid) {
        const u64 first = CUZK_GLOBAL_INDEX(tid) * 64;
        if (first >= n) continue;
        Sum acc = Sum::from_affine(a[0]).mul_small((u32)first).add(Sum::from_affine(b[0]));
        for (u64 i = first; i < n && i < first + 64; i++) {
            const F inv = (acc.zz * acc.zzz).inverse();  // 1/ZZ = inv·ZZZ, 1/ZZZ = inv·ZZ
            Point p;
            p.x = acc.x * (inv * acc.zzz);
            p.y = acc.y * (inv * acc.zz);
            out[i] = p;
            acc = acc.add_affine(a[0].x, a[0].y);
        }
    }
}
"""

CURVES = {"bn254": BN254, "bls12_381": BLS12_381}


def random_scalars(n: int, rng) -> np.ndarray:
    s = rng.integers(0, 2**32, size=(n, 8), dtype=np.uint64).astype(np.uint32)
    s[:, 7] &= 0x1FFFFFFF  # below 2^253 < r on both curves
    return s


def scalar_sums(scalars: np.ndarray, r: int) -> tuple[int, int]:
    """(Σ s_i, Σ i·s_i) mod r, exactly, with numpy: 16-bit halves keep every partial sum below 2^64."""
    idx = np.arange(scalars.shape[0], dtype=np.uint64)
    s0 = s1 = 0
    for limb in range(8):
        for half in range(2):
            h = (scalars[:, limb].astype(np.uint64) >> np.uint64(16 * half)) & np.uint64(0xFFFF)
            weight = 1 << (32 * limb + 16 * half)
            s0 += weight * int(h.sum())
            s1 += weight * int((idx * h).sum())
    return s0 % r, s1 % r


class Timer:
    def __init__(self, backend: CudaBackend):
        self.backend = backend

    def __call__(self, fn, repeat: int) -> tuple[float, object]:
        import cupy

        out = fn()  # warm-up: compiles, builds twiddle tables
        self.backend.runtime.synchronize()
        times = []
        for _ in range(repeat):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            out = fn()
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop))
        return statistics.median(times), out


def cpu_backend():
    try:
        from cuzk.backends import get_backend

        return get_backend("cpu")
    except Exception as exc:  # the CPU backend may not exist or may fail to import here
        print(f"(no CPU backend for comparison: {exc})", file=sys.stderr)
        return None


def host_time(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def bench_ntt(backend, timer, curve, log_n, rng, cpu, cpu_max_log, rows, block_sweep=()):
    import cupy

    n = 1 << log_n
    host = random_scalars(n, rng)
    host[:, 7] &= 0x0FFFFFFF
    data = cupy.asarray(host)
    repeat = 5 if log_n <= 20 else 3
    t_ntt, fwd = timer(lambda: backend.ntt(curve, data), repeat)
    t_intt, back = timer(lambda: backend.intt(curve, fwd), repeat)
    t_coset, _ = timer(lambda: backend.coset_ntt(curve, data, curve.fr_root_of_unity(log_n + 1)), repeat)
    ok = bool(cupy.array_equal(back, data))
    row = {"op": "ntt", "curve": curve.name, "log_n": log_n, "ntt_ms": t_ntt, "intt_ms": t_intt, "coset_ntt_ms": t_coset, "ok": ok}
    if block_sweep:  # other elements per shared-memory block (log2): fewer per block, more blocks (warps) per SM
        default, row["block_sweep_ms"] = backend.transforms.log_block, {}
        for log_block in block_sweep:
            backend.transforms.log_block = log_block
            ms, out = timer(lambda: backend.ntt(curve, data), repeat)
            row["block_sweep_ms"][log_block] = round(ms, 3) if bool(cupy.array_equal(out, fwd)) else "WRONG"
        backend.transforms.log_block = default
    if cpu is not None and log_n <= cpu_max_log:
        row["cpu_ntt_ms"] = host_time(lambda: cpu.ntt(curve, host), 1)
        row["cpu_ratio"] = row["cpu_ntt_ms"] / t_ntt
    rows.append(row)
    print(json.dumps(row), flush=True)


def bench_synth(backend, timer, curve, log_n, rows):
    import cupy

    from cuzk.backends.cpu.synth import evaluate_ab
    from cuzk.circuits.synthetic import synthesize
    from cuzk.prover.setup import coefficient_section

    circuit = synthesize(curve, (1 << log_n) - 8, n_public=1, seed=log_n)
    coeffs, n, w = coefficient_section(circuit.r1cs), 1 << log_n, circuit.witness
    t = time.perf_counter()
    resident = backend.upload_coefficients(curve, coeffs, len(w), n)
    upload_ms = (time.perf_counter() - t) * 1e3
    try:
        w_device = cupy.asarray(w)
        ms, (a, b) = timer(lambda: backend.evaluate_ab(curve, resident, w_device), 5 if log_n <= 20 else 3)
        t = time.perf_counter()
        want_a, want_b = evaluate_ab(curve, coeffs, w, n)
        cpu_ms = (time.perf_counter() - t) * 1e3
        ok = bool(np.array_equal(a.get(), want_a) and np.array_equal(b.get(), want_b))
    finally:
        resident.free()
    row = {"op": "synth", "curve": curve.name, "log_n": log_n, "ms": ms, "upload_ms": upload_ms, "entries": len(coeffs),
           "cpu_ms": cpu_ms, "cpu_ratio": cpu_ms / ms, "ok": ok}
    rows.append(row)
    print(json.dumps(row), flush=True)


def bench_host_bases(curve, group, host_bases, scalars, chunks: int, expected) -> dict:
    """Non-resident MSMs from page-locked host bases: whole (one upload, then compute), and in ``chunks``
    chunks (a VRAM budget that forces them) with the next chunk's upload overlapping this chunk's compute
    (``overlap``) or not. Wall-clock ms, medians of 3."""
    from cuzk.backends.cuda import VramBudget
    from cuzk.memory.pinned import CudaPinnedAllocator

    array, handle = CudaPinnedAllocator().allocate(host_bases.nbytes)
    pinned = array.view(np.uint32).reshape(host_bases.shape)
    pinned[...] = host_bases
    n = host_bases.shape[0]
    out = {}
    whole = CudaBackend()
    out["ms_host_bases_whole"] = host_time(lambda: whole.msm_g1(curve, pinned, scalars) if group == "g1" else whole.msm_g2(curve, pinned, scalars), 3)
    chunk = -(-n // chunks)
    budget = whole.msm_working_bytes(curve, group, chunk, buffers=2) + (64 << 20)  # + twiddle/temporary slack
    chunked = CudaBackend(vram_budget=VramBudget(budget, 0))
    fn = chunked.msm_g1 if group == "g1" else chunked.msm_g2
    with chunked.msm.plan(curve, group, n) as plan:
        out["host_bases_chunks"] = -(-n // plan.chunk)
    for overlap in (False, True):
        chunked.msm.overlap = overlap
        label = "overlap" if overlap else "serial"
        out[f"ms_host_bases_{label}"] = host_time(lambda: fn(curve, pinned, scalars), 3)
        out[f"ok_host_bases_{label}"] = (curve.G1 if group == "g1" else curve.G2).eq(fn(curve, pinned, scalars), expected)
    out["overlap_gain"] = out["ms_host_bases_serial"] / out["ms_host_bases_overlap"]
    del pinned, array
    CudaPinnedAllocator().free(handle)
    return out


def bench_msm(backend, timer, curve, group, log_n, rng, cpu, cpu_max_log, rows, host_bases_chunks: int = 0, table_sweep=(),
              chunk_sweep=(), join_sweep=(), accumulate_block_sweep=()):
    import cupy

    n = 1 << log_n
    G = curve.G1 if group == "g1" else curve.G2
    a, b = (int(x) for x in rng.integers(1, 2**62, size=2))
    A, B = G.mul(G.generator, a), G.mul(G.generator, b)
    module = backend.runtime.compile(group_source(curve, group, GENERATOR_KERNEL))
    words = point_words(curve, group)
    t = time.perf_counter()
    bases = cupy.empty((n, words), dtype=np.uint32)
    backend.runtime.launch(module, "bench_progression", -(-n // 64 // 128), 128,
                           (cupy.asarray(point_rows(curve, group, [A])), cupy.asarray(point_rows(curve, group, [B])), np.uint64(n), bases))
    backend.runtime.synchronize()
    gen_s = time.perf_counter() - t
    shape = (n, 2, curve.Fq.limbs32) if group == "g1" else (n, 2, 2, curve.Fq.limbs32)
    resident = backend.upload_bases(curve, group, bases.reshape(shape))
    scalars_host = random_scalars(n, rng)
    scalars = cupy.asarray(scalars_host)
    fn = backend.msm_g1 if group == "g1" else backend.msm_g2
    repeat = 5 if log_n <= 20 else 3
    t = time.perf_counter()
    fn(curve, resident, scalars)  # the first MSM over the resident bases builds their window table
    backend.runtime.synchronize()
    first_s = time.perf_counter() - t
    t_msm, got = timer(lambda: fn(curve, resident, scalars), repeat)
    s0, s1 = scalar_sums(scalars_host, curve.r)
    expected = G.mul(G.generator, (a * s1 + b * s0) % curve.r)
    row = {"op": f"msm_{group}", "curve": curve.name, "log_n": log_n, "ms": t_msm, "ok": G.eq(got, expected),
           "window_bits": window_bits(n, curve.r.bit_length()), "table_bits": resident.table_bits,
           "table_mib": round(backend.msm.table_bytes(curve, group, n) / 2**20, 1) if resident.table is not None else 0,
           "first_msm_s": round(first_s, 3), "gen_bases_s": round(gen_s, 3)}
    launches = backend.runtime.launch_count
    fn(curve, resident, scalars)
    row["launches"] = backend.runtime.launch_count - launches  # kernel launches and graph replays of one MSM
    # The same MSM over the table without its captured graph (small sizes): what the graph gives.
    backend.msm.graphs = False
    row["ms_no_graph"], got_direct = timer(lambda: fn(curve, resident, scalars), repeat)
    row["ok_no_graph"] = G.eq(got_direct, expected)
    launches = backend.runtime.launch_count
    fn(curve, resident, scalars)
    row["launches_no_graph"] = backend.runtime.launch_count - launches
    backend.msm.graphs = True
    # The same MSM without the window table (each window its own buckets, Horner at the end): the before.
    backend.msm.window_tables = False
    row["ms_no_table"], got_plain = timer(lambda: fn(curve, resident, scalars), repeat)
    row["ok_no_table"] = G.eq(got_plain, expected)
    backend.msm.phase_log = []
    fn(curve, resident, scalars)
    row["phases_no_table_ms"] = {label: round(ms, 3) for label, ms in backend.msm.phase_log}
    backend.msm.phase_log = None
    backend.msm.window_tables = True
    def sweep(knob: str, values: list[int], default) -> dict:
        """The same MSM with the backend's ``knob`` at each value (tables and graphs built anew), checked each time."""
        out = {}
        for value in values:
            resident.drop_table()
            setattr(backend.msm, knob, value)
            ms, got = timer(lambda: fn(curve, resident, scalars), repeat)
            out[value] = round(ms, 3) if G.eq(got, expected) else "WRONG"
        setattr(backend.msm, knob, default)
        resident.drop_table()
        return out

    if table_sweep:  # tables of other windows c
        row["table_sweep_ms"] = sweep("table_window", table_sweep, None)
    if chunk_sweep:  # other entries per accumulating thread
        row["chunk_sweep_ms"] = sweep("chunk_len", chunk_sweep, 0)
    if join_sweep:  # other widest buckets joined by one thread (1: the pairwise tree joins all)
        row["join_sweep_ms"] = sweep("join_span", join_sweep, 0)
    if accumulate_block_sweep:  # other blocks of the accumulation (more warps per SM where registers allow)
        row["accumulate_block_sweep_ms"] = sweep("accumulate_threads", accumulate_block_sweep, backend.msm.accumulate_threads)
    t_host, _ = timer(lambda: fn(curve, resident, scalars_host), 1)
    row["ms_scalars_from_host"] = t_host
    # A circom-like witness: half zeros, a third ones, the rest random.
    sparse_host = scalars_host.copy()
    kind = rng.random(n)
    sparse_host[kind < 0.5] = 0
    ones = (kind >= 0.5) & (kind < 0.83)
    sparse_host[ones] = 0
    sparse_host[ones, 0] = 1
    sparse = cupy.asarray(sparse_host)
    t_sparse, got_sparse = timer(lambda: fn(curve, resident, sparse), repeat)
    s0, s1 = scalar_sums(sparse_host, curve.r)
    row["ms_sparse_witness"] = t_sparse
    row["ok_sparse"] = G.eq(got_sparse, G.mul(G.generator, (a * s1 + b * s0) % curve.r))
    if host_bases_chunks:
        row.update(bench_host_bases(curve, group, cupy.asnumpy(bases).reshape(shape), scalars, host_bases_chunks, fn(curve, resident, scalars)))
    backend.msm.phase_log = []
    fn(curve, resident, scalars)
    row["phases_ms"] = {label: round(ms, 3) for label, ms in backend.msm.phase_log}
    backend.msm.phase_log = None
    if cpu is not None and log_n <= cpu_max_log:
        host_bases = cupy.asnumpy(bases).reshape(shape)
        cpu_fn = cpu.msm_g1 if group == "g1" else cpu.msm_g2
        row["cpu_ms"] = host_time(lambda: cpu_fn(curve, host_bases, scalars_host), 1)
        row["cpu_ratio"] = row["cpu_ms"] / t_msm
    resident.free()
    bases = scalars = sparse = None  # let the pool give their memory back
    backend.runtime.free_cached()
    rows.append(row)
    print(json.dumps(row), flush=True)


def bench_proofs(backend, corpus: Path, cpu, rows, proofs_out):
    for d in sorted(p for p in corpus.iterdir() if (p / "circuit.zkey").exists()):
        try:
            bench_proof(backend, d, cpu, rows, proofs_out)
        except Exception as exc:  # report and go on to the next circuit
            print(json.dumps({"op": "proof", "circuit": d.name, "error": repr(exc)}), flush=True)


def bench_proof(backend, d: Path, cpu, rows, proofs_out):
    from cuzk.formats.json_io import proof_to_json, public_to_json
    from cuzk.formats.wtns import read_wtns
    from cuzk.formats.zkey import read_zkey
    from cuzk.prover.groth16 import prove

    zkey, wtns = read_zkey(d / "circuit.zkey"), read_wtns(d / "witness.wtns")
    prove(backend, zkey, wtns)  # warm-up (compiles, twiddles)
    times = []
    for _ in range(3):
        t = time.perf_counter()
        proof = prove(backend, zkey, wtns)
        times.append((time.perf_counter() - t) * 1e3)
    row = {"op": "proof", "circuit": d.name, "curve": zkey.curve.name, "domain": zkey.domain_size,
           "ms": statistics.median(times), "phases_ms": {k: round(v * 1e3, 2) for k, v in proof.timings.items()}}
    resident = backend.upload_key(zkey)
    try:
        row["ms_key_resident"] = host_time(lambda: prove(backend, resident, wtns), 3)
        launches = backend.runtime.launch_count
        prove(backend, resident, wtns)
        row["launches_key_resident"] = backend.runtime.launch_count - launches  # kernel launches and graph replays of one proof
    finally:
        backend.free_key(resident)
    if cpu is not None:
        row["cpu_ms"] = host_time(lambda: prove(cpu, zkey, wtns), 1)
        row["cpu_ratio"] = row["cpu_ms"] / row["ms"]
    proofs_out[d.name] = {"proof": json.loads(proof_to_json(proof)), "public": json.loads(public_to_json(proof.public_signals))}
    rows.append(row)
    print(json.dumps(row), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16,20,22,24", help="log2 sizes (default 16,20,22,24)")
    ap.add_argument("--curves", default="bn254,bls12_381")
    ap.add_argument("--ops", default="ntt,msm_g1,msm_g2", help="of ntt,msm_g1,msm_g2,synth (default: all but synth)")
    ap.add_argument("--cpu-max-log", type=int, default=-1,
                    help="also time the CPU backend up to this log size (and on the corpus proofs); off by default")
    ap.add_argument("--host-bases", type=int, default=0, metavar="CHUNKS",
                    help="also time MSMs from pinned host bases: whole, and in CHUNKS chunks with and without the "
                         "double-buffered upload overlapping compute (prints the overlap gain)")
    ap.add_argument("--table-sweep", metavar="C,C,...", help="also time each MSM over window tables of these windows c")
    ap.add_argument("--chunk-sweep", metavar="L,L,...", help="also time each MSM with L sorted entries per accumulating thread")
    ap.add_argument("--ntt-block-sweep", metavar="B,B,...", help="also time each NTT with 2^B elements per shared-memory block")
    ap.add_argument("--join-sweep", metavar="S,S,...", help="also time each MSM with cut buckets of up to S chunks joined by one thread")
    ap.add_argument("--accumulate-block-sweep", metavar="T,T,...", help="also time each MSM with T threads per block of the accumulation")
    ap.add_argument("--proofs", type=Path, help="corpus directory: prove each circuit (and write the proofs with --out)")
    ap.add_argument("--out", type=Path, help="write all rows (and proofs) as JSON here")
    ap.add_argument("--prebuild", type=Path, help="nvcc-build every module (and the benchmark's) into this directory, then exit")
    args = ap.parse_args(argv)
    curves = [CURVES.get(c) or curve_by_name(c) for c in args.curves.split(",")]

    if args.prebuild:
        for curve in curves:
            sources = {kind: module_source(curve, kind) for kind in ("ntt", "synth", "msm_g1", "msm_g2")}
            sources.update({f"bench_{g}": group_source(curve, g, GENERATOR_KERNEL) for g in ("g1", "g2")})
            sources.update({f"fixed_base_{g}": group_source(curve, g, (KERNEL_DIR / "fixed_base.cu").read_text()) for g in ("g1", "g2")})
            for kind, source in sources.items():
                t = time.perf_counter()
                path = prebuild(source, args.prebuild)
                print(f"{curve.name} {kind}: {path.name} ({time.perf_counter() - t:.1f} s)", flush=True)
        return 0

    backend = CudaBackend()
    print(f"device: {backend.runtime.device_name}, {backend.runtime.multiprocessors} SMs, VRAM budget "
          f"{backend.vram.total_bytes / 2**30:.1f} GiB, prebuilt cubins: {os.environ.get(PREBUILT_ENV) or 'no'}", flush=True)
    t = time.perf_counter()
    for curve in curves:
        for kind in ("ntt", "synth", "msm_g1", "msm_g2"):
            backend.runtime.module(curve, kind)
    print(f"modules loaded in {time.perf_counter() - t:.1f} s", flush=True)
    cpu = cpu_backend() if args.cpu_max_log >= 0 else None
    timer = Timer(backend)
    rng = np.random.default_rng(12345)
    rows: list[dict] = []
    proofs: dict = {}
    ops = args.ops.split(",")
    for curve in curves:
        for log_n in (int(s) for s in args.sizes.split(",")):
            if "ntt" in ops:
                bench_ntt(backend, timer, curve, log_n, rng, cpu, args.cpu_max_log, rows,
                          [int(b) for b in args.ntt_block_sweep.split(",")] if args.ntt_block_sweep else ())
            for group in ("g1", "g2"):
                if f"msm_{group}" in ops:
                    bench_msm(backend, timer, curve, group, log_n, rng, cpu, args.cpu_max_log, rows, args.host_bases,
                              [int(c) for c in args.table_sweep.split(",")] if args.table_sweep else (),
                              [int(v) for v in args.chunk_sweep.split(",")] if args.chunk_sweep else (),
                              [int(v) for v in args.join_sweep.split(",")] if args.join_sweep else (),
                              [int(v) for v in args.accumulate_block_sweep.split(",")] if args.accumulate_block_sweep else ())
            if "synth" in ops:
                bench_synth(backend, timer, curve, log_n, rows)
    if args.proofs:
        bench_proofs(backend, args.proofs, cpu, rows, proofs)
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "proofs": proofs}, indent=1))

    print("\ncurve      op       log_n    GPU ms   (intt/coset|sparse, no table)   CPU ms   ratio  ok")
    for r in rows:
        if r["op"] == "proof":
            print(f"{r['curve']:10s} proof    {r['circuit'][:14]:14s} {r['ms']:9.2f} {'':20s} {r.get('cpu_ms', float('nan')):9.1f} {r.get('cpu_ratio', float('nan')):6.1f}")
            continue
        ms = r.get("ntt_ms", r.get("ms"))
        extra = (f"({r['intt_ms']:.2f} / {r['coset_ntt_ms']:.2f})" if r["op"] == "ntt"
                 else f"(upload {r['upload_ms']:.0f})" if r["op"] == "synth"
                 else f"(sparse {r['ms_sparse_witness']:.2f}, no table {r['ms_no_table']:.2f})")
        cpu_ms = r.get("cpu_ntt_ms", r.get("cpu_ms", float("nan")))
        print(f"{r['curve']:10s} {r['op']:8s} {r['log_n']:5d} {ms:9.2f}   {extra:30s} {cpu_ms:9.1f} {r.get('cpu_ratio', float('nan')):6.1f}  {r['ok']}"
              + ("" if r.get("ok_sparse", True) else " SPARSE WRONG") + ("" if r.get("ok_no_table", True) else " NO-TABLE WRONG"))
    for r in rows:
        if "overlap_gain" in r:
            print(f"{r['curve']:10s} {r['op']:8s} 2^{r['log_n']} from pinned host bases: whole {r['ms_host_bases_whole']:.1f} ms, "
                  f"{r['host_bases_chunks']} chunks serial {r['ms_host_bases_serial']:.1f} ms, overlapped {r['ms_host_bases_overlap']:.1f} ms "
                  f"(gain {r['overlap_gain']:.2f}x; resident {r['ms']:.1f} ms)")
    bad = [r for r in rows if r.get("ok") is False or r.get("ok_sparse") is False or r.get("ok_no_table") is False
           or r.get("ok_host_bases_serial") is False or r.get("ok_host_bases_overlap") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
