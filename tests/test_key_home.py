"""A key homed on the devices: read from disk through a staging ring straight into VRAM, no host copy.

Default tests run on devices emulated by the CUDA backend's host runtime (as test_device_vectors.py
does): the host sizing (a job refused on the host path fits on the device path), the load itself
(the same resident arrays as an upload from a host key, bad coefficients named before anything
stays reserved), eviction and reload from disk, and refusals before anything is read. The
``cgroup`` test reads a large section through the ring inside a real memory cgroup and reads the
kernel's own peak counter; the ``gpu`` tests do the same for a load into a real device's VRAM,
and prove across an eviction there. Also runnable as a script (what the cgroup tests run inside
the cgroup): ``python tests/test_key_home.py read|plain|device ...``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from cuzk.formats.errors import FormatError
from cuzk.formats.zkey import KEY_BASES, coeff_dtype, read_zkey, read_zkey_header
from cuzk.keys.device import load_from_disk
from cuzk.keys.host import KeyTier, drop_page_cache, footprint, read_chunk_bytes, section_spans
from cuzk.keys.stream import SectionReader, StagingRing, ring_bytes
from cuzk.memory.pinned import PageAlignedAllocator

MiB = 1 << 20
SLACK = 4 * MiB  # what the kernel may charge beyond the ring while reading: page tables, the interpreter's own small growth


class FreshCgroup:
    """Charges from now on, read from the kernel: the calling process moves itself into an empty memory cgroup (made
    by the test beside the one it started in), whose peak counter (v2 memory.peak, v1 memory.max_usage_in_bytes)
    therefore counts only what is charged after the move — what it had charged stays behind, on either version — so
    no counter needs resetting (v2 allows that only from Linux 6.12)."""

    def __init__(self, directory: str):
        self.directory = Path(directory)
        self.v1 = (self.directory / "memory.max_usage_in_bytes").exists()
        (self.directory / "cgroup.procs").write_text(str(os.getpid()))

    def usage(self) -> int:
        return int((self.directory / ("memory.usage_in_bytes" if self.v1 else "memory.current")).read_text())

    def peak(self) -> int:
        return int((self.directory / ("memory.max_usage_in_bytes" if self.v1 else "memory.peak")).read_text())


def _child_read(measure: str, path: str, offset: int, nbytes: int, chunk: int, direct: bool) -> dict:
    """Inside the cgroup: read ``nbytes`` at ``offset`` through a ring (or plain buffered reads, the control) and
    report what the kernel charged after the ring was allocated (in the fresh cgroup ``measure``)."""
    ring = StagingRing(PageAlignedAllocator(), chunk)
    total = 0
    with ring:
        counter = FreshCgroup(measure)
        baseline = counter.usage()
        if direct:
            with SectionReader(Path(path), ring) as reader:
                for piece in reader.chunks(offset, nbytes):
                    total += int(piece.array[-1]) + len(piece.array)
        else:
            with open(path, "rb", buffering=0) as f:
                f.seek(offset)
                view = memoryview(ring.slot(0))[:ring.chunk_bytes]
                while (n := f.readinto(view)) and total < nbytes:
                    total += n
        peak = counter.peak()
    return {"baseline": baseline, "peak": peak, "ring_bytes": ring.nbytes, "bytes_read": total}


def _uncached_file(path: Path, nbytes: int) -> Path:
    """A file of ``nbytes`` written and synced, its pages then dropped: reading it charges whoever reads it."""
    block = np.random.default_rng(7).integers(0, 256, 4 * MiB, dtype=np.uint8).tobytes()
    with open(path, "wb") as f:
        for _ in range(nbytes // len(block)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return path


@pytest.fixture
def cgroup(memory_cgroups):
    """Two memory cgroups side by side: the child starts in the first and moves into the second to measure."""
    return [memory_cgroups(4 << 30, "cuzk-test-keyhome-") for _ in range(2)]


def run_child(cgroups, *args) -> dict:
    start, measure = cgroups
    res = start.run([sys.executable, __file__, args[0], str(measure.directory), *map(str, args[1:])], timeout=300,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.cgroup
def test_reading_a_large_section_through_the_ring_charges_the_cgroup_for_the_ring_only(cgroup, tmp_path):
    path = _uncached_file(tmp_path / "big.bin", 256 * MiB)
    offset, nbytes = 12, 256 * MiB - 100  # a section starts anywhere a zkey puts it (4-byte aligned)
    ring = run_child(cgroup, "read", path, offset, nbytes, 8 * MiB)
    assert ring["bytes_read"] >= nbytes
    grew = ring["peak"] - ring["baseline"]
    assert grew <= SLACK, f"reading through the ring charged {grew / MiB:.1f} MiB beyond the ring"
    # The control: the same bytes read the ordinary way leave the file's pages charged (so the counter sees them).
    drop_page_cache(path)
    plain = run_child(cgroup, "plain", path, offset, nbytes, 8 * MiB)
    assert plain["peak"] - plain["baseline"] > nbytes // 2


@pytest.mark.parametrize("direct", [True, False], ids=["o_direct", "buffered"])
def test_the_reader_gives_a_sections_bytes_in_whole_records_from_any_offset(tmp_path, monkeypatch, direct):
    if not direct:  # as on a filesystem that refuses O_DIRECT (tmpfs)
        monkeypatch.delattr(os, "O_DIRECT", raising=False)
    data = np.random.default_rng(3).integers(0, 256, 3 * 4096 + 777, dtype=np.uint8)
    path = tmp_path / "f.bin"
    path.write_bytes(data.tobytes())
    with StagingRing(PageAlignedAllocator(), 4096) as ring, SectionReader(path, ring) as reader:
        assert reader.direct is (direct and hasattr(os, "O_DIRECT"))
        for offset, nbytes, record in ((0, len(data), 4), (12, 2 * 4096 + 300, 44), (4100, 8000, 60)):
            starts, got = [], []
            for piece in reader.chunks(offset, nbytes, record):  # a chunk's bytes live until its slot comes round again
                starts.append(piece.start)
                got.append(piece.array.copy())
            assert all(len(g) % record == 0 for g in got[:-1]) and len(got) > 1
            assert starts == list(np.cumsum([0] + [len(g) for g in got[:-1]]))
            assert np.array_equal(np.concatenate(got), data[offset : offset + nbytes])
            del piece
        assert np.array_equal(reader.read(5, 10), data[5:15])


# ---- the device path on emulated devices -------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_circuit(tmp_path_factory):
    """A BN254 circuit whose key (≈0.7 MB) is many times a small staging ring: (zkey, wtns)."""
    from cuzk.circuits.synthetic import synthesize, write_synthetic
    from cuzk.curves import BN254
    from cuzk.prover.setup import setup

    d = tmp_path_factory.mktemp("keyhome")
    r1cs, wtns = write_synthetic(d, synthesize(BN254, 1000, n_public=2, seed=5))
    setup(r1cs, d / "circuit.zkey")
    return d / "circuit.zkey", wtns


CHUNK = 16 << 10  # the engine's load_chunk_bytes in these tests: a ring of 2 × (16 + 8) KiB


def _engine(tmp_path, circuit, backends, budget_bytes, **config):
    from cuzk.engine import Engine, EngineConfig
    from cuzk.memory.budget import MemoryBudget

    return Engine(EngineConfig(data_dir=tmp_path / "data", reconcile=False, measure_peaks=False, load_chunk_bytes=CHUNK,
                               keys={"c": str(circuit[0])}, **config),
                  budget=MemoryBudget(budget_bytes), backends=backends).start()


def _prove(engine, circuit):
    return engine.await_result(engine.submit("c", circuit[1].read_bytes()), timeout=600)


def test_a_job_refused_on_the_host_path_fits_on_the_device_path(big_circuit, tmp_path):
    from cuzk.engine import JobState
    from emulated_devices import emulated

    header = read_zkey_header(big_circuit[0])
    device_key = footprint(header, KeyTier.DEVICE, chunk_bytes=CHUNK)
    host_key = footprint(header, KeyTier.HOT)
    assert device_key == ring_bytes(read_chunk_bytes(header, CHUNK)) + 4096 and device_key * 8 < host_key
    with _engine(tmp_path / "probe", big_circuit, [emulated(0)], 1 << 30) as engine:
        workset = engine.working_set("c")  # the same on both paths: the devices hold the vectors and synthesize
        assert workset.device_synthesis and workset.device_vectors
    budget = device_key + workset.total_bytes + (host_key - device_key) // 2
    with _engine(tmp_path / "host", big_circuit, [emulated(0)], budget, key_home="host") as engine:
        refused = _prove(engine, big_circuit)
    assert refused.state is JobState.FAILED and "for its key plus" in refused.error and "never run here" in refused.error
    with _engine(tmp_path / "device", big_circuit, [emulated(0)], budget) as engine:
        done = _prove(engine, big_circuit)
        assert done.state is JobState.DONE, done.error
        (status,) = engine.keys.status()
        # The key holds its IC points; its ring is the one reservation every device-homed key's ring shares.
        assert status["tier"] == "device" and status["reserved_bytes"] == 4096
        assert engine.budget.snapshot()["by_category"]["key"]["bytes"] == device_key
        assert engine.budget.snapshot()["peak_reserved_bytes"] <= budget


def test_device_homed_keys_share_one_ring_reservation_given_back_with_the_last_of_them(big_circuit, tmp_path):
    """Rings hold memory only while a load reads, and the rings of device-homed keys take turns: however many keys
    are homed, the host reserves the largest ring once, and nothing once none is homed."""
    from emulated_devices import emulated

    header = read_zkey_header(big_circuit[0])
    ring, ic = ring_bytes(read_chunk_bytes(header, CHUNK)), 4096
    with _engine(tmp_path, big_circuit, [emulated(0)], 1 << 30) as engine:
        for name in ("d", "e"):
            engine.register_key(name, big_circuit[0])
        for name in ("c", "d", "e"):
            assert engine.preload(name) == "device"
        assert engine.budget.snapshot()["by_category"]["key"]["bytes"] == ring + 3 * ic
        engine.keys.evict("c")
        engine.keys.evict("d")
        assert engine.budget.snapshot()["by_category"]["key"]["bytes"] == ring + ic
        engine.keys.evict("e")
        assert engine.budget.snapshot()["by_category"]["key"]["bytes"] == 0


def test_load_from_disk_makes_the_arrays_an_upload_of_the_host_key_makes(big_circuit):
    from emulated_devices import emulated

    backend = emulated(0)
    header = read_zkey_header(big_circuit[0])
    zkey = read_zkey(big_circuit[0])
    loaded = load_from_disk(big_circuit[0], header, backend, StagingRing(PageAlignedAllocator(), 4096))
    want = backend.upload_key(zkey)
    want_coeffs = backend.upload_coefficients(zkey.curve, zkey.coeffs, zkey.n_vars, zkey.domain_size)
    for name, _ in KEY_BASES:
        assert np.array_equal(getattr(loaded, name).points, getattr(want, name).points), name
    for field in ("row_starts", "signals", "values", "long_rows"):
        assert np.array_equal(getattr(loaded.coeffs, field), getattr(want_coeffs, field)), field
    assert loaded.ic is None
    backend.free_key(loaded)
    backend.free_key(want)
    want_coeffs.free()
    assert backend.vram.reserved_bytes == 0


def test_a_bad_coefficient_is_named_and_nothing_stays_resident(big_circuit, tmp_path):
    from emulated_devices import emulated

    header = read_zkey_header(big_circuit[0])
    bad = tmp_path / "bad.zkey"
    data = bytearray(big_circuit[0].read_bytes())
    offset, _ = section_spans(header)["coeffs"]
    entry = coeff_dtype(header.n8r).itemsize
    data[offset + 500 * entry + 8 : offset + 500 * entry + 12] = (header.n_vars + 3).to_bytes(4, "little")  # signal
    bad.write_bytes(bytes(data))
    backend = emulated(0)
    with pytest.raises(FormatError, match=r"entry #500: signal"):
        load_from_disk(bad, header, backend, StagingRing(PageAlignedAllocator(), 4096))
    assert backend.vram.reserved_bytes == 0


def test_eviction_from_vram_reloads_from_disk_and_the_proof_verifies(big_circuit, tmp_path):
    from cuzk.engine import JobState
    from emulated_devices import emulated

    backend = emulated(0)
    with _engine(tmp_path, big_circuit, [backend], 1 << 30) as engine:
        assert _prove(engine, big_circuit).state is JobState.DONE
        tier = engine.keys.add_device(backend)
        assert tier.uploads == 1 and tier.resident_names() == ["c"]
        # Pressure: another user wants all the VRAM; the idle key (and its bases' MSM window tables, a cache) is
        # evicted for it, then the room is given back.
        filler = backend.vram.reserve(backend.vram.available_bytes + tier.idle_bytes() + backend.msm.idle_bytes(),
                                      "another tenant")
        assert tier.resident_names() == [] and tier.evictions == 1
        filler.release()
        again = _prove(engine, big_circuit)  # verified by the engine before it is DONE
        assert again.state is JobState.DONE, again.error
        assert tier.uploads == 2 and engine.keys.status()[0]["tier"] == "device"


def test_preload_reads_a_device_homed_key_onto_each_device_with_room(big_circuit, tmp_path):
    from cuzk.prover.sizing import bases_bytes
    from emulated_devices import emulated

    roomy = emulated(0)
    with _engine(tmp_path, big_circuit, [roomy, emulated(1)], 1 << 30) as engine:
        busy = engine.keys.add_device(engine.backends[1])
        filler = engine.backends[1].vram.reserve(engine.backends[1].vram.available_bytes - bases_bytes(
            read_zkey_header(big_circuit[0])), "another tenant")
        assert engine.preload("c") == "device"
        assert engine.keys.add_device(roomy).resident_names() == ["c"] and busy.resident_names() == []
        filler.release()


def test_a_key_larger_than_vram_and_host_together_is_refused_before_anything_is_read(big_circuit, tmp_path):
    from cuzk.engine import JobState
    from cuzk.prover.sizing import bases_bytes
    from emulated_devices import emulated

    header = read_zkey_header(big_circuit[0])
    small = emulated(0, vram_bytes=bases_bytes(header))  # holds the bases, not a proof beside them
    with _engine(tmp_path / "auto", big_circuit, [small], footprint(header, KeyTier.HOT)) as engine:
        record = _prove(engine, big_circuit)
        (status,) = engine.keys.status()
    assert record.state is JobState.FAILED
    assert "never run here" in record.error and "cannot be homed in VRAM" in record.error and "device 0 needs" in record.error
    assert status["loads"] == 0 and status["tier"] == "cold" and small.vram.reserved_bytes == 0
    with _engine(tmp_path / "device", big_circuit, [emulated(0, vram_bytes=bases_bytes(header))], 1 << 30,
                 key_home="device") as engine:
        record = _prove(engine, big_circuit)
        assert engine.keys.status()[0]["loads"] == 0
    assert record.state is JobState.FAILED and 'key_home = "device"' in record.error and "device 0 needs" in record.error


def test_key_home_device_needs_a_device_backend(tmp_path, big_circuit):
    from cuzk.backends.cpu import CpuBackend

    with pytest.raises(ValueError, match="needs a device backend"):
        _engine(tmp_path, big_circuit, [CpuBackend()], 1 << 30, key_home="device")


# ---- on a real GPU (the coordinator runs these there) --------------------------------------------------------

def _child_device(measure: str, path: str, chunk: int) -> dict:
    """Inside the cgroup: load a key from disk into a real device's VRAM; the charge's peak growth over the moment
    before (CUDA initialized and the layout's kernels warmed up on a first load)."""
    from cuzk.backends.cuda import CudaBackend
    from cuzk.memory.pinned import default_allocator

    backend = CudaBackend(0)
    header = read_zkey_header(path)
    ring = StagingRing(default_allocator(), read_chunk_bytes(header, chunk))
    backend.free_key(load_from_disk(Path(path), header, backend, ring))  # CUDA context, kernels, CuPy's pools
    drop_page_cache(Path(path))
    counter = FreshCgroup(measure)
    baseline = counter.usage()
    key = load_from_disk(Path(path), header, backend, ring)
    peak = counter.peak()
    backend.free_key(key)
    return {"baseline": baseline, "peak": peak, "ring_bytes": ring.nbytes,
            "key_bytes": sum(n for name, n in header.section_nbytes().items() if name != "ic")}


@pytest.mark.gpu
@pytest.mark.cgroup
def test_loading_a_key_into_vram_charges_the_cgroup_no_more_than_its_staging_ring(cgroup, tmp_path):
    from cuzk.backends.cuda import available

    if not available():
        pytest.skip("no CUDA device")
    from cuzk.circuits.synthetic import synthesize, write_synthetic
    from cuzk.curves import BN254
    from cuzk.prover.setup import setup

    r1cs, _ = write_synthetic(tmp_path, synthesize(BN254, (1 << 16) - 8, n_public=2, seed=9))
    zkey = tmp_path / "circuit.zkey"
    setup(r1cs, zkey)
    drop_page_cache(zkey)
    got = run_child(cgroup, "device", zkey, 1 * MiB)
    grew = got["peak"] - got["baseline"]
    assert got["key_bytes"] > 10 * got["ring_bytes"]
    assert grew <= got["ring_bytes"] + SLACK, (f"loading a {got['key_bytes'] / MiB:.0f} MiB key charged "
                                               f"{grew / MiB:.1f} MiB, its ring is {got['ring_bytes'] / MiB:.0f} MiB")


@pytest.mark.gpu
def test_on_a_gpu_a_job_refused_on_the_host_path_proves_from_vram_across_an_eviction(big_circuit, tmp_path):
    from cuzk.backends.cuda import CudaBackend, available
    from cuzk.engine import JobState

    if not available():
        pytest.skip("no CUDA device")
    header_key = footprint(read_zkey_header(big_circuit[0]), KeyTier.HOT)
    backend = CudaBackend(0)
    with _engine(tmp_path / "probe", big_circuit, [backend], 1 << 30, key_home="host") as engine:
        workset = engine.working_set("c")
    budget = workset.total_bytes + header_key // 2
    with _engine(tmp_path / "host", big_circuit, [CudaBackend(0)], budget, key_home="host") as engine:
        assert _prove(engine, big_circuit).state is JobState.FAILED
    backend = CudaBackend(0)
    with _engine(tmp_path / "device", big_circuit, [backend], budget) as engine:
        assert _prove(engine, big_circuit).state is JobState.DONE
        tier = engine.keys.add_device(backend)
        filler = backend.vram.reserve(backend.vram.available_bytes + tier.idle_bytes() + backend.msm.idle_bytes(),
                                      "another tenant")  # the idle key and its bases' window tables give way
        assert tier.resident_names() == [] and tier.evictions == 1
        filler.release()
        again = _prove(engine, big_circuit)
        assert again.state is JobState.DONE, again.error
        assert tier.uploads == 2


if __name__ == "__main__":
    mode, measure, path, *rest = sys.argv[1:]
    if mode == "device":
        result = _child_device(measure, path, int(rest[0]))
    else:
        offset, nbytes, chunk = map(int, rest)
        result = _child_read(measure, path, offset, nbytes, chunk, direct=mode == "read")
    print(json.dumps(result))


def test_the_warm_up_homes_its_key_on_each_device_and_gives_the_vram_back(monkeypatch):
    """A device's warm-up also proves from the key homed in its VRAM, as the first real job's key load does (CuPy's own
    kernels compile on that path), then frees it."""
    import cuzk.keys.device as device_keys
    from cuzk.engine.warmup import warm_up
    from emulated_devices import emulated

    backend = emulated(0)
    homed = []
    monkeypatch.setattr(device_keys, "load_from_disk", lambda *args: homed.append(args[0]) or load_from_disk(*args))
    assert warm_up([backend], ["bn128"]) > 0  # the warm-up's proofs verify, or it raises
    cached = backend.vram.available_bytes  # what stays is what the device caches for a domain (its NTT tables)
    warm_up([backend], ["bn128"])
    assert len(homed) == 2 and backend.vram.available_bytes == cached  # the homed key is freed each time
