"""MemoryBudget: reservations, fairness, timeouts, evictors, and threads hammering it at random."""

import random
import threading
import time

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cuzk.memory.budget import CATEGORIES, AcquireTimeout, BudgetExceededError, MemoryBudget


def wait_until(predicate, timeout=5.0):
    """Poll a condition another thread will make true (e.g. 'the waiter has queued')."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.0005)


def start_thread(target, *args):
    result = {}

    def run():
        try:
            result["value"] = target(*args)
        except BaseException as exc:  # handed to the test thread
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_reserve_release_partial_and_snapshot_by_category():
    budget = MemoryBudget(1000)
    key = budget.acquire(400, "key", label="circuit-a")
    work = budget.try_acquire(300, "working")
    assert budget.reserved_bytes == 700 and budget.available_bytes == 300
    assert work.release(100) == 100 and work.nbytes == 200
    snap = budget.snapshot()
    assert snap["by_category"]["key"] == {"bytes": 400, "count": 1}
    assert snap["by_category"]["working"] == {"bytes": 200, "count": 1}
    assert snap["by_category"]["pinned"] == {"bytes": 0, "count": 0}
    assert snap["reserved_bytes"] == 600 and snap["peak_reserved_bytes"] == 700 and snap["reservations"] == 2
    with key:
        pass
    assert key.released and budget.reserved_bytes == 200
    assert key.release() == 0  # releasing what is already gone is a no-op
    with pytest.raises(ValueError, match="holds 200"):
        work.release(201)
    work.release()
    assert budget.snapshot()["reservations"] == 0 and budget.reserved_bytes == 0


def test_split_hands_part_of_a_reservation_on_without_waiting():
    budget = MemoryBudget(100)
    job = budget.acquire(100, "working", label="job 1")
    staging = job.split(30, "pinned", "staging")
    same = job.split(20)
    assert (job.nbytes, staging.nbytes, same.nbytes) == (50, 30, 20)
    assert (staging.category, staging.label, same.category, same.label) == ("pinned", "staging", "working", "job 1")
    snap = budget.snapshot()
    assert snap["reserved_bytes"] == 100 and snap["reservations"] == 3
    assert snap["by_category"]["working"] == {"bytes": 70, "count": 2} and snap["by_category"]["pinned"]["bytes"] == 30
    with pytest.raises(ValueError, match="cannot split 51 bytes"):
        job.split(51)
    staging.release()
    job.release()
    same.release()
    assert budget.reserved_bytes == 0 and budget.snapshot()["reservations"] == 0


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_bad_sizes_and_categories_are_rejected(bad):
    budget = MemoryBudget(100)
    with pytest.raises(ValueError, match="non-negative number of bytes"):
        budget.acquire(bad, "key")
    with pytest.raises(ValueError, match="unknown reservation category 'cache'"):
        budget.try_acquire(1, "cache")
    with pytest.raises(ValueError):
        MemoryBudget(-5)


def test_request_larger_than_the_whole_budget_fails_at_once_everywhere():
    budget = MemoryBudget(100)
    budget.set_effective_limit(10)
    start = time.monotonic()
    for call in (lambda: budget.acquire(101, "key", label="huge.zkey"), lambda: budget.try_acquire(101, "key")):
        with pytest.raises(BudgetExceededError, match="exceeds the whole host memory budget of 100 B"):
            call()
    assert time.monotonic() - start < 1.0
    # Larger than the effective total but not the total: it waits (the effective total may recover).
    with pytest.raises(AcquireTimeout, match="within 0.01 s"):
        budget.acquire(50, "key", timeout=0.01)


def test_timeout_leaves_no_trace_and_a_timed_out_head_unblocks_the_queue_behind_it():
    budget = MemoryBudget(100)
    held = budget.acquire(90, "key")
    big_thread, big = start_thread(lambda: budget.acquire(50, "working", timeout=0.2))
    wait_until(lambda: budget.snapshot()["waiters"] == 1)
    small_thread, small = start_thread(lambda: budget.acquire(10, "working", timeout=5))
    wait_until(lambda: budget.snapshot()["waiters"] == 2)
    # 10 bytes are free, but the small request queued behind the large one (no overtaking) ...
    big_thread.join()
    assert isinstance(big["error"], AcquireTimeout)
    # ... and is granted the moment the large head gives up.
    small_thread.join(5)
    assert small["value"].nbytes == 10
    assert budget.snapshot()["waiters"] == 0 and budget.reserved_bytes == 100
    held.release()
    small["value"].release()
    assert budget.reserved_bytes == 0


def test_large_waiter_is_not_starved_by_a_stream_of_small_requests():
    budget = MemoryBudget(100)
    stop = threading.Event()
    order = []

    def small_stream():
        while not stop.is_set():
            with budget.acquire(20, "transient"):
                order.append("small")

    streams = [threading.Thread(target=small_stream, daemon=True) for _ in range(4)]
    for t in streams:
        t.start()
    wait_until(lambda: order.count("small") > 50)
    large = budget.acquire(100, "key", timeout=10)  # needs everything: only fairness gets it through
    order.append("large")
    n_before = len(order)
    assert budget.reserved_bytes == 100
    large.release()
    wait_until(lambda: len(order) > n_before + 10)  # the small ones carry on afterwards
    stop.set()
    for t in streams:
        t.join(5)
    assert budget.reserved_bytes == 0 and budget.snapshot()["waiters"] == 0


def test_try_acquire_does_not_overtake_a_queued_request():
    budget = MemoryBudget(100)
    held = budget.acquire(60, "key")
    thread, result = start_thread(lambda: budget.acquire(80, "key", timeout=5))
    wait_until(lambda: budget.snapshot()["waiters"] == 1)
    assert budget.try_acquire(10, "working") is None  # 40 free, but the queue comes first
    assert budget.shortfall() == 40
    snap = budget.snapshot()
    assert (snap["waiters"], snap["waiting_bytes"], snap["shortfall_bytes"]) == (1, 80, 40) and snap["oldest_wait_s"] >= 0
    held.release()
    thread.join(5)
    assert result["value"].nbytes == 80 and budget.shortfall() == 0
    result["value"].release()


def test_grants_follow_arrival_order():
    budget = MemoryBudget(100)
    held = budget.acquire(100, "key")
    granted = []
    threads = []
    for i, size in enumerate([30, 50, 20, 40]):
        def want(i=i, size=size):
            r = budget.acquire(size, "working", timeout=10)
            granted.append(i)
            return r
        threads.append(start_thread(want))
        wait_until(lambda n=i + 1: budget.snapshot()["waiters"] == n)
    held.release()  # 30 + 50 + 20 fit; 40 must wait behind them
    wait_until(lambda: len(granted) == 3)
    assert sorted(granted) == [0, 1, 2] and budget.snapshot()["waiters"] == 1
    for thread, result in threads[:3]:
        thread.join(5)
        result["value"].release()
    threads[3][0].join(5)
    assert granted[-1] == 3
    threads[3][1]["value"].release()
    assert budget.reserved_bytes == 0


def test_evictors_are_asked_before_waiting_and_free_into_the_request():
    budget = MemoryBudget(100)
    idle = [budget.acquire(30, "pinned", label=f"idle-{i}") for i in range(3)]
    asked = []

    def evictor(needed):
        asked.append(needed)
        freed = 0
        while idle and freed < needed:
            freed += idle.pop().release()
        return freed

    def broken_evictor(needed):
        raise RuntimeError("evictor bug")

    budget.register_evictor(broken_evictor)
    budget.register_evictor(evictor)
    r = budget.acquire(50, "key", timeout=0)  # 10 free: 40 more needed, two idle buffers go
    assert asked == [40] and len(idle) == 1 and budget.reserved_bytes == 80
    r.release()
    budget.unregister_evictor(evictor)
    with pytest.raises(AcquireTimeout):
        budget.acquire(90, "key", timeout=0)


def test_notify_idle_evicts_for_a_request_already_queued():
    budget = MemoryBudget(100)
    in_use = budget.acquire(100, "pinned")
    idle = []
    budget.register_evictor(lambda needed: sum(idle.pop().release() for _ in range(len(idle))))
    thread, result = start_thread(lambda: budget.acquire(60, "key", timeout=5))
    wait_until(lambda: budget.snapshot()["waiters"] == 1)
    # The memory goes idle but stays reserved (as in the pinned pool): no release, so nothing wakes the waiter ...
    idle.append(in_use)
    assert budget.snapshot()["waiters"] == 1
    # ... until the owner says so.
    assert budget.notify_idle() == 100
    thread.join(5)
    assert result["value"].nbytes == 60 and budget.reserved_bytes == 60


def test_effective_limit_shrinks_and_recovers():
    budget = MemoryBudget(100)
    a = budget.acquire(50, "working")
    budget.set_effective_limit(40)  # below what is already reserved: nothing is taken back, nothing new fits
    assert budget.available_bytes == 0 and budget.snapshot()["effective_total_bytes"] == 40
    thread, result = start_thread(lambda: budget.acquire(30, "working", timeout=5))
    wait_until(lambda: budget.snapshot()["waiters"] == 1)
    a.release()  # 40 - 0 >= 30: granted by the release
    thread.join(5)
    assert result["value"].nbytes == 30
    thread, result = start_thread(lambda: budget.acquire(60, "working", timeout=5))
    wait_until(lambda: budget.snapshot()["waiters"] == 1)
    budget.set_effective_limit(None)  # back to 100: 30 + 60 fit
    thread.join(5)
    assert result["value"].nbytes == 60 and budget.effective_total_bytes == 100


def test_threads_at_random_never_exceed_never_deadlock_never_miss_a_wakeup():
    total = 1000
    budget = MemoryBudget(total)
    lock = threading.Lock()
    holding = [0]
    worst = [0]
    done = []

    def hold(n):
        with lock:
            holding[0] += n
            worst[0] = max(worst[0], holding[0])
            assert holding[0] <= total

    def unhold(n):
        with lock:
            holding[0] -= n

    def thread_worker(seed):
        rng = random.Random(seed)
        for _ in range(150):
            size = rng.choice([1, 10, 100, 400, 999]) if rng.random() < 0.9 else total
            r = budget.acquire(size, rng.choice(CATEGORIES), timeout=30)
            hold(size)
            if rng.random() < 0.5 and size > 1:
                part = rng.randrange(1, size)
                unhold(part)
                r.release(part)
            left = r.nbytes
            unhold(left)
            r.release()
        done.append(seed)

    def brief_worker(seed):  # another size mix, each held only while it yields once
        rng = random.Random(seed)
        for _ in range(100):
            size = rng.choice([5, 50, 300, 700])
            r = budget.acquire(size, rng.choice(CATEGORIES), timeout=30)
            hold(size)
            time.sleep(0)
            unhold(size)
            r.release()
        done.append(seed)

    threads = [threading.Thread(target=thread_worker, args=(i,), daemon=True) for i in range(8)]
    threads += [threading.Thread(target=brief_worker, args=(100 + i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "deadlock or a lost wake-up"
    assert len(done) == 16
    snap = budget.snapshot()
    assert snap["reserved_bytes"] == 0 and snap["waiters"] == 0 and snap["reservations"] == 0
    assert snap["peak_reserved_bytes"] <= total and worst[0] <= total


class BudgetModel(RuleBasedStateMachine):
    """Sequential semantics against a plain model: the sums always agree, nothing ever over-commits."""

    def __init__(self):
        super().__init__()
        self.total = 1000
        self.budget = MemoryBudget(self.total)
        self.held = []  # (reservation, bytes the model thinks it holds)
        self.effective = self.total

    @rule(size=st.integers(0, 1200), category=st.sampled_from(CATEGORIES))
    def try_acquire(self, size, category):
        if size > self.total:
            with pytest.raises(BudgetExceededError):
                self.budget.try_acquire(size, category)
            return
        r = self.budget.try_acquire(size, category)
        fits = size <= self.effective - sum(n for _, n in self.held)
        assert (r is not None) == fits
        if r is not None:
            self.held.append([r, size])

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def release_part(self, data):
        entry = data.draw(st.sampled_from(self.held))
        amount = data.draw(st.integers(0, entry[1]))
        assert entry[0].release(amount) == amount
        entry[1] -= amount
        if entry[1] == 0:
            self.held.remove(entry)

    @rule(limit=st.one_of(st.none(), st.integers(0, 1500)))
    def set_limit(self, limit):
        self.budget.set_effective_limit(limit)
        self.effective = self.total if limit is None else min(limit, self.total)

    @invariant()
    def sums_agree(self):
        snap = self.budget.snapshot()
        assert snap["reserved_bytes"] == sum(n for _, n in self.held)
        assert sum(c["bytes"] for c in snap["by_category"].values()) == snap["reserved_bytes"]
        assert snap["effective_total_bytes"] == self.effective
        assert snap["available_bytes"] == max(0, self.effective - snap["reserved_bytes"])


TestBudgetModel = BudgetModel.TestCase
TestBudgetModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_try_grow_adds_to_a_live_reservation_only_when_it_fits_and_nobody_waits():
    budget = MemoryBudget(100)
    r = budget.try_acquire(0, "runtime", label="engine runtime")
    assert budget.try_grow(r, 60) and r.nbytes == 60 and budget.snapshot()["by_category"]["runtime"] == {"bytes": 60, "count": 1}
    assert not budget.try_grow(r, 41) and r.nbytes == 60  # does not fit
    other = budget.acquire(40, "working")
    got = []
    waiter = threading.Thread(target=lambda: got.append(budget.acquire(10, "key")))
    waiter.start()
    while budget.snapshot()["waiters"] == 0:
        time.sleep(0.001)
    other.release(10)  # 10 free, but the queued request has it: growing may not jump the queue
    waiter.join(10)
    assert got and not budget.try_grow(r, 1)
    got[0].release()
    assert budget.try_grow(r, 10) and budget.reserved_bytes == 100
    with pytest.raises(ValueError, match="another budget"):
        MemoryBudget(10).try_grow(r, 1)
    r.release()
    assert budget.snapshot()["by_category"]["runtime"]["bytes"] == 0
