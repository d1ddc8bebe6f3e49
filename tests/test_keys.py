"""The key manager: exact budgeted loads, tiers, reference counts, LRU eviction under pressure."""

from __future__ import annotations

import mmap
import os
import threading
import time

import numpy as np
import pytest

from conftest import CORPUS_CIRCUITS, corpus_dir
from cuzk.backends.cpu import CpuBackend
from cuzk.backends.cpu.msm import TabledBases
from cuzk.backends.cpu.synth import row_order_bytes
from cuzk.circuits.synthetic import synthesize, write_synthetic
from cuzk.curves import BLS12_381, BN254
from cuzk.formats.errors import FormatError
from cuzk.formats.wtns import read_wtns
from cuzk.formats.zkey import coeff_dtype, read_zkey, write_zkey
from cuzk.keys.host import MSM_BASES, msm_table_bytes, read_chunk_bytes
from cuzk.keys.stream import ring_bytes
from cuzk.keys.manager import (
    KeyInUseError,
    KeyLoadCancelled,
    KeyManager,
    KeyManagerError,
    KeyTier,
    UnknownKeyError,
    footprint,
    load_peak,
)
from cuzk.keys.manager import MSM_TABLE_AUTO_MAX_POINTS, MSM_TABLE_BUDGET_SHARE
from cuzk.memory.budget import BudgetExceededError, MemoryBudget
from cuzk.prover.groth16 import prove
from cuzk.prover.setup import setup
from cuzk.prover.verify import prepare_zkey, verify

ARRAYS = ("ic", "coeffs", "a", "b1", "b2", "c", "h")


def make_zkey(path, *, n_vars=64, n_public=1, domain_size=64, curve=BN254, seed=0):
    """A well-formed key with random (not meaningful) point bytes: enough to test loading, not proving."""
    rng = np.random.default_rng(seed)
    lq = curve.Fq.limbs32
    n_coeffs = 2 * domain_size
    coeffs = np.zeros(n_coeffs, dtype=coeff_dtype(curve.Fr.n8))
    coeffs["matrix"] = np.arange(n_coeffs) % 2
    coeffs["constraint"] = rng.integers(0, domain_size, n_coeffs)
    coeffs["signal"] = rng.integers(0, n_vars, n_coeffs)
    coeffs["value"][:, 0] = rng.integers(1, 1 << 32, n_coeffs, dtype=np.uint64)

    def pts(n, g2=False):
        return rng.integers(0, 1 << 32, (n, 2, 2, lq) if g2 else (n, 2, lq), dtype=np.uint64).astype(np.uint32)

    g1, g2 = curve.G1.generator, curve.G2.generator
    write_zkey(path, curve, n_vars=n_vars, n_public=n_public, domain_size=domain_size,
               alpha1=g1, beta1=g1, beta2=g2, gamma2=g2, delta1=g1, delta2=g2,
               ic=pts(n_public + 1), coeffs=coeffs, a=pts(n_vars), b1=pts(n_vars), b2=pts(n_vars, True),
               c=pts(n_vars - n_public - 1), h=pts(domain_size))  # fmt: skip
    return path


@pytest.fixture
def keys(tmp_path):
    """Three keys of different sizes on two curves."""
    return {
        "small": make_zkey(tmp_path / "small.zkey", n_vars=32, domain_size=32, seed=1),
        "mid": make_zkey(tmp_path / "mid.zkey", n_vars=200, domain_size=256, seed=2),
        "bls": make_zkey(tmp_path / "bls.zkey", n_vars=100, domain_size=128, curve=BLS12_381, seed=3),
    }


def assert_same_key(lease_zkey, path):
    ref = read_zkey(path)
    for name in ARRAYS:
        got, want = getattr(lease_zkey, name), getattr(ref, name)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want), name
        assert not got.flags.writeable
    assert lease_zkey.header == ref.header


