"""Admission: can this job start now, and with what? One question, asked of the memory layer.

vLLM's scheduler admits a request only when its KV-cache manager can allocate the request's
slots; here a job starts only when the key manager can lease its key and the host budget can
reserve its working set (``prover.sizing``). ``admit`` answers with a ``Grant`` — the lease,
the reservation, the working set and how long getting them took — after waiting for room, or
raises ``JobTooLarge`` when no amount of waiting could make it. Admission is serialized: one
job at a time waits for memory, so two half-admitted jobs never wait on each other.

It also measures, while jobs run alone or together, in *windows*: the spans between two
changes of what the running jobs reserve (a job admitted, a job's a/b/c released, a job ended),
so that within a window the set of jobs and their reservations are fixed. Each window reads how
far the process's resident memory (anonymous, and mapped files such as the jobs' witnesses)
rose above the *busy baseline* — its resident set when the engine last went from idle to busy:
runtime and keys, no job — with the kernel's high-water mark (``memory.process.PeakProbe``,
reset as the window opens), and attributes that peak to the window's jobs
in proportion to what they reserve: q = peak ÷ the jobs' reservations now, and each job is
implied a share of q × its full working-set reservation. Alone in its a/b/c phase a job's share
is its own measured peak; with several jobs at staggered phases (the usual case under load) it
is the part that, reserved by every job of the window, would have covered the window's peak.
When a job ends, and only if every window of its life was measured, its largest share is a
measured peak of its circuit on its proving path (a window closed early in a job's life, before
it allocated, never lowers a reservation by itself). The largest such peak per circuit and path
(kept in the journal's ``working_set_peaks``) calibrates that circuit's later reservations into
[1, 1.05]× it (``prover.sizing.host_working_set``): raised when the estimate was short, lowered
when the estimate's worst case was never charged. Since every window counts, alone and
together, the reservation is never below a peak a job reached by itself. A window is not
measured when a job in it is its circuit's first in this process (numba's JIT allocates then,
once) or proves from a warm key, when a key was loaded during it, or when what is reserved
outside working sets (keys, pinned buffers, the runtime, transients) changed since the
baseline: the baseline no longer describes the memory beside the jobs, until the engine is next
idle.

Lock order: ``_admitting`` (one admission at a time) → the key manager's and the budget's own
locks; ``_measuring`` (taken under a job's grant lock) → the key manager's lock (reading its load count) and
the budget's (a leaf); a job's measured peak is written to the journal after ``_measuring`` is let go.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

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


# A job that waited this long for memory while no job ran and no key loaded is refused (``Admission._stuck``): the
# reconciler re-reads the process every 0.5 s, so by then the room it waits for is not coming back.
STUCK_WAIT_S = 5.0


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
        self.timings = timings  # intake (a job submitted to this engine), queue (queued → admitted, less the key's part), key_load
        self.unmeasurable = False  # its memory is not only its working set (JIT warm-up, a warm key's page-ins)
        self.implied_peak = 0  # the largest share of a window's peak attributed to it (module docstring)
        self.measured_whole_life = True  # every window of its life was measured: its implied peak may calibrate
        self._released = False
        self._lock = threading.Lock()

    def release_abc(self) -> None:
        """Phase one: the prover freed a/b/c, so their part of the reservation goes back (a measuring window ends)."""
        with self._lock:
            if not self._released:
                self._admission.release_abc(self)

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._admission.forget(self)
        return_free_heap()  # the job's arrays are gone: hand their pages back before releasing their bytes
        self.reservation.release()
        self.lease.release()
        self._admission.measure_runtime_if_idle()


@dataclass
class _Window:
    """A span in which the running jobs and their reservations do not change (module docstring)."""

    grants: list[Grant]
    reserved: int  # what they reserve in it
    loads: int  # key loads so far when it opened


class Admission:
    """Admits jobs against the key manager and the host budget, and learns each circuit's peak."""

    def __init__(self, budget: MemoryBudget, keys: KeyManager, journal: Journal, *, on_device: bool,
                 runtime: RuntimeReservation | None = None, measure_peaks: bool = True,
                 devices=None, prover_pids: Callable[[], list[int]] | None = None):
        """``devices`` answers what the proving devices hold (``synthesizes_on_devices``, ``holds_vectors_on_devices``,
        ``why_not_on_devices``) and how many key loads they made (``loads_total``): the key manager, whose VRAM tiers
        they are, or the device worker processes that own them (``engine.procs``), whose pids ``prover_pids`` gives:
        the jobs' memory is theirs, so their resident peaks are measured with this process's."""
        self.budget = budget
        self.keys = keys
        self.devices = devices if devices is not None else keys
        self.journal = journal
        self.on_device = on_device  # jobs are proved on a device backend (sizes the host working set)
        self._runtime = runtime
        self._probe = PeakProbe(prover_pids) if measure_peaks else None
        self._peaks = journal.saved_peaks()
        self._admitting = threading.Lock()
        self._measuring = threading.Lock()
        self._running: set[Grant] = set()
        self._window: _Window | None = None  # the measuring window open now
        self._baseline: tuple[int, int] | None = None  # (resident bytes, reserved outside working sets) as the busy period began
        self._spoiled = False  # the baseline went stale in this busy period: nothing is measured until the engine is idle
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
                                device_vectors=device_vectors, r1cs_path=self.keys.parses_r1cs_per_job(circuit),
                                measured_bytes=self._peaks.get((circuit, path)),
                                msm_tables=self.keys.holds_msm_tables(circuit))

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
                key_bytes = self.keys.footprint(job.circuit, lease.tier)  # it may be at another tier already
                self._check_fits(job.circuit, workset, key_bytes)
                reservation = self._reserve(job, workset, key_bytes)
            except BaseException:
                lease.release()
                raise
            timings = {"queue": max(0.0, time.time() - job.queued_at - key_load), "key_load": key_load}
            if job.intake_s is not None:
                timings = {"intake": job.intake_s, **timings}
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

    def _reserve(self, job: LiveJob, workset: WorkingSet, key_bytes: int) -> Reservation:
        label = f"job {job.id[:8]} ({job.circuit})"
        stuck_since = None
        while True:  # bounded waits, so a cancel is seen while queued for memory
            job.checkpoint()
            try:
                return self.budget.acquire(workset.total_bytes, "working", timeout=0.2, label=label)
            except AcquireTimeout:
                if not self._nothing_will_free():
                    stuck_since = None
                    continue
                if stuck_since is None:
                    stuck_since = time.monotonic()
                    # Idle but for this job: the engine's own memory is measured now, not left at a figure from before
                    # (a restart measures it before its replayed jobs); with it, a job that can never fit says so.
                    if self._runtime is not None and self._runtime.update(waiting=True):
                        self._check_fits(job.circuit, workset, key_bytes)
                if time.monotonic() - stuck_since >= STUCK_WAIT_S:
                    raise self._stuck(job.circuit, workset) from None

    def _nothing_will_free(self) -> bool:
        """No job holds memory and no key loads: waiting only helps if the reconciler gives room back."""
        with self._measuring:
            if self._running:
                return False
        held = self.budget.snapshot()["by_category"]
        return held["working"]["bytes"] == 0 and held["transient"]["bytes"] == 0 and not self.keys.any_loading()

    def _stuck(self, circuit: str, workset: WorkingSet) -> JobTooLarge:
        """The refusal of a job that waited ``STUCK_WAIT_S`` for memory while nothing ran: what the engine itself and
        its keys hold leaves less than it needs, so it would wait forever."""
        snap = self.budget.snapshot()
        runtime = (f"{format_size(self._runtime.nbytes)} reserved, {format_size(self._runtime.unreserved_bytes())} "
                   "resident beyond reservations now") if self._runtime is not None else "not measured"
        return JobTooLarge(
            f"circuit {circuit!r} needs {format_size(workset.total_bytes)} of working memory, and only "
            f"{format_size(snap['available_bytes'])} of the budget is free with no job running: the engine's own memory "
            f"({runtime}) and its keys ({format_size(snap['by_category']['key']['bytes'])}) hold the rest of the "
            f"{format_size(snap['effective_total_bytes'])} usable now ({format_size(snap['total_bytes'])} planned); "
            "it cannot run here (raise the memory limit or the budget)")

    # ---- measurement (module docstring) -----------------------------------------------------
    def _begin_measure(self, grant: Grant) -> None:
        with self._measuring:
            # Not only its working set: the circuit's first run in this process (numba's JIT and caches allocate
            # then, once), or a warm key (its page-ins).
            grant.unmeasurable = (grant.lease.tier not in (KeyTier.HOT, KeyTier.DEVICE)
                                  or grant.circuit not in self._seen_circuits)
            self._seen_circuits.add(grant.circuit)
        self._reservations_change(grant, joins=True)

    def release_abc(self, grant: Grant) -> None:
        """``grant``'s a/b/c part goes back (phase one): one window ends, the next begins."""
        self._reservations_change(grant, release=lambda: grant.reservation.release(
            min(grant.workset.abc_bytes, grant.reservation.nbytes)))

    def forget(self, grant: Grant) -> None:
        """``grant``'s job ended: it leaves the running jobs (its bytes are released after)."""
        self._reservations_change(grant, leaves=True)

    def _reservations_change(self, grant: Grant, *, joins: bool = False, leaves: bool = False,
                             release: Callable[[], object] | None = None) -> None:
        with self._measuring:  # one step, so no other change falls between two windows
            self._close_window()
            if joins:
                self._running.add(grant)
            elif leaves:
                self._running.discard(grant)
            if release is not None:
                release()  # the budget's lock is a leaf: a release only hands bytes to waiters and wakes them
            self._open_window()
        if leaves and grant.measured_whole_life and not grant.unmeasurable:
            key = (grant.circuit, grant.workset.path)
            if grant.implied_peak > (self._peaks.get(key) or 0):
                before = self.working_set(grant.circuit)
                self.record_peak(grant.circuit, grant.implied_peak, grant.workset.path)
                log.info("circuit %s (%s): implied working-set peak %s; its reservation %s → %s (estimate %s)",
                         grant.circuit, grant.workset.path, format_size(grant.implied_peak), format_size(before.total_bytes),
                         format_size(self.working_set(grant.circuit).total_bytes), format_size(before.estimated_bytes))

    def _loads(self) -> int:
        """Key loads so far, the host's and the devices' (a worker process loads its own copies): a window in which
        one happened is not measured."""
        return self.keys.loads_total() + (self.devices.loads_total() if self.devices is not self.keys else 0)

    def _outside_working(self) -> int:
        snap = self.budget.snapshot()
        return snap["reserved_bytes"] - snap["by_category"]["working"]["bytes"]

    def _open_window(self) -> None:
        self._window = None
        if self._probe is None:
            return
        if not self._running:  # idle: the next job begins a busy period, measured from what is there then
            self._baseline, self._spoiled = None, False
            return
        if self._spoiled:
            return
        resident = self._probe.begin()  # resets the high-water mark
        if resident is None:
            return
        if self._baseline is None:  # the busy period's first job, admitted but not yet allocating
            self._baseline = (resident, self._outside_working())
        self._window = _Window(list(self._running), sum(g.reservation.nbytes for g in self._running), self._loads())

    def _close_window(self) -> None:
        """Attribute the closing window's peak to its jobs (``Grant.implied_peak``), or mark every running job as not
        measured for its whole life when the window could not be."""
        window, self._window = self._window, None
        peak = None
        if window is not None:
            resident, outside = self._baseline
            if (any(g.unmeasurable for g in window.grants) or self._loads() != window.loads
                    or self._outside_working() != outside):
                self._spoiled = True  # memory beside the jobs moved: the baseline is stale until the engine is idle
            elif window.reserved > 0:
                peak = self._probe.end(resident)
        if peak is None:
            for g in self._running:
                g.measured_whole_life = False
            return
        for g in window.grants:
            g.implied_peak = max(g.implied_peak, -(-peak * g.workset.total_bytes // window.reserved))

    def measure_runtime_if_idle(self) -> None:
        """The last job just ended and nobody waits: measure the engine's runtime memory now (``memory.runtime``). The
        engine's housekeeping measures it on its ticks while idle, which a workload that keeps jobs coming (a bench's
        warm-up, then its measured jobs at once) may never show it: then what the first proofs left behind (numba's
        loaded kernels, allocator arenas) would stay unreserved, charged but untracked, for the whole run."""
        if self._runtime is not None and self.idle():
            self._runtime.update()

    def idle(self) -> bool:
        """No job holds memory and nobody waits for it: the process's RSS is its runtime plus its keys."""
        with self._measuring:
            if self._running:
                return False
        snap = self.budget.snapshot()
        return snap["waiters"] == 0 and snap["by_category"]["working"]["bytes"] == 0 and not self.keys.any_loading()
