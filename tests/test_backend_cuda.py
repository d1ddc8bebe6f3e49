"""The CUDA backend against the reference arithmetic in cuzk.curves.

Every test runs twice: on the host emulation of the kernels (the same .cu sources built
with the host C++ compiler: CI, no GPU, small sizes) and on a real GPU (marked ``gpu``:
`pytest -m gpu`, skipped without CuPy or a device). Tests that only make sense at sizes
the emulation cannot reach are GPU-only.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuzk.backends.cuda import (
    CudaBackend,
    CudaInputError,
    HostRuntime,
    ScalarOutOfRangeError,
    VramBudget,
    VramExhaustedError,
    available,
)
from cuzk.backends.cuda.modules import host_compiler
from cuzk.curves import BLS12_381, BN254
from cuzk.curves.serialize import g1_to_bytes, g2_to_bytes
from cuzk.formats.limbs import ints_to_limbs, limbs_to_ints
from cuzk.formats.zkey import KEY_BASES
from cuzk.prover.sizing import bases_bytes, coefficient_bytes, proof_vram_bytes, proofs_in_flight, tables_bytes

CURVES = [pytest.param(BN254, id="bn254"), pytest.param(BLS12_381, id="bls12_381")]
GROUPS = ["g1", "g2"]

_backends: dict[str, CudaBackend] = {}


def make_backend(kind: str, **options) -> CudaBackend:
    if kind == "gpu":
        if not available():
            pytest.skip("no CuPy or no CUDA device")
        return CudaBackend(**options)
    if host_compiler() is None:
        pytest.skip("no host C++ compiler for the CUDA host emulation")
    return CudaBackend(runtime=HostRuntime(), **options)


@pytest.fixture(scope="module", params=["host", pytest.param("gpu", marks=pytest.mark.gpu)])
def kind(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def backend(kind) -> CudaBackend:
    return make_backend(kind)


@pytest.fixture
def gpu_backend() -> CudaBackend:
    if "gpu" not in _backends:
        _backends["gpu"] = make_backend("gpu")
    return _backends["gpu"]


# ------------------------------------------------------------------ reference helpers
def fr_rows(curve, values, mont=True):
    Fr = curve.Fr
    return ints_to_limbs([Fr.to_mont(v) if mont else v for v in values], Fr.limbs32)


def fr_values(curve, rows, mont=True):
    Fr = curve.Fr
    return [Fr.from_mont(v) if mont else v for v in limbs_to_ints(np.asarray(rows_to_host(rows)))]


def rows_to_host(rows):
    return rows if isinstance(rows, np.ndarray) else rows.get()


def reference_ntt(curve, a, w):
    """Iterative radix-2 DFT: out[i] = Σ a_j w^(ij) (O(n log n) in Python ints)."""
    r, n = curve.r, len(a)
    if n == 1:
        return list(a)
    even = reference_ntt(curve, a[0::2], w * w % r)
    odd = reference_ntt(curve, a[1::2], w * w % r)
    out = [0] * n
    t = 1
    for i in range(n // 2):
        x = odd[i] * t % r
        out[i] = (even[i] + x) % r
        out[i + n // 2] = (even[i] - x) % r
        t = t * w % r
    return out


def group_of(curve, group):
    return curve.G1 if group == "g1" else curve.G2


def bases_array(curve, group, points):
    enc = g1_to_bytes if group == "g1" else g2_to_bytes
    lq = curve.Fq.limbs32
    shape = (len(points), 2, lq) if group == "g1" else (len(points), 2, 2, lq)
    raw = b"".join(enc(curve, P) for P in points)
    return np.frombuffer(raw, dtype="<u4").reshape(shape).copy()


def multiples(G, P, start, count):
    """start·P, (start+1)·P, ...: consecutive multiples by repeated addition."""
    out, acc = [], G.mul(P, start)
    for _ in range(count):
        out.append(acc)
        acc = G.add(acc, P)
    return out


def msm(backend, curve, group, bases, scalars):
    fn = backend.msm_g1 if group == "g1" else backend.msm_g2
    return fn(curve, bases, scalars)


def random_points(curve, group, count, rng):
    G = group_of(curve, group)
    seeds = [G.mul(G.generator, rng.randrange(1, curve.r)) for _ in range(min(count, 4))]
    # A few random points and their small combinations: distinct, cheap to make.
    out = []
    for i in range(count):
        out.append(G.add(seeds[i % len(seeds)], G.mul(G.generator, i // len(seeds) + 1)))
    return out


# ------------------------------------------------------------------ Fr vectors
@pytest.mark.parametrize("curve", CURVES)
def test_fr_elementwise_matches_reference(backend, curve):
    rng = random.Random(1)
    r = curve.r
    a = [0, 1, r - 1, r - 1, 2] + [rng.randrange(r) for _ in range(60)]
    b = [r - 1, r - 1, r - 1, 0, r - 2] + [rng.randrange(r) for _ in range(60)]
    A, B = fr_rows(curve, a), fr_rows(curve, b)
    assert fr_values(curve, backend.fr_mul(curve, A, B)) == [x * y % r for x, y in zip(a, b)]
    assert fr_values(curve, backend.fr_sub(curve, A, B)) == [(x - y) % r for x, y in zip(a, b)]
    assert fr_values(curve, backend.fr_from_mont(curve, A), mont=False) == a
    assert np.array_equal(rows_to_host(backend.fr_to_mont(curve, fr_rows(curve, a, mont=False))), A)


def test_fr_vectors_rejected_with_clear_errors(backend):
    good = fr_rows(BN254, [1, 2])
    with pytest.raises(CudaInputError, match="shape"):
        backend.fr_mul(BN254, good, fr_rows(BN254, [1, 2])[:, :4].copy())
    with pytest.raises(CudaInputError, match="differ in length"):
        backend.fr_sub(BN254, good, fr_rows(BN254, [1]))
    with pytest.raises(CudaInputError, match="uint32"):
        backend.fr_mul(BN254, good.astype(np.int64), good)


# ------------------------------------------------------------------ NTT
@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("log_n,log_block", [(0, 11), (1, 11), (2, 11), (5, 11), (9, 11), (9, 3), (10, 4), (7, 2), (13, 11), (12, 5)])
def test_ntt_intt_coset_match_reference(kind, curve, log_n, log_block):
    """Single-pass and (with small blocks) three-to-five-pass transforms equal the reference DFT; from 2^12 the bit
    reversal swaps pairs of distinct tiles."""
    backend = make_backend(kind, ntt_log_block=log_block)
    rng = random.Random(log_n * 100 + log_block)
    r, n = curve.r, 1 << log_n
    a = [rng.randrange(r) for _ in range(n)]
    a[0] = r - 1
    w = curve.fr_root_of_unity(log_n)
    rows = fr_rows(curve, a)
    assert fr_values(curve, backend.ntt(curve, rows)) == reference_ntt(curve, a, w)
    n_inv = pow(n, -1, r)
    assert fr_values(curve, backend.intt(curve, rows)) == [x * n_inv % r for x in reference_ntt(curve, a, pow(w, -1, r))]
    shift = curve.fr_root_of_unity(log_n + 1)
    scaled = [x * pow(shift, i, r) % r for i, x in enumerate(a)]
    assert fr_values(curve, backend.coset_ntt(curve, rows, shift)) == reference_ntt(curve, scaled, w)
    assert np.array_equal(rows_to_host(backend.intt(curve, backend.ntt(curve, rows))), rows)


def test_ntt_rejects_bad_lengths(backend):
    with pytest.raises(CudaInputError, match="power of two"):
        backend.ntt(BN254, fr_rows(BN254, [1, 2, 3]))
    with pytest.raises(CudaInputError, match="power of two"):
        backend.intt(BN254, np.zeros((0, 8), dtype=np.uint32))
    with pytest.raises(CudaInputError, match="non-zero"):
        backend.coset_ntt(BN254, fr_rows(BN254, [1, 2]), BN254.r)


def test_ntt_leaves_its_input_alone(backend):
    rows = fr_rows(BN254, list(range(1, 17)))
    before = rows.copy()
    backend.ntt(BN254, rows)
    backend.coset_ntt(BN254, rows, 7)
    assert np.array_equal(rows, before)


# ------------------------------------------------------------------ MSM
@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_msm_matches_reference_with_edge_scalars_and_bases(backend, curve, group):
    rng = random.Random(7)
    G, r = group_of(curve, group), curve.r
    points = random_points(curve, group, 40, rng)
    points[3] = None  # the point at infinity as a base
    points[10:14] = [points[9]] * 4  # equal bases
    points[20] = G.neg(points[21])  # opposite bases
    scalars = [rng.randrange(r) for _ in range(40)]
    scalars[0:4] = [0, 1, r - 1, 5]
    scalars[20] = scalars[21]  # their terms cancel
    scalars[30:36] = [1] * 6
    got = msm(backend, curve, group, bases_array(curve, group, points), ints_to_limbs(scalars, 8))
    assert G.eq(got, G.msm(points, scalars))


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_msm_all_equal_bases(backend, curve, group):
    rng = random.Random(11)
    G = group_of(curve, group)
    P = G.mul(G.generator, rng.randrange(1, curve.r))
    scalars = [rng.randrange(curve.r) for _ in range(33)]
    got = msm(backend, curve, group, bases_array(curve, group, [P] * 33), ints_to_limbs(scalars, 8))
    assert G.eq(got, G.mul(P, sum(scalars) % curve.r))


@pytest.mark.parametrize("curve", CURVES)
def test_msm_sparse_witness_of_zeros_and_ones(backend, curve):
    """Mostly 0 and 1, as circom witnesses are: one bucket takes most entries and is summed in levels."""
    G = curve.G1
    n = 600
    points = multiples(G, G.generator, 1, n)  # i·G
    rng = random.Random(5)
    scalars = [rng.choice((0, 1, 1, 1)) for _ in range(n)]
    scalars[17] = curve.r - 1
    expected = sum((i + 1) * s for i, s in enumerate(scalars)) % curve.r
    got = backend.msm_g1(curve, bases_array(curve, "g1", points), ints_to_limbs(scalars, 8))
    assert G.eq(got, G.mul(G.generator, expected))


@pytest.mark.parametrize("curve", CURVES)
def test_msm_scan_in_tiles_and_scatter_in_stretches(backend, curve, monkeypatch):
    """The bucket scan in several tiles and the window-table scatter in stretches of the sorted entries (as from
    2^20 points up, where their bounds exceed one block and L2) give the same MSMs, dense and sparse, resident
    (a graph) or not, with zero entries too."""
    from cuzk.backends.cuda import msm as msm_module

    monkeypatch.setattr(msm_module, "SCAN_TILE", 16)
    monkeypatch.setattr(msm_module, "SCATTER_STRETCH_LOG", 5)
    G, n = curve.G1, 200
    points = multiples(G, G.generator, 1, n)
    host = bases_array(curve, "g1", points)
    resident = backend.upload_bases(curve, "g1", host)
    rng = random.Random(8)
    for scalars in ([rng.randrange(curve.r) for _ in range(n)], [rng.choice((0, 1, 1, 2)) for _ in range(n)], [0] * n):
        expected = G.mul(G.generator, sum((i + 1) * s for i, s in enumerate(scalars)) % curve.r)
        limbs = ints_to_limbs(scalars, 8)
        assert G.eq(backend.msm_g1(curve, resident, limbs), expected) and G.eq(backend.msm_g1(curve, host, limbs), expected)
    assert resident.table is not None and resident.graphs
    resident.free()


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("join_span", [2, 4])
def test_msm_cut_buckets_joined_by_one_thread_or_the_tree(backend, curve, join_span, monkeypatch):
    """Cut buckets of at most ``join_span`` chunks summed by a thread each (msm_join_buckets, the rule from 2^22
    entries), wider ones by the pairwise tree, in one MSM: dense scalars, and 0/1/2 ones whose bucket of 1s spans
    many chunks; resident (a graph over a window table) and from the host. (In the host emulation, one
    multiprocessor, the tree's threads stride over the dense MSMs' ~1,200 chunks.)"""
    monkeypatch.setattr(backend.msm, "join_span", join_span)
    G, n = curve.G1, 300
    points = multiples(G, G.generator, 1, n)
    host = bases_array(curve, "g1", points)
    resident = backend.upload_bases(curve, "g1", host)
    rng = random.Random(9)
    for scalars in ([rng.randrange(curve.r) for _ in range(n)], [rng.choice((0, 1, 1, 2)) for _ in range(n)]):
        expected = G.mul(G.generator, sum((i + 1) * s for i, s in enumerate(scalars)) % curve.r)
        limbs = ints_to_limbs(scalars, 8)
        assert G.eq(backend.msm_g1(curve, resident, limbs), expected) and G.eq(backend.msm_g1(curve, host, limbs), expected)
    resident.free()


@pytest.mark.parametrize("curve", CURVES)
def test_msm_accumulation_in_smaller_blocks(backend, curve, monkeypatch):
    """The accumulation launched in blocks of 32 threads (the benchmarks' accumulate_threads sweep): same sums."""
    monkeypatch.setattr(backend.msm, "accumulate_threads", 32)
    G, n = curve.G1, 300
    host = bases_array(curve, "g1", multiples(G, G.generator, 1, n))
    rng = random.Random(5)
    scalars = [rng.randrange(curve.r) for _ in range(n)]
    expected = G.mul(G.generator, sum((i + 1) * s for i, s in enumerate(scalars)) % curve.r)
    assert G.eq(backend.msm_g1(curve, host, ints_to_limbs(scalars, 8)), expected)


@pytest.mark.parametrize("group", GROUPS)
def test_msm_of_nothing_is_infinity(backend, group):
    curve = BN254
    points = random_points(curve, group, 5, random.Random(1))
    assert msm(backend, curve, group, bases_array(curve, group, points), ints_to_limbs([0] * 5, 8)) is None
    assert msm(backend, curve, group, bases_array(curve, group, []), np.zeros((0, 8), dtype=np.uint32)) is None
    # Infinity bases only:
    assert msm(backend, curve, group, bases_array(curve, group, [None] * 3), ints_to_limbs([1, 2, 3], 8)) is None


def test_msm_rejects_bad_inputs(backend):
    curve = BN254
    bases = bases_array(curve, "g1", random_points(curve, "g1", 4, random.Random(2)))
    with pytest.raises(ScalarOutOfRangeError, match="scalar 2 ") as err:
        backend.msm_g1(curve, bases, ints_to_limbs([1, 2, curve.r, 4], 8))
    assert err.value.index == 2
    with pytest.raises(CudaInputError, match="4 bases but 3 scalars"):
        backend.msm_g1(curve, bases, ints_to_limbs([1, 2, 3], 8))
    with pytest.raises(CudaInputError, match="G2 bases"):
        backend.msm_g2(curve, bases, ints_to_limbs([1, 2, 3, 4], 8))
    with pytest.raises(CudaInputError, match="MSM scalars"):
        backend.msm_g1(curve, bases, np.zeros((4, 12), dtype=np.uint32))


@pytest.mark.parametrize("group", GROUPS)
def test_msm_split_into_chunks_when_vram_budget_is_small(kind, group):
    """A budget too small for the whole MSM makes it run in chunks, with the same result."""
    curve = BLS12_381
    backend = make_backend(kind, vram_budget=VramBudget(250_000 if group == "g1" else 500_000), min_msm_chunk=8)
    rng = random.Random(3)
    G = group_of(curve, group)
    points = multiples(G, G.generator, 1, 200)
    scalars = [rng.randrange(curve.r) for _ in range(200)]
    with backend.msm.plan(curve, group, 200) as plan:
        assert 8 <= plan.chunk < 200
    got = msm(backend, curve, group, bases_array(curve, group, points), ints_to_limbs(scalars, 8))
    assert G.eq(got, G.mul(G.generator, sum((i + 1) * s for i, s in enumerate(scalars)) % curve.r))
    assert backend.vram.reserved_bytes == 0
    tiny = make_backend(kind, vram_budget=VramBudget(1000), min_msm_chunk=8)
    with pytest.raises(VramExhaustedError, match="too little"):
        msm(tiny, curve, group, bases_array(curve, group, points), ints_to_limbs(scalars, 8))


def test_resident_bases_give_the_same_result_and_hold_budget(kind):
    curve = BN254
    backend = make_backend(kind, vram_budget=VramBudget(1 << 26))
    rng = random.Random(4)
    points = random_points(curve, "g2", 24, rng)
    scalars = ints_to_limbs([rng.randrange(curve.r) for _ in range(24)], 8)
    host = bases_array(curve, "g2", points)
    resident = backend.upload_bases(curve, "g2", host)
    assert backend.vram.reserved_bytes == host.nbytes == resident.nbytes
    assert curve.G2.eq(backend.msm_g2(curve, resident, scalars), backend.msm_g2(curve, host, scalars))
    with pytest.raises(CudaInputError, match="G2"):
        backend.msm_g1(curve, resident, scalars)
    resident.free()
    assert backend.vram.reserved_bytes == 0
    with pytest.raises(CudaInputError, match="freed"):
        backend.msm_g2(curve, resident, scalars)
    small = make_backend(kind, vram_budget=VramBudget(host.nbytes - 1))
    with pytest.raises(VramExhaustedError, match="bases"):
        small.upload_bases(curve, "g2", host)


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_window_table_msm_matches_reference_whole_and_in_chunks(kind, curve, group):
    """Resident bases get a window table on their first MSM (reserved beside them, freed with them); the one-bucket-set
    MSM over it equals the reference, with edge bases and scalars, whole and in chunks when the budget is short."""
    rng = random.Random(13)
    G, r = group_of(curve, group), curve.r
    points = random_points(curve, group, 48, rng)
    points[3] = None
    points[10:14] = [points[9]] * 4
    points[20] = G.neg(points[21])
    scalars = [rng.randrange(r) for _ in range(48)]
    scalars[0:4] = [0, 1, r - 1, 5]
    scalars[20] = scalars[21]
    scalars[30:40] = [1] * 10
    expected = G.msm(points, scalars)
    backend = make_backend(kind, vram_budget=VramBudget(1 << 24), min_msm_chunk=8)
    host = bases_array(curve, group, points)
    resident = backend.upload_bases(curve, group, host)
    limbs = ints_to_limbs(scalars, 8)
    assert G.eq(msm(backend, curve, group, resident, limbs), expected)
    # The small MSM was captured as a graph (its buffers reserved with the table); other scalars replay it in one launch.
    graph_bytes = sum(g.nbytes for g in resident.graphs)
    assert len(resident.graphs) == 1 and 0 < graph_bytes <= backend.msm.working_bytes(curve, group, 48, resident=True)
    assert resident.table is not None and resident.nbytes == host.nbytes + backend.msm.table_bytes(curve, group, 48) + graph_bytes
    assert backend.vram.reserved_bytes == resident.nbytes
    launches = backend.runtime.launch_count
    others = [rng.randrange(r) for _ in range(48)]
    assert G.eq(msm(backend, curve, group, resident, ints_to_limbs(others, 8)), G.msm(points, others))
    assert backend.runtime.launch_count == launches + 1 and len(resident.graphs) == 1
    bad = ints_to_limbs(others, 8)
    bad[7] = ints_to_limbs([r], 8)[0]
    with pytest.raises(ScalarOutOfRangeError) as caught:
        msm(backend, curve, group, resident, bad)
    assert caught.value.index == 7 and len(resident.graphs) == 1
    assert backend.msm.evict_idle(1) == graph_bytes and not resident.graphs and resident.table is not None  # graphs go first
    backend.msm.graphs = False  # the chunked path: a graph would bring its own reserved buffers
    whole = backend.msm.working_bytes(curve, group, 48, resident=True, table_bits=resident.table_bits)  # chunks sort over its c
    room = (whole + backend.msm.working_bytes(curve, group, 8, resident=True, table_bits=resident.table_bits)) // 2  # < whole, > 8 points
    blocker = backend.vram.reserve(backend.vram.available_bytes - room, "test: leave room for a chunk only")
    launched, launch, allocated, empty = [], backend.runtime.launch, [], backend.runtime.empty
    backend.runtime.launch = lambda module, kernel, *args, **kw: launched.append(kernel) or launch(module, kernel, *args, **kw)
    backend.runtime.empty = lambda shape, dtype: allocated.append(int(np.prod(shape)) * np.dtype(dtype).itemsize) or empty(shape, dtype)
    assert G.eq(msm(backend, curve, group, resident, limbs), expected)  # the table it reads is not evicted for its chunks
    chunks = launched.count("msm_count")
    assert chunks > 1 and "msm_scatter_table" in launched and resident.table is not None
    assert sum(allocated) / chunks <= room  # each chunk's buffers stay within the plan's reservation
    backend.runtime.launch, backend.runtime.empty = launch, empty
    blocker.release()
    backend.msm.graphs = True
    # A table is a cache: a reservation that needs its room evicts it while no MSM reads it, and the next MSM rebuilds it.
    other = backend.upload_bases(curve, group, host)  # a second tabled bases: eviction picks among several
    msm(backend, curve, group, other, limbs)
    other.free()
    # After an eviction the table waits table_backoff MSMs (doubled at each further eviction) before it is built again:
    # under steady pressure each rebuild would be evicted by the next proof.
    backend.msm.table_backoff = 2
    for evictions in (1, 2):
        evicting = backend.vram.reserve(backend.vram.available_bytes + backend.msm.idle_bytes(), "test: needs the table's room")
        assert resident.table is None and resident.nbytes == host.nbytes and not resident.graphs
        evicting.release()
        for _ in range(2 << (evictions - 1)):
            assert G.eq(msm(backend, curve, group, resident, limbs), expected) and resident.table is None
        assert G.eq(msm(backend, curve, group, resident, limbs), expected) and resident.table is not None
    backend.msm.window_tables = False
    assert G.eq(msm(backend, curve, group, resident, ints_to_limbs([1] * 48, 8)), G.msm(points, [1] * 48))
    resident.free()
    assert backend.vram.reserved_bytes == 0


def test_msm_many_queues_a_proofs_msms_and_reads_them_back_once(kind):
    """A proof's MSMs over resident bases (graphs, plain launches over window tables, and bases without a table) are
    queued on one stream and read back in one copy, each equal to its own MSM; with no room for their working set, or
    bases from the host, they run one by one with the checkpoint between them; a bad scalar is named by its index."""
    curve, rng = BN254, random.Random(8)
    backend = make_backend(kind, vram_budget=VramBudget(1 << 26), min_msm_chunk=8)
    sizes = [("g1", 40), ("g1", 40), ("g2", 40), ("g1", 37), ("g1", 64)]  # a proof's A, B1, B2, C and H
    hosts = [bases_array(curve, g, random_points(curve, g, n, rng)) for g, n in sizes]
    resident = [backend.upload_bases(curve, g, h) for (g, _), h in zip(sizes, hosts)]
    scalars = [ints_to_limbs([rng.randrange(curve.r) for _ in range(n)], 8) for _, n in sizes]
    want = [msm(backend, curve, g, h, s) for (g, _), h, s in zip(sizes, hosts, scalars)]
    reads, to_host = [], backend.runtime.to_host
    backend.runtime.to_host = lambda a: reads.append(a) or to_host(a)
    checkpoints = []

    def many(bases):
        reads.clear()
        return backend.msm_many(curve, [(g, b, s) for (g, _), b, s in zip(sizes, bases, scalars)], lambda: checkpoints.append(1))

    def same(got):
        return all(group_of(curve, g).eq(x, y) for (g, _), x, y in zip(sizes, got, want))

    assert same(many(resident)) and len(reads) == 1 and not checkpoints  # tables built, graphs captured
    assert all(b.table is not None and b.graphs for b in resident)
    held = backend.vram.reserved_bytes  # bases, their tables and idle graphs: the queued working set went back
    assert same(many(resident)) and len(reads) == 1 and backend.vram.reserved_bytes == held
    backend.msm.graphs = False  # each MSM launches its kernels, carved from one arena
    assert same(many(resident)) and len(reads) == 1 and backend.vram.reserved_bytes == held
    backend.msm.window_tables = False  # per-window buckets and Horner, queued alike
    assert same(many(resident)) and len(reads) == 1 and not checkpoints
    bad = [s.copy() for s in scalars]
    bad[3][5] = ints_to_limbs([curve.r], 8)[0]
    with pytest.raises(ScalarOutOfRangeError) as caught:
        backend.msm_many(curve, [(g, b, s) for (g, _), b, s in zip(sizes, resident, bad)])
    assert caught.value.index == 5
    # The queued working set is one MSM's (one arena, reused in stream order): only where not even that fits do they
    # run one by one, in chunks.
    for b in resident:
        b.drop_table()  # nothing idle for the budget to evict
    chunk = backend.msm.working_bytes(curve, "g2", 8, resident=True)
    blocker = backend.vram.reserve(backend.vram.available_bytes - chunk, "test: room for a chunk of one MSM")
    assert same(many(resident)) and len(reads) > len(sizes) and len(checkpoints) == len(sizes) - 1
    blocker.release()
    checkpoints.clear()
    assert same(many(hosts)) and len(reads) >= len(sizes) and len(checkpoints) == len(sizes) - 1
    backend.runtime.to_host = to_host
    for b in resident:
        b.free()
    assert backend.vram.reserved_bytes == 0


def test_idle_window_table_gives_way_to_an_msm_that_cannot_otherwise_run(kind):
    """A window table built in room that was spare then is a cache: an MSM whose smallest chunk does not fit beside it
    evicts it (resident bases stay) instead of failing, and the result is right."""
    curve, G = BN254, BN254.G1
    rng = random.Random(21)
    points = random_points(curve, "g1", 128, rng)
    scalars = [rng.randrange(curve.r) for _ in range(128)]
    backend = make_backend(kind, vram_budget=VramBudget(1 << 24), min_msm_chunk=8)
    backend.msm.graphs = False
    host = bases_array(curve, "g1", points)
    resident = backend.upload_bases(curve, "g1", host)
    assert G.eq(msm(backend, curve, "g1", resident, ints_to_limbs(scalars, 8)), G.msm(points, scalars))
    table = backend.msm.table_bytes(curve, "g1", 128)
    assert resident.table is not None and backend.msm.idle_bytes() == table
    smallest = backend.msm.working_bytes(curve, "g1", 8, buffers=2)
    assert smallest < table
    blocker = backend.vram.reserve(backend.vram.available_bytes - smallest // 2, "test: room for half a chunk, a table idle")
    assert G.eq(msm(backend, curve, "g1", host, ints_to_limbs(scalars, 8)), G.msm(points, scalars))
    assert resident.table is None and resident.nbytes == host.nbytes  # the table went; the bases stayed
    blocker.release()
    resident.free()
    assert backend.vram.reserved_bytes == 0


def test_upload_key_makes_every_msm_base_resident(kind):
    from conftest import corpus_dir
    from cuzk.formats.zkey import read_zkey

    zkey = read_zkey(corpus_dir("toy_multiplier") / "circuit.zkey")
    backend = make_backend(kind, vram_budget=VramBudget(1 << 26))
    resident = backend.upload_key(zkey)
    names = ("a", "b1", "b2", "c", "h")
    assert backend.vram.reserved_bytes == sum(getattr(zkey, name).nbytes for name in names)
    w = ints_to_limbs([3] * zkey.n_vars, 8)
    assert BN254.G1.eq(backend.msm_g1(BN254, resident.a, w), backend.msm_g1(BN254, zkey.a, w))
    assert resident.coeffs is zkey.coeffs and resident.n_vars == zkey.n_vars
    # The key's window tables, as sizing counts them (one owner: the MSM's table_bytes), are what its MSMs reserve.
    for name, group in KEY_BASES:
        bases = getattr(resident, name)
        msm(backend, BN254, group, bases, ints_to_limbs([3] * bases.n, 8))
    tables = sum(getattr(resident, name).table_reservation.nbytes for name in names)
    assert tables == tables_bytes(zkey, backend) > 0
    plan = proofs_in_flight("auto", backend, [zkey])
    assert plan.tables_bytes == tables  # they fit beside its proofs: part of the key's footprint
    tight = make_backend(kind, vram_budget=VramBudget(bases_bytes(zkey) + coefficient_bytes(zkey) + proof_vram_bytes(zkey, backend)))
    assert proofs_in_flight("auto", tight, [zkey]).tables_bytes == 0  # no room: a cache built when there is
    backend.free_key(resident)
    assert backend.vram.reserved_bytes == 0
    small = make_backend(kind, vram_budget=VramBudget(zkey.a.nbytes + 1))
    with pytest.raises(VramExhaustedError):
        small.upload_key(zkey)
    assert small.vram.reserved_bytes == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_msm_property_random_small(backend, data):
    curve = BN254
    n = data.draw(st.integers(1, 12))
    scalar = st.one_of(st.sampled_from([0, 1, 2, curve.r - 1, curve.r - 2, (1 << 253) - 1]), st.integers(0, curve.r - 1))
    scalars = data.draw(st.lists(scalar, min_size=n, max_size=n))
    ks = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    G = curve.G1
    points = [G.mul(G.generator, k) for k in ks]  # small multiples (0 = infinity), often equal
    got = backend.msm_g1(curve, bases_array(curve, "g1", points), ints_to_limbs(scalars, 8))
    assert G.eq(got, G.mul(G.generator, sum(k * s for k, s in zip(ks, scalars)) % curve.r))


# ------------------------------------------------------------------ GPU only: real sizes, device arrays
@pytest.mark.gpu
@pytest.mark.parametrize("curve", CURVES)
def test_gpu_ntt_reference_and_round_trip_at_real_sizes(gpu_backend, curve):
    rng = np.random.default_rng(1)
    log_n = 14
    a = [int(x) % curve.r for x in rng.integers(0, 2**62, size=1 << log_n)]
    rows = fr_rows(curve, a)
    assert fr_values(curve, gpu_backend.ntt(curve, rows)) == reference_ntt(curve, a, curve.fr_root_of_unity(log_n))
    for big in (20, 22):
        data = rng.integers(0, 2**32, size=(1 << big, 8), dtype=np.uint64).astype(np.uint32)
        data[:, 7] &= 0x0FFFFFFF  # below r on both curves
        assert np.array_equal(gpu_backend.intt(curve, gpu_backend.ntt(curve, data)), data)
    # The coset step at 2^20: coset_ntt(a, s) = ntt(a_i·s^i).
    shift, powers, p = 5, [], 1
    for _ in range(1 << 20):
        powers.append(p)
        p = p * 5 % curve.r
    data = data[: 1 << 20]
    scaled = gpu_backend.fr_mul(curve, data, fr_rows(curve, powers))
    assert np.array_equal(gpu_backend.coset_ntt(curve, data, shift), gpu_backend.ntt(curve, scaled))


@pytest.mark.gpu
@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", GROUPS)
def test_gpu_msm_closed_form_at_real_size(gpu_backend, curve, group):
    """Bases i·P (i = 1..n): the MSM must equal (Σ i·s_i)·P, checked at 2^15 points."""
    G = group_of(curve, group)
    n = 1 << 15
    points = multiples(G, G.generator, 1, n)
    rng = np.random.default_rng(2)
    limbs = rng.integers(0, 2**32, size=(n, 8), dtype=np.uint64).astype(np.uint32)
    limbs[:, 7] &= 0x0FFFFFFF
    limbs[: n // 4] = 0
    limbs[n // 4 : n // 2] = ints_to_limbs([1] * (n // 4), 8)
    scalars = limbs_to_ints(limbs)
    bases = bases_array(curve, group, points)
    expected = G.mul(G.generator, sum((i + 1) * s for i, s in enumerate(scalars)) % curve.r)
    assert G.eq(msm(gpu_backend, curve, group, bases, limbs), expected)
    resident = gpu_backend.upload_bases(curve, group, bases)
    try:
        assert G.eq(msm(gpu_backend, curve, group, resident, limbs), expected)
    finally:
        resident.free()


@pytest.mark.gpu
def test_gpu_device_arrays_stay_on_the_device(gpu_backend):
    import cupy

    curve = BN254
    rows = cupy.asarray(fr_rows(curve, list(range(1, 9))))
    out = gpu_backend.ntt(curve, rows)
    assert isinstance(out, cupy.ndarray)
    assert isinstance(gpu_backend.fr_mul(curve, out, out), cupy.ndarray)
    assert np.array_equal(gpu_backend.intt(curve, out).get(), rows.get())


@pytest.mark.gpu
def test_gpu_corpus_proofs_verify(corpus_circuit, gpu_backend, tmp_path):
    """Every corpus circuit proved on the GPU verifies (cuzk's verifier, and snarkjs where installed), from host bases
    and from a resident key, whose MSMs run over window tables (the daemon's path; snarkjs judges that proof)."""
    from conftest import snarkjs_verify
    from cuzk.formats.json_io import write_proof, write_public
    from cuzk.formats.wtns import read_wtns
    from cuzk.formats.zkey import read_zkey
    from cuzk.prover.groth16 import prove
    from cuzk.prover.verify import verify, vkey_from_zkey

    zkey, wtns = read_zkey(corpus_circuit / "circuit.zkey"), read_wtns(corpus_circuit / "witness.wtns")
    vkey = vkey_from_zkey(zkey)
    from_host = prove(gpu_backend, zkey, wtns)
    assert verify(vkey, from_host.public_signals, from_host)
    resident = gpu_backend.upload_key(zkey)
    try:
        proof = prove(gpu_backend, resident, wtns)
        assert resident.h.table is not None
    finally:
        gpu_backend.free_key(resident)
    assert verify(vkey, proof.public_signals, proof)
    write_proof(tmp_path / "proof.json", proof)
    write_public(tmp_path / "public.json", proof.public_signals)
    assert snarkjs_verify(corpus_circuit / "verification_key.json", tmp_path / "public.json", tmp_path / "proof.json")