@pytest.mark.parametrize("chunk", [4096, 1 << 20])
def test_hot_load_streams_the_exact_arrays_with_an_exact_peak(keys, chunk, caplog):
    caplog.set_level("WARNING", logger="cuzk.memory.pinned")
    for name, path in keys.items():
        km = KeyManager(MemoryBudget(1 << 30), chunk_bytes=chunk, idle_evict_s=0)
        header = km.register(name, path)
        with km.acquire(name) as lease:
            assert lease.tier is KeyTier.HOT
            assert_same_key(lease.zkey, path)
            snap = km.budget.snapshot()
            # Reserved before reading: footprint + the staging ring; after: exactly the footprint.
            assert snap["peak_reserved_bytes"] == load_peak(header, KeyTier.HOT, chunk)
            assert snap["by_category"]["key"]["bytes"] == footprint(header, KeyTier.HOT)
        km.close()
        assert km.budget.reserved_bytes == 0
    # The ring is unmapped as its load ends: no slot view outlives it (its bytes would stay resident, unreserved).
    assert not [r for r in caplog.records if "still referenced" in r.getMessage()]


def test_load_fits_a_budget_of_exactly_its_peak_and_not_one_byte_less(keys):
    chunk = 8192
    header = KeyManager(MemoryBudget(0)).register("mid", keys["mid"])
    peak = load_peak(header, KeyTier.HOT, chunk)
    assert peak == footprint(header, KeyTier.HOT) + ring_bytes(read_chunk_bytes(header, chunk))  # the hot buffer and the staging ring

    exact = KeyManager(MemoryBudget(peak), chunk_bytes=chunk)
    exact.register("mid", keys["mid"])
    exact.preload("mid")
    assert exact.budget.snapshot()["peak_reserved_bytes"] == peak

    short = KeyManager(MemoryBudget(peak - 1), chunk_bytes=chunk)
    short.register("mid", keys["mid"])
    with pytest.raises(BudgetExceededError):
        short.preload("mid")
    assert short.budget.reserved_bytes == 0 and short.status()[0]["tier"] == "cold"


