"""The engine with ``device_processes``: each proving device owned by a worker process. Proofs snarkjs accepts, a
worker killed mid-proof (its job proved once, by the restarted worker), cancel while a job is in a worker, status; a
device error in a worker on devices emulated on the host (``emulated_devices``): the device's self-test, then the
engine's ``DeviceErrorPolicy`` as in-process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import REPO, snarkjs_verify, snarkjs_verify_all, wait_for
from emulated_devices import (MiB, EmulatedDevices, FailingRuntime, OnceFailingRuntime, gpu_with_a_transient_fault,
                              need_host_compiler)
from cuzk.engine import Engine, EngineConfig, JobState, Priority
from cuzk.formats.json_io import write_vkey
from cuzk.formats.zkey import read_zkey, read_zkey_header
from cuzk.keys.host import KeyTier, footprint
from cuzk.memory.budget import MemoryBudget
from cuzk.memory.process import PeakProbe
from cuzk.prover.sizing import CALIBRATION_HEADROOM
from cuzk.prover.verify import vkey_from_zkey
from cuzk.server.metrics import DaemonMetrics
from test_engine import (SLOW, circuits, make_engine, synthesize_public, unsatisfied_witness,  # noqa: F401 — fixtures reused
                         write_result)


def _child(engine) -> dict:
    (child,) = engine.status()["device_processes"]
    return child


class KillOnProving:
    """A listener that SIGKILLs the worker process the moment it reports the job's proving half begun there."""

    def __init__(self, engine):
        self.engine = engine
        self.killed: list[int] = []

    def __call__(self, job_id: str, state: JobState) -> None:
        if state is JobState.PROVING and not self.killed:
            pid = _child(self.engine)["pid"]
            self.killed.append(pid)
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("name", ["small", "bls"])
def test_proofs_from_the_worker_process_verify_with_snarkjs(make_engine, circuits, tmp_path, name):
    c = circuits[name]
    engine = make_engine(keys=(name,), device_processes=True)
    child = _child(engine)
    assert child["pid"] != os.getpid() and child["alive"] and child["restarts"] == 0
    jobs = [engine.submit(name, c.witness, Priority.HIGH) for _ in range(3)]
    vkey = tmp_path / "vkey.json"
    write_vkey(vkey, vkey_from_zkey(read_zkey(c.zkey)))
    records = [engine.await_result(job_id, timeout=SLOW) for job_id in jobs]
    assert all(r.state is JobState.DONE for r in records), [r.error for r in records]
    assert all(r.public_signals == [str(v) for v in synthesize_public(c)] for r in records)
    assert snarkjs_verify_all(vkey, [write_result(r, tmp_path, str(i))[::-1] for i, r in enumerate(records)])
    assert engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0
    assert engine.status()["config"]["backend"] == ["cpu"]


def test_a_cpu_workers_key_copy_is_reserved_and_its_jobs_peaks_calibrate_the_circuit(make_engine, circuits):
    """With the CPU in a worker process: the key's lease in the engine reserves the worker's hot copy beside the
    verifier's part; the jobs' peaks, which only the worker's memory shows, are measured from its high-water mark and
    calibrate the circuit's reservation into [1, CALIBRATION_HEADROOM]× the peak; when the key goes cold in the engine
    the worker frees its copy, and the next job loads it again (a window with that load is not measured)."""
    if not PeakProbe().available:
        pytest.skip("no /proc/self/clear_refs here: peaks cannot be measured")
    engine = make_engine(keys=("large",), device_processes=True, key_idle_evict_s=3600)
    c = circuits["large"]
    header = read_zkey_header(c.zkey)
    for _ in range(3):  # one at a time: the first is never measured (the worker loads its key, the JIT warms up)
        record = engine.await_result(engine.submit("large", c.witness), timeout=SLOW)
        assert record.state is JobState.DONE, record.error
    (key,) = engine.status()["keys"]
    assert key["reserved_bytes"] >= footprint(header, KeyTier.HOT), key
    peak = engine.status()["peaks"]["large"]["cpu"]
    reserved = engine.working_set("large").total_bytes
    assert 0 < peak <= reserved <= CALIBRATION_HEADROOM * peak, (peak, reserved)
    loads = _child(engine)["key_loads"]
    assert loads == 1
    engine.keys.evict("large")
    assert engine.budget.snapshot()["by_category"]["key"]["bytes"] == 0
    record = engine.await_result(engine.submit("large", c.witness), timeout=SLOW)
    assert record.state is JobState.DONE, record.error
    assert _child(engine)["key_loads"] == 2  # the worker had dropped its copy with the engine's reservation
    assert engine.status()["peaks"]["large"]["cpu"] == peak  # the job with the load measured nothing


