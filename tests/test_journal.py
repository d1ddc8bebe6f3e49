"""The SQLite journal: durability before return, replay order, idempotent request ids, bounded results."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuzk.engine.jobs import JobError, JobState, Priority
from cuzk.engine.journal import DataDirLock, DataDirLocked, Journal, RequestIdConflict, WitnessFile


def test_submit_returns_a_durable_queued_job(tmp_path):
    j = Journal(tmp_path)
    rec, created = j.submit("toy", Priority.HIGH, b"witness-bytes", request_id="r1")
    assert created and rec.state is JobState.QUEUED and rec.priority is Priority.HIGH
    assert j.witness_path(rec.job_id).read_bytes() == b"witness-bytes"
    # A second connection (what a restarted daemon opens) sees it without close() ever being called.
    again = Journal(tmp_path)
    assert again.get(rec.job_id) == rec


@pytest.mark.parametrize("fsync", [True, 30.0, False])
def test_submit_survives_sigkill_right_after_return(tmp_path, fsync):
    """A child submits, prints the id, and is SIGKILLed at once; the job must be there, waited for by the disk or not."""
    code = textwrap.dedent(f"""
        import sys, time
        from cuzk.engine.journal import Journal
        from cuzk.engine.jobs import Priority
        j = Journal({str(tmp_path)!r}, fsync={fsync})
        rec, _ = j.submit("toy", Priority.NORMAL, b"w" * 1000, request_id="killed")
        print(rec.job_id, flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    job_id = child.stdout.readline().strip()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    j = Journal(tmp_path)
    replay = j.requeue_unfinished()
    assert [r.job_id for r in replay] == [job_id]
    assert j.witness_path(job_id).read_bytes() == b"w" * 1000


@pytest.mark.parametrize("fsync", [True, False])
def test_journal_fsync_decides_whether_submits_and_commits_wait_for_the_disk(tmp_path, monkeypatch, fsync):
    import cuzk.engine.journal as journal_module

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(journal_module.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    j = Journal(tmp_path, fsync=fsync)
    assert j._db.execute("PRAGMA synchronous").fetchone()[0] == (2 if fsync else 1)  # FULL / NORMAL
    rec, _ = j.submit("c", Priority.NORMAL, b"w" * 100)
    j.mark_started(rec.job_id)
    assert j._db.execute("PRAGMA synchronous").fetchone()[0] == (2 if fsync else 1)  # restored after the start mark
    j.finish(rec.job_id, JobState.DONE, proof={"pi_a": ["1"]}, public_signals=["7"])
    assert len(synced) == (2 if fsync else 0)  # the witness file and its directory
    assert Journal(tmp_path).get(rec.job_id).state is JobState.DONE


def _record_fsyncs(monkeypatch) -> list[str]:
    """The paths the journal fsyncs from now on (it still fsyncs them)."""
    import cuzk.engine.journal as journal_module

    synced, real_fsync = [], os.fsync
    monkeypatch.setattr(journal_module.os, "fsync",
                        lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))[1])
    return synced


def test_journal_fsync_as_a_delay_syncs_unfinished_jobs_only_and_everything_at_close(tmp_path, monkeypatch):
    """A delay: submits and finishes never wait for the disk; a round fsyncs the witnesses of jobs still unfinished,
    their directory and the WAL — never the witness of a job that ended first — and close() runs a last round."""
    synced = _record_fsyncs(monkeypatch)
    j = Journal(tmp_path, fsync=3600.0)
    assert j._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL: the syncer makes commits durable
    waiting, ended = (j.submit("c", Priority.NORMAL, b"w" * 100)[0].job_id for _ in range(2))
    j.mark_started(ended)
    j.finish(ended, JobState.DONE, proof={"pi_a": ["1"]}, public_signals=["7"])
    assert synced == []
    j.close()
    assert sorted(synced) == sorted([str(j.witness_path(waiting)), str(j.witness_dir), str(tmp_path / "journal.sqlite3-wal")])
    again = Journal(tmp_path)
    assert again.get(ended).state is JobState.DONE and [r.job_id for r in again.requeue_unfinished()] == [waiting]


