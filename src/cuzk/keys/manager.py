"""The proving-key manager: which keys are in memory, at what cost, and which to drop.

Tiers (``KeyTier``):

- **cold** — registered: only the header is in memory (read and validated at
  registration, a few hundred bytes). Costs nothing in the budget.
- **warm** — memory-mapped (``formats.zkey.read_zkey``): the arrays are views of the file.
  *Accounting:* the page cache behind a mapping is charged to our cgroup as soon as a
  page is touched, and proving touches every page, so a warm key reserves its **full**
  section size in the ``key`` category, exactly like a hot one. This over-counts while the
  pages are untouched (just after mapping) and is the honest figure while it is in use;
  on eviction the mapping is dropped and the kernel is asked to drop the file's pages
  (``posix_fadvise(DONTNEED)``) so the charge really goes away. The only gain of warm over
  hot is the load time (no copy); it is what you want for a key you might use.
- **hot** — resident in host memory we own: one page-aligned buffer holding every big
  section, streamed in from the file with a peak of final size + one chunk (``keys.host``).
  The buffer is the key's own allocation, reserved under ``key``, not a pool loan.

Keys in use are reference-counted through ``KeyLease`` (``acquire`` … ``lease.release()``
or a ``with`` block). An idle key (no lease) is evicted — least recently used first — when
the budget needs room for someone else, under one of two rules (``evict_idle``):

- **at once** when waiting cannot make the room: the bytes still needed exceed what jobs in
  flight will give back (the budget's ``working`` and ``transient`` reservations). Nothing
  else would ever free them, so keeping the idle key would only stall the waiter (after an
  OOM restart under a tight learned budget this turned 1.3 proofs/s into 0.25, and an
  ``idle_evict_s`` of an hour into a stall of an hour);
- **after ``idle_evict_s``** of idleness otherwise: the waiter gets its room when a job in
  flight ends, so two circuits alternating on a budget that holds both keys but not two
  working sets wait briefly for each other instead of evicting and reloading each key.

``evict`` drops one on request. The manager registers itself as a budget evictor, asks the
budget to evict for its waiters whenever a key becomes idle, and ``maintain()`` (called
periodically by the engine) hands keys over once their idle time runs out.

- **device** — homed on the devices (GPU hosts, ``key_home``): no host copy. The host holds
  the key's IC points (for the verifier) and the staging ring that loads read through
  (``keys.stream``), straight from the file into each device's VRAM, when a proof first needs
  the key there and again after VRAM pressure evicted it (``keys.device.load_from_disk``). A
  ring's memory exists only while a load reads, and the rings of all device-homed keys take
  turns, so one reservation of the largest, held while any key is homed there, covers them all.
  ``key_home`` "auto" homes a key on the devices when every device's budget holds its bases and
  coefficients beside a proof (``DeviceKeys.can_synthesize``), and in host memory (the default
  tier) otherwise; "device" refuses a key no device holds (``DeviceKeyTooLarge``); "host" keeps
  every key in host memory.

The VRAM tier (``keys.device``): ``on_device(lease, backend)`` gives a job the key with its
MSM bases (and coefficients, for synthesis on the device) resident on the backend's device —
uploaded once per device, kept across proofs, counted while in use, LRU-evicted by that
device's VRAM budget — or the host key when they do not fit. ``synthesizes_on_devices``
says whether every device can synthesize a key's proofs. ``status()`` lists each key's residency per device.

A key registered with its circuit's ``.r1cs`` (the satisfaction check that names a constraint
an unsatisfied witness breaks) holds the parsed constraint system beside its arrays while it
is loaded, so a job never parses the file: read with the key (its file's page cache dropped
then), counted in the key's reservation (``r1cs_resident_bytes``: the same bound a proof that
parses it itself is sized by) and freed with it. Where the device worker processes hold the
proving copies (``provers_hold_keys``) they parse it per job, and it is theirs to size
(``r1cs_path``).

Footprints are computed from the header alone (``keys.host.footprint``) and, with an r1cs, its
file's size, so admission can refuse a job that could never fit before it loads anything.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..backends.base import Backend, DeviceBackend, is_device_backend
from ..formats.r1cs import R1CS, read_r1cs
from ..formats.zkey import ZKey, ZKeyHeader, read_zkey, read_zkey_header
from ..memory.budget import AcquireTimeout, MemoryBudget, Reservation
from ..memory.pinned import HostAllocator, default_allocator
from ..memory.units import MiB, format_size
from ..prover.sizing import holds_device_vectors, r1cs_resident_bytes
from .device import DeviceKeyLease, DeviceKeys, DeviceKeyTooLarge, KeyFile
from .errors import KeyInUseError, KeyLoadCancelled, KeyManagerError, UnknownKeyError
from .host import (PAGE, HostBuffer, KeyTier, drop_page_cache, footprint, load_device_home, load_hot, load_peak,
                   msm_table_bytes, read_chunk_bytes, with_msm_tables)
from .stream import StagingRing

KEY_HOMES = ("auto", "host", "device")

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 64 * MiB
# msm_tables = "auto": a key's MSM window tables may take at most this share of the budget's total (they cost ~20x its
# bases: a 2^20 key's would take ~8 GB) and its MSMs at most this many points. A table MSM reads each base's table row
# once where the plain one reads the bases once per window: fast while a table stays in the cache, memory-bound once
# it does not. Measured (benchmarks/msm_tables.py, 2-core EPYC, 32 MiB L3): MSM phase x1.42 faster at 2^12 (tables
# 32 MiB, built in 0.8 s), x1.17 at 2^14 (114 MiB, 2.4 s), x1.01 at 2^16 (456 MiB, 9.6 s: not worth its memory).
MSM_TABLE_BUDGET_SHARE = 1 / 8
MSM_TABLE_AUTO_MAX_POINTS = 1 << 14

@dataclass
class _Entry:
    name: str
    path: Path
    header: ZKeyHeader
    tier: KeyTier = KeyTier.COLD
    zkey: ZKey | None = None
    buffer: HostBuffer | None = None
    reservation: Reservation | None = None
    refcount: int = 0
    last_used: float = 0.0  # time.monotonic() of the last release (or load)
    ring: StagingRing | None = None  # a device-homed key's staging ring (its memory exists only while a load reads)
    loading: threading.Event | None = None  # set when an in-flight load ends
    loads: int = 0
    evictions: int = 0
    load_seconds: float = 0.0
    extras: dict | None = None  # per-key data derived by users (e.g. the prepared verification key); survives eviction
    msm_tables: bool = False  # a hot copy holds window tables for its MSMs (decided at registration: ``msm_tables``)
    table_seconds: float = 0.0  # the last load's table build
    r1cs_path: Path | None = None  # the circuit's constraint system, for the satisfaction check
    r1cs_bytes: int = 0  # what the parsed r1cs is counted as while loaded (``r1cs_resident_bytes``)
    r1cs: R1CS | None = None  # parsed, while the key is loaded (and this process proves: not ``provers_hold_keys``)


class KeyLease:
    """A counted reference to a loaded key; the key cannot be evicted until every lease is released."""

    def __init__(self, manager: KeyManager, entry: _Entry):
        self._manager = manager
        self._entry = entry
        self.name = entry.name
        self.zkey: ZKey = entry.zkey
        self.r1cs: R1CS | None = entry.r1cs  # the key's parsed r1cs, when registered with one (module docstring)
        self.tier = entry.tier
        self._released = False

    @property
    def header(self) -> ZKeyHeader:
        return self._entry.header

    @property
    def home(self) -> KeyFile | None:
        """Where a key homed on the devices is loaded from (None for a host-tier key)."""
        entry = self._entry
        return KeyFile(entry.path, entry.header, entry.ring) if self.tier is KeyTier.DEVICE else None

    @property
    def r1cs_path(self) -> Path | None:
        """The circuit's .r1cs the key was registered with (a device worker process parses it per job)."""
        return self._entry.r1cs_path

    @property
    def extras(self) -> dict:
        """A dict that lives with the key's registration (cache derived data here, e.g. a prepared vkey)."""
        return self._entry.extras

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.zkey = self.r1cs = None
            self._manager._release(self._entry)

    def __enter__(self) -> KeyLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class KeyManager:
    def __init__(
        self,
        budget: MemoryBudget,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        idle_evict_s: float = 10.0,
        default_tier: KeyTier = KeyTier.HOT,
        allocator: HostAllocator | None = None,
        key_home: str = "auto",
        provers_hold_keys: bool = False,
        msm_tables: bool | str = False,
    ):
        """``allocator`` makes the hot tier's buffers and the staging rings: default, page-locked where CUDA exists,
        else page-aligned mmap. ``key_home``: see the module docstring. ``provers_hold_keys``: the device worker
        processes load the proving copies themselves (``engine.procs``), so every key is leased here at the device
        tier: its header and IC points, what the verifier needs. ``msm_tables`` (keys proved by the CPU backend
        here): hot copies hold window tables for their MSMs — True, False, or "auto": for a key of at most
        ``MSM_TABLE_AUTO_MAX_POINTS`` points an MSM whose tables take at most ``MSM_TABLE_BUDGET_SHARE`` of the
        budget's total."""
        if chunk_bytes < PAGE:
            raise ValueError(f"chunk_bytes must be at least one page ({PAGE} bytes), got {chunk_bytes}")
        if idle_evict_s < 0:
            raise ValueError(f"idle_evict_s must be >= 0, got {idle_evict_s}")
        if default_tier not in (KeyTier.WARM, KeyTier.HOT):
            raise ValueError("the default tier for proving must be warm or hot")
        if key_home not in KEY_HOMES:
            raise ValueError(f"key_home must be one of {', '.join(KEY_HOMES)}, got {key_home!r}")
        if not (isinstance(msm_tables, bool) or msm_tables == "auto"):
            raise ValueError(f"msm_tables must be true, false or \"auto\", got {msm_tables!r}")
        self.msm_tables = msm_tables
        self.key_home = key_home
        self.provers_hold_keys = provers_hold_keys
        self.budget = budget
        self.chunk_bytes = chunk_bytes
        self.idle_evict_s = idle_evict_s
        self.default_tier = default_tier
        self.allocator = allocator if allocator is not None else default_allocator()
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._zombie_lock = threading.Lock()
        self._zombies: list[tuple[HostBuffer, Reservation]] = []  # unmapping blocked by a stray reference
        self._devices: dict[object, DeviceKeys] = {}  # proving backend → its VRAM tier
        # Device-homed keys' staging rings: their memory exists only while a load reads, and they take turns, so one
        # reservation of the largest covers them all (held while any key is homed on the devices).
        self._ring_turns = threading.Lock()
        self._ring_reservation: Reservation | None = None
        # Copies the prover processes hold of a key leased here at the device tier (``attach_provers``).
        self._prover_copy: Callable[[str, Path, ZKeyHeader], int] | None = None
        self._drop_prover_copy: Callable[[str, Path], object] | None = None
        self._provers_devices: Callable[[], list[dict]] | None = None  # their VRAM tiers' status (``attach_provers``)
        budget.register_evictor(self.evict_idle)

    def attach_provers(self, copy_bytes: Callable[[str, Path, ZKeyHeader], int], drop: Callable[[str, Path], object],
                       devices: Callable[[], list[dict]] | None = None) -> None:
        """With ``provers_hold_keys``: each key leased here also reserves the ``copy_bytes(name, path, header)`` of it the
        prover processes hold (their hot copies: a CPU worker's, a GPU worker's that does not home the key in VRAM),
        and ``drop(name, path)`` tells the provers to free theirs when it goes cold here — so a worker's copy lives no
        longer than its reservation. ``devices``: the status of the VRAM tiers the provers hold (GPU worker
        processes), which ``device_status`` and each key's ``resident_devices`` then show. Call before any key
        loads; ``copy_bytes`` may be asked under this manager's lock, so it must not call back into this manager."""
        self._prover_copy, self._drop_prover_copy, self._provers_devices = copy_bytes, drop, devices

    def _prover_bytes(self, entry: _Entry, tier: KeyTier) -> int:
        if self._prover_copy is None or tier is not KeyTier.DEVICE:
            return 0
        return self._prover_copy(entry.name, entry.path, entry.header)

    # ---- registration -------------------------------------------------------------------
    def register(self, name: str, path: str | os.PathLike, r1cs_path: str | os.PathLike | None = None) -> ZKeyHeader:
        """Make ``name`` refer to the .zkey at ``path`` (cold), with the circuit's ``r1cs_path`` when given (parsed
        with each load of the key); the key's header is read and validated now."""
        if not name or not isinstance(name, str):
            raise KeyManagerError(f"key name must be a non-empty string, got {name!r}")
        path = Path(path)
        header = read_zkey_header(path)  # FormatError (a ValueError) names the file and what is wrong
        r1cs = None if r1cs_path is None else Path(r1cs_path).resolve()
        r1cs_bytes = 0 if r1cs is None else r1cs_resident_bytes(r1cs)
        with self._lock:
            old = self._entries.get(name)
            if old is not None:
                if old.path == path.resolve() and old.r1cs_path == r1cs:
                    return old.header
                if old.refcount or old.loading is not None:
                    raise KeyInUseError(f"key {name!r} is in use; cannot re-register it to {path}"
                                        + (f" with {r1cs}" if r1cs is not None else ""))
            self._entries[name] = _Entry(name, path.resolve(), header, extras={}, msm_tables=self._wants_tables(header),
                                         r1cs_path=r1cs, r1cs_bytes=r1cs_bytes)
        if old is not None:
            self._unload(old)
            self._drop_device_copies(name)
        return header

    def _wants_tables(self, header: ZKeyHeader) -> bool:
        """Whether hot copies of this key hold MSM window tables (``msm_tables``): "auto" bounds them to a share of
        the budget, so a large key on a small box never gets them, and to keys whose MSMs they speed up."""
        if self.msm_tables == "auto":
            return (max(header.n_vars, header.domain_size) <= MSM_TABLE_AUTO_MAX_POINTS
                    and msm_table_bytes(header) <= self.budget.total_bytes * MSM_TABLE_BUDGET_SHARE)
        return bool(self.msm_tables)

    def unregister(self, name: str) -> None:
        with self._lock:
            entry = self._get(name)
            if entry.refcount or entry.loading is not None:
                raise KeyInUseError(f"key {name!r} is in use; cannot unregister it")
            del self._entries[name]
        self._unload(entry)
        self._drop_device_copies(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._entries)

    def header(self, name: str) -> ZKeyHeader:
        with self._lock:
            return self._get(name).header

    def path(self, name: str) -> Path:
        """The registered key's file (resolved)."""
        with self._lock:
            return self._get(name).path

    def footprint(self, name: str, tier: KeyTier | None = None) -> int:
        """Host bytes ``name`` holds at ``tier`` (default: its home, ``home``)."""
        tier = tier or self.home(name)
        with self._lock:
            entry = self._get(name)
        return (footprint(entry.header, tier, chunk_bytes=self.chunk_bytes, msm_tables=entry.msm_tables)
                + self._prover_bytes(entry, tier) + self._r1cs_bytes(entry, tier))

    def _r1cs_bytes(self, entry: _Entry, tier: KeyTier) -> int:
        """What the key's parsed r1cs is counted as at ``tier``: held while loaded, unless the provers parse it per job."""
        return entry.r1cs_bytes if tier is not KeyTier.COLD and not self.provers_hold_keys else 0

    def r1cs_path(self, name: str) -> Path | None:
        """The .r1cs ``name`` was registered with (None without one)."""
        with self._lock:
            return self._get(name).r1cs_path

    def parses_r1cs_per_job(self, name: str) -> Path | None:
        """The .r1cs each proof of ``name`` parses itself (the device worker processes do: sized with its working
        set), or None: none registered, or the loaded key holds it parsed."""
        return None if not self.provers_hold_keys else self.r1cs_path(name)

    def holds_msm_tables(self, name: str) -> bool:
        """Whether ``name``'s hot copy holds MSM window tables (its proofs' MSM scratch grows with them: sizing)."""
        with self._lock:
            return self._get(name).msm_tables

    def home(self, name: str) -> KeyTier:
        """The tier ``name`` is proved from: DEVICE when ``key_home`` allows and every device holds the key, its bases
        and coefficients beside a proof; the default host tier otherwise. DeviceKeyTooLarge for ``key_home =
        "device"`` and a key some device cannot hold (before anything is read)."""
        if self.provers_hold_keys:
            return KeyTier.DEVICE
        if self.key_home == "host":
            return self.default_tier
        header = self.header(name)
        with self._lock:
            devices = list(self._devices.values())
        too_small = [keys for keys in devices if not keys.can_synthesize(header)]
        if devices and not too_small:
            return KeyTier.DEVICE
        if self.key_home == "device":
            raise DeviceKeyTooLarge(f"key {name!r} cannot be homed on the devices (key_home = \"device\"): "
                                    + (self.why_not_on_devices(name) or "there is no device"))
        return self.default_tier

    def why_not_on_devices(self, name: str) -> str:
        """Why devices cannot home ``name`` (its VRAM need against each budget that is too small), '' when they can."""
        header = self.header(name)
        with self._lock:
            devices = list(self._devices.values())
        return "; ".join(keys.shortfall(header) for keys in devices if not keys.can_synthesize(header))

    def _get(self, name: str) -> _Entry:
        entry = self._entries.get(name)
        if entry is None:
            raise UnknownKeyError(name, sorted(self._entries))
        return entry

    # ---- use ----------------------------------------------------------------------------
    def acquire(self, name: str, tier: KeyTier | None = None, *, cancelled: Callable[[], bool] | None = None) -> KeyLease:
        """A lease on the key, loading it first if it is cold (or warm when ``tier`` is hot and nobody uses it).

        Waits for room in the budget (evicting idle keys) and for a load already in flight.
        ``cancelled`` is polled while waiting for room; when it fires, KeyLoadCancelled.
        """
        tier = tier or self.home(name)
        if tier is KeyTier.COLD:
            raise KeyManagerError("a key is used warm, hot or from the devices, not cold")
        while True:
            with self._lock:
                entry = self._get(name)
                if entry.loading is None:
                    upgrade = entry.tier is KeyTier.WARM and tier is KeyTier.HOT and entry.refcount == 0
                    if entry.tier is not KeyTier.COLD and not upgrade:
                        entry.refcount += 1
                        entry.last_used = time.monotonic()
                        return KeyLease(self, entry)
                    entry.loading = threading.Event()
                    if upgrade:  # drop the mapping first: the peak is never warm + hot
                        self._detach(entry)
                    break
                in_flight = entry.loading
            in_flight.wait()
        try:
            self._load(entry, tier, cancelled)
        except BaseException:
            with self._lock:
                done, entry.loading = entry.loading, None
            done.set()
            raise
        with self._lock:
            entry.refcount += 1
            entry.last_used = time.monotonic()
            done, entry.loading = entry.loading, None
            lease = KeyLease(self, entry)
        done.set()
        return lease

    def on_device(self, lease: KeyLease, backend: Backend, coefficients: bool = False,
                  vectors_reserved: bool = False, cancelled: Callable[[], bool] | None = None) -> DeviceKeyLease:
        """The leased key for proving on ``backend``: bases (and, asked for, coefficients) resident in its VRAM when
        they fit (uploaded on first use; ``vectors_reserved``: beside a proof that holds its vectors already), else
        the host key; a device-homed key always resident, read from its file once room is free (``cancelled`` polled
        while waiting). Release the result when the proof is done (before the host lease)."""
        if not is_device_backend(backend):
            if lease.tier is KeyTier.DEVICE:
                raise KeyManagerError(f"key {lease.name!r} is homed on the devices; backend {backend.name} has no VRAM")
            return DeviceKeyLease(None, None, lease.zkey)
        return self.add_device(backend).acquire(lease.name, lease.zkey, coefficients, vectors_reserved,
                                                home=lease.home, cancelled=cancelled)

    def synthesizes_on_devices(self, name: str) -> bool:
        """Whether a proof of ``name`` leaves A·w and B·w to the device: there are devices, and each one's budget holds
        the key's bases and coefficients beside a proof (``DeviceKeys.can_synthesize``)."""
        header = self.header(name)
        return self._every_device(lambda keys: keys.can_synthesize(header))

    def holds_vectors_on_devices(self, name: str) -> bool:
        """Whether a proof of ``name`` keeps its vectors in VRAM for sure (waiting for them): there are devices, and
        each one's whole budget holds the key's bases and a proof's vectors and largest MSM beside them."""
        header = self.header(name)
        return self._every_device(lambda keys: holds_device_vectors(header, keys.backend))

    def _every_device(self, holds: Callable[[DeviceKeys], bool]) -> bool:
        with self._lock:
            devices = list(self._devices.values())
        return bool(devices) and all(holds(keys) for keys in devices)

    def add_device(self, backend: DeviceBackend) -> DeviceKeys:
        """The VRAM tier of ``backend``'s device (made on first use; the engine adds its devices up front so
        that status lists them before any job)."""
        with self._lock:
            keys = self._devices.get(backend)
            if keys is None:
                keys = self._devices[backend] = DeviceKeys(backend)
            return keys

    def _drop_device_copies(self, name: str) -> None:
        with self._lock:
            devices = list(self._devices.values())
        for keys in devices:
            keys.drop(name)

    def device_status(self) -> list[dict]:
        """Per device: its VRAM budget, the resident keys (bytes, in use, idle) and why others are not resident."""
        if self._provers_devices is not None:
            return self._provers_devices()
        with self._lock:
            devices = list(self._devices.values())
        return [keys.status() for keys in sorted(devices, key=lambda k: k.device)]

    def preload(self, name: str, tier: KeyTier | None = None, *, cancelled: Callable[[], bool] | None = None) -> KeyTier:
        """Bring a key to (at least) ``tier`` now, so the first job does not pay for the load; returns its tier. A key
        homed on the devices is read onto each device whose VRAM has room for it now (the others at first use)."""
        with self.acquire(name, tier, cancelled=cancelled) as lease:
            if lease.tier is KeyTier.DEVICE:
                with self._lock:
                    devices = list(self._devices.values())
                for keys in devices:
                    try:  # one try, no waiting: a busy device loads it when a proof first needs it there
                        keys.acquire(name, lease.zkey, home=lease.home, cancelled=lambda: True).release()
                    except KeyLoadCancelled:
                        log.info("preload: no room on device %d for key %s now; it loads at first use", keys.device, name)
            return lease.tier

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.refcount -= 1
            entry.last_used = time.monotonic()
            idle = entry.refcount == 0
        if idle:  # a waiter that nothing in flight can satisfy gets this key now (see evict_idle)
            self.budget.notify_idle()

    # ---- loading ------------------------------------------------------------------------
    def _load(self, entry: _Entry, tier: KeyTier, cancelled: Callable[[], bool] | None) -> None:
        header = entry.header
        label = f"key {entry.name} ({tier.value})"
        tables = entry.msm_tables and tier is KeyTier.HOT
        r1cs_bytes = self._r1cs_bytes(entry, tier)
        reservation = self._reserve(load_peak(header, tier, self.chunk_bytes, tables) + self._prover_bytes(entry, tier)
                                    + r1cs_bytes, label, cancelled)
        t0 = time.perf_counter()
        table_seconds = 0.0
        try:
            r1cs = None
            if entry.r1cs_path is not None and not self.provers_hold_keys:
                # Its file's mapping (the wire labels' view) is not kept, and the file's cached pages are dropped.
                r1cs = replace(read_r1cs(entry.r1cs_path), wire_to_label=None)
                drop_page_cache(entry.r1cs_path)
            if tier is KeyTier.HOT:
                zkey, buffer = load_hot(entry.path, header, self.allocator, self.chunk_bytes)
                if tables:  # built inside the load's reservation, its transient part (the ring's) covering the scratch
                    t = time.perf_counter()
                    try:
                        zkey = with_msm_tables(zkey)
                    except BaseException:
                        buffer.close()
                        raise
                    table_seconds = time.perf_counter() - t
                    log.info("key %s: MSM window tables (%s) built in %.2f s", entry.name,
                             format_size(msm_table_bytes(header)), table_seconds)
                transient = reservation.nbytes - footprint(header, KeyTier.HOT, msm_tables=tables) - r1cs_bytes
                reservation.release(transient)
            elif tier is KeyTier.DEVICE:
                entry.ring = StagingRing(self.allocator, read_chunk_bytes(header, self.chunk_bytes), turns=self._ring_turns)
                zkey, buffer = load_device_home(entry.path, header, entry.ring), None
                self._share_ring(reservation, entry.ring.nbytes)
            else:
                zkey, buffer = read_zkey(entry.path), None
        except BaseException:
            reservation.release()
            raise
        with self._lock:
            entry.zkey, entry.buffer, entry.reservation, entry.tier = zkey, buffer, reservation, tier
            entry.r1cs = r1cs
            entry.loads += 1
            entry.load_seconds = time.perf_counter() - t0
            entry.table_seconds = table_seconds

    def _share_ring(self, reservation: Reservation, ring: int) -> None:
        """Move a device-homed key's ring out of its load ``reservation`` (which keeps the IC points) into the one
        reservation every such key's ring shares (they take turns): grown to this ring if it is larger, else given back."""
        with self._lock:
            if self._ring_reservation is not None and self._ring_reservation.nbytes >= ring:
                reservation.release(ring)
                return
            grown = reservation.split(ring, label="staging rings of device-homed keys (one at a time)")
            smaller, self._ring_reservation = self._ring_reservation, grown
            if smaller is not None:
                smaller.release()

    def _fit_shared_ring(self) -> None:
        """Under the lock, after device-homed keys went cold: shrink the shared ring reservation to the largest ring
        still homed, or give it back when none is (the budget's lock is a leaf: releasing here is safe)."""
        held = self._ring_reservation
        need = max((e.ring.nbytes for e in self._entries.values() if e.tier is KeyTier.DEVICE and e.ring), default=0)
        if held is not None and held.nbytes > need:
            held.release(held.nbytes - need)
            if not need:
                self._ring_reservation = None

    def _reserve(self, nbytes: int, label: str, cancelled: Callable[[], bool] | None) -> Reservation:
        if cancelled is None:
            return self.budget.acquire(nbytes, "key", label=label)
        while True:  # poll the cancel check between bounded waits
            if cancelled():
                raise KeyLoadCancelled(f"cancelled while waiting for room to load {label}")
            try:
                return self.budget.acquire(nbytes, "key", timeout=0.2, label=label)
            except AcquireTimeout:
                continue

    # ---- eviction -----------------------------------------------------------------------
    def evict(self, name: str) -> int:
        """Drop a key to cold now (the Evict request), its device copies too; returns the host bytes freed."""
        with self._lock:
            entry = self._get(name)
            if entry.refcount or entry.loading is not None:
                raise KeyInUseError(f"key {name!r} is in use by {entry.refcount} job(s); evict it once idle")
            freed = self._detach(entry)
            entry.evictions += 1 if freed else 0
        self._drop_device_copies(name)
        return freed

    def in_flight_release_bytes(self) -> int:
        """Bytes that jobs in flight will give back by themselves: their working sets and load transients."""
        by_category = self.budget.snapshot()["by_category"]
        return by_category["working"]["bytes"] + by_category["transient"]["bytes"]

    def evict_idle(self, needed: int) -> int:
        """The budget's evictor: idle keys, least recently used first (the rule is in the module docstring).

        Any idle key when ``needed`` exceeds what jobs in flight will release (waiting cannot
        help), else only keys idle for at least ``idle_evict_s``.
        """
        min_idle = 0.0 if needed > self.in_flight_release_bytes() else self.idle_evict_s
        now = time.monotonic()
        freed = 0
        with self._lock:
            candidates = sorted(
                (e for e in self._entries.values()
                 if e.tier is not KeyTier.COLD and e.refcount == 0 and e.loading is None and now - e.last_used >= min_idle),
                key=lambda e: e.last_used,
            )
            victims = []
            for entry in candidates:
                if freed >= needed:
                    break
                victims.append(entry)
                freed += entry.reservation.nbytes
            detached = [(e.path, e.buffer, e.reservation) for e in victims]
            for e in victims:
                self._mark_cold(e)
                e.evictions += 1
            self._fit_shared_ring()
        for args in detached:
            self._free(*args)
        self._retry_zombies()
        if victims:
            log.info("evicted idle keys %s for %s", [e.name for e in victims], format_size(needed))
        return freed

    def maintain(self) -> None:
        """Periodic upkeep: hand idle keys to queued budget requests once their idle time has run out."""
        self._retry_zombies()
        if self.budget.shortfall() > 0:
            self.budget.notify_idle()

    def close(self) -> None:
        """Drop every key (the engine is stopping); leases still out keep their arrays alive until released."""
        with self._lock:
            entries = list(self._entries.values())
        for entry in entries:
            self._unload(entry)
        with self._lock:
            devices, self._devices = list(self._devices.values()), {}
        for keys in devices:
            keys.close()
        self.budget.unregister_evictor(self.evict_idle)

    def _unload(self, entry: _Entry) -> None:
        with self._lock:
            self._detach(entry)

    def _detach(self, entry: _Entry) -> int:
        """Under the lock: mark the entry cold and free its memory. Returns the bytes released."""
        if entry.reservation is None:
            return 0
        path, buffer, reservation, tier = entry.path, entry.buffer, entry.reservation, entry.tier
        freed = reservation.nbytes
        self._mark_cold(entry)  # drops the entry's ZKey: with no lease out, nothing else holds its arrays
        self._fit_shared_ring()
        if self._prover_bytes(entry, tier):  # the provers' copies go with this reservation
            self._drop_prover_copy(entry.name, path)
        self._free(path, buffer, reservation)
        return freed

    @staticmethod
    def _mark_cold(entry: _Entry) -> None:
        entry.zkey = entry.buffer = entry.reservation = entry.ring = entry.r1cs = None
        entry.tier = KeyTier.COLD

    def _free(self, path: Path, buffer: HostBuffer | None, reservation: Reservation) -> None:
        if buffer is None:  # warm: unmapped when the views die; then the cached pages can go
            drop_page_cache(path)
            reservation.release()
        elif buffer.close():
            reservation.release()
        else:
            log.warning("key buffer for %s is still referenced; keeping its %s reserved until it is freed", path, format_size(reservation.nbytes))
            with self._zombie_lock:
                self._zombies.append((buffer, reservation))

    def _retry_zombies(self) -> None:
        with self._zombie_lock:
            kept = []
            for buffer, reservation in self._zombies:
                if buffer.close():
                    reservation.release()
                else:
                    kept.append((buffer, reservation))
            self._zombies = kept

    # ---- status -------------------------------------------------------------------------
    def any_loading(self) -> bool:
        """Whether a key load is in flight (cheap: the engine's housekeeping asks every tick)."""
        with self._lock:
            return any(e.loading is not None for e in self._entries.values())

    def loads_total(self) -> int:
        """Key loads so far, all keys, into host memory and onto devices (the engine compares it around a job to tell
        a clean peak measurement)."""
        with self._lock:
            devices = list(self._devices.values())
            host = sum(e.loads for e in self._entries.values())
        return host + sum(keys.uploads for keys in devices)

    def status(self) -> list[dict]:
        if self._provers_devices is not None:  # the worker processes' reports
            resident = {d["device"]: set(d["keys"]) for d in self._provers_devices()}
        with self._lock:
            if self._provers_devices is None:
                resident = {keys.device: set(keys.resident_names()) for keys in self._devices.values()}
            now = time.monotonic()
            return [
                {
                    "name": e.name,
                    "path": str(e.path),
                    "curve": e.header.curve.name,
                    "n_vars": e.header.n_vars,
                    "n_public": e.header.n_public,
                    "domain_size": e.header.domain_size,
                    "tier": e.tier.value,
                    "loading": e.loading is not None,
                    "in_use": e.refcount,
                    "reserved_bytes": e.reservation.nbytes if e.reservation else 0,
                    "hot_bytes": footprint(e.header, KeyTier.HOT, msm_tables=e.msm_tables),
                    "msm_table_bytes": msm_table_bytes(e.header) if e.msm_tables else 0,
                    "r1cs": str(e.r1cs_path) if e.r1cs_path else None,
                    "r1cs_bytes": self._r1cs_bytes(e, KeyTier.HOT),  # held beside any loaded tier's
                    "warm_bytes": footprint(e.header, KeyTier.WARM),
                    "device_home_bytes": footprint(e.header, KeyTier.DEVICE, chunk_bytes=self.chunk_bytes),
                    "idle_s": None if e.tier is KeyTier.COLD or e.refcount else round(now - e.last_used, 3),
                    "loads": e.loads,
                    "evictions": e.evictions,
                    "last_load_s": round(e.load_seconds, 4),  # the MSM tables' build included
                    "last_table_build_s": round(e.table_seconds, 4),
                    "resident_devices": sorted(d for d, names in resident.items() if e.name in names),
                }
                for e in sorted(self._entries.values(), key=lambda e: e.name)
            ]