def test_a_worker_killed_mid_proof_is_restarted_and_the_job_proved_once(make_engine, circuits, tmp_path):
    c = circuits["small"]
    engine = make_engine(device_processes=True)
    killer = KillOnProving(engine)
    engine.add_listener(killer)
    answers: list[str] = []
    engine.add_listener(lambda job_id, state: answers.append(job_id) if state is JobState.DONE else None)
    job_id = engine.submit("small", c.witness)
    record = engine.await_result(job_id, timeout=SLOW)
    assert record.state is JobState.DONE, record.error
    assert killer.killed, "the worker process was never seen with the job"
    child = _child(engine)
    assert child["restarts"] == 1 and child["pid"] != killer.killed[0] and child["last_exit"] == "killed by SIGKILL"
    assert answers == [job_id]  # answered once
    assert record.attempts == 2  # started in the killed worker, then proved by the restarted one
    assert [r.job_id for r in engine.list_jobs(states=[JobState.DONE])] == [job_id]
    vkey = tmp_path / "vkey.json"
    write_vkey(vkey, vkey_from_zkey(read_zkey(c.zkey)))
    assert snarkjs_verify(vkey, *reversed(write_result(record, tmp_path)))
    assert engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0


def test_a_job_whose_worker_dies_each_time_is_failed_after_max_attempts(make_engine, circuits):
    engine = make_engine(device_processes=True, max_attempts=2)
    kills: list[int] = []

    def kill_every_time(job_id: str, state: JobState) -> None:
        if state is JobState.PROVING:
            kills.append(_child(engine)["pid"])
            os.kill(kills[-1], signal.SIGKILL)
    engine.add_listener(kill_every_time)
    record = engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW)
    assert record.state is JobState.FAILED and len(kills) == 2
    assert "abandoned" in record.error and "worker process" in record.error and "max_attempts = 2" in record.error
    assert engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0


def test_cancel_while_in_the_worker_process_frees_its_reservation(make_engine, circuits):
    engine = make_engine(device_processes=True)
    proving = threading.Event()
    cancelled: list[bool] = []

    def cancel_on_proving(job_id: str, state: JobState) -> None:
        if state is JobState.PROVING and not proving.is_set():
            proving.set()
            assert engine.budget.snapshot()["by_category"]["working"]["bytes"] > 0
            cancelled.append(engine.cancel(job_id))
    engine.add_listener(cancel_on_proving)
    record = engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW)
    assert cancelled == [True]
    assert record.state is JobState.CANCELLED, record.error
    assert engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0
    assert _child(engine)["restarts"] == 0 and _child(engine)["jobs"] == []
    # The worker process carries on.
    assert engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW).state is JobState.DONE


def test_a_request_error_in_the_worker_process_fails_the_job_with_its_message(make_engine, circuits, tmp_path):
    c = circuits["small"]
    engine = make_engine(keys=(), device_processes=True)
    engine.register_key("small", c.zkey, c.r1cs)
    record = engine.await_result(engine.submit("small", unsatisfied_witness(c, tmp_path)), timeout=SLOW)
    assert record.state is JobState.FAILED and "constraint" in record.error and "internal" not in record.error
    assert _child(engine)["restarts"] == 0 and engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0
    assert engine.await_result(engine.submit("small", c.witness), timeout=SLOW).state is JobState.DONE
    # The worker process parses the r1cs per job (sized with the job's working set): the parent's key holds none.
    (key,) = engine.status()["keys"]
    assert key["r1cs"] == str(c.r1cs.resolve()) and key["r1cs_bytes"] == 0


def test_stop_joins_the_worker_processes(make_engine, circuits):
    engine = make_engine(device_processes=True)
    pid = _child(engine)["pid"]
    assert engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW).state is JobState.DONE
    engine.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _gone(pid: int) -> bool:
    """Exited (absent, or a zombie nobody reaped yet: it runs no more)."""
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def test_a_worker_process_exits_when_its_engine_dies(tmp_path):
    code = textwrap.dedent(f"""
        import threading
        from cuzk.engine import Engine, EngineConfig
        from cuzk.memory.budget import MemoryBudget
        if __name__ == "__main__":
            engine = Engine(EngineConfig(data_dir={str(tmp_path / "data")!r}, backend="cpu", reconcile=False,
                                         device_processes=True), budget=MemoryBudget(1 << 30))
            print(engine.status()["device_processes"][0]["pid"], flush=True)
            threading.Event().wait()
    """)
    engine = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        worker = int(engine.stdout.readline())
    finally:
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait()
    wait_for(lambda: _gone(worker), 60, "the worker process to exit after its engine")


