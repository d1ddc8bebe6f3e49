"""One memory budget for the whole process: reserve before you allocate, release when you free.

Every large host allocation (proving keys, pinned buffers even while idle in their pool,
working sets, load transients) holds a ``Reservation``. The budget never over-commits:
a request that does not fit waits.

How waiting works, and why it cannot lose a wake-up or starve a large request:
- Waiters form one FIFO queue shared by all threads. A new request that fits
  is granted at once only when nobody is queued; otherwise it queues behind the others, so a
  stream of small requests cannot overtake a large one.
- Grants are *handed off*: whoever frees memory (a release, a raised effective limit, a
  waiter giving up) grants queued requests from the head, under the budget's lock, before
  waking them. A woken waiter never has to re-check and retry, so no wake-up can be missed.
- Before a request queues, registered evictors (key manager, pinned pool) are asked to free
  idle memory. Owners of idle reserved memory call ``notify_idle()`` when memory becomes
  idle so that queued requests can have it evicted for them.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from typing import Callable

from .units import format_size

log = logging.getLogger(__name__)

CATEGORIES = ("key", "pinned", "working", "transient", "runtime")  # runtime: the engine process itself (memory.runtime)

Evictor = Callable[[int], int]
"""Called with the bytes still needed; frees idle memory (releasing its reservations) and returns the bytes freed."""


class BudgetExceededError(ValueError):
    """The request is larger than the whole budget: waiting could never satisfy it."""


class AcquireTimeout(TimeoutError):
    """No room was made for the request within its timeout."""


class Reservation:
    """Bytes held in a budget under a category; release all or part of it, or leave a ``with`` block."""

    __slots__ = ("budget", "category", "label", "id", "_nbytes", "created")

    def __init__(self, budget: "MemoryBudget", nbytes: int, category: str, label: str, rid: int):
        self.budget = budget
        self.category = category
        self.label = label
        self.id = rid
        self._nbytes = nbytes
        self.created = time.monotonic()

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def released(self) -> bool:
        return self._nbytes == 0

    def release(self, nbytes: int | None = None) -> int:
        """Give back ``nbytes`` (default: all that is left); returns the bytes released."""
        return self.budget._release(self, nbytes)

    def split(self, nbytes: int, category: str | None = None, label: str | None = None) -> "Reservation":
        """Move ``nbytes`` of this reservation into a new one (another category, another owner) without waiting.

        A job that reserves everything it needs in one request and then hands parts on (to the
        pinned pool, say) never holds memory while waiting for more, so jobs cannot deadlock on
        the budget the way they would by reserving piece by piece.
        """
        return self.budget._split(self, nbytes, category if category is not None else self.category,
                                  label if label is not None else self.label)

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Reservation({format_size(self._nbytes)}, {self.category}, {self.label!r})"


_PENDING, _GRANTED, _ABANDONED = "pending", "granted", "abandoned"


class _Waiter:
    __slots__ = ("nbytes", "category", "label", "state", "reservation", "wake", "since")

    def __init__(self, nbytes: int, category: str, label: str, wake: Callable[[], None]):
        self.nbytes = nbytes
        self.category = category
        self.label = label
        self.state = _PENDING
        self.reservation: Reservation | None = None
        self.wake = wake
        self.since = time.monotonic()


class MemoryBudget:
    """A fixed total of bytes, of which the reconciler may make only part usable (the effective total)."""

    def __init__(self, total_bytes: int, name: str = "host"):
        if isinstance(total_bytes, bool) or not isinstance(total_bytes, int) or total_bytes < 0:
            raise ValueError(f"budget total must be a non-negative number of bytes, got {total_bytes!r}")
        self.name = name
        self.total_bytes = total_bytes
        self._effective = total_bytes
        self._reserved = 0
        self._peak_reserved = 0
        self._by_category = {c: 0 for c in CATEGORIES}
        self._live: dict[int, Reservation] = {}
        self._queue: deque[_Waiter] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._evictors: list[Evictor] = []

    # -- reading -------------------------------------------------------------------------------

    @property
    def effective_total_bytes(self) -> int:
        return self._effective

    @property
    def reserved_bytes(self) -> int:
        return self._reserved

    @property
    def available_bytes(self) -> int:
        """Bytes a new request could get now (0 when the effective total sits below what is reserved)."""
        return max(0, self._effective - self._reserved)

    def shortfall(self) -> int:
        """Bytes the first queued request still lacks (0 when nobody waits)."""
        with self._lock:
            return self._shortfall_locked()

    def snapshot(self) -> dict:
        with self._lock:
            by_category = {c: {"bytes": b, "count": 0} for c, b in self._by_category.items()}
            for r in self._live.values():
                by_category[r.category]["count"] += 1
            return {
                "name": self.name,
                "total_bytes": self.total_bytes,
                "effective_total_bytes": self._effective,
                "reserved_bytes": self._reserved,
                "available_bytes": max(0, self._effective - self._reserved),
                "peak_reserved_bytes": self._peak_reserved,
                "by_category": by_category,
                "reservations": len(self._live),
                "waiters": len(self._queue),
                "waiting_bytes": sum(w.nbytes for w in self._queue),
                "oldest_wait_s": round(time.monotonic() - self._queue[0].since, 3) if self._queue else 0.0,
                "shortfall_bytes": self._shortfall_locked(),
            }

    # -- acquiring -----------------------------------------------------------------------------

    def try_acquire(self, nbytes: int, category: str, label: str = "") -> Reservation | None:
        """A reservation if it fits now and nobody is queued ahead; never waits, never evicts."""
        self._check_request(nbytes, category)
        with self._lock:
            self._check_fits_total(nbytes, label)
            if not self._queue and nbytes <= self._effective - self._reserved:
                return self._grant_locked(nbytes, category, label)
            return None

    def acquire(self, nbytes: int, category: str, timeout: float | None = None, label: str = "") -> Reservation:
        """Reserve ``nbytes``, evicting idle memory and then waiting (FIFO) if it does not fit.

        Raises BudgetExceededError at once for a request larger than the whole budget, and
        AcquireTimeout when ``timeout`` seconds pass without a grant.
        """
        deadline = self._deadline(timeout)
        reservation = self._grant_or_evict(nbytes, category, label)
        if reservation is not None:
            return reservation
        event = threading.Event()
        waiter = self._enqueue_or_grant(nbytes, category, label, event.set)
        if isinstance(waiter, Reservation):
            return waiter
        try:
            event.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except BaseException:
            self._give_up(waiter)
            raise
        return self._take_grant(waiter, nbytes, category, label, timeout)

    def try_grow(self, reservation: Reservation, nbytes: int) -> bool:
        """Add ``nbytes`` to a live reservation if they fit now and nobody is queued; never waits, never evicts."""
        self._check_grow(reservation, nbytes)
        with self._lock:
            if self._queue or nbytes > self._effective - self._reserved:
                return False
            self._grow_locked(reservation, nbytes)
            return True

    def account_resident(self, reservation: Reservation, nbytes: int) -> None:
        """Add ``nbytes`` that are already resident and charged — memory the reconciler counts as untracked, now
        named — to a live reservation, even past the free room or behind queued requests: it takes nothing a waiter
        could be granted, since the reconciler already took those bytes out of the effective total (its
        ``accounted`` gives them back there)."""
        self._check_grow(reservation, nbytes)
        with self._lock:
            self._grow_locked(reservation, nbytes)

    def _check_grow(self, reservation: Reservation, nbytes: int) -> None:
        self._check_request(nbytes, reservation.category)
        if reservation.budget is not self:
            raise ValueError(f"cannot grow {reservation!r}: it belongs to another budget")

    def _grow_locked(self, reservation: Reservation, nbytes: int) -> None:
        self._reserved += nbytes
        self._peak_reserved = max(self._peak_reserved, self._reserved)
        self._by_category[reservation.category] += nbytes
        reservation._nbytes += nbytes
        self._live[reservation.id] = reservation

    # -- releasing, limits, evictors -----------------------------------------------------------

    def set_effective_limit(self, nbytes: int | None) -> None:
        """Make only ``nbytes`` of the total usable (None: all of it); queued requests that now fit are granted."""
        with self._lock:
            self._effective = self.total_bytes if nbytes is None else max(0, min(int(nbytes), self.total_bytes))
            self._grant_queued_locked()

    def register_evictor(self, evictor: Evictor) -> Evictor:
        with self._lock:
            self._evictors.append(evictor)
        return evictor

    def unregister_evictor(self, evictor: Evictor) -> None:
        with self._lock:
            self._evictors.remove(evictor)

    def notify_idle(self) -> int:
        """Called by owners of reserved memory that just became idle: evict for queued requests. Returns bytes freed."""
        needed = self.shortfall()
        return self._run_evictors(needed) if needed > 0 else 0

    # -- internals -----------------------------------------------------------------------------

    @staticmethod
    def _deadline(timeout: float | None) -> float | None:
        if timeout is None:
            return None
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
        return time.monotonic() + timeout

    @staticmethod
    def _check_request(nbytes: int, category: str) -> None:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"reservation size must be a non-negative number of bytes, got {nbytes!r}")
        if category not in CATEGORIES:
            raise ValueError(f"unknown reservation category {category!r} (one of {', '.join(CATEGORIES)})")

    def _check_fits_total(self, nbytes: int, label: str) -> None:
        if nbytes > self.total_bytes:
            what = f" for {label}" if label else ""
            raise BudgetExceededError(f"request of {format_size(nbytes)}{what} exceeds the whole {self.name} memory budget "
                                      f"of {format_size(self.total_bytes)}")

    def _timeout_error(self, nbytes: int, category: str, label: str, timeout: float | None) -> AcquireTimeout:
        snap = self.snapshot()
        what = f" ({label})" if label else ""
        return AcquireTimeout(f"no room for {format_size(nbytes)} of {category} memory{what} within {timeout} s: "
                              f"{format_size(snap['reserved_bytes'])} of {format_size(snap['effective_total_bytes'])} reserved, "
                              f"{snap['waiters']} request(s) queued")

    def _shortfall_locked(self) -> int:
        if not self._queue:
            return 0
        return max(0, self._queue[0].nbytes - (self._effective - self._reserved))

    def _grant_locked(self, nbytes: int, category: str, label: str) -> Reservation:
        self._reserved += nbytes
        self._peak_reserved = max(self._peak_reserved, self._reserved)
        return self._register_locked(nbytes, category, label)

    def _register_locked(self, nbytes: int, category: str, label: str) -> Reservation:
        reservation = Reservation(self, nbytes, category, label, next(self._ids))
        self._by_category[category] += nbytes
        self._live[reservation.id] = reservation
        return reservation

    def _grant_queued_locked(self) -> None:
        """Hand memory to queued requests in order, stopping at the first that does not fit."""
        while self._queue and self._queue[0].nbytes <= self._effective - self._reserved:
            waiter = self._queue.popleft()
            reservation = self._grant_locked(waiter.nbytes, waiter.category, waiter.label)
            try:
                waiter.wake()
            except RuntimeError:  # its event loop is closed: nobody will ever take this grant
                self._release_locked(reservation, None, regrant=False)
                waiter.state = _ABANDONED
                continue
            waiter.reservation = reservation
            waiter.state = _GRANTED

    def _abandon_locked(self, waiter: _Waiter) -> None:
        if waiter.state == _PENDING:
            self._queue.remove(waiter)
            waiter.state = _ABANDONED
            # It may have been the head that everyone else was waiting behind.
            self._grant_queued_locked()

    def _take_grant(self, waiter: _Waiter, nbytes: int, category: str, label: str, timeout: float | None) -> Reservation:
        with self._lock:
            if waiter.state == _GRANTED:
                return waiter.reservation
            self._abandon_locked(waiter)
        raise self._timeout_error(nbytes, category, label, timeout)

    def _give_up(self, waiter: _Waiter) -> None:
        """The waiter will never take its grant (interrupted or cancelled): leave the queue or return the bytes."""
        with self._lock:
            if waiter.state == _GRANTED:
                waiter.state = _ABANDONED
                self._release_locked(waiter.reservation, None)
            else:
                self._abandon_locked(waiter)

    def _grant_or_evict(self, nbytes: int, category: str, label: str) -> Reservation | None:
        self._check_request(nbytes, category)
        with self._lock:
            self._check_fits_total(nbytes, label)
            if not self._queue and nbytes <= self._effective - self._reserved:
                return self._grant_locked(nbytes, category, label)
            needed = nbytes - max(0, self._effective - self._reserved)
        self._run_evictors(needed)
        return None

    def _enqueue_or_grant(self, nbytes: int, category: str, label: str, wake: Callable[[], None]) -> _Waiter | Reservation:
        with self._lock:
            if not self._queue and nbytes <= self._effective - self._reserved:
                return self._grant_locked(nbytes, category, label)
            waiter = _Waiter(nbytes, category, label, wake)
            self._queue.append(waiter)
            return waiter

    def _run_evictors(self, needed: int) -> int:
        """Ask evictors, in registration order, for ``needed`` bytes; never holds the budget's lock (they release into it)."""
        with self._lock:
            evictors = list(self._evictors)
        freed = 0
        for evictor in evictors:
            if freed >= needed:
                break
            try:
                freed += max(0, int(evictor(needed - freed)))
            except Exception:
                log.exception("memory evictor %r failed; continuing with the others", evictor)
        return freed

    def _split(self, reservation: Reservation, nbytes: int, category: str, label: str) -> Reservation:
        self._check_request(nbytes, category)
        with self._lock:
            if nbytes > reservation._nbytes:
                raise ValueError(f"cannot split {nbytes} bytes from {reservation!r}: it holds {reservation._nbytes}")
            reservation._nbytes -= nbytes
            self._by_category[reservation.category] -= nbytes
            if reservation._nbytes == 0:
                self._live.pop(reservation.id, None)
            return self._register_locked(nbytes, category, label)

    def _release(self, reservation: Reservation, nbytes: int | None) -> int:
        with self._lock:
            return self._release_locked(reservation, nbytes)

    def _release_locked(self, reservation: Reservation, nbytes: int | None, regrant: bool = True) -> int:
        held = reservation._nbytes
        amount = held if nbytes is None else nbytes
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0 or amount > held:
            raise ValueError(f"cannot release {amount!r} bytes from {reservation!r}: it holds {held}")
        reservation._nbytes = held - amount
        self._reserved -= amount
        self._by_category[reservation.category] -= amount
        if reservation._nbytes == 0:
            self._live.pop(reservation.id, None)
        if regrant and amount:
            self._grant_queued_locked()
        return amount
