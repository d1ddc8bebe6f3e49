"""Pinned pool: idle buffers stay counted in the budget, trimming releases exactly what it frees, pressure evicts."""

import mmap
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuzk.memory.budget import AcquireTimeout, MemoryBudget
from cuzk.memory.limits import read_rss_bytes
from cuzk.memory.pinned import CudaPinnedAllocator, PageAlignedAllocator, PinnedPool, cuda_available, size_class
from cuzk.memory.units import MiB

from test_memory_budget import start_thread, wait_until


def pinned_bytes(budget):
    return budget.snapshot()["by_category"]["pinned"]["bytes"]


def test_idle_buffers_stay_reserved_and_are_reused():
    budget = MemoryBudget(256 * MiB)
    with PinnedPool(budget, PageAlignedAllocator()) as pool:
        buf = pool.get(10 * MiB)
        assert buf.nbytes == size_class(10 * MiB) and buf.array.nbytes == buf.nbytes
        assert buf.array.ctypes.data % mmap.PAGESIZE == 0
        buf.array[:] = 7
        buf.release()
        stats = pool.stats()
        assert (stats["pooled_buffers"], stats["pooled_bytes"], stats["in_use_bytes"]) == (1, buf.nbytes, 0)
        assert pinned_bytes(budget) == buf.nbytes  # idle, and still in the budget
        again = pool.get(10 * MiB - 5)  # same size class: the same buffer
        assert again is buf and pool.stats()["hits"] == 1 and pool.stats()["misses"] == 1
        other = pool.get(3 * MiB)
        assert pool.stats()["misses"] == 2 and pinned_bytes(budget) == buf.nbytes + other.nbytes
        with pytest.raises(ValueError, match="already returned"):
            other.release()
            other.release()
        again.release()
    assert budget.reserved_bytes == 0  # closing the pool freed and released everything


def test_trimming_releases_exactly_what_it_frees_and_the_memory_really_goes():
    budget = MemoryBudget(1024 * MiB)
    pool = PinnedPool(budget, PageAlignedAllocator())
    sizes = [64 * MiB, 32 * MiB, 96 * MiB]
    buffers = [pool.get(n) for n in sizes]
    for b in buffers:  # returned oldest-first: 64, 32, 96
        b.release()
    rss_before, reserved_before = read_rss_bytes(), budget.reserved_bytes
    freed = pool.trim(80 * MiB)  # least recently returned first: 64 then 32 MiB
    assert freed == 96 * MiB
    assert reserved_before - budget.reserved_bytes == freed
    assert pool.stats()["pooled_bytes"] == 96 * MiB and pool.stats()["trimmed_bytes"] == freed
    assert rss_before - read_rss_bytes() >= freed * 0.9  # unmapped, not just forgotten
    assert pool.trim() == 96 * MiB and budget.reserved_bytes == 0 and pool.trim() == 0
    pool.close()


def test_budget_pressure_evicts_idle_buffers_least_recently_returned_first():
    budget = MemoryBudget(64 * MiB)
    pool = PinnedPool(budget, PageAlignedAllocator())
    first, second, third = (pool.get(16 * MiB) for _ in range(3))
    for b in (first, second, third):
        b.release()
    assert budget.available_bytes == 16 * MiB
    key = budget.acquire(40 * MiB, "key", timeout=0)  # 24 MiB short: two idle buffers go
    assert pool.stats()["pooled_buffers"] == 1 and pool.stats()["trimmed_bytes"] == 32 * MiB
    assert pool.get(16 * MiB) is third  # the most recently returned one survived
    assert budget.reserved_bytes == 56 * MiB
    key.release()
    pool.close()


def test_a_buffer_going_idle_feeds_a_queued_request():
    budget = MemoryBudget(32 * MiB)
    pool = PinnedPool(budget, PageAlignedAllocator())
    buf = pool.get(32 * MiB)
    thread, result = start_thread(lambda: budget.acquire(20 * MiB, "working", timeout=10))
    wait_until(lambda: budget.snapshot()["waiters"] == 1)
    buf.release()  # idle in the pool (still reserved), then the pool tells the budget, which evicts it
    thread.join(10)
    assert result["value"].nbytes == 20 * MiB and pool.stats()["pooled_bytes"] == 0
    assert pinned_bytes(budget) == 0
    result["value"].release()
    pool.close()


