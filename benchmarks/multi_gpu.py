"""Proofs per second on 1 GPU and on 2 (or more) GPUs, and the gain of keeping a key's bases in VRAM.

    PYTHONPATH=src python3 benchmarks/multi_gpu.py [--log-n 20] [--proofs 24] [--gpus 1,2]

One synthetic BN254 circuit of 2^log_n - 8 constraints (made with ``circuits.synthetic`` and
``prover.setup`` once, cached in --dir) and its witness. Three measurements:

1. residency (one GPU): the proving half (NTTs, MSMs, blinding) of one proof with the key's
   bases uploaded for every MSM (host key in page-locked memory, as the hot tier keeps it)
   versus resident in VRAM (uploaded once). Median of 3, after a warm-up.
2. devices only: for each GPU count, one thread per device proving pre-synthesized jobs with
   resident keys, as the engine's device workers do: proofs/s and the ratio to 1 GPU.
3. engine end to end: the daemon's engine (``devices = [0..k-1]``, CPU synthesis workers,
   self-verification off) proving --proofs jobs submitted at once: proofs/s and the ratio.
   The CPU's synthesis feeds every device, so this ratio is capped by the host's cores.
   With --device-processes, each count runs again with a worker process per GPU
   (``device_processes = true``) and its ratio to the in-process engine is printed.

With --timeline the devices-only run also reports how often no lane waits for the device (all on the host)
and the GPU's busy fraction (NVML), to tell a host that feeds the device too slowly from a device that is full.

Every proof of the engine runs is counted only if DONE; one per run is checked with cuzk's
verifier. Prints a summary table at the end; --out writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cuzk.backends.cuda import CudaBackend, cupy_device_count
from cuzk.circuits.synthetic import synthesize as make_circuit, write_synthetic
from cuzk.curves import BN254
from cuzk.engine import Engine, EngineConfig, JobState
from cuzk.formats.wtns import read_wtns
from cuzk.formats.zkey import read_zkey
from cuzk.keys.manager import KeyManager
from cuzk.memory.budget import MemoryBudget
from cuzk.memory.pinned import PinnedPool
from cuzk.prover.groth16 import prove_synthesized, synthesize
from cuzk.prover.verify import verify, vkey_from_zkey


def circuit(directory: Path, log_n: int) -> tuple[Path, Path]:
    """(zkey, wtns) of the benchmark circuit, made once per size."""
    d = directory / f"synthetic_2^{log_n}"
    zkey, wtns = d / "circuit.zkey", d / "witness.wtns"
    if not zkey.exists():
        from cuzk.prover.setup import setup

        t = time.perf_counter()
        r1cs, wtns = write_synthetic(d, make_circuit(BN254, (1 << log_n) - 8, n_public=1, seed=log_n))
        setup(r1cs, zkey.with_suffix(".tmp"))
        os.replace(zkey.with_suffix(".tmp"), zkey)
        print(f"made the 2^{log_n} circuit and its key in {time.perf_counter() - t:.1f} s", flush=True)
    return zkey, wtns


def residency_gain(zkey_path: Path, wtns_path: Path) -> dict:
    """Proving half with bases uploaded per MSM (pinned hot key) versus resident."""
    manager = KeyManager(MemoryBudget(64 << 30))
    manager.register("k", zkey_path)
    lease = manager.acquire("k")
    witness = read_wtns(wtns_path)
    backend = CudaBackend(0)
    device_zkey = backend.upload_key(lease.zkey)

    def run(key) -> float:
        synthesis = synthesize(lease.zkey, witness)
        backend.runtime.synchronize()
        t = time.perf_counter()
        prove_synthesized(backend, key, synthesis)
        return (time.perf_counter() - t) * 1e3

    out = {}
    for label, key in (("uploaded_per_msm", lease.zkey), ("resident", device_zkey)):
        run(key)  # warm-up: module compile, twiddles, staging buffers
        out[f"{label}_ms"] = statistics.median(run(key) for _ in range(3))
    out["residency_gain"] = out["uploaded_per_msm_ms"] / out["resident_ms"]
    backend.free_key(device_zkey)
    del device_zkey  # it shares the host key's other arrays: drop it before the key's buffer is freed
    lease.release()
    manager.close()
    return out


def devices_only(zkey_path: Path, wtns_path: Path, gpus: int, proofs: int, lanes: int = 1, timeline: bool = False,
                 device_synthesis: bool = False) -> dict:
    """``lanes`` threads per device, each in a lane of its own (as the engine's K device workers), proving
    pre-synthesized jobs against resident bases: the devices' rate with no engine around them. ``timeline``: also
    each lane's waits for the device and GPU 0's busy fraction (``LaneTimeline``). ``device_synthesis``: fed as the
    engine feeds them — the key's coefficients resident, A·w and B·w on the device, the witness's upload staged through
    a pinned pool — instead of uploading CPU-synthesized A·w, B·w and w from pageable memory."""
    zkey = read_zkey(zkey_path)
    witness = read_wtns(wtns_path)
    backends = [CudaBackend(d) for d in range(gpus)]
    keys = [b.upload_key(zkey) for b in backends]
    if device_synthesis:
        staging = PinnedPool(MemoryBudget(8 << 30))
        for i, b in enumerate(backends):
            b.attach_staging(staging)
            keys[i] = dataclasses.replace(keys[i], coeffs=b.upload_coefficients(zkey.curve, zkey.coeffs, zkey.n_vars, zkey.domain_size))
    for b, k in zip(backends, keys):  # warm-up
        prove_synthesized(b, k, synthesize(zkey, witness, defer_ab=device_synthesis))
    todo = [synthesize(zkey, witness, defer_ab=device_synthesis) for _ in range(proofs)]
    lock = threading.Lock()
    done = [0] * gpus
    recorder = LaneTimeline([b.runtime for b in backends]) if timeline else None

    def worker(i: int) -> None:
        lane = backends[i].new_lane()
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    synthesis = todo.pop()
                t0 = time.perf_counter()
                with lane:
                    prove_synthesized(backends[i], keys[i], synthesis)
                if recorder is not None:
                    recorder.proof(t0, time.perf_counter())
                done[i] += 1
        finally:
            lane.close()

    busy = gpu_busy(0) if timeline else None
    t = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(gpus) for _ in range(lanes)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stop = time.perf_counter()
    seconds = stop - t
    for b, k in zip(backends, keys):
        b.free_key(k)
    return {"gpus": gpus, "lanes": lanes, "proofs": proofs, "seconds": round(seconds, 3), "proofs_per_s": proofs / seconds,
            "per_device": done, "device_synthesis": device_synthesis, **({"timeline": {**recorder.summary(t, stop), "gpu0_busy": _fraction(busy.read().utilization_percent)}} if timeline else {})}


class LaneTimeline:
    """When each proving thread waited for its device (a read-back, ``to_host``, or a stream sync, as a lane's end
    waits for its proof's work) and when each of its proofs ran. A lane's stream holds queued work at least while its
    thread waits; while no thread waits, every lane is on the host (launching, reading back, blinding) and the
    device runs only what they queued before: if the device is idle about that often, the host feeds it too slowly."""

    def __init__(self, runtimes):
        self.waits: dict[int, list[tuple[float, float]]] = {}
        self.proofs: dict[int, list[tuple[float, float]]] = {}
        for rt in runtimes:  # the instances' own methods: the backend's parts share its runtime object
            for name in ("to_host", "synchronize_stream"):
                setattr(rt, name, self._timed(getattr(rt, name)))

    def _timed(self, wait):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return wait(*args, **kwargs)
            finally:
                self.waits.setdefault(threading.get_ident(), []).append((t, time.perf_counter()))
        return timed

    def proof(self, start: float, stop: float) -> None:
        self.proofs.setdefault(threading.get_ident(), []).append((start, stop))

    def summary(self, start: float, stop: float) -> dict:
        wall = stop - start
        edges = sorted([(a, 1) for lane in self.waits.values() for a, _ in lane] + [(b, -1) for lane in self.waits.values() for _, b in lane])
        waiting, since, none_waiting = 0, start, 0.0
        for at, step in edges:
            at = min(max(at, start), stop)
            if waiting == 0:
                none_waiting += at - since
            waiting += step
            since = at
        none_waiting += (stop - since) if waiting == 0 else 0.0
        proofs = [p for lane in self.proofs.values() for p in lane]
        waits = [w for lane in self.waits.values() for w in lane if w[0] >= start]
        proof_s = sum(b - a for a, b in proofs)
        wait_s = sum(b - a for a, b in waits)
        return {"no_lane_waiting": round(none_waiting / wall, 3), "proofs": len(proofs),
                "proof_ms": round(1e3 * proof_s / max(1, len(proofs)), 2),
                "waits_per_proof": round(len(waits) / max(1, len(proofs)), 2),
                "wait_ms_per_proof": round(1e3 * wait_s / max(1, len(proofs)), 2),
                "host_ms_per_proof": round(1e3 * (proof_s - wait_s) / max(1, len(proofs)), 2)}


def _fraction(percent: float | None) -> float | None:
    return None if percent is None else round(percent / 100, 3)


def gpu_busy(index: int):
    """NVML's utilization reader of GPU ``index`` as ``cuzk bench`` samples it, from now on: its reading
    at the end of the run is the mean of the periods that ended meanwhile, in percent."""
    import pynvml

    from cuzk.bench.gpu import _DeviceReader

    pynvml.nvmlInit()
    return _DeviceReader(pynvml, pynvml.nvmlDeviceGetHandleByIndex(index))


SUBMITTERS = 8  # client threads submitting at once in the engine run


def engine_run(zkey_path: Path, wtns_path: Path, gpus: int, proofs: int, synth_workers: int | str,
               verify_proofs: bool = False, profile: bool = False, *, device_processes: bool = False,
               backend: str = "cuda") -> dict:
    """The engine end to end on ``gpus`` devices (``backend`` "cpu": the CPU, ``gpus`` ignored), threads or
    ``device_processes``."""
    with tempfile.TemporaryDirectory() as data_dir:
        devices = list(range(gpus)) if backend == "cuda" else "all"
        config = EngineConfig(data_dir=data_dir, backend=backend, devices=devices, verify=verify_proofs,
                              synth_workers=synth_workers, reconcile=False, measure_peaks=False, keys={"k": str(zkey_path)},
                              device_processes=device_processes)
        with Engine(config) as engine:
            warm = [engine.submit("k", wtns_path) for _ in range(2 * gpus)]  # uploads the key to every device, compiles
            for job in warm:
                engine.await_result(job, timeout=600)
            profiler = HostProfile() if profile else None
            t = time.perf_counter()
            # By path, from several threads, as local clients of the daemon submit: each witness is copied into the
            # journal by the kernel and fsync'd before its submit returns.
            with ThreadPoolExecutor(SUBMITTERS) as pool:
                jobs = list(pool.map(lambda _: engine.submit("k", wtns_path), range(proofs)))
            submit_s = time.perf_counter() - t
            records = [engine.await_result(job, timeout=600) for job in jobs]
            seconds = time.perf_counter() - t
            host = profiler.stop(seconds) if profiler is not None else None
            status = engine.status()
    ok = [r for r in records if r.state is JobState.DONE]
    failed = [r.error for r in records if r.state is not JobState.DONE]
    verified = None
    if ok:
        from cuzk.formats.json_io import parse_proof

        zkey = read_zkey(zkey_path)
        proof = parse_proof(ok[-1].proof, curve=zkey.curve)
        verified = verify(vkey_from_zkey(zkey), [int(v) for v in ok[-1].public_signals], proof)
    per_worker = {w["name"]: w["jobs_done"] for w in status["workers"] if w["kind"] == "proving"}
    return {"gpus": gpus, "device_processes": device_processes, "proofs": proofs, "done": len(ok), "seconds": round(seconds, 3), "proofs_per_s": len(ok) / seconds,
            "submit_s": round(submit_s, 3), "witness_bytes": wtns_path.stat().st_size, "per_worker": per_worker, "verified": verified, "failed": failed[:3],
            "resident": {d["device"]: list(d["keys"]) for d in status["devices"]}, "proofs_per_device": status["config"]["proofs_per_device"],
            **({"host_profile": host} if host is not None else {})}


class HostProfile:
    """Where the engine's host time goes while it proves: CPU seconds of every thread, by thread and by function
    (yappi, the profiler that sees all threads). The engine's Python holds the GIL for most of its CPU time,
    so the process's CPU seconds per wall second in Python frames say how close the GIL is to saturated."""

    def __init__(self):
        import yappi

        self._yappi = yappi
        yappi.set_clock_type("cpu")
        yappi.set_context_name_callback(lambda: threading.current_thread().name)
        yappi.start(builtins=True, profile_threads=True)

    def stop(self, wall_s: float, top: int = 25) -> dict:
        yappi = self._yappi
        yappi.stop()
        threads = sorted(((t.name, t.ttot) for t in yappi.get_thread_stats()), key=lambda x: -x[1])
        functions = yappi.get_func_stats()
        functions.sort("tsub", "desc")
        rows = [{"function": f"{f.module.rsplit('/', 1)[-1]}:{f.lineno} {f.name}", "calls": f.ncall,
                 "self_s": round(f.tsub, 3), "total_s": round(f.ttot, 3)} for f in functions[:top]]
        yappi.clear_stats()
        return {"wall_s": round(wall_s, 3), "cpu_s_per_wall_s": round(sum(s for _, s in threads) / wall_s, 3),
                "threads": [(name, round(s, 3)) for name, s in threads[:12]], "functions_by_self_cpu": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log-n", type=int, default=20, help="circuit domain 2^log_n (default 20)")
    ap.add_argument("--proofs", type=int, default=24, help="proofs per measured run (default 24)")
    ap.add_argument("--gpus", default="1,2", help="GPU counts to compare (default 1,2)")
    ap.add_argument("--synth-workers", default=4, type=lambda v: v if v == "auto" else int(v),
                    help="engine synthesis workers, a number or auto (default 4)")
    ap.add_argument("--lanes", type=int, default=1, help="devices-only run: proving threads (lanes) per device (default 1)")
    ap.add_argument("--verify", action="store_true", help="engine run: self-verify every proof, as the daemon does")
    ap.add_argument("--profile", action="store_true", help="engine run: report the host's CPU time by thread and function (yappi)")
    ap.add_argument("--timeline", action="store_true",
                    help="devices-only run: each lane's waits for the device, and GPU 0's busy fraction (NVML)")
    ap.add_argument("--device-synthesis", action="store_true",
                    help="devices-only run: A·w and B·w on the device from resident coefficients, uploads staged (as the engine)")
    ap.add_argument("--switch-interval", type=float, help="sys.setswitchinterval for the runs (seconds; Python's default 0.005)")
    ap.add_argument("--skip-residency", action="store_true", help="skip the residency measurement")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "cuzk-multi-gpu", help="circuit cache")
    ap.add_argument("--skip-engine", action="store_true", help="only the residency and devices-only measurements")
    ap.add_argument("--device-processes", action="store_true",
                    help="engine run: also with device_processes = true (a worker process per GPU), and the ratio")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = ap.parse_args(argv)

    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    available = cupy_device_count()
    counts = [int(g) for g in args.gpus.split(",")]
    if available < 1:
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    skipped = [g for g in counts if g > available]
    counts = [g for g in counts if g <= available]
    if skipped:
        print(f"only {available} GPU(s) visible: skipping runs with {skipped}", flush=True)
    zkey, wtns = circuit(args.dir, args.log_n)
    out: dict = {"log_n": args.log_n, "gpus_visible": available, "switch_interval_s": sys.getswitchinterval()}

    if not args.skip_residency:
        out["residency"] = residency_gain(zkey, wtns)
        print(json.dumps({"residency": out["residency"]}), flush=True)
    out["devices_only"] = []
    for g in counts:
        out["devices_only"].append(devices_only(zkey, wtns, g, args.proofs, args.lanes, args.timeline, args.device_synthesis))
        print(json.dumps({"devices_only": out["devices_only"][-1]}), flush=True)
    out["engine"] = []
    if not args.skip_engine:
        for g in counts:
            for processes in (False, True) if args.device_processes else (False,):
                out["engine"].append(engine_run(zkey, wtns, g, args.proofs, args.synth_workers, args.verify, args.profile,
                                                device_processes=processes))
                print(json.dumps({"engine": out["engine"][-1]}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))

    if "residency" in out:
        r = out["residency"]
        print(f"\n2^{args.log_n} BN254 proof, proving half on one GPU: bases uploaded per MSM {r['uploaded_per_msm_ms']:.1f} ms, "
              f"resident {r['resident_ms']:.1f} ms (residency gain {r['residency_gain']:.2f}x)")
    for row in out["devices_only"]:
        if "timeline" in row:
            tl = row["timeline"]
            print(f"devices only, {row['gpus']} GPU(s) x {row['lanes']} lanes: GPU 0 busy {tl['gpu0_busy']}, no lane waiting for the "
                  f"device {tl['no_lane_waiting']:.1%} of the time; per proof {tl['proof_ms']} ms in its lane, of which "
                  f"{tl['wait_ms_per_proof']} ms in {tl['waits_per_proof']} waits, {tl['host_ms_per_proof']} ms on the host")
    threads = [row for row in out["engine"] if not row["device_processes"]]
    for label, rows in (("devices only", out["devices_only"]), ("engine end to end", threads)):
        if not rows:
            continue
        base = rows[0]["proofs_per_s"]
        for row in rows:
            print(f"{label:18s} {row['gpus']} GPU(s): {row['proofs_per_s']:6.2f} proofs/s  (x{row['proofs_per_s'] / base:.2f} vs "
                  f"{rows[0]['gpus']} GPU)  split {row.get('per_device') or row.get('per_worker')}"
                  + (f"  (submitting took {row['submit_s']:.2f} s: {row['witness_bytes'] / 2**20:.0f} MiB witness files by path from {SUBMITTERS} threads, fsync'd)"
                     if "submit_s" in row else "")
                  + ("" if row.get("verified", True) else "  PROOF DID NOT VERIFY"))
    for row in out["engine"]:
        if row["device_processes"]:
            peer = next(t for t in threads if t["gpus"] == row["gpus"])
            print(f"engine with device_processes ÷ in-process, {row['gpus']} GPU(s): "
                  f"{row['proofs_per_s'] / peer['proofs_per_s']:.2f} ({row['proofs_per_s']:.2f} vs {peer['proofs_per_s']:.2f} proofs/s)")
            continue
        peer = next((d for d in out["devices_only"] if d["gpus"] == row["gpus"]), None)
        if peer is not None:
            print(f"engine ÷ devices only, {row['gpus']} GPU(s): {row['proofs_per_s'] / peer['proofs_per_s']:.2f} "
                  f"(engine K = {row['proofs_per_device']}, devices only {peer['lanes']} lane(s) per device)")
        host = row.get("host_profile")
        if host:
            print(f"host CPU while proving: {host['cpu_s_per_wall_s']:.2f} s per wall second; by thread {host['threads']}")
            for f in host["functions_by_self_cpu"]:
                print(f"  {f['self_s']:8.3f} s self {f['total_s']:8.3f} s total {f['calls']:8d} calls  {f['function']}")
    bad = [row for row in out["engine"] if row["verified"] is False or row["done"] < row["proofs"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
