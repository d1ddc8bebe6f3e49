"""Admission: can this job start now, and with what? One question, asked of the memory layer.

vLLM's scheduler admits a request only when its KV-cache manager can allocate the request's
slots; here a job starts only when the key manager can lease its key and the host budget can
reserve its working set (``prover.sizing``). ``admit`` answers with a ``Grant`` — the lease,
the reservation, the working set and how long getting them took — after waiting for room, or
raises ``JobTooLarge`` when no amount of waiting could make it. Admission is serialized: one
job at a time waits for memory, so two half-admitted jobs never wait on each other.

It also measures: a job admitted while nothing else runs (no other job or key load beside it,
its key hot or homed on the devices, its circuit proved before in this process) has its
anonymous-memory peak probed, and the largest such peak per circuit and proving path (kept in
the journal) calibrates that circuit's later reservations into [1, 1.2]× it
(``prover.sizing.host_working_set``): raised when the estimate was short, lowered when the
estimate's worst case was never charged.

Lock order: ``_admitting`` (one admission at a time) → the key manager's and the budget's own
locks; ``_measuring`` is a leaf, taken under a job's lock when its grant is released.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from ..keys.host import KeyTier
from ..keys.manager import KeyLease, KeyManager
from ..memory.budget import AcquireTimeout, MemoryBudget, Reservation
from ..memory.process import PeakProbe, return_free_heap
from ..memory.runtime import RuntimeReservation
from ..memory.units import format_size
from ..prover.groth16 import ProvingError
from ..prover.sizing import WorkingSet, host_working_set, proving_path
from .journal import Journal
from .tracker import LiveJob

log = logging.getLogger("cuzk.engine")


class JobTooLarge(ProvingError):
    """Key plus working set exceed the whole budget: waiting could never help."""


class Grant:
    """What a job was admitted with; ``release`` gives all of it back (idempotent, from any thread)."""

    def __init__(self, admission: Admission, circuit: str, lease: KeyLease, reservation: Reservation,
                 workset: WorkingSet, timings: dict[str, float]):
        self._admission = admission
        self.circuit = circuit
        self.lease = lease
        self.reservation = reservation
        self.workset = workset
        self.timings = timings  # queue (submitted → admitted, less the key's part) and key_load
        self.overlapped = False  # another job or key load ran beside it: its peak is not its own
        self.probe_baseline: int | None = None
        self.loads_at_start = 0
        self._released = False
        self._lock = threading.Lock()

    def release_abc(self) -> None:
        """Phase one: the prover freed a/b/c, so their part of the reservation goes back."""
        with self._lock:
            if not self._released:
                self.reservation.release(min(self.workset.abc_bytes, self.reservation.nbytes))

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._admission.forget(self)
        return_free_heap()  # the job's arrays are gone: hand their pages back before releasing their bytes
        self.reservation.release()
        self.lease.release()


class Admission:
    """Admits jobs against the key manager and the host budget, and learns each circuit's peak."""

    def __init__(self, budget: MemoryBudget, keys: KeyManager, journal: Journal, *, on_device: bool,
                 r1cs_paths: Mapping[str, str], runtime: RuntimeReservation | None = None, measure_peaks: bool = True,
                 devices=None):
        """``devices`` answers what the proving devices hold (``synthesizes_on_devices``, ``holds_vectors_on_devices``,
        ``why_not_on_devices``): the key manager, whose VRAM tiers they are, or the device worker processes that own
        them (``engine.procs``)."""
        self.budget = budget
        self.keys = keys
        self.devices = devices if devices is not None else keys
        self.journal = journal
        self.on_device = on_device  # jobs are proved on a device backend (sizes the host working set)
        self._r1cs_paths = r1cs_paths  # the engine's registry, read here
        self._runtime = runtime
        self._probe = PeakProbe() if measure_peaks else None
        self._peaks = journal.saved_peaks()
        self._admitting = threading.Lock()
        self._measuring = threading.Lock()
        self._running: set[Grant] = set()
        self._seen_circuits: set[str] = set()  # circuits admitted once in this process (the first run pays JIT warm-up)

    @property
    def peaks(self) -> dict[str, dict[str, int]]:
        """circuit → {proving path → the largest peak measured}."""
        out: dict[str, dict[str, int]] = {}
        for (circuit, path), peak in sorted(self._peaks.items()):
            out.setdefault(circuit, {})[path] = peak
        return out

    def working_set(self, circuit: str) -> WorkingSet:
        """The reservation one proof of ``circuit`` takes now (estimate, raised to the measured peak); without a/b
        when the devices synthesize the circuit's proofs (``device_synthesis``: the synthesis worker defers them), and
        without the other domain-sized vectors when every device holds a proof's vectors beside the key
        (``device_vectors``: the proving worker waits for their VRAM)."""
        device_synthesis = self.on_device and self.devices.synthesizes_on_devices(circuit)
        device_vectors = self.on_device and self.devices.holds_vectors_on_devices(circuit)
        path = proving_path(on_device=self.on_device, device_synthesis=device_synthesis, device_vectors=device_vectors)
        return host_working_set(self.keys.header(circuit), on_device=self.on_device, device_synthesis=device_synthesis,
                                device_vectors=device_vectors, r1cs_path=self._r1cs_paths.get(circuit),
                                measured_bytes=self._peaks.get((circuit, path)))

    def record_peak(self, circuit: str, nbytes: int, path: str | None = None) -> int:
        """Remember a measured working-set peak for ``circuit`` on proving ``path`` (default: the path its jobs take
        now); the largest is kept. Returns the stored value."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"peak must be a non-negative number of bytes, got {nbytes!r}")
        path = path or self.working_set(circuit).path
        stored = self.journal.save_peak(circuit, path, nbytes)
        self._peaks[(circuit, path)] = stored
        return stored

    def check_fits(self, circuit: str) -> None:
        """Raise ``JobTooLarge`` when no proof of ``circuit`` could ever be admitted (asked before taking a request)."""
        self._check_fits(circuit, self.working_set(circuit), self.keys.footprint(circuit))

    def fitting_now(self, circuit: str, waiting: list[str]) -> int:
        """How many proofs of ``circuit`` the budget holds now: its free bytes (idle keys count as free: they are
        evicted for room) less the working sets of ``waiting`` jobs (their circuits) not admitted yet, and the key's
        own bytes when it is not loaded, in working sets."""
        workset = self.working_set(circuit)
        keys = {k["name"]: k for k in self.keys.status()}
        free = self.budget.available_bytes + sum(k["reserved_bytes"] for name, k in keys.items()
                                                 if name != circuit and not k["in_use"] and not k["loading"])
        free -= sum(self.working_set(other).total_bytes for other in waiting)
        if keys[circuit]["tier"] == KeyTier.COLD.value:
            free -= self.keys.footprint(circuit)
        return max(0, free // max(1, workset.total_bytes))

    def admit(self, job: LiveJob) -> Grant:
        """Wait until ``job`` can start, then hand it its key and working set.

        Raises ``JobTooLarge`` (from the header, before anything loads) when the key plus the
        working set exceed the whole budget, and ``ProofCancelled`` when the job is cancelled
        while it waits; nothing is held after either.
        """
        with self._admitting:
            job.checkpoint()
            workset = self.working_set(job.circuit)
            self._check_fits(job.circuit, workset, self.keys.footprint(job.circuit))  # at its home tier
            t_key = time.perf_counter()
            lease = self.keys.acquire(job.circuit, cancelled=job.cancelled)
            try:
                key_load = time.perf_counter() - t_key  # waiting for room for the key and loading it; ~0 when resident
                self._check_fits(job.circuit, workset, self.keys.footprint(job.circuit, lease.tier))  # it may be at another tier already
                reservation = self._reserve(job, workset)
            except BaseException:
                lease.release()
                raise
            timings = {"queue": max(0.0, time.time() - job.submitted_at - key_load), "key_load": key_load}
            grant = Grant(self, job.circuit, lease, reservation, workset, timings)
            self._begin_measure(grant)
            return grant

    def _check_fits(self, circuit: str, workset: WorkingSet, key_bytes: int) -> None:
        runtime = self._runtime.nbytes if self._runtime is not None else 0  # the process itself: never given back
        if key_bytes + workset.total_bytes > self.budget.total_bytes - runtime:
            beside = f" beside the engine's own {format_size(runtime)}" if runtime else ""
            devices = self.devices.why_not_on_devices(circuit) if self.on_device else ""
            vram = f", and its key cannot be homed in VRAM instead ({devices})" if devices else ""
            raise JobTooLarge(
                f"circuit {circuit!r} needs {format_size(key_bytes)} for its key plus {format_size(workset.total_bytes)} "
                f"of working memory, more than the whole budget of {format_size(self.budget.total_bytes)}{beside}{vram}; "
                "it can never run here (raise the memory limit or the budget)")

    def _reserve(self, job: LiveJob, workset: WorkingSet) -> Reservation:
        label = f"job {job.id[:8]} ({job.circuit})"
        while True:  # bounded waits, so a cancel is seen while queued for memory
            job.checkpoint()
            try:
                return self.budget.acquire(workset.total_bytes, "working", timeout=0.2, label=label)
            except AcquireTimeout:
                continue

    # ---- measurement ------------------------------------------------------------------------
    def _begin_measure(self, grant: Grant) -> None:
        with self._measuring:
            for other in self._running:
                other.overlapped = True
            # Not its own peak: another job beside it, a warm key (its page-ins would count), or the
            # circuit's first run in this process (numba's JIT and caches allocate then, once).
            grant.overlapped = (bool(self._running) or grant.lease.tier not in (KeyTier.HOT, KeyTier.DEVICE)
                                or grant.circuit not in self._seen_circuits)
            self._seen_circuits.add(grant.circuit)
            self._running.add(grant)
            grant.loads_at_start = self.keys.loads_total()
            if self._probe is not None and not grant.overlapped:
                grant.probe_baseline = self._probe.begin()

    def end_measure(self, grant: Grant) -> None:
        """The job's proof is made: a clean peak calibrates the circuit's later reservations (module docstring)."""
        if self._probe is None or grant.probe_baseline is None:
            return
        with self._measuring:
            clean = not grant.overlapped and self.keys.loads_total() == grant.loads_at_start
            peak = self._probe.end(grant.probe_baseline) if clean else None
        workset = grant.workset
        if peak is not None and peak > (self._peaks.get((grant.circuit, workset.path)) or 0):
            self.record_peak(grant.circuit, peak, workset.path)
            calibrated = self.working_set(grant.circuit).total_bytes
            log.info("circuit %s (%s): measured working-set peak %s; its reservation %s → %s (estimate %s)",
                     grant.circuit, workset.path, format_size(peak), format_size(workset.total_bytes),
                     format_size(calibrated), format_size(workset.estimated_bytes))

    def forget(self, grant: Grant) -> None:
        with self._measuring:
            self._running.discard(grant)

    def idle(self) -> bool:
        """No job holds memory and nobody waits for it: the process's RSS is its runtime plus its keys."""
        with self._measuring:
            if self._running:
                return False
        snap = self.budget.snapshot()
        return snap["waiters"] == 0 and snap["by_category"]["working"]["bytes"] == 0 and not self.keys.any_loading()