def test_warm_tier_maps_and_reserves_the_full_size_then_upgrades_to_hot(keys):
    km = KeyManager(MemoryBudget(1 << 30), idle_evict_s=0)
    header = km.register("mid", keys["mid"])
    assert km.preload("mid", KeyTier.WARM) is KeyTier.WARM
    # The mapped sections, and the page-rounded (matrix, row) order synthesis derives once per loaded key.
    order = -(-row_order_bytes(header.n_coeffs) // mmap.PAGESIZE) * mmap.PAGESIZE
    assert km.budget.reserved_bytes == footprint(header, KeyTier.WARM) == sum(header.section_nbytes().values()) + order
    with km.acquire("mid", KeyTier.WARM) as lease:
        assert_same_key(lease.zkey, keys["mid"])
    # Asking for hot while nobody uses the warm key upgrades it; the warm mapping is dropped first.
    assert km.preload("mid", KeyTier.HOT) is KeyTier.HOT
    assert km.budget.reserved_bytes == footprint(header, KeyTier.HOT)
    assert km.budget.snapshot()["peak_reserved_bytes"] == max(
        footprint(header, KeyTier.WARM), load_peak(header, KeyTier.HOT, km.chunk_bytes))
    # A hot key serves a warm request as it is.
    with km.acquire("mid", KeyTier.WARM) as lease:
        assert lease.tier is KeyTier.HOT


def test_lru_eviction_under_pressure_spares_the_recent_and_the_busy(tmp_path):
    paths = {n: make_zkey(tmp_path / f"{n}.zkey", n_vars=128, domain_size=128, seed=i) for i, n in enumerate("abcd")}
    probe = KeyManager(MemoryBudget(0))
    size = footprint(probe.register("a", paths["a"]), KeyTier.HOT)
    peak = load_peak(probe.header("a"), KeyTier.HOT, 1 << 20)
    # Room for two keys at rest plus one load transient: a third key needs an eviction.
    km = KeyManager(MemoryBudget(2 * size + (peak - size)), idle_evict_s=0)
    for n, p in paths.items():
        km.register(n, p)
    km.preload("a")
    km.preload("b")
    with km.acquire("a"):
        pass  # "a" is now the more recently used
    km.preload("c")  # evicts "b", the least recently used
    tiers = {k["name"]: k["tier"] for k in km.status()}
    assert tiers == {"a": "hot", "b": "cold", "c": "hot", "d": "cold"}

    busy = km.acquire("c")  # "c" in use: only "a" may go, though "a" is more recent
    km.preload("d")
    tiers = {k["name"]: k["tier"] for k in km.status()}
    assert tiers == {"a": "cold", "b": "cold", "c": "hot", "d": "hot"}
    assert km.budget.snapshot()["peak_reserved_bytes"] <= km.budget.total_bytes
    busy.release()
    assert [k["evictions"] for k in km.status()] == [1, 1, 0, 0]


def test_a_load_waits_for_a_busy_key_and_proceeds_once_it_is_released(tmp_path):
    pa, pb = make_zkey(tmp_path / "a.zkey", seed=1), make_zkey(tmp_path / "b.zkey", seed=2)
    probe = KeyManager(MemoryBudget(0))
    peak = load_peak(probe.register("a", pa), KeyTier.HOT, 1 << 20)
    km = KeyManager(MemoryBudget(peak), idle_evict_s=0)  # one key at a time
    km.register("a", pa)
    km.register("b", pb)
    lease = km.acquire("a")
    got = []
    t = threading.Thread(target=lambda: got.append(km.acquire("b")))
    t.start()
    deadline = time.monotonic() + 10
    while km.budget.snapshot()["waiters"] == 0:  # "b" queued behind the busy key
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert not got
    lease.release()  # idle now: the release hands the room to the waiter
    t.join(timeout=10)
    assert got and got[0].tier is KeyTier.HOT and got[0].name == "b"
    assert_same_key(got[0].zkey, pb)
    got[0].release()


def test_idle_time_delays_eviction_while_work_in_flight_will_make_the_room(tmp_path):
    pa, pb = make_zkey(tmp_path / "a.zkey", seed=1), make_zkey(tmp_path / "b.zkey", seed=2)
    probe = KeyManager(MemoryBudget(0))
    peak = load_peak(probe.register("a", pa), KeyTier.HOT, 1 << 20)
    budget = MemoryBudget(2 * peak)
    km = KeyManager(budget, idle_evict_s=0.3)
    km.register("a", pa)
    km.register("b", pb)
    km.preload("a")
    released_at = time.monotonic()
    # A job in flight: "b" fits only once "a" goes or the job ends, and the job alone would make the room.
    job = budget.acquire(peak, "working", label="job in flight")
    assert budget.available_bytes < peak
    assert km.evict_idle(1) == 0  # idle for less than 0.3 s and the job will give back enough: kept
    done = threading.Event()
    t = threading.Thread(target=lambda: (km.preload("b"), done.set()))
    t.start()
    while not done.is_set():
        km.maintain()  # what the engine's housekeeping loop does
        done.wait(0.01)
    t.join()
    assert time.monotonic() - released_at >= 0.3
    assert {k["name"]: k["tier"] for k in km.status()} == {"a": "cold", "b": "hot"}
    job.release()


def test_idle_key_goes_at_once_when_nothing_in_flight_would_make_the_room(tmp_path):
    """The post-OOM stall: an hour of idle time must not keep a waiter waiting when waiting cannot help."""
    pa, pb = make_zkey(tmp_path / "a.zkey", seed=1), make_zkey(tmp_path / "b.zkey", seed=2)
    probe = KeyManager(MemoryBudget(0))
    peak = load_peak(probe.register("a", pa), KeyTier.HOT, 1 << 20)
    budget = MemoryBudget(peak)
    km = KeyManager(budget, idle_evict_s=3600)
    km.register("a", pa)
    km.register("b", pb)
    with km.acquire("a"):  # in use: a waiter for "b" waits, and gets "a" the moment its lease ends
        t = threading.Thread(target=km.preload, args=("b",))
        t.start()
        deadline = time.monotonic() + 10
        while budget.snapshot()["waiters"] == 0:  # "b" queued behind the busy key
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert km.status()[0]["tier"] == "hot"
    t.join(10)  # no maintain() in between: the release itself hands the key over
    assert not t.is_alive()
    assert {k["name"]: k["tier"] for k in km.status()} == {"a": "cold", "b": "hot"}


def test_cancel_while_waiting_for_room(tmp_path):
    pa, pb = make_zkey(tmp_path / "a.zkey", seed=1), make_zkey(tmp_path / "b.zkey", seed=2)
    probe = KeyManager(MemoryBudget(0))
    peak = load_peak(probe.register("a", pa), KeyTier.HOT, 1 << 20)
    km = KeyManager(MemoryBudget(peak), idle_evict_s=0)
    km.register("a", pa)
    km.register("b", pb)
    lease = km.acquire("a")
    stop = threading.Event()
    errors = []

    def load_b():
        try:
            km.acquire("b", cancelled=stop.is_set)
        except KeyLoadCancelled as exc:
            errors.append(exc)

    t = threading.Thread(target=load_b)
    t.start()
    stop.set()
    t.join(timeout=10)
    assert errors and "cancelled" in str(errors[0])
    assert km.status()[1]["tier"] == "cold" and not km.status()[1]["loading"]
    lease.release()
    km.preload("b")  # the key is usable afterwards


def test_concurrent_acquires_load_once(keys):
    km = KeyManager(MemoryBudget(1 << 30))
    km.register("mid", keys["mid"])
    leases = []
    lock = threading.Lock()

    def use():
        lease = km.acquire("mid")
        with lock:
            leases.append(lease)

    threads = [threading.Thread(target=use) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    status = km.status()[0]
    assert status["loads"] == 1 and status["in_use"] == 6
    with pytest.raises(KeyInUseError):
        km.evict("mid")
    for lease in leases:
        lease.release()
        lease.release()  # idempotent
    assert km.status()[0]["in_use"] == 0
    assert km.evict("mid") == footprint(km.header("mid"), KeyTier.HOT)
    assert km.budget.reserved_bytes == 0


def test_a_stray_reference_keeps_the_memory_reserved_until_it_dies(keys):
    km = KeyManager(MemoryBudget(1 << 30), idle_evict_s=0)
    km.register("small", keys["small"])
    with km.acquire("small") as lease:
        stray = lease.zkey.h[1:]  # a view someone kept past the lease
    km.evict("small")
    assert km.budget.reserved_bytes > 0  # the bytes still exist, so they stay in the budget
    del stray
    km.maintain()
    assert km.budget.reserved_bytes == 0


def test_truncated_after_registration_fails_cleanly(tmp_path):
    path = make_zkey(tmp_path / "k.zkey", seed=4)
    km = KeyManager(MemoryBudget(1 << 30))
    km.register("k", path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)
    with pytest.raises(KeyManagerError, match="file ended"):
        km.acquire("k")
    assert km.budget.reserved_bytes == 0
    assert km.status()[0]["tier"] == "cold"


def test_registration_errors(tmp_path, keys):
    km = KeyManager(MemoryBudget(1 << 30))
    with pytest.raises(UnknownKeyError, match="known: none registered"):
        km.acquire("nope")
    (tmp_path / "bad.zkey").write_bytes(b"not a zkey at all")
    with pytest.raises(FormatError, match="bad.zkey"):
        km.register("bad", tmp_path / "bad.zkey")
    km.register("small", keys["small"])
    km.register("small", keys["small"])  # same path again: a no-op
    with km.acquire("small"):
        with pytest.raises(KeyInUseError):
            km.register("small", keys["mid"])
        with pytest.raises(KeyInUseError):
            km.unregister("small")
    km.register("small", keys["mid"])  # idle: re-pointed, old memory freed
    assert km.header("small").n_vars == 200 and km.budget.reserved_bytes == 0
    km.unregister("small")
    assert km.names() == []
    with pytest.raises(ValueError):
        KeyManager(MemoryBudget(1), chunk_bytes=10)


@pytest.mark.skipif(not CORPUS_CIRCUITS, reason="no ../shared/corpus")
@pytest.mark.parametrize("name", ["poseidon_chain_16", "chain4000_bls12381"])
def test_corpus_keys_load_hot_identically(name):
    path = corpus_dir(name) / "circuit.zkey"
    km = KeyManager(MemoryBudget(1 << 30), chunk_bytes=256 << 10)
    header = km.register(name, path)
    with km.acquire(name) as lease:
        assert_same_key(lease.zkey, path)
    assert km.budget.snapshot()["peak_reserved_bytes"] == load_peak(header, KeyTier.HOT, 256 << 10)


# MSM window tables (the CPU backend's hot keys) -------------------------------------------------


@pytest.fixture(scope="module")
def proving_keys(tmp_path_factory):
    """Real keys (setup of the project's synthetic circuits) with their witnesses, on both curves."""
    out = {}
    for curve in (BN254, BLS12_381):
        d = tmp_path_factory.mktemp(curve.name)
        r1cs, wtns = write_synthetic(d, synthesize(curve, 300, n_public=2, seed=5))
        setup(r1cs, d / "circuit.zkey")
        out[curve.name] = (d / "circuit.zkey", wtns)
    return out


def table_nbytes(zkey) -> int:
    return sum(getattr(zkey, name).window_table.rows.nbytes for name in MSM_BASES)


@pytest.mark.parametrize("curve", [BN254, BLS12_381], ids=lambda c: c.name)
def test_msm_tables_are_built_at_load_counted_exactly_and_prove_correctly(proving_keys, curve):
    zkey_path, wtns = proving_keys[curve.name]
    km = KeyManager(MemoryBudget(1 << 30), chunk_bytes=1 << 20, idle_evict_s=0, msm_tables=True)
    header = km.register("k", zkey_path)
    with km.acquire("k") as lease:
        zkey = lease.zkey
        assert all(isinstance(getattr(zkey, name), TabledBases) for name in MSM_BASES)
        assert_same_key(zkey, zkey_path)  # the bases themselves are untouched
        assert table_nbytes(zkey) == msm_table_bytes(header) > 0
        snap = km.budget.snapshot()
        assert snap["by_category"]["key"]["bytes"] == footprint(header, KeyTier.HOT, msm_tables=True)
        assert footprint(header, KeyTier.HOT, msm_tables=True) == footprint(header, KeyTier.HOT) + msm_table_bytes(header)
        assert snap["peak_reserved_bytes"] == load_peak(header, KeyTier.HOT, 1 << 20, msm_tables=True)
        assert km.footprint("k") == footprint(header, KeyTier.HOT, msm_tables=True)
        status = km.status()[0]
        assert status["msm_table_bytes"] == msm_table_bytes(header) and status["hot_bytes"] == km.footprint("k")
        witness = read_wtns(wtns)
        proof = prove(CpuBackend(), zkey, witness)
        assert verify(prepare_zkey(zkey, single_proof=True), proof.public_signals, proof)
        del zkey
    km.close()
    assert km.budget.reserved_bytes == 0


def test_msm_tables_policy(proving_keys):
    """"auto" builds tables only where they take at most MSM_TABLE_BUDGET_SHARE of the budget and the MSMs are at most
    MSM_TABLE_AUTO_MAX_POINTS points; a warm key has none."""
    zkey_path, _ = proving_keys[BN254.name]
    header = KeyManager(MemoryBudget(0)).register("k", zkey_path)
    need = msm_table_bytes(header)
    least = round(need / MSM_TABLE_BUDGET_SHARE)  # the smallest budget "auto" builds them in
    for policy, total, tabled in (("auto", least, True), ("auto", least - 1, False), (True, 1, True), (False, 1 << 40, False)):
        km = KeyManager(MemoryBudget(total), idle_evict_s=0, msm_tables=policy)
        km.register("k", zkey_path)
        assert km.footprint("k") == footprint(header, KeyTier.HOT, msm_tables=tabled), (policy, total)
    big = make_zkey(zkey_path.parent / "big.zkey", n_vars=MSM_TABLE_AUTO_MAX_POINTS + 1, domain_size=64)
    auto = KeyManager(MemoryBudget(1 << 40), msm_tables="auto")
    header = auto.register("big", big)  # MSMs beyond the size where tables pay
    assert auto.footprint("big") == footprint(header, KeyTier.HOT)
    km = KeyManager(MemoryBudget(1 << 30), idle_evict_s=0, msm_tables=True, default_tier=KeyTier.WARM)
    km.register("k", zkey_path)
    with km.acquire("k") as lease:
        assert not isinstance(lease.zkey.a, TabledBases)
    with pytest.raises(ValueError, match="msm_tables"):
        KeyManager(MemoryBudget(1), msm_tables="yes")
