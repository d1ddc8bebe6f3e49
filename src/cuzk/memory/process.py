"""This process's own memory as the engine sees it between jobs: the peak a job reached, and giving back free heap.

``PeakProbe`` measures a job's anonymous-memory peak (which calibrates later reservations for
its circuit); ``return_free_heap`` hands pages malloc keeps after a job back to the kernel, so
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


def _read_status_kib(*names: str) -> dict[str, int] | None:
    """Fields of /proc/self/status in bytes (one read, so they describe the same moment); None if any is missing."""
    fields = read_status_bytes(*names)
    return fields if fields is not None and len(fields) == len(names) else None


def _file_backed(fields: dict[str, int]) -> int:
    return fields["RssFile"] + fields["RssShmem"]


class PeakProbe:
    """The peak of the process's *anonymous* memory over an interval, from the kernel's high-water mark.

    Why not VmHWM alone: it counts file-backed pages too, and a job first touches some of
    those (numba's cached machine code, shared libraries) — not memory the job allocated,
    and not memory the budget's working set is for. Why not sample RssAnon from a thread:
    the CPU backend's numba kernels hold the GIL, so a sampler would not run during the very
    kernels whose scratch is the peak.

    So: ``begin()`` resets VmHWM (writing 5 to /proc/self/clear_refs) and notes RssAnon;
    ``end()`` returns ``VmHWM − (RssFile + RssShmem now) − RssAnon at the start``. At the
    moment of the peak, VmHWM = anon + file-backed; file-backed RSS only grows while a job
    runs (pages are touched, not dropped), so subtracting its value at the end subtracts at
    least what it was at the peak: the result is at most the anonymous growth at the peak — a
    *lower* bound, as the engine needs (a measurement only ever raises an estimate). Only if
    the kernel reclaimed file pages during the job can it exceed that, by what was reclaimed,
    which errs toward a larger reservation. Memory malloc kept from earlier and reused does
    not raise RSS either (another reason it is a lower bound). It is process-wide, so the
    engine only trusts it for a job that ran with no other job or key load beside it.
    Unavailable (``available`` False) where clear_refs cannot be written or the kernel lacks
    the RssAnon/RssFile/RssShmem fields (before 4.5).
    """

    FIELDS = ("VmHWM", "RssAnon", "RssFile", "RssShmem")

    def __init__(self) -> None:
        self.available = self._reset() and _read_status_kib(*self.FIELDS) is not None

    @staticmethod
    def _reset() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def begin(self) -> int | None:
        """Reset the high-water mark; returns the baseline for ``end`` (anonymous RSS now), None if unavailable."""
        if not self.available or not self._reset():
            return None
        fields = _read_status_kib(*self.FIELDS)
        return None if fields is None else fields["RssAnon"]

    def end(self, baseline: int | None) -> int | None:
        """Bytes the anonymous memory rose above ``baseline`` at its peak since ``begin`` (a lower bound)."""
        if baseline is None:
            return None
        fields = _read_status_kib(*self.FIELDS)
        if fields is None:
            return None
        return max(0, fields["VmHWM"] - _file_backed(fields) - baseline)
