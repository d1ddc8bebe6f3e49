"""A proof admitted with device vectors: its host working set is the witness (and the CPU's a/b until uploaded),
and its device worker waits for its vectors' VRAM instead of copying them through the host.

On devices emulated by the CUDA backend's host runtime (as test_proofs_in_flight.py does).
"""

from __future__ import annotations

import json

import pytest

from conftest import snarkjs_verify
from cuzk.backends.cuda import CudaBackend, HostRuntime, VramBudget
from cuzk.engine import JobState
from cuzk.formats.json_io import write_vkey
from cuzk.formats.wtns import read_wtns
from cuzk.formats.zkey import read_zkey, read_zkey_header
from cuzk.prover.groth16 import prove_synthesized, synthesize as synthesize_witness
from cuzk.prover.sizing import (ABC_VECTORS, bases_bytes, device_vector_bytes,
                                holds_device_vectors, host_working_set, proof_vram_bytes, slack_bytes)
from cuzk.prover.verify import verify, vkey_from_zkey
from emulated_devices import emulated
from test_proofs_in_flight import GateRuntime, NoRoomForVectors, circuit, start_engine, wait_until  # noqa: F401 (circuit: a fixture)


def test_the_working_set_of_a_device_vector_job_is_the_documented_arithmetic(circuit):
    h = read_zkey_header(circuit[0])
    E, N, V = h.n8r, h.domain_size, h.n_vars
    slack = slack_bytes()
    cpu_synthesis = host_working_set(h, on_device=True, device_vectors=True)
    assert (cpu_synthesis.abc_bytes, cpu_synthesis.rest_bytes) == (2 * N * E, V * E + slack)
    assert cpu_synthesis.device_vectors and cpu_synthesis.to_dict()["device_vectors"]
    device_synthesis = host_working_set(h, on_device=True, device_synthesis=True, device_vectors=True)
    assert (device_synthesis.abc_bytes, device_synthesis.rest_bytes) == (0, V * E + slack)
    # Vectors copied through the host per operation: the a/b/c phase and the H scalars, as before.
    fallback = host_working_set(h, on_device=True)
    assert (fallback.abc_bytes, fallback.rest_bytes) == (ABC_VECTORS * N * E, V * E + N * E + slack)
    assert not fallback.device_vectors
    with pytest.raises(ValueError):
        host_working_set(h, on_device=False, device_vectors=True)


def test_admission_decides_device_vectors_from_every_devices_budget(circuit, tmp_path):
    h = read_zkey_header(circuit[0])
    roomy = emulated(0)
    need = bases_bytes(h) + proof_vram_bytes(h, roomy)
    tight = emulated(1, vram_bytes=need - 1)  # its whole budget cannot hold a proof's vectors beside the key
    assert holds_device_vectors(h, roomy) and not holds_device_vectors(h, tight)
    with start_engine(tmp_path / "one", circuit, [roomy]) as engine:
        expected = host_working_set(h, on_device=True, device_synthesis=True, device_vectors=True)
        assert engine.working_set("c") == expected
    with start_engine(tmp_path / "both", circuit, [emulated(0), tight]) as engine:
        assert engine.working_set("c") == host_working_set(h, on_device=True)  # one device cannot: today's fallback


class RecordingVram(VramBudget):
    """Records what is reserved, and counts the times a proof's vectors found no room."""

    def __init__(self, total_bytes: int):
        super().__init__(total_bytes)
        self.reserved: list[str] = []
        self.vectors_refused = 0

    def try_reserve(self, nbytes, what, evict=True, transient=False):
        reservation = super().try_reserve(nbytes, what, evict=evict, transient=transient)
        if reservation is None and what == "proof vectors":
            self.vectors_refused += 1
        return reservation

    def reserve(self, nbytes, what, **options):
        reservation = super().reserve(nbytes, what, **options)
        self.reserved.append(what)
        return reservation


def _second_proof_waits(engine, device, runtime, circuit):
    """Catch a first proof at its MSM (its vectors and the key held), take all the rest of the budget but less than
    one proof's vectors (``filler``: what another proof holds while it computes; idle MSM window tables, a cache,
    give way to it), and submit a second proof: returns
    (first, second, filler) once the second waits for its vectors' VRAM. Release the filler before opening the gate:
    the first proof's later MSMs need room too."""
    runtime.armed = True
    first = engine.submit("c", circuit[1].read_bytes())
    assert runtime.reached.wait(120)
    room = device.vram.available_bytes + device.msm.idle_bytes() - device_vector_bytes(read_zkey_header(circuit[0])) + 1  # idle window tables are evicted for it
    filler = device.vram.reserve(max(0, room), "another proof")
    second = engine.submit("c", circuit[1].read_bytes())
    wait_until(lambda: device.vram.vectors_refused >= 2 and engine.get(second).state is JobState.PROVING)
    return first, second, filler


