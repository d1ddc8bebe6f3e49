"""Reconciler: real untracked memory (touched numpy arrays outside the budget) shrinks the budget; freeing it recovers."""

import time

import numpy as np
import pytest

from cuzk.memory.budget import MemoryBudget
from cuzk.memory.limits import read_limits, read_rss_bytes
from cuzk.memory.plan import BudgetPlan, plan_budget
from cuzk.memory.reconcile import Reconciler
from cuzk.memory.units import GiB, MiB

from test_memory_budget import wait_until

TOTAL = 512 * MiB
HEADROOM = 32 * MiB


def untracked(nbytes):
    return np.ones(nbytes, dtype=np.uint8)  # ones, not zeros: every page touched


def rss_plan():
    """A configured ceiling whose allowance covers this interpreter as it is now, plus 32 MiB of slack."""
    allowance = read_rss_bytes() + 32 * MiB
    return BudgetPlan(ceiling_bytes=TOTAL + HEADROOM + allowance, ceiling_source="configured",
                      margin_bytes=HEADROOM + allowance, margin_source="test", headroom_bytes=HEADROOM, total_bytes=TOTAL)


def test_untracked_memory_shrinks_the_budget_and_freeing_it_recovers():
    budget = MemoryBudget(TOTAL)
    rec = Reconciler(budget, rss_plan(), source="rss", recover_after_s=0)
    assert rec.sample().effective_total_bytes == TOTAL
    blob = untracked(160 * MiB)  # ~128 MiB past the allowance
    reading = rec.sample()
    expected = TOTAL - (reading.untracked_bytes - reading.untracked_allowance_bytes)
    assert reading.effective_total_bytes == budget.effective_total_bytes == expected
    assert 100 * MiB < reading.shrunk_bytes < 150 * MiB
    # Memory the budget knows about is not untracked.
    with budget.acquire(64 * MiB, "working") as r:
        tracked = untracked(r.nbytes)
        again = rec.sample()
        assert abs(again.untracked_bytes - reading.untracked_bytes) < 16 * MiB
        del tracked
    del blob
    back = rec.sample()
    assert back.effective_total_bytes == TOTAL and back.shrunk_bytes == 0
    assert rec.peak_untracked_bytes >= 160 * MiB and rec.latest == back


def test_recovery_waits_for_the_hysteresis_step_but_shrinking_does_not():
    budget = MemoryBudget(TOTAL)
    rec = Reconciler(budget, rss_plan(), source="rss", hysteresis_bytes=120 * MiB, recover_after_s=0)
    a, b = untracked(80 * MiB), untracked(80 * MiB)
    low = rec.sample().effective_total_bytes
    assert low < TOTAL - 100 * MiB
    del a  # 80 MiB come back: less than the 120 MiB step, so the budget stays where it was
    held = rec.sample()
    assert held.effective_total_bytes == low == budget.effective_total_bytes
    del b  # all the way back: the full total is restored at once
    assert rec.sample().effective_total_bytes == TOTAL


def test_recovery_waits_until_untracked_memory_has_stayed_low_for_the_window():
    budget = MemoryBudget(TOTAL)
    rec = Reconciler(budget, rss_plan(), source="rss", recover_after_s=0.3)
    blob = untracked(160 * MiB)
    high_at = time.monotonic()
    shrunk = rec.sample()
    assert shrunk.shrunk_bytes > 100 * MiB
    del blob
    # A dip of untracked memory (as while a reserved buffer is still being filled) does not give the memory back yet ...
    dip = rec.sample()
    assert dip.untracked_bytes < shrunk.untracked_bytes - 100 * MiB
    assert dip.untracked_held_bytes == shrunk.untracked_bytes and budget.effective_total_bytes == shrunk.effective_total_bytes
    # ... only once the whole window has stayed low.
    wait_until(lambda: rec.sample().effective_total_bytes == TOTAL)
    assert time.monotonic() - high_at >= 0.3


def test_memory_accounted_into_a_reservation_is_given_back_at_once_not_after_the_window():
    """Untracked memory that a reservation names afterwards (the engine's runtime measured and accounted while a job
    waits, ``MemoryBudget.account_resident``) leaves the recovery window at once: the usable total comes back by what
    was named, which the reservation now holds — not held out a second time for ``recover_after_s``. What is free
    then is what was free, less the part of the allowance the named memory had used."""
    budget = MemoryBudget(TOTAL)
    runtime = budget.try_acquire(0, "runtime", label="engine runtime")
    rec = Reconciler(budget, rss_plan(), source="rss", recover_after_s=3600)
    blob = untracked(160 * MiB)
    shrunk = rec.sample()
    assert shrunk.shrunk_bytes > 100 * MiB
    free = budget.available_bytes
    budget.account_resident(runtime, 160 * MiB)  # past the free room: those bytes are resident already
    assert budget.reserved_bytes == 160 * MiB
    held = rec.preview()
    assert held.effective_total_bytes < TOTAL - 100 * MiB  # without being told, the window keeps the old figure
    named = rec.accounted(160 * MiB)
    assert named.untracked_held_bytes < shrunk.untracked_bytes - 150 * MiB
    assert named.effective_total_bytes == budget.effective_total_bytes == TOTAL
    assert free - 48 * MiB < budget.available_bytes <= free  # the allowance's 32 MiB, and RSS moving a few MiB
    del blob
    runtime.release()


def test_background_sampling_publishes_readings():
    budget = MemoryBudget(TOTAL)
    with Reconciler(budget, rss_plan(), source="rss", interval_s=0.01) as rec:
        wait_until(lambda: len(rec.history) >= 3)
        latest = rec.latest.to_dict()
    assert latest["source"] == "rss" and latest["reserved_bytes"] == 0
    assert set(latest) >= {"actual_bytes", "untracked_bytes", "untracked_held_bytes", "effective_total_bytes", "shrunk_bytes", "rss_bytes"}


def test_source_follows_the_limit_that_binds():
    limits = read_limits()
    plan = plan_budget(limits)
    rec = Reconciler(MemoryBudget(plan.total_bytes), plan)
    if plan.ceiling_source.startswith("cgroup"):
        assert rec.source == "cgroup"
    else:
        assert rec.source == "meminfo"
        assert abs(rec.measure() - (limits.meminfo.total_bytes - limits.meminfo.available_bytes)) < GiB
    configured = plan_budget(limits, configured_bytes=min(plan.ceiling_bytes // 2, 4 * GiB))
    assert Reconciler(MemoryBudget(configured.total_bytes), configured).source == "rss"
    with pytest.raises(ValueError, match="unknown reconciler source 'kernel'"):
        Reconciler(MemoryBudget(1), plan, source="kernel")
    with pytest.raises(ValueError, match="recovery window"):
        Reconciler(MemoryBudget(1), plan, recover_after_s=-1)
