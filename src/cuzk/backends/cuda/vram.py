"""Device-memory accounting: a per-device budget and bases kept resident in it.

The budget starts from what cudaMemGetInfo reports free when the backend is created,
minus a margin (CUDA context growth, CuPy's pool rounding, other processes' small
allocations). Everything long-lived (resident bases, twiddle tables) holds a reservation,
and so does everything a proof holds while it runs (its vectors, each MSM's working set: an
MSM's chunk plan *is* its reservation), so the proofs several lanes run on one device at once
never together exceed the budget, and nothing is launched to fail for lack of memory. An MSM
that finds no room while other MSMs hold theirs waits for one to end (``wait_for_release``):
an MSM holds its working set only while it computes, waiting for nothing else, so that wait
always ends. A proof admitted with device vectors waits for its vectors' room the same way
(``reserve_when_free``), but holding nothing on the device while it waits: what holds the room
then is other proofs, which end, and idle keys, which are evicted. Evictors (the key manager's
VRAM tier) give back idle resident bases when a reservation or a whole MSM's working set needs
the room (``make_room``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ...curves import Curve

DEFAULT_MARGIN_FRACTION = 0.05
MIN_MARGIN_BYTES = 512 << 20


class VramExhaustedError(MemoryError):
    """A device allocation would exceed the device's VRAM budget."""


class VramBudget:
    """Bytes cuzk may hold on one device; reservations are explicit and released explicitly."""

    def __init__(self, total_bytes: int, device: int = 0):
        if total_bytes < 0:
            raise ValueError(f"VRAM budget must be non-negative, got {total_bytes}")
        self.total_bytes = int(total_bytes)
        self.device = device
        self._reserved = 0
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)
        self._transient = 0  # bytes of reservations that end on their own (MSM working sets): worth waiting for
        self._releases = 0  # transient reservations ended so far (``wait_for_release``)
        self._frees = 0  # reservations of any kind ended so far (``reserve_when_free``)
        self._evictors: list = []  # objects with idle_bytes() and evict_idle(bytes_needed) -> bytes freed

    @classmethod
    def from_free_memory(cls, free_bytes: int, device: int = 0, margin_bytes: int | None = None) -> "VramBudget":
        if margin_bytes is None:
            margin_bytes = max(MIN_MARGIN_BYTES, int(free_bytes * DEFAULT_MARGIN_FRACTION))
        return cls(max(0, free_bytes - margin_bytes), device)

    @property
    def reserved_bytes(self) -> int:
        return self._reserved

    @property
    def available_bytes(self) -> int:
        return self.total_bytes - self._reserved

    def register_evictor(self, evictor) -> None:
        self._evictors.append(evictor)

    def unregister_evictor(self, evictor) -> None:
        self._evictors.remove(evictor)

    def make_room(self, nbytes: int) -> bool:
        """Evict idle holders until ``nbytes`` are available; whether they are.

        Evicts nothing when even every idle holder together could not make the room, so a
        request that cannot fit never costs a resident key its place.
        """
        short = int(nbytes) - self.available_bytes
        if short <= 0:
            return True
        if short > sum(e.idle_bytes() for e in list(self._evictors)):
            return False
        for evictor in list(self._evictors):
            short = int(nbytes) - self.available_bytes
            if short <= 0:
                break
            evictor.evict_idle(short)
        return self.available_bytes >= nbytes

    def try_reserve(self, nbytes: int, what: str, evict: bool = True, transient: bool = False) -> "VramReservation | None":
        """``reserve``, or None when the bytes do not fit (``evict``: idle holders may be evicted to make them fit)."""
        if not evict and nbytes > self.available_bytes:
            return None
        try:
            return self.reserve(nbytes, what, evict=evict, transient=transient)
        except VramExhaustedError:
            return None

    def reserve(self, nbytes: int, what: str, evict: bool = True, transient: bool = False) -> "VramReservation":
        """``nbytes`` held until released, checked and taken under the lock (so two callers never both fit in the
        same room); idle holders are evicted first when they must be and ``evict`` allows. ``transient``: held by
        work that releases it without waiting for anything else (an MSM), so another may wait for it to end."""
        nbytes = int(nbytes)
        if evict and nbytes > self.available_bytes:
            self.make_room(nbytes)
        with self._lock:
            if nbytes > self.total_bytes - self._reserved:
                raise VramExhaustedError(
                    f"{what} needs {nbytes / 2**20:.1f} MiB of device {self.device} memory but only "
                    f"{(self.total_bytes - self._reserved) / 2**20:.1f} MiB of its {self.total_bytes / 2**20:.1f} MiB budget is free"
                )
            self._reserved += nbytes
            self._transient += nbytes if transient else 0
        return VramReservation(self, nbytes, transient)

    def reserve_waiting(self, nbytes: int, what: str) -> "VramReservation":
        """A transient reservation, waiting for other transient ones to end while it does not fit; VramExhaustedError
        when it does not fit and none is held."""
        while True:
            since = self._releases
            reservation = self.try_reserve(nbytes, what, transient=True)
            if reservation is not None:
                return reservation
            if not self.wait_for_release(since):
                return self.reserve(nbytes, what, transient=True)  # the error names the bytes, unless room came since

    def reserve_when_free(self, nbytes: int, what: str, cancelled: Callable[[], bool],
                          poll_seconds: float = 0.2) -> "VramReservation | None":
        """``nbytes`` once they fit (idle holders evicted for them), waiting for any reservation to end in bounded waits
        that poll ``cancelled``; None when cancelled or when they exceed the whole budget. The caller must hold no
        reservation of its own while it waits: it waits for others' work to end."""
        while nbytes <= self.total_bytes:
            since = self._frees
            reservation = self.try_reserve(nbytes, what)
            if reservation is not None:
                return reservation
            if cancelled():
                return None
            with self._released:
                if self._frees == since:
                    self._released.wait(poll_seconds)
        return None

    @property
    def releases(self) -> int:
        """How many transient reservations have ended: read it before a try, then ``wait_for_release(since=...)``."""
        return self._releases

    def wait_for_release(self, since: int) -> bool:
        """Wait until a transient reservation ends after the ``since`` reading of ``releases``; False at once when
        none has and none is held (nothing would ever end on its own: waiting could not help)."""
        with self._released:
            while self._releases == since:
                if not self._transient:
                    return False
                self._released.wait()
            return True

    def _release(self, nbytes: int, transient: bool) -> None:
        with self._released:
            self._reserved -= nbytes
            self._frees += 1
            self._released.notify_all()
            if transient:
                self._transient -= nbytes
                self._releases += 1


