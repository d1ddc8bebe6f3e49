"""The VRAM tier: a key's MSM bases resident on one device, kept across proofs.

One ``DeviceKeys`` per device (per proving backend with memory of its own: a
``backends.base.DeviceBackend``, i.e. the CUDA backend). ``acquire(name, zkey)`` returns a lease whose
``zkey`` is the host key with its A, B1, B2, C, H bases replaced by resident ``DeviceBases``
when the device's VRAM budget allows — uploaded on the first use, reused after — and the
host key itself otherwise, so an MSM whose bases do not fit runs in chunks from host memory
and is never launched to fail.

A resident key counts its leases; an idle one (no lease) is evicted least recently used
first when the device's budget needs room for another key or for an MSM's working set
(the tier registers itself as the budget's evictor), and by ``drop`` when the key manager
evicts, re-registers or unregisters the key.

A key is made resident only when its bases *and* the proof's own device working set
(``proof_vram_bytes``: the NTT vectors and one full-size resident MSM) fit, so residency
never pushes the proof it serves into chunked MSMs. For a job whose synthesis was left to
the device (``acquire(..., coefficients=True)``), the key's coefficients
(``coefficient_bytes``) join them when they fit too — at the upload, or at a later such
acquire when they did not fit then — and the proof makes A·w and B·w on the device
(``prover.groth16``). ``can_synthesize`` says whether they can fit at all: the engine defers
synthesis only for a key every device can hold with its coefficients
(``KeyManager.synthesizes_on_devices``). A lease's key without resident coefficients carries
the host key's, so a deferred proof that meets one is synthesized on the CPU.

A proof admitted with device vectors acquires its lease after reserving its vectors
(``vectors_reserved``), so the room asked for beside the key does not count them twice.

Several proving lanes of one device acquire at once: one uploads a key while the others
wanting it wait for that upload rather than making a second copy; the bases are read-only
once resident.

A key *homed on the devices* (``KeyTier.DEVICE``: no host copy) is acquired with its ``KeyFile``
(path, header, staging ring): when it is not resident, ``load_from_disk`` reads its bases and
coefficients from the file through the ring straight into VRAM, after waiting for room for them
and a proof beside them (idle keys evicted for it; an evicted key is read from disk again at its
next use). ``load_from_disk`` needs only the file, the header's section table, a device backend
and a ring — no engine state — so it runs as well in a process of its own per device.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import DeviceBackend
from ..formats import zkey as zkey_format
from ..formats.binfile import BinFile
from ..formats.zkey import KEY_BASES, ZKey, ZKeyHeader
from ..memory.units import format_size
from ..prover.sizing import bases_bytes, coefficient_bytes, holds_device_vectors, proof_vram_bytes
from .errors import KeyLoadCancelled, KeyManagerError
from .host import array_shapes, section_spans
from .stream import SectionReader, StagingRing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyFile:
    """A key homed on the devices: its file, its header (the section table) and the staging ring its loads read
    through (reserved in the host budget by the key manager)."""

    path: Path
    header: ZKeyHeader
    ring: StagingRing


class DeviceKeyTooLarge(KeyManagerError):
    """A device-homed key whose bases, coefficients and one proof exceed a device's whole VRAM budget."""


