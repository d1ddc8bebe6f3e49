"""This process's own memory as the engine sees it between jobs: the peak a job reached, and giving back free heap.

``PeakProbe`` measures how far the resident set rose at its peak (admission attributes it to the
jobs that ran, which calibrates later reservations for their circuits); ``return_free_heap`` hands pages malloc keeps after a job back to the kernel, so
the kernel's charge follows what the budget reserves.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from .limits import read_status_bytes


def _libc_malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _libc_malloc_trim()


def return_free_heap() -> None:
    """Give memory that malloc holds free back to the kernel (glibc ``malloc_trim``).

    After a job its arrays are freed, but glibc keeps much of that memory mapped for
    reuse; the kernel still charges it, so the reconciler would count it as untracked and
    shrink the budget. Trimming after each job keeps the kernel's figure close to what the
    budget reserves, and makes the next peak measurement start from a clean baseline.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class PeakProbe:
    """The peak of the process's resident memory over an interval, from the kernel's high-water mark.

    Why the high-water mark: the CPU backend's numba kernels hold the GIL, so a sampling
    thread would not run during the very kernels whose scratch is the peak. ``begin()``
    resets VmHWM (writing 5 to /proc/self/clear_refs) and returns VmRSS; ``end(baseline)``
    returns ``VmHWM − baseline``: how far the resident set rose above the baseline at its peak.

    Resident means anonymous memory, shared memory and mapped file pages alike: a job's
    witness is a mapped file (the journal's copy, in the page cache the kernel charges to the
    cgroup) as much as its vectors are anonymous memory, and the working-set estimate counts
    both. What a job does *not* own and still maps for the first time — numba's cached machine
    code, shared libraries — is touched by a circuit's first run in a process, which the engine
    never measures; memory malloc kept from before and reuses does not raise the figure. It is
    process-wide, so the engine attributes it across the jobs that ran together
    (``engine.admission``). Unavailable (``available`` False) where clear_refs cannot be written.
    """

    FIELDS = ("VmHWM", "VmRSS")

    def __init__(self) -> None:
        self.available = self._reset() and self._read() is not None

    @staticmethod
    def _reset() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def _read(self) -> dict[str, int] | None:
        fields = read_status_bytes(*self.FIELDS)
        return fields if fields is not None and len(fields) == len(self.FIELDS) else None

    def begin(self) -> int | None:
        """Reset the high-water mark; returns the baseline for ``end`` (the resident set now), None if unavailable."""
        if not self.available or not self._reset():
            return None
        fields = self._read()
        return None if fields is None else fields["VmRSS"]

    def end(self, baseline: int | None) -> int | None:
        """Bytes the resident set rose above ``baseline`` at its peak since the last ``begin``."""
        if baseline is None:
            return None
        fields = self._read()
        return None if fields is None else max(0, fields["VmHWM"] - baseline)