# ---------------------------------------------------------------- device errors, on devices emulated on the host
def emulated_engine(tmp_path, circuits, runtimes: dict, devices: list[int], vram_bytes: int = 256 * MiB,
                    key: str = "small", **config) -> Engine:
    """An engine whose worker processes prove on emulated devices ``devices`` (``runtimes``: ordinal → a failing
    runtime class; a VRAM budget of ``vram_bytes`` each), one proof in flight each unless ``config`` says otherwise,
    with circuit ``key``."""
    need_host_compiler()
    config = EngineConfig(data_dir=tmp_path / "data", reconcile=False, measure_peaks=False, key_idle_evict_s=0,
                          device_processes=True, devices=devices, keys={key: str(circuits[key].zkey)},
                          **{"proofs_per_device": 1, **config})
    return Engine(config, budget=MemoryBudget(1 << 30), process_backend=EmulatedDevices(runtimes, vram_bytes)).start()


def test_a_gpu_worker_process_proves_a_key_it_does_not_home_from_a_host_copy_the_engine_reserves(circuits, tmp_path):
    """``key_home`` applies in a GPU's worker process as in-process: with "host" (as with "auto" for a key whose bases
    and coefficients the device cannot hold beside a proof) the key is proved from a hot copy in the process, its
    bases and coefficients uploaded from it where they fit; the copy is reserved with the key's lease in the engine
    and dropped when the key goes cold there."""
    c = circuits["large"]
    header = read_zkey_header(c.zkey)
    with emulated_engine(tmp_path, circuits, {}, [0], key="large", key_home="host") as engine:
        record = engine.await_result(engine.submit("large", c.witness), timeout=SLOW)
        assert record.state is JobState.DONE, record.error
        (key,) = engine.status()["keys"]
        assert key["reserved_bytes"] >= footprint(header, KeyTier.HOT), key
        (device,) = engine.status()["devices"]
        assert device["keys"]["large"]["coefficients"]  # uploaded from the host copy
        engine.keys.evict("large")
        assert engine.budget.snapshot()["by_category"]["key"]["bytes"] == 0
        record = engine.await_result(engine.submit("large", c.witness), timeout=SLOW)
        assert record.state is JobState.DONE, record.error
        assert process_of(engine, 0)["key_loads"] == 2  # the process had dropped its copy with the engine's reservation


def lanes_of(engine, device: int) -> list[dict]:
    return [w for w in engine.status()["workers"] if w["kind"] == "proving" and w["device"] == device]


def process_of(engine, device: int) -> dict:
    (child,) = [p for p in engine.status()["device_processes"] if p["device"] == device]
    return child


def record_states(engine) -> dict[str, list[JobState]]:
    history: dict[str, list[JobState]] = {}
    engine.add_listener(lambda job_id, state: history.setdefault(job_id, []).append(state))
    return history


def test_a_device_error_in_a_worker_process_self_tests_and_requeues_the_job(circuits, tmp_path):
    """A transient fault: the process's device passes its self-test, keeps proving (no restart), and the job goes back
    to the queue and is proved once."""
    with emulated_engine(tmp_path, circuits, {0: OnceFailingRuntime}, [0]) as engine:
        history = record_states(engine)
        job_id = engine.submit("small", circuits["small"].witness)
        record = engine.await_result(job_id, timeout=SLOW)
        lanes, child = lanes_of(engine, 0), process_of(engine, 0)
        status = engine.status()
    assert record.state is JobState.DONE, record.error
    assert history[job_id].count(JobState.DONE) == 1 and JobState.QUEUED in history[job_id][1:]  # requeued, answered once
    (erred,) = [w for w in lanes if w["device_errors"]]
    assert erred["device_errors"] == 1 and all(w["healthy"] for w in lanes)
    assert "unspecified launch failure" in erred["error"] and "self-test passed" in erred["error"]
    assert sum(w["jobs_done"] for w in lanes) == 1
    assert child["alive"] and child["restarts"] == 0 and child["out_of_service"] is None
    # The process's VRAM tier, as it reports it, in status and /metrics as in-process.
    (device,) = status["devices"]
    assert device["device"] == 0 and device["vram_total_bytes"] == 256 * MiB and "small" in device["keys"]
    assert [k["resident_devices"] for k in status["keys"]] == [[0]]
    assert 'cuzk_vram_resident_keys_bytes{device="0"}' in DaemonMetrics(lambda: status).text()


