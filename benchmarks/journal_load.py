"""Jobs per second the journal lets the daemon finish while witnesses stream in, as ``cuzk bench`` drives it at 2^20.

    PYTHONPATH=src python3 benchmarks/journal_load.py [--witness-mib 32] [--concurrency 16] [--submitters 4] [--seconds 10] [--fsync true,1,false]

No proving: the journal's side of each job, on the real ``Journal`` in --dir (on the daemon's disk, not a tmpfs).
``--submitters`` threads submit witnesses of --witness-mib MiB (written and fsync'd, as a submit by path is) while at
most --concurrency jobs are unfinished; one thread marks each job started (as a synthesis worker does); one finisher
thread ends them as the engine's ``Finisher`` does: every job waiting for it in one ``Journal.finish_many`` commit
where the journal has it, else one ``finish`` each (the code before session 9: run this script with that code's src
on PYTHONPATH for the peer). Prints jobs finished per second, the finisher's time per job, and the witness bytes
written per second. Under witness writes each fsync'd commit waits for their data (ext4's ordered journal), so what
one commit per job costs shows here without a GPU (GPU_NOTES, session 9).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from cuzk.engine.jobs import JobState, Priority
from cuzk.engine.journal import Journal


def run(directory: Path, witness_mib: int, concurrency: int, submitters: int, seconds: float, fsync: bool | float = True) -> dict:
    # Only a journal with ``fsync`` (session 9) takes the argument: the default runs on older code, the peer's.
    journal = Journal(tempfile.mkdtemp(prefix="journal-load-", dir=directory), **({} if fsync is True else {"fsync": fsync}))
    witness = os.urandom(witness_mib << 20)
    room = threading.Semaphore(concurrency)  # unfinished jobs, as the bench's clients keep them
    submitted: queue.SimpleQueue = queue.SimpleQueue()
    started: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()
    finished: list[float] = []
    finish_s: list[float] = []
    batched = hasattr(journal, "finish_many")

    def submitter() -> None:
        while not stop.is_set():
            if room.acquire(timeout=0.1):
                submitted.put(journal.submit("c", Priority.NORMAL, witness)[0].job_id)

    def starter() -> None:
        while (job_id := submitted.get()) is not None:
            journal.mark_started(job_id)
            started.put(job_id)

    def finisher() -> None:
        while (job_id := started.get()) is not None:
            batch = [job_id]
            while True:
                try:
                    more = started.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    started.put(None)
                    break
                batch.append(more)
            t = time.perf_counter()
            if batched:
                journal.finish_many([(j, JobState.DONE, {"proof": {"pi_a": ["1"]}, "public_signals": ["1"]}) for j in batch])
            else:
                for j in batch:
                    journal.finish(j, JobState.DONE, proof={"pi_a": ["1"]}, public_signals=["1"])
            now = time.perf_counter()
            finish_s.append((now - t) / len(batch))
            finished.extend([now] * len(batch))
            for _ in batch:
                room.release()

    threads = [threading.Thread(target=submitter) for _ in range(submitters)]
    helpers = [threading.Thread(target=starter), threading.Thread(target=finisher)]
    for t in threads + helpers:
        t.start()
    time.sleep(1.0)  # let the pipeline fill before measuring
    begin = time.perf_counter()
    done_before = len(finished)
    time.sleep(seconds)
    window = time.perf_counter() - begin
    done = len(finished) - done_before
    stop.set()
    for t in threads:
        t.join()
    submitted.put(None)
    helpers[0].join()
    started.put(None)
    helpers[1].join()
    journal.close()
    return {"finish_many": batched, "fsync": fsync, "jobs_per_s": round(done / window, 2), "witness_mb_per_s": round(done * witness_mib * 1.048576 / window, 1),
            "finisher_ms_per_job_p50": round(1e3 * statistics.median(finish_s), 2) if finish_s else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--witness-mib", type=int, default=32, help="witness size (32 MiB: the 2^20 ladder rung)")
    ap.add_argument("--concurrency", type=int, default=16, help="unfinished jobs at most (the bench's --concurrency)")
    ap.add_argument("--submitters", type=int, default=4, help="threads writing witnesses")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured window")
    ap.add_argument("--dir", type=Path, default=Path.cwd(), help="where the journal lives (default: here)")
    ap.add_argument("--fsync", type=lambda text: [_fsync_setting(v) for v in text.split(",")], default=[True],
                    help="journal_fsync settings to run one after the other, each compared with the first: true, false "
                         "or a delay in seconds (default: true)")
    args = ap.parse_args(argv)
    rows = [run(args.dir, args.witness_mib, args.concurrency, args.submitters, args.seconds, fsync) for fsync in args.fsync]
    for row in rows:
        print(json.dumps(row))
        print(f"{'finish_many' if row['finish_many'] else 'one finish per job'}, journal_fsync = {row['fsync']}: "
              f"{row['jobs_per_s']} jobs/s finished ({row['witness_mb_per_s']} MB/s of witnesses), "
              f"finisher {row['finisher_ms_per_job_p50']} ms per job (p50)"
              + (f"; x{row['jobs_per_s'] / rows[0]['jobs_per_s']:.2f} the first" if row is not rows[0] else ""))
    return 0


def _fsync_setting(text: str) -> bool | float:
    word = text.strip().lower()
    return word == "true" if word in ("true", "false") else float(word)


if __name__ == "__main__":
    sys.exit(main())
