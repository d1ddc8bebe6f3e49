"""The child side of a device worker process (``engine.procs``): one proving device, its keys, its K lanes.

Started by ``multiprocessing``'s spawn context (never fork: CUDA contexts and the parent's
threads do not survive a fork), it owns its backend — the CPU's, or a ``CudaBackend`` for its
ordinal — and loads each key itself from the key's file when a job first needs it: on the CPU
the hot copy (``keys.host.load_hot``); on a GPU that homes it (``DeviceChild.homes``: the
engine's ``key_home``, for this device) the verifier's IC points on the host and the bases and
coefficients in VRAM through the device tier (``keys.device.DeviceKeys``, which reads them with
``load_from_disk``), its A·w, B·w made there; else the hot copy, its bases (and coefficients)
uploaded from it where they fit. The parent reserves every hot copy (``KeyManager.attach_provers``).
It holds K + ``JOBS_AHEAD`` jobs: each is synthesized on a thread of its own, then proved in one
of the K lanes when one is free.

Messages are small tuples on one pipe. In: ``("prove", job id, key name, key path, witness
path, r1cs path or None)``, ``("cancel", job id)``, ``("call", request id, name, args)``,
``("drop", key name, key path)`` (free that copy: the parent's reservation of it went back), ``("exit",)``.
Out: ``("ready", report)`` once, then ``("loaded", key name)`` (a key loaded here), ``("devices", status)`` (its
VRAM tier's ``DeviceKeys.status``, on a GPU, after each key load and each job), ``("proving", job id)``
(synthesized), ``("proved", job id, Proof)``, ``("cancelled", job id)``, ``("failed", job id, "request" | "internal", message)``,
``("device_error", job id, error, self-test problem or None)``, ``("answer", request id, ok, value)``. The witness
is read from the journal's file here, so no array crosses the pipe. An EOF on the pipe means the parent died: the
process exits at once, so no worker outlives its daemon. A device error (``backends.base.is_device_error_on``, as
in-process) runs the device self-test here, on this process's backend, and both go to the parent, whose
``DeviceErrorPolicy`` decides: the job requeued or failed, and a device that failed the test out of service (its
process then stopped for good). The process itself carries on: a device that passes its self-test keeps proving, as
in-process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import is_device_backend, is_device_error_on
from ..backends.selftest import device_self_test
from ..curves import BN254, Curve
from ..formats.r1cs import read_r1cs
from ..formats.wtns import read_wtns
from ..formats.zkey import ZKey, ZKeyHeader, read_zkey_header
from ..keys.errors import KeyLoadCancelled
from ..keys.host import load_device_home, load_hot, read_chunk_bytes
from ..keys.stream import StagingRing
from ..prover.groth16 import ProofCancelled, prove_synthesized, synthesize, wait_for_vectors
from ..prover.sizing import holds_device_vectors

log = logging.getLogger("cuzk.engine")

JOBS_AHEAD = 1  # jobs a process holds beyond its K proving lanes: their synthesis overlaps the proofs


@dataclass(frozen=True)
class ChildSpec:
    """What a device worker process is started with (pickled once, at spawn)."""

    device: int | None  # CUDA ordinal; None: the CPU backend
    proofs_per_device: int | str
    keys: dict[str, str]  # the keys registered at start (name → .zkey path): K is sized for the largest
    chunk_bytes: int
    log_level: int
    key_home: str = "auto"  # the engine's key_home, applied here to this device (``DeviceChild.homes``)
    make_backend: Callable[[int], object] | None = None  # a GPU's backend from its ordinal; None: CudaBackend(device=)


def main(conn, spec: ChildSpec) -> None:
    """The process's entry point (spawn target)."""
    logging.basicConfig(level=spec.log_level, format=f"%(asctime)s %(levelname)s device-worker[{os.getpid()}] %(message)s")
    DeviceChild(conn, spec).serve()