def test_pool_waits_for_room_and_times_out_cleanly():
    budget = MemoryBudget(16 * MiB)
    pool = PinnedPool(budget, PageAlignedAllocator())
    held = pool.get(12 * MiB)
    with pytest.raises(AcquireTimeout):
        pool.get(8 * MiB, timeout=0.01)
    assert pool.stats()["in_use_bytes"] == 12 * MiB and budget.reserved_bytes == 12 * MiB
    done = threading.Event()
    thread, result = start_thread(lambda: (pool.get(8 * MiB, timeout=10), done.set())[0])
    wait_until(lambda: budget.snapshot()["waiters"] == 1)
    held.release()  # idle 12 MiB is trimmed for the 8 MiB request
    thread.join(10)
    assert done.is_set() and result["value"].nbytes == 8 * MiB and budget.reserved_bytes == 8 * MiB
    pool.close()
    result["value"].release()  # lent when the pool closed: freed on return
    assert budget.reserved_bytes == 0
    with pytest.raises(RuntimeError, match="closed"):
        pool.get(1)


def test_try_get_lends_a_buffer_only_when_the_budget_has_room_now():
    """A device's staging source: the proving thread asking may be what frees the memory, so it never waits."""
    budget = MemoryBudget(16 * MiB)
    pool = PinnedPool(budget, PageAlignedAllocator())
    held = pool.try_get(12 * MiB, label="staging")
    assert held is not None and held.nbytes == 12 * MiB
    assert pool.try_get(8 * MiB) is None  # no room now (AcquireTimeout at once)
    assert pool.try_get(32 * MiB) is None  # more than the whole budget (BudgetExceededError)
    assert pool.stats()["in_use_bytes"] == budget.reserved_bytes == 12 * MiB
    held.release()
    again = pool.try_get(8 * MiB)  # the idle buffer is trimmed for it
    assert again is not None and budget.reserved_bytes == 8 * MiB
    again.release()
    pool.close()
    assert budget.reserved_bytes == 0


def test_a_job_draws_buffers_from_its_own_reservation():
    budget = MemoryBudget(64 * MiB)
    pool = PinnedPool(budget, PageAlignedAllocator())
    job = budget.acquire(40 * MiB, "working", label="job")
    buf = pool.get(16 * MiB, reservation=job)  # miss: the buffer's bytes come out of the job's, no waiting
    assert job.nbytes == 24 * MiB and budget.reserved_bytes == 40 * MiB and pinned_bytes(budget) == 16 * MiB
    buf.release()  # idle in the pool, its bytes stay reserved there
    again = pool.get(16 * MiB, reservation=job)  # hit: the buffer already holds its bytes, so the job gives 16 MiB back
    assert again is buf and job.nbytes == 8 * MiB and budget.reserved_bytes == 24 * MiB
    with pytest.raises(ValueError, match="cannot cover"):
        pool.get(16 * MiB, reservation=job)
    again.release()
    job.release()
    pool.close()
    assert budget.reserved_bytes == 0


def test_idle_cap_frees_the_oldest_on_return():
    budget = MemoryBudget(256 * MiB)
    pool = PinnedPool(budget, PageAlignedAllocator(), max_idle_bytes=40 * MiB)
    bufs = [pool.get(16 * MiB) for _ in range(3)]
    for b in bufs:
        b.release()
    assert pool.stats()["pooled_bytes"] == 32 * MiB and budget.reserved_bytes == 32 * MiB
    pool.close()


def test_failed_allocation_returns_its_reservation():
    class Exhausted(PageAlignedAllocator):
        def allocate(self, nbytes):
            raise MemoryError(f"cannot map {nbytes} bytes")

    budget = MemoryBudget(64 * MiB)
    pool = PinnedPool(budget, Exhausted())
    with pytest.raises(MemoryError):
        pool.get(MiB)
    assert budget.reserved_bytes == 0 and pool.stats()["in_use_buffers"] == 0


@given(st.integers(1, 1 << 40))
def test_size_classes_cover_the_request_in_whole_pages_with_little_waste(n):
    c = size_class(n)
    assert c >= n and c % mmap.PAGESIZE == 0
    if n > MiB:
        assert c - n <= n / 16
    assert size_class(c) == c  # a class is its own class: returned buffers match requests of their size


def test_size_class_rejects_nonsense():
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="positive number of bytes"):
            size_class(bad)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs CuPy and a CUDA device")
def test_cuda_pinned_buffers_are_page_locked_and_counted():
    import cupy

    budget = MemoryBudget(1024 * MiB)
    pool = PinnedPool(budget)
    assert pool.kind == "cuda-pinned" and isinstance(pool.allocator, CudaPinnedAllocator)
    buf = pool.get(64 * MiB)
    host = buf.array[: 64 * MiB].view(np.uint32)
    host[:] = np.arange(host.size, dtype=np.uint32)
    device = cupy.empty(host.size, dtype=cupy.uint32)
    device.set(host)  # DMA from page-locked memory
    assert int(device[-1]) == host.size - 1
    buf.release()
    assert pinned_bytes(budget) == buf.nbytes
    assert pool.trim() == buf.nbytes and budget.reserved_bytes == 0
    pool.close()