def test_journal_fsync_delay_is_kept_by_the_syncer_thread(tmp_path, monkeypatch):
    synced = _record_fsyncs(monkeypatch)
    j = Journal(tmp_path, fsync=0.02)
    job_id = j.submit("c", Priority.NORMAL, b"w" * 100)[0].job_id
    deadline = time.monotonic() + 30
    while str(j.witness_path(job_id)) not in synced or str(tmp_path / "journal.sqlite3-wal") not in synced:
        assert time.monotonic() < deadline, f"the syncer did not fsync the job within 30 s (fsync'd: {synced})"
        time.sleep(0.01)
    j.close()
    rounds = len(synced)
    j._sync_round()  # nothing new since: not even the WAL is fsync'd again
    assert len(synced) == rounds


def test_a_sync_round_that_fails_leaves_its_jobs_for_the_next(tmp_path, monkeypatch):
    import cuzk.engine.journal as journal_module

    synced = _record_fsyncs(monkeypatch)
    recording = journal_module.os.fsync
    failures = [OSError(errno.EIO, "injected")]

    def fsync_failing_once(fd):
        if failures:
            raise failures.pop()
        recording(fd)

    j = Journal(tmp_path, fsync=3600.0)
    job_id = j.submit("c", Priority.NORMAL, b"w" * 100)[0].job_id
    monkeypatch.setattr(journal_module.os, "fsync", fsync_failing_once)
    with pytest.raises(OSError, match="injected"):
        j._sync_round()
    j.close()  # the last round
    assert str(j.witness_path(job_id)) in synced


def test_replay_fails_a_job_whose_witness_was_lost_with_the_machine(tmp_path):
    """With journal_fsync = false a machine's crash can leave a job's row without all of its witness: replay fails that
    job, naming the file, instead of proving from a cut-short witness (or calling it the client's bad input)."""
    j = Journal(tmp_path, fsync=False)
    kept, cut, gone = (j.submit("c", Priority.NORMAL, b"w" * 64)[0].job_id for _ in range(3))
    j.close()
    os.truncate(j.witness_path(cut), 10)
    j.witness_path(gone).unlink()
    again = Journal(tmp_path)
    assert [r.job_id for r in again.requeue_unfinished()] == [kept]
    assert again.get(kept).state is JobState.QUEUED
    for job_id, what in ((cut, "10 of 64 bytes"), (gone, "missing")):
        record = again.get(job_id)
        assert record.state is JobState.FAILED and "witness is lost" in record.error and what in record.error


def test_replay_requeues_started_jobs_in_submission_order(tmp_path):
    j = Journal(tmp_path)
    ids = [j.submit("c", p, bytes([i]))[0].job_id for i, p in enumerate([Priority.LOW, Priority.CRITICAL, Priority.NORMAL])]
    assert j.mark_started(ids[1]) == 1
    j.set_state(ids[1], JobState.PROVING)
    j.finish(ids[2], JobState.DONE, proof={"pi_a": ["1"]}, public_signals=["7"])
    replay = Journal(tmp_path).requeue_unfinished()
    assert [r.job_id for r in replay] == ids[:2]
    assert all(r.state is JobState.QUEUED for r in replay)
    assert replay[1].attempts == 1  # the attempt count survives, so a poison job is noticed


def test_request_id_is_idempotent_and_refuses_reuse_for_other_work(tmp_path):
    j = Journal(tmp_path)
    first, created = j.submit("c", Priority.NORMAL, b"abc", request_id="same")
    again, created_again = j.submit("c", Priority.HIGH, b"abc", request_id="same")
    assert created and not created_again and again.job_id == first.job_id
    j.finish(first.job_id, JobState.DONE, proof={"x": 1}, public_signals=[])
    after_finish, created = j.submit("c", Priority.NORMAL, b"abc", request_id="same")
    assert not created and after_finish.state is JobState.DONE and after_finish.proof == {"x": 1}
    with pytest.raises(RequestIdConflict, match="witness"):
        j.submit("c", Priority.NORMAL, b"abd", request_id="same")
    with pytest.raises(RequestIdConflict, match="circuit"):
        j.submit("other", Priority.NORMAL, b"abc", request_id="same")
    with pytest.raises(JobError):
        j.submit("c", Priority.NORMAL, b"abc", request_id="")