def test_a_worker_process_whose_device_fails_its_self_test_is_stopped_and_its_jobs_proved_elsewhere(circuits, tmp_path):
    """K = 2 proofs in flight per process: every job device 0's process held fails there, goes back to the queue and is
    proved once by device 1; device 0's process is stopped once its lanes have ended their jobs, and never restarted."""
    with emulated_engine(tmp_path, circuits, {0: FailingRuntime}, [0, 1], proofs_per_device=2) as engine:
        history = record_states(engine)
        records = []
        for _ in range(5):  # bursts, until device 0's process has taken jobs (its lanes wait beside device 1's)
            jobs = [engine.submit("small", circuits["small"].witness) for _ in range(8)]
            records += [engine.await_result(job_id, timeout=SLOW) for job_id in jobs]
            if not all(w["healthy"] for w in lanes_of(engine, 0)):
                break
        wait_for(lambda: not process_of(engine, 0)["alive"], SLOW, "device 0's worker process to be stopped")
        down, up = lanes_of(engine, 0), lanes_of(engine, 1)
        failed, healthy = process_of(engine, 0), process_of(engine, 1)
    assert all(r.state is JobState.DONE for r in records), [r.error for r in records]
    assert all(states.count(JobState.DONE) == 1 for states in history.values())  # each answered once
    assert down and not any(w["healthy"] for w in down) and sum(w["jobs_done"] for w in down) == 0
    assert all("self-test failed: CudaBackendError: emulated device fault" in w["error"] for w in down)
    assert all(w["error"].startswith("device out of service") for w in down if not w["device_errors"])
    assert failed["restarts"] == 0 and "self-test failed" in failed["out_of_service"]  # stopped, never restarted
    assert all(w["healthy"] for w in up) and sum(w["jobs_done"] for w in up) == len(records)  # device 1 proved them all
    assert healthy["alive"] and healthy["restarts"] == 0 and healthy["out_of_service"] is None
    requeued = [states for states in history.values() if JobState.QUEUED in states[states.index(JobState.PROVING):]]
    assert len(requeued) == sum(w["device_errors"] for w in down) >= 1  # the jobs device 0 failed, each once


def test_a_job_fails_clearly_when_the_only_worker_processs_device_fails_its_self_test(circuits, tmp_path):
    with emulated_engine(tmp_path, circuits, {0: FailingRuntime}, [0]) as engine:
        record = engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW)
        wait_for(lambda: not process_of(engine, 0)["alive"], SLOW, "the worker process to be stopped")
        child, lanes = process_of(engine, 0), lanes_of(engine, 0)
    assert record.state is JobState.FAILED
    assert "no healthy device is left" in record.error and "device 0: CudaBackendError: emulated device fault" in record.error
    assert "self-test failed" in record.error and "internal" not in record.error
    assert child["restarts"] == 0 and child["out_of_service"] and child["jobs"] == []  # no restart loop
    assert not any(w["healthy"] for w in lanes)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["large", "bls"])
def test_gpu_worker_killed_mid_proof_is_restarted_and_its_jobs_proved_once(make_engine, circuits, tmp_path, name):
    """On GPU 0: K proofs in flight in its worker process, which is SIGKILLed as it takes the first; every job is proved
    once (snarkjs accepts each proof), by the restarted worker where it was in the killed one."""
    from cuzk.backends.cuda import available

    if not available():
        pytest.skip("no CuPy or no CUDA device")
    c = circuits[name]
    engine = make_engine(keys=(name,), backend="cuda", devices=[0], device_processes=True, budget=8 << 30)
    proofs = _child(engine)["proofs_per_device"]
    assert _child(engine)["backend"] == "cuda" and proofs >= 1
    killer = KillOnProving(engine)
    engine.add_listener(killer)
    answers: list[str] = []
    engine.add_listener(lambda job_id, state: answers.append(job_id) if state is JobState.DONE else None)
    jobs = [engine.submit(name, c.witness) for _ in range(proofs + 1)]
    vkey = tmp_path / "vkey.json"
    write_vkey(vkey, vkey_from_zkey(read_zkey(c.zkey)))
    records = [engine.await_result(job_id, timeout=SLOW) for job_id in jobs]
    assert all(r.state is JobState.DONE for r in records), [r.error for r in records]
    assert killer.killed and _child(engine)["restarts"] == 1
    assert sorted(answers) == sorted(jobs)  # each answered once
    assert sorted(r.job_id for r in engine.list_jobs(states=[JobState.DONE])) == sorted(jobs)
    assert snarkjs_verify_all(vkey, [write_result(r, tmp_path, str(i))[::-1] for i, r in enumerate(records)])


