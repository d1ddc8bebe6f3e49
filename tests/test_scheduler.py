"""The priority queue: strict priority order, FIFO by submission within a level, removal, closing."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuzk.engine.jobs import JobError, Priority
from cuzk.engine.scheduler import Scheduler, SchedulerClosed


@given(st.lists(st.tuples(st.sampled_from(list(Priority)), st.booleans()), max_size=40))
def test_pop_order_is_priority_then_submission(jobs):
    s: Scheduler[int] = Scheduler()
    for seq, (prio, _) in enumerate(jobs):
        s.push(f"j{seq}", prio, seq, seq)
    removed = {f"j{seq}" for seq, (_, drop) in enumerate(jobs) if drop}
    for job_id in removed:
        assert s.remove(job_id) is not None
    expected = sorted((-int(p), seq) for seq, (p, drop) in enumerate(jobs) if not drop)
    got = []
    while (item := s.pop(timeout=0)) is not None:
        got.append(item[1])
    assert got == [seq for _, seq in expected]
    assert len(s) == 0


def test_replayed_job_keeps_its_place_by_seq():
    s: Scheduler[str] = Scheduler()
    s.push("new", Priority.NORMAL, 10, "new")
    s.push("replayed", Priority.NORMAL, 3, "replayed")  # pushed later, submitted earlier
    assert s.pop(timeout=0)[0] == "replayed"


def test_pop_waits_for_a_push_and_times_out():
    s: Scheduler[str] = Scheduler()
    assert s.pop(timeout=0.01) is None
    got = []
    t = threading.Thread(target=lambda: got.append(s.pop(timeout=10)))
    t.start()
    s.push("a", Priority.LOW, 0, "payload")
    t.join()
    assert got == [("a", "payload")]


def test_remove_twice_and_duplicates():
    s: Scheduler[str] = Scheduler()
    s.push("a", Priority.LOW, 0, "x")
    with pytest.raises(ValueError):
        s.push("a", Priority.LOW, 1, "x")
    assert "a" in s
    assert s.remove("a") == "x"
    assert s.remove("a") is None
    assert "a" not in s


def test_close_wakes_waiters_and_returns_leftovers():
    s: Scheduler[str] = Scheduler()
    s.push("a", Priority.HIGH, 0, "left")
    assert s.close() == ["left"]
    with pytest.raises(SchedulerClosed):
        s.push("b", Priority.LOW, 1, "y")

    waiting: Scheduler[str] = Scheduler()
    errors = []

    def waiter():
        try:
            waiting.pop()
        except SchedulerClosed as exc:
            errors.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    waiting.close()  # whether the waiter is already blocked or not, it must see the close
    t.join(timeout=10)
    assert not t.is_alive() and len(errors) == 1


def test_depth_by_priority():
    s: Scheduler[None] = Scheduler()
    s.push("a", Priority.HIGH, 0, None)
    s.push("b", Priority.HIGH, 1, None)
    s.push("c", Priority.LOW, 2, None)
    assert s.depth_by_priority() == {"CRITICAL": 0, "HIGH": 2, "NORMAL": 0, "LOW": 1}


@pytest.mark.parametrize("text,expected", [("critical", Priority.CRITICAL), (" Low ", Priority.LOW), (2, Priority.HIGH), (Priority.NORMAL, Priority.NORMAL)])
def test_priority_parse(text, expected):
    assert Priority.parse(text) is expected


@pytest.mark.parametrize("bad", ["urgent", 7, -1, True, None, 1.0])
def test_priority_parse_rejects(bad):
    with pytest.raises(JobError, match="unknown priority"):
        Priority.parse(bad)


def test_a_waiter_gives_up_when_woken_and_leaves_the_jobs_to_others():
    s: Scheduler[str] = Scheduler()
    stop = threading.Event()
    got = []
    waiter = threading.Thread(target=lambda: got.append(s.pop(give_up=stop.is_set)))
    waiter.start()
    stop.set()
    s.wake()
    waiter.join(60)
    assert not waiter.is_alive() and got == [None]
    s.push("j", Priority.NORMAL, 1, "j")
    assert s.pop(timeout=0, give_up=stop.is_set) is None and "j" in s  # it never takes a job once it gives up
    assert s.pop(timeout=0) == ("j", "j")