def load_from_disk(path: Path, header: ZKeyHeader, backend: DeviceBackend, ring: StagingRing) -> ZKey:
    """The key's bases and coefficients resident on ``backend``'s device, read from ``path`` through ``ring``
    (O_DIRECT: the host holds the ring and nothing else, not even page cache); its coefficients checked chunk by chunk
    as snarkjs's reader checks them (a FormatError names the entry). All or nothing: on any error, nothing stays
    reserved. The key it returns has no host arrays."""
    spans, shapes = section_spans(header), array_shapes(header)
    resident: dict[str, object] = {}
    try:
        with ring, SectionReader(path, ring) as reader, BinFile(path, "zkey", zkey_format.ZKEY_MAX_VERSION,
                                                                 zkey_format.SECTION_NAMES) as f:
            for name, group in KEY_BASES:
                offset, nbytes = spans[name]
                resident[name] = backend.upload_bases_from(header.curve, group, shapes[name][1][0],
                                                           reader.chunks(offset, nbytes))
            offset, nbytes = spans["coeffs"]
            entry = zkey_format.coeff_dtype(header.n8r)

            def passes():
                for chunk in reader.chunks(offset, nbytes, entry.itemsize):
                    zkey_format.check_coeffs(f, header, chunk.array.view(entry), first=chunk.start // entry.itemsize)
                    yield chunk
            resident["coeffs"] = backend.upload_coefficients_from(header.curve, header.n_coeffs, header.n_vars,
                                                                  header.domain_size, passes)
    except BaseException:
        for arrays in resident.values():
            arrays.free()
        raise
    return ZKey(**{fl.name: getattr(header, fl.name) for fl in dataclasses.fields(ZKeyHeader)}, ic=None, **resident)


@dataclass
class _Resident:
    name: str
    zkey: ZKey  # the host key's header with DeviceBases in place of its bases (no host arrays), DeviceCoefficients or None
    nbytes: int
    refcount: int = 0
    last_used: float = 0.0
    upload_seconds: float = 0.0
    coefficients_uploading: bool = False  # one acquire at a time adds the coefficients of a key resident without them

    @property
    def has_coefficients(self) -> bool:
        return self.zkey.coeffs is not None

    def lease_key(self, host: ZKey) -> ZKey:
        """The key a job proves with: the resident one, carrying the host coefficients when it has none of its own."""
        return self.zkey if self.has_coefficients else dataclasses.replace(self.zkey, coeffs=host.coeffs)


class DeviceKeyLease:
    """A job's use of a key on one device; ``zkey`` has resident bases when ``resident``."""

    def __init__(self, keys: DeviceKeys | None, entry: _Resident | None, zkey: ZKey):
        self._keys = keys
        self._entry = entry
        self.zkey = zkey
        self.resident = entry is not None

    def release(self) -> None:
        keys, self._keys = self._keys, None
        self.zkey = None
        if keys is not None and self._entry is not None:
            keys._release(self._entry)

    def __enter__(self) -> DeviceKeyLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class DeviceKeys:
    """Keys resident in one device's VRAM (see the module docstring)."""

    def __init__(self, backend: DeviceBackend):
        self.backend = backend
        self.device = backend.vram.device
        self._lock = threading.Lock()
        self._resident: OrderedDict[str, _Resident] = OrderedDict()  # least recently used first
        self._refused: dict[str, str] = {}  # name → why it is not resident (status)
        self._uploading: dict[str, threading.Event] = {}  # name → set when its upload (by another lane) ends
        self.evictions = 0
        self.uploads = 0
        backend.vram.register_evictor(self)

    def can_synthesize(self, header: ZKeyHeader) -> bool:
        """Whether this device's whole budget holds the key's bases and coefficients and a proof beside them."""
        return holds_device_vectors(header, self.backend, coefficients=True)

    def shortfall(self, header: ZKeyHeader) -> str:
        """The VRAM a key's bases, coefficients and one proof need against this device's whole budget (a refusal's
        words)."""
        need = bases_bytes(header) + coefficient_bytes(header) + proof_vram_bytes(header, self.backend)
        return (f"device {self.device} needs {format_size(need)} for its bases, coefficients and a proof, its budget "
                f"is {format_size(self.backend.vram.total_bytes)}")

    def acquire(self, name: str, zkey: ZKey, coefficients: bool = False, vectors_reserved: bool = False, *,
                home: KeyFile | None = None, cancelled: Callable[[], bool] | None = None) -> DeviceKeyLease:
        """A lease on ``name``'s bases on this device, and its coefficients when asked for: resident when they, and a
        proof beside them, fit (``vectors_reserved``: the proof holds its vectors' reservation already). A key homed
        here (``home``) is always resident with its coefficients: loaded from its file once room is free, which is
        waited for (``cancelled`` polled: KeyLoadCancelled)."""
        while True:
            with self._lock:
                entry = self._resident.get(name)
                if entry is not None:
                    entry.refcount += 1
                    entry.last_used = time.monotonic()
                    self._resident.move_to_end(name)
                    add_coefficients = coefficients and not entry.has_coefficients and not entry.coefficients_uploading
                    entry.coefficients_uploading |= add_coefficients
                    break
                uploading = self._uploading.get(name)
                if uploading is None:
                    uploading = self._uploading[name] = threading.Event()
                    break
            uploading.wait()  # another lane is uploading it: use that copy (or try again if it did not fit)
        if entry is not None:
            if add_coefficients and home is None:
                try:
                    self._add_coefficients(entry, zkey, vectors_reserved)
                except BaseException:
                    self._release(entry)
                    raise
            return DeviceKeyLease(self, entry, entry.lease_key(zkey))
        try:
            if home is not None:
                return self._load_home(name, home, vectors_reserved, cancelled or (lambda: False))
            return self._upload(name, zkey, coefficients, vectors_reserved)
        finally:
            with self._lock:
                del self._uploading[name]
            uploading.set()

    def _upload(self, name: str, zkey: ZKey, coefficients: bool, vectors_reserved: bool) -> DeviceKeyLease:
        """Make ``name`` resident (with its coefficients when asked and they fit) and lease it, or lease the host key
        when it does not fit (its caller is the only one uploading ``name``)."""
        bases = bases_bytes(zkey)
        need = bases + proof_vram_bytes(zkey, self.backend, vectors_reserved=vectors_reserved)
        vram = self.backend.vram
        with_coefficients = coefficients and self._room_for(need + coefficient_bytes(zkey))
        if not with_coefficients and not self._room_for(need):
            why = (f"bases {format_size(bases)} + proof working set {format_size(need - bases)} do not fit in "
                   f"{format_size(vram.available_bytes)} free of device {self.device}'s {format_size(vram.total_bytes)} budget")
            with self._lock:
                if self._refused.get(name) != why:
                    log.info("key %s stays in host memory on device %d: %s", name, self.device, why)
                self._refused[name] = why
            return DeviceKeyLease(None, None, zkey)
        t0 = time.perf_counter()
        try:
            device_zkey = self.backend.upload_key(zkey)
        except MemoryError as exc:  # VramExhaustedError, or the device's own out-of-memory: prove from host memory
            with self._lock:
                self._refused[name] = str(exc)
            return DeviceKeyLease(None, None, zkey)
        # Proving needs only the bases, the coefficients and the header's points: drop the host arrays, so that
        # evicting the host key really frees its buffer while the device copy lives on.
        try:
            resident_coefficients = self._upload_coefficients(zkey) if with_coefficients else None
        except BaseException:  # a device error, or coefficients that index outside the key: nothing stays reserved
            self.backend.free_key(device_zkey)
            raise
        device_zkey = dataclasses.replace(device_zkey, ic=None, coeffs=resident_coefficients)
        nbytes = bases + (resident_coefficients.nbytes if resident_coefficients is not None else 0)
        entry = _Resident(name, device_zkey, nbytes, refcount=1, last_used=time.monotonic(),
                          upload_seconds=time.perf_counter() - t0)
        with self._lock:
            self._refused.pop(name, None)
            self._resident[name] = entry
            self.uploads += 1
        log.info("key %s resident on device %d (%s%s, uploaded in %.3f s)", name, self.device, format_size(nbytes),
                 " with its coefficients" if entry.has_coefficients else "", entry.upload_seconds)
        return DeviceKeyLease(self, entry, entry.lease_key(zkey))

    def _load_home(self, name: str, home: KeyFile, vectors_reserved: bool, cancelled: Callable[[], bool]) -> DeviceKeyLease:
        """Load a device-homed key from its file once its bases, coefficients and a proof fit (its caller is the only
        one loading ``name`` here)."""
        header, vram = home.header, self.backend.vram
        beside = max(proof_vram_bytes(header, self.backend, vectors_reserved=vectors_reserved),  # the proof, after it
                     self.backend.coefficient_layout_scratch_bytes(header.curve, header.domain_size, home.ring.chunk_bytes))
        need = bases_bytes(header) + coefficient_bytes(header) + beside
        t0 = time.perf_counter()
        while True:
            room = vram.reserve_when_free(need, f"room for key {name}", cancelled)
            if room is None:
                if need > vram.total_bytes:
                    raise DeviceKeyTooLarge(
                        f"key {name!r}: bases, coefficients and a proof (or the coefficients' layout being built) need "
                        f"{format_size(need)} of VRAM, more than "
                        f"device {self.device}'s whole budget of {format_size(vram.total_bytes)}")
                raise KeyLoadCancelled(f"cancelled while waiting for device {self.device}'s VRAM to load key {name}")
            room.release()  # the load reserves each array itself; another lane taking the room first means waiting again
            try:
                device_zkey = load_from_disk(home.path, header, self.backend, home.ring)
                break
            except MemoryError as exc:
                log.info("key %s: device %d's room went to another proof while loading (%s); waiting again", name,
                         self.device, exc)
        entry = _Resident(name, device_zkey, bases_bytes(header) + device_zkey.coeffs.nbytes, refcount=1,
                          last_used=time.monotonic(), upload_seconds=time.perf_counter() - t0)
        with self._lock:
            self._refused.pop(name, None)
            self._resident[name] = entry
            self.uploads += 1
        log.info("key %s loaded from disk onto device %d (%s with its coefficients, in %.3f s)", name, self.device,
                 format_size(entry.nbytes), entry.upload_seconds)
        return DeviceKeyLease(self, entry, entry.zkey)

    def _room_for(self, nbytes: int) -> bool:
        vram = self.backend.vram
        return nbytes <= vram.total_bytes and vram.make_room(nbytes)

    def _upload_coefficients(self, zkey: ZKey):
        """The key's coefficients resident on this device, or None when they do not fit (synthesis stays on the CPU)."""
        try:
            return self.backend.upload_coefficients(zkey.curve, zkey.coeffs, zkey.n_vars, zkey.domain_size)
        except MemoryError as exc:
            log.info("coefficients of a %s key stay in host memory on device %d: %s", zkey.curve.name, self.device, exc)
            return None

    def _add_coefficients(self, entry: _Resident, zkey: ZKey, vectors_reserved: bool) -> None:
        """Make a resident key's coefficients resident too when they, and a proof beside them, fit now."""
        coefficients = None
        try:
            proof = proof_vram_bytes(zkey, self.backend, vectors_reserved=vectors_reserved)
            if self._room_for(coefficient_bytes(zkey) + proof):
                coefficients = self._upload_coefficients(zkey)
        finally:
            with self._lock:
                entry.coefficients_uploading = False
                if coefficients is not None:
                    entry.zkey = dataclasses.replace(entry.zkey, coeffs=coefficients)
                    entry.nbytes += coefficients.nbytes

    def _release(self, entry: _Resident) -> None:
        with self._lock:
            entry.refcount -= 1
            entry.last_used = time.monotonic()
            orphan = entry.refcount == 0 and self._resident.get(entry.name) is not entry
        if orphan:  # dropped while in use: free it now that its last job is done
            self.backend.free_key(entry.zkey)

    def idle_bytes(self) -> int:
        """Bytes ``evict_idle`` could free now (resident keys no job is using)."""
        with self._lock:
            return sum(e.nbytes for e in self._resident.values() if e.refcount == 0)

    def evict_idle(self, needed: int) -> int:
        """The VRAM budget's evictor: idle resident keys, least recently used first, until ``needed`` bytes are freed."""
        victims, freed = [], 0
        with self._lock:
            for entry in list(self._resident.values()):
                if freed >= needed:
                    break
                if entry.refcount == 0:
                    del self._resident[entry.name]
                    victims.append(entry)
                    freed += entry.nbytes
            self.evictions += len(victims)
        for entry in victims:
            self.backend.free_key(entry.zkey)
        if victims:
            log.info("device %d: evicted idle resident keys %s for %s", self.device, [e.name for e in victims], format_size(needed))
        return freed

    def drop(self, name: str) -> int:
        """Forget ``name``'s device copy (the key was evicted, re-registered or unregistered); returns bytes freed now.

        A copy still in use is freed when its last lease is released.
        """
        with self._lock:
            entry = self._resident.pop(name, None)
            self._refused.pop(name, None)
        if entry is None:
            return 0
        self.evictions += 1
        if entry.refcount:
            return 0
        self.backend.free_key(entry.zkey)
        return entry.nbytes

    def close(self) -> None:
        with self._lock:
            names = list(self._resident)
        for name in names:
            self.drop(name)
        self.backend.vram.unregister_evictor(self)

    def status(self) -> dict:
        vram = self.backend.vram
        now = time.monotonic()
        with self._lock:
            return {
                "device": self.device,
                "vram_total_bytes": vram.total_bytes,
                "vram_reserved_bytes": vram.reserved_bytes,
                "resident_bytes": sum(e.nbytes for e in self._resident.values()),
                "uploads": self.uploads,
                "evictions": self.evictions,
                "keys": {e.name: {"bytes": e.nbytes, "in_use": e.refcount, "coefficients": e.has_coefficients,
                                  "idle_s": None if e.refcount else round(now - e.last_used, 3),
                                  "upload_s": round(e.upload_seconds, 4)} for e in self._resident.values()},
                "not_resident": dict(self._refused),
            }

    def resident_names(self) -> list[str]:
        with self._lock:
            return list(self._resident)
