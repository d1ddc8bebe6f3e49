"""The job journal: SQLite in WAL mode in the daemon's data directory.

Why it exists: a proof request must survive the daemon dying (an OOM kill included), so
``submit`` writes the job to disk — witness file fsync'd, row committed with
``synchronous=FULL`` — before it returns an id. ``fsync`` (``[engine] journal_fsync``) trades that
wait for speed, as Redis's ``appendfsync`` does. A number of seconds makes each job durable within
that delay instead: a syncer thread fsyncs the witnesses of the jobs still unfinished, then the
database, so a job that ends within the delay never writes its witness to the disk at all.
``False`` never waits; the kernel writes back in its own time. Either way a job survives the
daemon's death; the machine's death can lose the jobs of the last moments (within the delay), and
replay fails by name any whose row reached the disk without its witness (``requeue_unfinished``).
After a restart ``unfinished()`` lists what
to run again, in the original order. Results are plain rows, pruned by age and by total
size (``prune``) so the journal never grows without bound.

Layout of the data directory::

    journal.sqlite3 (+ -wal, -shm)   jobs, registered keys, measured per-circuit peaks
    witness/<job_id>.wtns            the witness of each unfinished job (deleted when it ends)

``request_id`` is an idempotency key: submitting again with the same id returns the first
job (even after it finished, until its result is pruned); reusing an id for a different
circuit or witness is refused, because answering with the other job's proof would be wrong.

One process owns a data directory at a time (the engine takes ``DataDirLock``); the
journal itself is thread-safe (one connection behind a lock).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from .jobs import UNFINISHED_STATES, JobError, JobRecord, JobState, Priority

if TYPE_CHECKING:
    from .config import EngineConfig

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id         TEXT NOT NULL UNIQUE,
    request_id     TEXT UNIQUE,
    circuit        TEXT NOT NULL,
    priority       INTEGER NOT NULL,
    state          TEXT NOT NULL,
    witness_sha256 TEXT NOT NULL,
    witness_bytes  INTEGER,
    submitted_at   REAL NOT NULL,
    started_at     REAL,
    finished_at    REAL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    proof          TEXT,
    public_signals TEXT,
    error          TEXT,
    timings        TEXT,
    result_bytes   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs(finished_at);
CREATE TABLE IF NOT EXISTS keys (
    name TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    r1cs TEXT,
    wasm TEXT
);
DROP TABLE IF EXISTS circuit_peaks;
CREATE TABLE IF NOT EXISTS working_set_peaks (
    circuit     TEXT NOT NULL,
    path        TEXT NOT NULL,
    peak_bytes  INTEGER NOT NULL,
    measured_at REAL NOT NULL,
    PRIMARY KEY (circuit, path)
);
"""

_COLUMNS = (
    "seq, job_id, request_id, circuit, priority, state, submitted_at, started_at, finished_at, "
    "attempts, proof, public_signals, error, timings"
)


class RequestIdConflict(JobError):
    def __init__(self, request_id: str, job_id: str, what: str):
        super().__init__(f"request_id {request_id!r} was already used by job {job_id} for a different {what}")
        self.request_id = request_id
        self.job_id = job_id


class DataDirLocked(RuntimeError):
    def __init__(self, data_dir: Path):
        super().__init__(f"data directory {data_dir} is in use by another cuzk engine (lock file {data_dir / 'engine.lock'})")


class DataDirLock:
    """An exclusive flock on ``<data_dir>/engine.lock``: two daemons must never share one journal.

    The kernel drops the lock when the holder dies (SIGKILL included), so a restarted
    daemon never finds a stale lock.
    """

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / "engine.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirLocked(self.path.parent) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


class WitnessFile(NamedTuple):
    """An open .wtns file to journal by copying: its first ``nbytes`` bytes (its size when it was checked)."""

    fd: int
    nbytes: int