def test_concurrent_submits_overlap_their_file_work_and_a_request_id_still_makes_one_job(tmp_path):
    """Submits write and check their witnesses outside the journal's lock: while one submit's check is
    held up, another completes; racing submits of one request id make one job and leave no stray file."""
    import threading

    j = Journal(tmp_path)
    in_check, release = threading.Event(), threading.Event()

    def slow_check(path):
        in_check.set()
        assert release.wait(10)

    slow = threading.Thread(target=j.submit, args=("c", Priority.NORMAL, b"slow"), kwargs={"check": slow_check})
    slow.start()
    assert in_check.wait(10)
    fast, created = j.submit("c", Priority.NORMAL, b"fast")  # not blocked behind the slow check
    assert created and fast.state is JobState.QUEUED
    release.set()
    slow.join(10)

    barrier = threading.Barrier(8)
    ids = []

    def racer():
        barrier.wait(10)
        ids.append(j.submit("c", Priority.NORMAL, b"same witness", request_id="r-1")[0].job_id)

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(ids) == 8 and len(set(ids)) == 1
    assert len(j.list()) == 3
    assert sorted(p.stem for p in j.witness_dir.iterdir()) == sorted(r.job_id for r in j.list())


def test_a_failed_check_keeps_nothing(tmp_path):
    j = Journal(tmp_path)

    def refuse(path):
        assert path.read_bytes() == b"bad"
        raise ValueError("witness has 3 values but the circuit has 4 signals")

    with pytest.raises(ValueError, match="3 values"):
        j.submit("c", Priority.NORMAL, b"bad", request_id="x", check=refuse)
    assert j.list() == [] and list(j.witness_dir.iterdir()) == []
    rec, created = j.submit("c", Priority.NORMAL, b"good", request_id="x", check=lambda p: None)
    assert created  # the refused attempt did not claim the request id


@pytest.mark.parametrize("in_kernel_range", [True, False], ids=["copy_file_range", "sendfile"])
def test_a_witness_file_is_copied_up_to_its_checked_size(tmp_path, monkeypatch, in_kernel_range):
    if not in_kernel_range:  # what an older kernel says across filesystems: the copy falls back to sendfile
        def refuse(*args):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        monkeypatch.setattr(os, "copy_file_range", refuse)
    j = Journal(tmp_path / "data")
    data = os.urandom(3 << 20) + b"tail"
    source = tmp_path / "w.wtns"
    source.write_bytes(data + b"appended after the size was taken")
    fd = os.open(source, os.O_RDONLY)
    try:
        rec, created = j.submit("c", Priority.NORMAL, WitnessFile(fd, len(data)), request_id="f")
    finally:
        os.close(fd)
    assert created and j.witness_path(rec.job_id).read_bytes() == data
    assert j.submit("c", Priority.NORMAL, data, request_id="f") == (rec, False)  # its digest is the bytes' digest
    assert sorted(p.name for p in j.witness_dir.iterdir()) == [f"{rec.job_id}.wtns"]
    short = tmp_path / "short.wtns"  # truncated after its size was taken: the copy stops at its end, the check decides
    short.write_bytes(b"12345")

    def check(path):
        raise ValueError(f"the witness file is {path.stat().st_size} bytes")

    fd = os.open(short, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="is 5 bytes"):
            j.submit("c", Priority.NORMAL, WitnessFile(fd, 4096), check=check)
    finally:
        os.close(fd)
    assert sorted(p.name for p in j.witness_dir.iterdir()) == [f"{rec.job_id}.wtns"]  # nothing of it kept