@pytest.mark.gpu
def test_gpu_engines_put_each_device_in_a_worker_process_by_default_and_cpu_engines_do_not(make_engine, circuits, tmp_path):
    """device_processes = "auto" (the default): a worker process for GPU 0; the CPU backend proves in the engine's own."""
    from cuzk.backends.cuda import available

    if not available():
        pytest.skip("no CuPy or no CUDA device")
    on_gpu = make_engine(keys=("small",), backend="cuda", devices=[0], budget=8 << 30)
    assert on_gpu.device_processes and _child(on_gpu)["backend"] == "cuda"
    record = on_gpu.await_result(on_gpu.submit("small", circuits["small"].witness), timeout=SLOW)
    assert record.state is JobState.DONE, record.error
    on_gpu.stop()
    on_cpu = make_engine(keys=("small",), backend="cpu", data_dir=tmp_path / "cpu")
    assert not on_cpu.device_processes and on_cpu.status()["device_processes"] is None


@pytest.mark.gpu
def test_gpu_a_cuda_error_in_the_worker_process_self_tests_the_gpu_and_the_job_is_proved_once(circuits, tmp_path):
    """On GPU 0, its first NTT launch failing (injected): the worker process self-tests the GPU, which passes; the job
    goes back to the queue and is proved once, by the same process (snarkjs accepts the proof)."""
    from cuzk.backends.cuda import available

    if not available():
        pytest.skip("no CuPy or no CUDA device")
    c = circuits["large"]
    config = EngineConfig(data_dir=tmp_path / "data", reconcile=False, measure_peaks=False, device_processes=True,
                          devices=[0], keys={"large": str(c.zkey)})
    with Engine(config, budget=MemoryBudget(8 << 30), process_backend=gpu_with_a_transient_fault).start() as engine:
        history = record_states(engine)
        job_id = engine.submit("large", c.witness)
        record = engine.await_result(job_id, timeout=SLOW)
        lanes, child, devices = lanes_of(engine, 0), process_of(engine, 0), engine.status()["devices"]
    assert record.state is JobState.DONE, record.error
    assert history[job_id].count(JobState.DONE) == 1 and JobState.QUEUED in history[job_id][1:]
    (erred,) = [w for w in lanes if w["device_errors"]]
    assert "injected transient fault" in erred["error"] and "self-test passed" in erred["error"]
    assert [d["device"] for d in devices] == [0] and "large" in devices[0]["keys"]  # the process's VRAM tier
    assert all(w["healthy"] for w in lanes) and child["backend"] == "cuda"
    assert child["alive"] and child["restarts"] == 0 and child["out_of_service"] is None
    vkey = tmp_path / "vkey.json"
    write_vkey(vkey, vkey_from_zkey(read_zkey(c.zkey)))
    assert snarkjs_verify(vkey, *reversed(write_result(record, tmp_path)))


@pytest.mark.gpu
def test_gpu_worker_process_with_key_home_host_proves_from_a_reserved_host_copy(make_engine, circuits, tmp_path):
    """On GPU 0 with ``key_home = "host"``: its worker process proves from a hot copy, reserved in the engine, the
    key's bases and coefficients uploaded from it (status shows them resident); snarkjs accepts the proof."""
    from cuzk.backends.cuda import available

    if not available():
        pytest.skip("no CuPy or no CUDA device")
    c = circuits["large"]
    engine = make_engine(keys=("large",), backend="cuda", devices=[0], device_processes=True, key_home="host",
                         budget=8 << 30)
    record = engine.await_result(engine.submit("large", c.witness), timeout=SLOW)
    assert record.state is JobState.DONE, record.error
    (key,) = engine.status()["keys"]
    assert key["reserved_bytes"] >= footprint(read_zkey_header(c.zkey), KeyTier.HOT), key
    (device,) = engine.status()["devices"]
    assert device["device"] == 0 and device["keys"]["large"]["coefficients"]
    vkey = tmp_path / "vkey.json"
    write_vkey(vkey, vkey_from_zkey(read_zkey(c.zkey)))
    assert snarkjs_verify(vkey, *reversed(write_result(record, tmp_path)))