def test_a_proof_waits_for_its_vectors_then_proves_when_another_releases(circuit, tmp_path):
    runtime = GateRuntime()
    device = CudaBackend(runtime=runtime, vram_budget=RecordingVram(256 << 20))
    with start_engine(tmp_path, circuit, [device], proofs_per_device=2) as engine:
        assert engine.working_set("c").device_vectors
        warm = engine.await_result(engine.submit("c", circuit[1].read_bytes()), timeout=300)
        assert warm.state is JobState.DONE, warm.error
        first, second, filler = _second_proof_waits(engine, device, runtime, circuit)
        filler.release()  # the other proof ends: the second gets its vectors
        runtime.opened.set()
        records = [engine.await_result(job, timeout=300) for job in (first, second)]
    assert [r.state for r in records] == [JobState.DONE] * 2, [r.error for r in records]
    # Each of the three proofs held its vectors in VRAM (the emulation's device arrays are numpy arrays, so its
    # operations' host-copy reservations cannot tell the paths apart).
    assert device.vram.reserved.count("proof vectors") == 3
    write_vkey(tmp_path / "vkey.json", vkey_from_zkey(read_zkey(circuit[0])))
    (tmp_path / "proof.json").write_text(json.dumps(records[1].proof))
    (tmp_path / "public.json").write_text(json.dumps(records[1].public_signals))
    assert snarkjs_verify(tmp_path / "vkey.json", tmp_path / "public.json", tmp_path / "proof.json")


def test_cancelling_a_proof_waiting_for_its_vectors_leaves_nothing_reserved(circuit, tmp_path):
    runtime = GateRuntime()
    device = CudaBackend(runtime=runtime, vram_budget=RecordingVram(256 << 20))
    with start_engine(tmp_path, circuit, [device], proofs_per_device=2) as engine:
        warm = engine.await_result(engine.submit("c", circuit[1].read_bytes()), timeout=300)
        assert warm.state is JobState.DONE, warm.error
        idle_vram = device.vram.reserved_bytes - device.msm.idle_bytes()  # the key's; idle tables and graphs are a cache
        first, second, filler = _second_proof_waits(engine, device, runtime, circuit)
        held_vram = device.vram.reserved_bytes  # the first proof's vectors and MSM and the filler, none of the second's
        assert engine.cancel(second)
        assert engine.await_result(second, timeout=300).state is JobState.CANCELLED
        assert device.vram.reserved_bytes == held_vram
        working = engine.budget.snapshot()["by_category"]["working"]["bytes"]
        assert working == engine.working_set("c").total_bytes  # the first proof's alone: the second's went back
        filler.release()
        runtime.opened.set()
        assert engine.await_result(first, timeout=300).state is JobState.DONE
        wait_until(lambda: engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0)
        assert device.vram.reserved_bytes - device.msm.idle_bytes() == idle_vram  # the filler evicted the cache


def test_a_key_whose_vectors_never_fit_keeps_the_fallback_and_the_larger_reservation(circuit, tmp_path):
    h = read_zkey_header(circuit[0])
    probe = emulated(0)
    budget = RecordingVram(bases_bytes(h) + proof_vram_bytes(h, probe) - 1)
    device = CudaBackend(runtime=HostRuntime(), vram_budget=budget)
    with start_engine(tmp_path, circuit, [device]) as engine:
        workset = engine.working_set("c")
        assert not workset.device_vectors and workset == host_working_set(h, on_device=True)
        record = engine.await_result(engine.submit("c", circuit[1].read_bytes()), timeout=300)
    assert record.state is JobState.DONE, record.error


@pytest.mark.parametrize("vectors_in_vram", [True, False])
def test_the_host_ab_halves_are_released_once_uploaded_or_after_the_ntts(circuit, vectors_in_vram):
    """Phase one of the host reservation goes back when the host's a/b/c are gone: once a and b are uploaded when the
    proof's vectors stay in VRAM, after the NTTs when each operation copies them through the host."""
    zkey = read_zkey(circuit[0])
    probe = emulated(0)  # skips without a host compiler
    backend = probe if vectors_in_vram else CudaBackend(runtime=HostRuntime(), vram_budget=NoRoomForVectors(256 << 20))
    events: list[str] = []
    intt = backend.intt
    backend.intt = lambda *args: (events.append("intt"), intt(*args))[1]
    vectors = backend.vram.reserve(device_vector_bytes(zkey), "proof vectors") if vectors_in_vram else None
    synthesis = synthesize_witness(zkey, read_wtns(circuit[1]))
    proof = prove_synthesized(backend, zkey, synthesis, on_abc_released=lambda: events.append("released"),
                              vectors=vectors)
    assert events == (["released"] + ["intt"] * 3 if vectors_in_vram else ["intt"] * 3 + ["released"])
    assert verify(vkey_from_zkey(zkey), proof.public_signals, proof)
    if vectors is not None:
        assert backend.vram.reserved_bytes > vectors.nbytes  # the caller's to release, with the NTT tables beside
        vectors.release()