def test_finish_deletes_the_witness_and_stores_the_result(tmp_path):
    j = Journal(tmp_path)
    rec, _ = j.submit("c", Priority.NORMAL, b"w")
    done = j.finish(rec.job_id, JobState.FAILED, error="witness does not satisfy constraint 3", timings={"synthesize": 0.5})
    j.close()  # waits for the deletion, which runs off the finishing thread
    assert not j.witness_path(rec.job_id).exists()
    assert done.state is JobState.FAILED and done.error.endswith("constraint 3") and done.timings == {"synthesize": 0.5}
    assert done.finished_at >= done.submitted_at


def test_finish_many_journals_several_outcomes_in_one_commit(tmp_path):
    """The finisher's group commit: each job's result stored and its witness deleted, in one transaction."""
    j = Journal(tmp_path)
    ids = [j.submit("c", Priority.NORMAL, bytes([i]))[0].job_id for i in range(3)]
    statements = []
    j._db.set_trace_callback(statements.append)
    done = j.finish_many([(ids[0], JobState.DONE, {"proof": {"pi_a": ["1"]}, "public_signals": ["7"], "timings": {"msm": 0.1}}),
                          (ids[1], JobState.FAILED, {"error": "rejected"}),
                          (ids[2], JobState.CANCELLED, {})])
    j._db.set_trace_callback(None)
    assert [r.job_id for r in done] == ids and [r.state for r in done] == [JobState.DONE, JobState.FAILED, JobState.CANCELLED]
    assert done[0].proof == {"pi_a": ["1"]} and done[0].public_signals == ["7"] and done[1].error == "rejected"
    begin = statements.index("BEGIN")
    commit = statements.index("COMMIT", begin)
    updates = [i for i, s in enumerate(statements) if s.startswith("UPDATE jobs SET state")]
    assert len(updates) == 3 and all(begin < i < commit for i in updates)  # all three in the first transaction
    assert Journal(tmp_path).result_bytes() == j.result_bytes() > 0  # the running total is the rows'
    with pytest.raises(ValueError, match="terminal"):
        j.finish_many([(j.submit("c", Priority.NORMAL, b"x")[0].job_id, JobState.PROVING, {})])
    j.close()  # waits for the witnesses' deletion
    assert not any(j.witness_path(i).exists() for i in ids)