class DeviceChild:
    def __init__(self, conn, spec: ChildSpec):
        from ..memory.pinned import PageAlignedAllocator, default_allocator
        from .devices import proofs_per_backend

        self.conn, self.spec = conn, spec
        self._send_lock = threading.Lock()
        if spec.device is None:
            from ..backends import get_backend

            self.backend = get_backend("cpu")
        elif spec.make_backend is not None:
            self.backend = spec.make_backend(spec.device)
        else:
            from ..backends.cuda import CudaBackend

            self.backend = CudaBackend(device=spec.device)
        self.on_device = is_device_backend(self.backend)
        self.device_keys = None
        if self.on_device:
            from ..keys.device import DeviceKeys

            self.device_keys = DeviceKeys(self.backend)
        self.allocator = default_allocator() if self.on_device else PageAlignedAllocator()
        self._keys: dict[str, tuple[Path, ZKey, object, bool]] = {}  # name → (path, key, its buffer or device home, homed)
        self._keys_lock = threading.Lock()
        self._cancels: dict[str, threading.Event] = {}  # the jobs in this process
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        headers = []
        for name, path in spec.keys.items():
            try:
                headers.append(read_zkey_header(path))
            except (OSError, ValueError) as exc:  # the parent logged it at registration; its jobs fail with it
                log.warning("key %r not sized for: %s", name, exc)
        self.proofs = proofs_per_backend(spec.proofs_per_device, [self.backend], headers)[0]
        self._lanes: queue.SimpleQueue = queue.SimpleQueue()  # the K lanes a synthesized job waits for
        for _ in range(self.proofs):
            self._lanes.put(self.backend.new_lane() if self.on_device else None)

    def _send(self, message: tuple) -> None:
        with self._send_lock:
            self.conn.send(message)

    def serve(self) -> None:
        # A thread per job held: K prove while the next one's synthesis overlaps them (the parent feeds K + JOBS_AHEAD).
        threads = [threading.Thread(target=self._work, name=f"cuzk-job-{k}", daemon=True)
                   for k in range(self.proofs + JOBS_AHEAD)]
        for thread in threads:
            thread.start()
        self._send(("ready", {"pid": os.getpid(), "backend": self.backend.name, "device": self.spec.device,
                              "proofs": self.proofs,
                              "vram_bytes": self.backend.vram.total_bytes if self.on_device else None}))
        self._report_devices()
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                os._exit(0)  # the parent is gone: no orphan keeps proving
            kind = message[0]
            if kind == "prove":
                self._cancels[message[1]] = threading.Event()
                self._jobs.put(message[1:])
            elif kind == "drop":
                self._drop(*message[1:])
            elif kind == "cancel":
                cancel = self._cancels.get(message[1])
                if cancel is not None:
                    cancel.set()
            elif kind == "call":
                threading.Thread(target=self._answer, args=message[1:], daemon=True).start()
            elif kind == "exit":
                for cancel in list(self._cancels.values()):
                    cancel.set()
                for _ in threads:
                    self._jobs.put(None)
                for thread in threads:
                    thread.join()
                while self.on_device and not self._lanes.empty():
                    self._lanes.get().close()
                return

    # ---- calls ------------------------------------------------------------------------------
    def _answer(self, request: int, name: str, args: tuple) -> None:
        try:
            value = getattr(self, f"call_{name}")(*args)
        except Exception as exc:  # noqa: BLE001 — the caller gets the reason
            self._send(("answer", request, False, f"{type(exc).__name__}: {exc}"))
        else:
            self._send(("answer", request, True, value))

    def call_describe(self, path: str) -> dict:
        """What this device holds of the key at ``path``: the answers admission sizes a job by, and whether it proves
        from a host copy here (``home`` False: the parent reserves that copy)."""
        header = read_zkey_header(path)
        if not self.on_device:
            return {"home": False, "synthesis": False, "vectors": False, "why_not": "the CPU backend has no VRAM"}
        fits = self.device_keys.can_synthesize(header)
        return {"home": self.homes(header), "synthesis": fits, "vectors": holds_device_vectors(header, self.backend),
                "why_not": "" if fits else self.device_keys.shortfall(header)}

    def homes(self, header: ZKeyHeader) -> bool:
        """Whether the key lives in this device's VRAM (read from its file straight there: no host copy), by
        ``key_home`` as ``KeyManager.home`` applies it in-process, for this device: "device" always, "auto" when the
        device holds its bases and coefficients beside a proof, "host" never. Otherwise it is proved from a hot copy
        in host memory (bases resident in VRAM when they fit), which the parent reserves."""
        return self.on_device and (self.spec.key_home == "device" or
                                   (self.spec.key_home == "auto" and self.device_keys.can_synthesize(header)))

    def call_warm_up(self, curves: list[str]) -> float:
        from .warmup import warm_up

        return warm_up([self.backend], curves, device_homes=self.spec.key_home != "host")

    # ---- proving ----------------------------------------------------------------------------
    def _work(self) -> None:
        while (item := self._jobs.get()) is not None:
            job_id, name, key_path = item[:3]
            cancel = self._cancels[job_id]
            try:
                proof = self._prove(job_id, *item[1:], cancelled=cancel.is_set)
            except (ProofCancelled, KeyLoadCancelled):
                self._send(("cancelled", job_id))
            except BaseException as exc:  # noqa: BLE001 — the job's outcome, never the thread's end
                self._failed(job_id, name, key_path, exc)
            else:
                self._send(("proved", job_id, proof))
            finally:
                self._cancels.pop(job_id, None)
                self._report_devices()

    def _report_devices(self) -> None:
        """The device's VRAM tier as status shows it (the parent's ``status()["devices"]``, ``/metrics``' VRAM gauges):
        sent when it may have changed, so the parent's status never waits on this process."""
        if self.on_device:
            self._send(("devices", self.device_keys.status()))

    def _failed(self, job_id: str, name: str, key_path: str, exc: BaseException) -> None:
        from .tracker import REQUEST_ERRORS

        if is_device_error_on(self.backend, exc):  # the device's failure, or the job's? Its self-test tells
            problem = device_self_test(self.backend, self._curve(name, key_path))
            log.error("job %s hit a CUDA error; the device's self-test %s", job_id,
                      "passed" if problem is None else f"failed: {problem}", exc_info=exc)
            self._send(("device_error", job_id, f"{type(exc).__name__}: {exc}", problem))
            return
        if isinstance(exc, REQUEST_ERRORS):
            self._send(("failed", job_id, "request", str(exc)))
        else:
            log.error("job %s failed with an internal error:\n%s", job_id, "".join(traceback.format_exception(exc)))
            self._send(("failed", job_id, "internal", f"{type(exc).__name__}: {exc}"))

    def _curve(self, name: str, path: str) -> Curve:
        """The curve of the job's key, for the self-test (BN254 when the key cannot be read: the device is still tested)."""
        with self._keys_lock:
            kept = self._keys.get(name)
        if kept is not None and kept[0] == Path(path):
            return kept[1].curve
        try:
            return read_zkey_header(path).curve
        except (OSError, ValueError):
            return BN254

    def _key(self, name: str, path: str) -> tuple[ZKey, object, bool]:
        """The key for proving, loaded on first use (again when re-registered at another path, or after its host copy
        was dropped): (key, its device home or host buffer, whether homed on the device)."""
        with self._keys_lock:
            kept = self._keys.get(name)
            if kept is not None and kept[0] == Path(path):
                return kept[1:]
            header = read_zkey_header(path)
            homed = self.homes(header)
            if homed:
                from ..keys.device import KeyFile

                ring = StagingRing(self.allocator, read_chunk_bytes(header, self.spec.chunk_bytes))
                zkey, held = load_device_home(Path(path), header, ring), KeyFile(Path(path), header, ring)
            else:
                zkey, held = load_hot(Path(path), header, self.allocator, self.spec.chunk_bytes)
            if kept is not None and self.on_device:  # re-registered: its old file's copy on the device goes
                self.device_keys.drop(name)
            self._keys[name] = (Path(path), zkey, held, homed)
            self._send(("loaded", name))  # before the job's answer: the parent knows this job's memory held a load
            self._report_devices()
            return zkey, held, homed

    def _drop(self, name: str, path: str) -> None:
        """Free the host copy of key ``name`` loaded from ``path`` (the parent's reservation of it went back,
        ``KeyManager.attach_provers``; a key homed on the device has none): the jobs proving with it keep it until
        they end."""
        with self._keys_lock:
            kept = self._keys.get(name)
            if kept is not None and kept[0] == Path(path) and not kept[3]:
                del self._keys[name]

    def _prove(self, job_id: str, name: str, key_path: str, witness_path: str, r1cs_path: str | None, *, cancelled):
        """The job's synthesis, then its proving half in a free lane, as the in-process workers do them (A·w and B·w
        deferred to a GPU that holds the key's coefficients beside a proof); the parent hears when the proving half
        begins."""
        zkey, held, homed = self._key(name, key_path)
        witness = read_wtns(witness_path)
        r1cs = read_r1cs(r1cs_path) if r1cs_path else None
        synthesis = synthesize(zkey, witness, r1cs=r1cs, cancelled=cancelled,
                               defer_ab=homed or (self.on_device and self.device_keys.can_synthesize(zkey)))
        del witness, r1cs
        self._send(("proving", job_id))
        lane = self._lanes.get()
        try:
            return self._prove_synthesized(name, zkey, held if homed else None, synthesis, cancelled, lane)
        finally:
            self._lanes.put(lane)

    def _prove_synthesized(self, name: str, zkey: ZKey, home, synthesis, cancelled, lane):
        """``home``: the key's device home (its file), or None for a host copy (``zkey``)."""
        if not self.on_device:
            return prove_synthesized(self.backend, zkey, synthesis, cancelled=cancelled)
        vectors = wait_for_vectors(self.backend, zkey, cancelled) if holds_device_vectors(zkey, self.backend) else None
        try:
            with (self.device_keys.acquire(name, zkey, synthesis.deferred, vectors is not None, home=home,
                                           cancelled=cancelled) as device_key,
                  lane or contextlib.nullcontext()):
                return prove_synthesized(self.backend, device_key.zkey, synthesis, cancelled=cancelled, vectors=vectors)
        finally:
            if vectors is not None:
                vectors.release()