@dataclass
class VramReservation:
    budget: VramBudget
    nbytes: int
    transient: bool = False
    _released: bool = field(default=False, repr=False)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.budget._release(self.nbytes, self.transient)

    def __enter__(self) -> "VramReservation":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@dataclass(eq=False)  # a handle on device memory: equal only to itself (it holds device arrays)
class DeviceBases:
    """A key's MSM bases resident in VRAM: repeated proofs upload only their scalars.

    ``points`` is the (n, words) device array in the backend's layout. ``table`` is their
    window table once an MSM has built one (msm.py: 2^(c·w)·P_i for every window w of
    ``table_bits`` = c, under a reservation of its own, ``table_reservation``, read by
    ``table_users`` MSMs now), None before, when the budget had no room for it, or after the
    budget evicted it (then ``table_wait`` MSMs run without it before it is built again).
    ``free()`` gives all of it and its reservations back (the key manager calls it on eviction).
    """

    curve: Curve
    group: str
    points: object
    reservation: VramReservation
    table: object = None
    table_bits: int = 0
    table_reservation: VramReservation | None = None
    table_users: int = 0
    graphs: list = field(default_factory=list)  # idle captured MSMs over the table (msm.MsmGraph)
    table_evictions: int = 0  # times the budget evicted the table for room
    table_wait: int = 0  # MSMs over these bases still to run without a table before it is built again

    @property
    def n(self) -> int:
        return int(self.points.shape[0])

    @property
    def nbytes(self) -> int:
        """VRAM held: the bases, their window table when one was built, and its idle MSM graphs."""
        return (self.reservation.nbytes + (self.table_reservation.nbytes if self.table_reservation is not None else 0)
                + sum(g.nbytes for g in self.graphs))

    def free(self) -> None:
        self.points = None
        self.reservation.release()
        self.drop_table()

    def drop_table(self) -> int:
        """Free the window table and the idle MSM graphs over it (none may be reading it); the bytes given back."""
        freed = sum(g.free() for g in self.graphs)
        self.graphs = []
        held, self.table, self.table_bits, self.table_reservation = self.table_reservation, None, 0, None
        if held is None:
            return freed
        held.release()
        return freed + held.nbytes

    def __len__(self) -> int:
        return self.n