def test_started_mark_survives_sigkill_without_waiting_for_the_disk(tmp_path):
    """mark_started commits without an fsync: a daemon killed right after it still left the attempt counted."""
    code = textwrap.dedent(f"""
        from cuzk.engine.journal import Journal
        from cuzk.engine.jobs import Priority
        j = Journal({str(tmp_path)!r})
        rec, _ = j.submit("toy", Priority.NORMAL, b"w")
        assert j.mark_started(rec.job_id) == 1
        print(rec.job_id, flush=True)
        import time; time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    job_id = child.stdout.readline().strip()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    replay = Journal(tmp_path).requeue_unfinished()
    assert [(r.job_id, r.attempts) for r in replay] == [(job_id, 1)]


def test_prune_by_age(tmp_path):
    j = Journal(tmp_path, result_ttl_s=100)
    old, _ = j.submit("c", Priority.NORMAL, b"1")
    new, _ = j.submit("c", Priority.NORMAL, b"2")
    queued, _ = j.submit("c", Priority.NORMAL, b"3")
    j.finish(old.job_id, JobState.DONE, proof={}, public_signals=[])
    j.finish(new.job_id, JobState.DONE, proof={}, public_signals=[])
    assert j.prune(now=time.time() + 50) == 0
    # Both finished results are older than the TTL 150 s from now; the queued job is never pruned.
    assert j.prune(now=time.time() + 150) == 2
    assert j.get(old.job_id) is None and j.get(new.job_id) is None and j.get(queued.job_id) is not None
    assert j.result_bytes() == 0


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(min_value=0, max_value=2000), min_size=1, max_size=12), cap=st.integers(min_value=1, max_value=6000))
def test_prune_by_size_keeps_the_newest_results_within_the_cap(tmp_path_factory, sizes, cap):
    j = Journal(tmp_path_factory.mktemp("j"), result_max_bytes=cap)
    ids = []
    for size in sizes:
        rec, _ = j.submit("c", Priority.NORMAL, os.urandom(8))
        j.finish(rec.job_id, JobState.FAILED, error="e" * size)  # finish() prunes as it goes
        ids.append(rec.job_id)
    assert j.result_bytes() <= cap
    assert Journal(j.data_dir, result_max_bytes=cap).result_bytes() == j.result_bytes()  # the running total is the rows'
    kept = [i for i in ids if j.get(i) is not None]
    assert kept == ids[len(ids) - len(kept):]  # only the oldest ever go
    if kept != ids:  # minimal: the newest dropped result would not have fit beside the kept ones
        stored = [size + len("{}") for size in sizes]  # error text + empty timings JSON
        newest_dropped = len(ids) - len(kept) - 1
        assert j.result_bytes() + stored[newest_dropped] > cap


def test_results_are_never_kept_forever(tmp_path):
    with pytest.raises(ValueError):
        Journal(tmp_path, result_ttl_s=0)


def test_orphan_witness_files_are_removed_on_open(tmp_path):
    j = Journal(tmp_path)
    rec, _ = j.submit("c", Priority.NORMAL, b"keep")
    (j.witness_dir / "deadbeef.wtns").write_bytes(b"orphan")  # row never committed
    (j.witness_dir / "x.tmp").write_bytes(b"half-written")
    j2 = Journal(tmp_path)
    assert sorted(p.name for p in j2.witness_dir.iterdir()) == [f"{rec.job_id}.wtns"]


def test_list_counts_keys_and_peaks(tmp_path):
    j = Journal(tmp_path)
    a, _ = j.submit("a", Priority.NORMAL, b"1")
    b, _ = j.submit("b", Priority.NORMAL, b"2")
    j.finish(a.job_id, JobState.CANCELLED)
    assert [r.job_id for r in j.list()] == [b.job_id, a.job_id]
    assert [r.job_id for r in j.list(states=[JobState.CANCELLED])] == [a.job_id]
    assert [r.job_id for r in j.list(circuit="b")] == [b.job_id]
    assert j.counts()["queued"] == 1 and j.counts()["cancelled"] == 1
    j.save_key("a", "/keys/a.zkey")
    j.save_key("b", "/keys/b.zkey", r1cs="/keys/b.r1cs", wasm="/keys/b.wasm")
    assert Journal(tmp_path).saved_keys() == {"a": ("/keys/a.zkey", None, None), "b": ("/keys/b.zkey", "/keys/b.r1cs", "/keys/b.wasm")}
    j.forget_key("a")
    assert list(j.saved_keys()) == ["b"]
    assert j.save_peak("a", "cpu", 100) == 100 and j.save_peak("a", "cpu", 50) == 100
    assert j.save_peak("a", "cpu", 300) == 300 and j.save_peak("a", "device", 40) == 40  # per proving path
    assert j.saved_peaks() == {("a", "cpu"): 300, ("a", "device"): 40}


def test_data_dir_lock_is_exclusive_and_released(tmp_path):
    first = DataDirLock(tmp_path)
    first.acquire()
    with pytest.raises(DataDirLocked, match="in use"):
        DataDirLock(tmp_path).acquire()
    first.release()
    second = DataDirLock(tmp_path)
    second.acquire()
    second.release()


def test_a_journal_from_before_wasm_keys_keeps_its_keys(tmp_path):
    """An existing journal's keys table (no wasm column) gains the column; its keys read back without a .wasm."""
    import sqlite3

    db = sqlite3.connect(tmp_path / "journal.sqlite3")
    db.execute("CREATE TABLE keys (name TEXT PRIMARY KEY, path TEXT NOT NULL, r1cs TEXT)")
    db.execute("INSERT INTO keys VALUES ('old', '/keys/old.zkey', '/keys/old.r1cs')")
    db.commit()
    db.close()
    j = Journal(tmp_path)
    assert j.saved_keys() == {"old": ("/keys/old.zkey", "/keys/old.r1cs", None)}
    j.save_key("old", "/keys/old.zkey", wasm="/keys/old.wasm")
    assert Journal(tmp_path).saved_keys()["old"][2] == "/keys/old.wasm"