def _copy_file(src: int, dst: int, nbytes: int) -> None:
    """Copy ``nbytes`` from the start of ``src`` in the kernel (copy_file_range, else sendfile): no GIL, no user-space buffer.

    A source that turns out shorter stops the copy early; the check of the copy then names what is wrong.
    """
    offset, in_kernel_range = 0, True
    while offset < nbytes:
        if in_kernel_range:
            try:
                done = os.copy_file_range(src, dst, nbytes - offset, offset)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                in_kernel_range = False  # across filesystems on older kernels, or a filesystem without it
                continue
        else:
            done = os.sendfile(dst, src, offset, nbytes - offset)
        if done == 0:
            return
        offset += done


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    def __init__(self, data_dir: str | os.PathLike, *, result_ttl_s: float = 24 * 3600, result_max_bytes: int = 64 << 20,
                 fsync: bool | float = True):
        if result_ttl_s <= 0 or result_max_bytes <= 0:
            raise ValueError("result_ttl_s and result_max_bytes must be positive (results are never kept forever)")
        self.data_dir = Path(data_dir)
        self.witness_dir = self.data_dir / "witness"
        self.witness_dir.mkdir(parents=True, exist_ok=True)
        self.result_ttl_s = result_ttl_s
        self.result_max_bytes = result_max_bytes
        self.fsync = fsync
        self._fsync_each = fsync is True  # every submit and finish waits for the disk
        self._lock = threading.RLock()
        self._deleter: ThreadPoolExecutor | None = None  # deletes finished jobs' witnesses (``_delete_witnesses``)
        # With a delay: unfinished jobs whose witness is not yet fsync'd, and the WAL's (size, mtime) when last fsync'd
        # (``_sync_round``).
        self._unsynced: set[str] = set()
        self._wal_synced: tuple[int, int] | None = None
        self._syncer: threading.Thread | None = None
        self._stop_syncing = threading.Event()
        self._db = sqlite3.connect(self.data_dir / "journal.sqlite3", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes effect on a new file; lets prune give space back
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed submit survives power loss too; NORMAL (in WAL mode): the process's death, not power loss
        self._db.execute(f"PRAGMA synchronous={'FULL' if self._fsync_each else 'NORMAL'}")
        self._db.executescript(SCHEMA)
        if "wasm" not in {row[1] for row in self._db.execute("PRAGMA table_info(keys)")}:  # a journal from before .wasm keys
            self._db.execute("ALTER TABLE keys ADD COLUMN wasm TEXT")
        if "witness_bytes" not in {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}:  # before session 9
            self._db.execute("ALTER TABLE jobs ADD COLUMN witness_bytes INTEGER")
        self._remove_orphan_witnesses()
        # Kept up to date by finish and prune: a SUM over every retained result at each finish grew with them
        # (5 ms a finish with 5,000 retained, 30 ms with 20,000), and the cap allows tens of thousands.
        self._retained_bytes = self._db.execute(
            "SELECT COALESCE(SUM(result_bytes), 0) FROM jobs WHERE finished_at IS NOT NULL").fetchone()[0]
        if not isinstance(fsync, bool):
            self._syncer = threading.Thread(target=self._sync_every, args=(float(fsync),), name="cuzk-journal-sync", daemon=True)
            self._syncer.start()

    @classmethod
    def of(cls, config: EngineConfig) -> Journal:
        """The journal of an engine (or a cluster's front door) with these settings, in its data directory."""
        return cls(config.data_dir, result_ttl_s=config.result_ttl_s, result_max_bytes=config.result_max_bytes,
                   fsync=config.journal_fsync)

    def close(self) -> None:
        """Close the database, once every job is durable (with a delay) and the finished jobs' witnesses are deleted."""
        if self._syncer is not None:
            self._stop_syncing.set()
            self._syncer.join()
            self._sync_round()
        with self._lock:
            deleter, self._deleter = self._deleter, None
        if deleter is not None:
            deleter.shutdown(wait=True)
        with self._lock:
            self._db.close()

    def _sync_every(self, delay_s: float) -> None:
        while not self._stop_syncing.wait(delay_s):
            try:
                self._sync_round()
            except OSError:  # a failing disk: said loudly each round, and the jobs still prove
                log.exception("journal: could not make the jobs of the last %.3g s durable", delay_s)

    def _sync_round(self) -> None:
        """Make every job committed so far durable (``fsync`` given as a delay): the witnesses of those still unfinished,
        their directory, then the database's WAL, which holds the rows (so a row on the disk has its witness there)."""
        with self._lock:
            unsynced, self._unsynced = self._unsynced, set()
        try:
            for job_id in unsynced:
                try:
                    fd = os.open(self.witness_path(job_id), os.O_RDONLY)
                except FileNotFoundError:  # its job ended and the file is gone: it never needs the disk
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            if unsynced:
                _fsync_dir(self.witness_dir)
        except OSError:
            with self._lock:  # tried again next round (those of jobs that ended meanwhile only cost an open)
                self._unsynced |= unsynced
            raise
        try:  # fsync'ing the WAL makes every transaction in it durable, as SQLite's synchronous=FULL does at each commit
            fd = os.open(self.data_dir / "journal.sqlite3-wal", os.O_RDONLY)
        except FileNotFoundError:
            fd = None
        if fd is not None:
            try:
                st = os.fstat(fd)
                if (st.st_size, st.st_mtime_ns) != self._wal_synced:
                    os.fsync(fd)
                    self._wal_synced = (st.st_size, st.st_mtime_ns)
            finally:
                os.close(fd)

    def _delete_witnesses(self, job_ids: list[str]) -> None:
        """Delete finished jobs' witness files on a thread of the journal's own: under witnesses being written, unlinking
        one (32 MiB at 2^20) waited tens of ms for the filesystem's journal, on the finisher's thread. A restart deletes
        any left behind (``_remove_orphan_witnesses``)."""
        with self._lock:
            if self._deleter is None:
                self._deleter = ThreadPoolExecutor(1, thread_name_prefix="cuzk-journal-delete")
            deleter = self._deleter
        deleter.submit(lambda: [self.witness_path(job_id).unlink(missing_ok=True) for job_id in job_ids])

    # ---- submission ---------------------------------------------------------------
    def submit(self, circuit: str, priority: Priority, witness: bytes | WitnessFile, request_id: str | None = None,
               check: Callable[[Path], None] | None = None) -> tuple[JobRecord, bool]:
        """Make a job durable. Returns (record, created); created is False for a repeated request_id.

        ``witness`` is the .wtns bytes, or a ``WitnessFile`` copied by the kernel (the bytes
        never pass through Python). ``check(path)`` runs on the written witness file before
        the job row is committed; if it raises, nothing is kept and the error propagates (a
        witness that cannot belong to the circuit is refused at the door, not failed later).
        """
        if request_id is not None and (not isinstance(request_id, str) or not request_id):
            raise JobError("request_id must be a non-empty string (or None)")
        # The digest only tells a repeated request_id's witness from another: no request id, no hashing pass.
        digest = "" if request_id is None else None if isinstance(witness, WitnessFile) else hashlib.sha256(witness).hexdigest()
        if request_id is not None and digest is not None:  # a repeat is answered before its witness is written again
            with self._lock:
                existing = self._existing_request(request_id, circuit, digest)
            if existing is not None:
                return existing, False
        # Writing, fsync'ing and checking the witness take most of a submit (tens of ms per 10 MiB):
        # done outside the lock, each in its own file, so concurrent submits overlap; only the row is serialized.
        job_id = uuid.uuid4().hex
        path = self.witness_path(job_id)
        try:
            self._write_durably(path, witness)
            if digest is None:
                with open(path, "rb") as f:
                    digest = hashlib.file_digest(f, "sha256").hexdigest()
            if check is not None:
                check(path)
            with self._lock:
                if request_id is not None:  # a concurrent submit of the same request may have committed meanwhile
                    existing = self._existing_request(request_id, circuit, digest)
                    if existing is not None:
                        path.unlink(missing_ok=True)
                        return existing, False
                self._db.execute(
                    "INSERT INTO jobs (job_id, request_id, circuit, priority, state, witness_sha256, witness_bytes, submitted_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (job_id, request_id, circuit, int(priority), JobState.QUEUED.value, digest,
                     witness.nbytes if isinstance(witness, WitnessFile) else len(witness), time.time()),
                )
                if self._syncer is not None:
                    self._unsynced.add(job_id)
                return self._get(job_id), True
        except BaseException:
            path.unlink(missing_ok=True)
            path.with_suffix(".tmp").unlink(missing_ok=True)
            raise

    def _existing_request(self, request_id: str, circuit: str, digest: str) -> JobRecord | None:
        row = self._db.execute("SELECT job_id, circuit, witness_sha256 FROM jobs WHERE request_id = ?", (request_id,)).fetchone()
        if row is None:
            return None
        job_id, old_circuit, old_digest = row
        if old_circuit != circuit:
            raise RequestIdConflict(request_id, job_id, f"circuit ({old_circuit!r}, now {circuit!r})")
        if old_digest != digest:
            raise RequestIdConflict(request_id, job_id, "witness")
        return self._get(job_id)

    def witness_path(self, job_id: str) -> Path:
        return self.witness_dir / f"{job_id}.wtns"

    def _write_durably(self, path: Path, witness: bytes | WitnessFile) -> None:
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            if isinstance(witness, WitnessFile):
                _copy_file(witness.fd, f.fileno(), witness.nbytes)
            else:
                f.write(witness)
                f.flush()
            if self._fsync_each:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if self._fsync_each:
            _fsync_dir(path.parent)

    def _remove_orphan_witnesses(self) -> None:
        """Witness files whose job row never committed (died between the two writes), or already ended."""
        live = {r[0] for r in self._db.execute(
            f"SELECT job_id FROM jobs WHERE state IN ({','.join('?' * len(UNFINISHED_STATES))})",
            [s.value for s in UNFINISHED_STATES],
        )}
        for p in self.witness_dir.iterdir():
            if p.stem not in live or p.suffix != ".wtns":
                p.unlink(missing_ok=True)

    # ---- state changes --------------------------------------------------------------
    def mark_started(self, job_id: str) -> int:
        """Record that a worker took the job (state SYNTHESIZING); returns the attempt number.

        Committed without waiting for the disk (``synchronous=NORMAL`` for this one commit): in WAL mode it survives
        the daemon's death (an OOM kill included, which is what the attempt count is for) and becomes durable with the
        next fsync'd commit; a power loss before that leaves the job queued with one attempt fewer, and it is replayed
        either way. Under witnesses being written, an fsync'd commit waits for their data (ext4's ordered journal):
        tens of ms each, behind the one lock every commit takes (GPU_NOTES, session 9)."""
        with self._lock:
            if self._fsync_each:
                self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                self._db.execute(
                    "UPDATE jobs SET state = ?, started_at = ?, attempts = attempts + 1 WHERE job_id = ?",
                    (JobState.SYNTHESIZING.value, time.time(), job_id),
                )
            finally:
                if self._fsync_each:
                    self._db.execute("PRAGMA synchronous=FULL")
            return self._db.execute("SELECT attempts FROM jobs WHERE job_id = ?", (job_id,)).fetchone()[0]

    def set_state(self, job_id: str, state: JobState) -> None:
        if state.terminal:
            raise ValueError("use finish() for a terminal state")
        with self._lock:
            self._db.execute("UPDATE jobs SET state = ? WHERE job_id = ?", (state.value, job_id))

    def finish(
        self,
        job_id: str,
        state: JobState,
        *,
        proof: dict | None = None,
        public_signals: list[str] | None = None,
        error: str | None = None,
        timings: dict[str, float] | None = None,
    ) -> JobRecord:
        """Store the outcome, delete the witness (off the calling thread), and prune old results."""
        return self.finish_many([(job_id, state, {"proof": proof, "public_signals": public_signals, "error": error,
                                                  "timings": timings})])[0]

    def finish_many(self, outcomes: list[tuple[str, JobState, dict]]) -> list[JobRecord]:
        """``finish`` for several jobs, (job id, state, its keyword arguments) each, in one commit (fsync'd by default): the
        finisher journals every proof that waited for it at once, where one commit each queued behind the witnesses'
        fsyncs and set the daemon's pace (GPU_NOTES, session 9). Their witnesses are deleted after the commit, off the
        calling thread."""
        rows = []
        for job_id, state, result in outcomes:
            if not state.terminal:
                raise ValueError(f"finish() needs a terminal state, not {state.value}")
            proof, public = result.get("proof"), result.get("public_signals")
            proof_s = json.dumps(proof) if proof is not None else None
            public_s = json.dumps(public) if public is not None else None
            timings_s = json.dumps(result.get("timings") or {})
            error = result.get("error")
            size = sum(len(s) for s in (proof_s, public_s, error, timings_s) if s)
            rows.append((job_id, state.value, proof_s, public_s, error, timings_s, size))
        with self._lock:
            grown = 0
            self._db.execute("BEGIN")
            try:
                for job_id, state, proof_s, public_s, error, timings_s, size in rows:
                    before = self._db.execute("SELECT result_bytes FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
                    self._db.execute(
                        "UPDATE jobs SET state = ?, finished_at = ?, proof = ?, public_signals = ?, error = ?, timings = ?, "
                        "result_bytes = ? WHERE job_id = ?",
                        (state, time.time(), proof_s, public_s, error, timings_s, size, job_id),
                    )
                    if before is not None:
                        grown += size - before[0]
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._retained_bytes += grown
            records = [self._get(job_id) for job_id, *_ in rows]
            self.prune()
            self._unsynced.difference_update(job_id for job_id, *_ in rows)  # ended: their witnesses never need the disk
        self._delete_witnesses([job_id for job_id, *_ in rows])
        return records

    def requeue_unfinished(self) -> list[JobRecord]:
        """After a restart: every unfinished job goes back to QUEUED; returned in submission order. A job whose witness
        file is gone or shorter than what was written fails, naming that, instead (the machine stopped before the file
        reached the disk, which ``fsync`` other than True allows, or the data directory was changed by hand)."""
        with self._lock:
            marks = ",".join("?" * len(UNFINISHED_STATES))
            self._db.execute(f"UPDATE jobs SET state = ? WHERE state IN ({marks})",
                             [JobState.QUEUED.value, *[s.value for s in UNFINISHED_STATES]])
            lost = []
            for job_id, written in self._db.execute("SELECT job_id, witness_bytes FROM jobs WHERE state = ?",
                                                    (JobState.QUEUED.value,)).fetchall():
                path = self.witness_path(job_id)
                found = path.stat().st_size if path.exists() else None
                if found is None or (written is not None and found != written):
                    lost.append((job_id, JobState.FAILED, {"error": (
                        f"the journal's copy of this job's witness is lost ({path}: "
                        f"{'missing' if found is None else f'{found} of {written} bytes'}): the machine stopped before it "
                        f"reached the disk (journal_fsync is not true), or the data directory was changed")}))
            if lost:
                self.finish_many(lost)
            return self._select("WHERE state = ? ORDER BY seq", (JobState.QUEUED.value,))

    # ---- pruning ----------------------------------------------------------------------
    def prune(self, now: float | None = None) -> int:
        """Delete finished jobs older than the TTL, then the oldest until results fit the size cap.

        Only finished jobs have a ``finished_at``, so both steps walk the ``jobs_finished`` index from its oldest end
        and touch only what they delete: a finish pays for its own pruning, not for every result kept."""
        now = time.time() if now is None else now
        with self._lock, self._db:
            self._db.execute("BEGIN")
            cutoff = now - self.result_ttl_s
            removed, freed = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(result_bytes), 0) FROM jobs WHERE finished_at < ?", (cutoff,)).fetchone()
            if removed:
                self._db.execute("DELETE FROM jobs WHERE finished_at < ?", (cutoff,))
            total = self._retained_bytes - freed
            if total > self.result_max_bytes:
                victims = []
                for seq, size in self._db.execute(
                        "SELECT seq, result_bytes FROM jobs WHERE finished_at IS NOT NULL ORDER BY finished_at, seq"):
                    if total <= self.result_max_bytes:
                        break
                    victims.append((seq,))
                    total -= size
                self._db.executemany("DELETE FROM jobs WHERE seq = ?", victims)
                removed += len(victims)
            self._retained_bytes = total
        if removed:
            with self._lock:
                self._db.execute("PRAGMA incremental_vacuum")
        return removed

    def result_bytes(self) -> int:
        """Bytes of the finished jobs' results kept (proofs, public signals, errors, timings)."""
        with self._lock:
            return self._retained_bytes

    # ---- queries ----------------------------------------------------------------------
    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            return self._get(job_id)

    def _get(self, job_id: str) -> JobRecord | None:
        rows = self._select("WHERE job_id = ?", (job_id,))
        return rows[0] if rows else None

    def list(self, *, states: Iterable[JobState] | None = None, circuit: str | None = None, limit: int = 100) -> list[JobRecord]:
        """Most recent first; ``limit`` -1 for all."""
        where, args = [], []
        if states is not None:
            states = [JobState(s) for s in states]
            where.append(f"state IN ({','.join('?' * len(states))})")
            args += [s.value for s in states]
        if circuit is not None:
            where.append("circuit = ?")
            args.append(circuit)
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        with self._lock:
            return self._select(f"{clause} ORDER BY seq DESC LIMIT ?", (*args, int(limit)))

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        out = {s.value: 0 for s in JobState}
        out.update(dict(rows))
        return out

    def _select(self, tail: str, args: Iterable) -> list[JobRecord]:
        return [self._record(r) for r in self._db.execute(f"SELECT {_COLUMNS} FROM jobs {tail}", tuple(args))]

    @staticmethod
    def _record(row: tuple) -> JobRecord:
        (seq, job_id, request_id, circuit, priority, state, submitted_at, started_at, finished_at,
         attempts, proof, public, error, timings) = row
        return JobRecord(
            job_id=job_id,
            circuit=circuit,
            priority=Priority(priority),
            state=JobState(state),
            submitted_at=submitted_at,
            request_id=request_id,
            seq=seq,
            started_at=started_at,
            finished_at=finished_at,
            attempts=attempts,
            proof=json.loads(proof) if proof else None,
            public_signals=json.loads(public) if public else None,
            error=error,
            timings=json.loads(timings) if timings else {},
        )

    # ---- registered keys and learned peaks (so a restart remembers them) ----------------
    def save_key(self, name: str, path: str, r1cs: str | None = None, wasm: str | None = None) -> None:
        with self._lock:
            self._db.execute("INSERT INTO keys (name, path, r1cs, wasm) VALUES (?, ?, ?, ?) ON CONFLICT(name) DO UPDATE "
                             "SET path = excluded.path, r1cs = excluded.r1cs, wasm = excluded.wasm", (name, path, r1cs, wasm))

    def forget_key(self, name: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM keys WHERE name = ?", (name,))

    def saved_keys(self) -> dict[str, tuple[str, str | None, str | None]]:
        """name → (zkey path, r1cs path or None, wasm path or None)."""
        with self._lock:
            rows = self._db.execute("SELECT name, path, r1cs, wasm FROM keys ORDER BY name")
            return {name: (path, r1cs, wasm) for name, path, r1cs, wasm in rows}

    def save_peak(self, circuit: str, path: str, peak_bytes: int) -> int:
        """Keep the largest measured working-set peak per circuit and proving path (``prover.sizing.proving_path``);
        returns the stored value."""
        with self._lock:
            self._db.execute(
                "INSERT INTO working_set_peaks (circuit, path, peak_bytes, measured_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(circuit, path) DO UPDATE SET peak_bytes = MAX(peak_bytes, excluded.peak_bytes), "
                "measured_at = excluded.measured_at",
                (circuit, path, int(peak_bytes), time.time()),
            )
            return self._db.execute("SELECT peak_bytes FROM working_set_peaks WHERE circuit = ? AND path = ?",
                                    (circuit, path)).fetchone()[0]

    def saved_peaks(self) -> dict[tuple[str, str], int]:
        """(circuit, proving path) → the largest peak measured."""
        with self._lock:
            rows = self._db.execute("SELECT circuit, path, peak_bytes FROM working_set_peaks").fetchall()
        return {(circuit, path): peak for circuit, path, peak in rows}
