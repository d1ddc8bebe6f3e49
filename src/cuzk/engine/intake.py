"""A witness into the journal: its bytes, or a file named by path (what the caller saw there, opened for the journal's copy).

A local client names its .wtns file instead of sending its bytes (the daemon's unix socket);
the journal then copies it in the kernel. The file is checked before a byte is copied: a
regular file, the very file the caller saw (device, inode, size, mtime), and no larger than
a witness of the circuit can be.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from typing import NamedTuple

from pathlib import Path

from ..formats.errors import FormatError
from ..formats.wtns import read_wtns, wtns_file_size
from ..formats.zkey import ZKeyHeader
from ..memory.units import format_size
from ..prover.groth16 import check_inputs
from .jobs import JobError, JobRecord, Priority
from .journal import Journal, WitnessFile


class WitnessFileError(JobError):
    """The witness path given to ``submit`` cannot be read as a file (missing, unreadable, a directory or a device)."""


class FileIdentity(NamedTuple):
    """A file as stat(2) shows it: what a client saw at a path, checked against what the engine opens there."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@contextlib.contextmanager
def open_witness_file(path: str | os.PathLike, header: ZKeyHeader, expected: FileIdentity | None) -> Iterator[WitnessFile]:
    """A caller's .wtns file, opened for the journal's copy; what cannot be one is refused before anything is copied."""
    try:  # O_NONBLOCK: a FIFO must not hang the caller; it is refused below as not a regular file
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise WitnessFileError(f"cannot open the witness file {os.fspath(path)!r}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WitnessFileError(f"the witness path {os.fspath(path)} is not a regular file")
        if expected is not None and FileIdentity.of(st) != expected:
            raise WitnessFileError(f"{os.fspath(path)} is not the file the caller named ({FileIdentity.of(st)} here, "
                                   f"{expected} there): another file at that path, or one changed since")
        most = wtns_file_size(header.curve, header.n_vars)
        if st.st_size > most:
            raise JobError(f"the witness file {os.fspath(path)} is {format_size(st.st_size)}, more than a witness of this "
                           f"circuit's {header.n_vars} values ({format_size(most)}); it cannot be this circuit's witness")
        yield WitnessFile(fd, st.st_size)
    finally:
        os.close(fd)


def journal_witness(journal: Journal, circuit: str, header: ZKeyHeader, witness: bytes | bytearray | memoryview | str | os.PathLike,
                    priority: Priority, request_id: str | None, identity: FileIdentity | None = None) -> tuple[JobRecord, bool]:
    """Journal a job whose witness is checked against its key's header first (``Journal.submit``'s (record, created)).

    The one intake of the engine and of the cluster's front door: a witness that cannot belong to the circuit is
    refused at the door with what is wrong (``FormatError`` / ``ProvingError``), never failed later.
    """
    if not isinstance(witness, (bytes, bytearray, memoryview, str, os.PathLike)):
        raise JobError(f"witness must be the .wtns file's bytes or its path, got {type(witness).__name__}")

    shown = str(witness) if isinstance(witness, (str, os.PathLike)) else "witness"

    def check(path: Path) -> None:
        try:
            check_inputs(header, read_wtns(path, resident=False))  # the job maps it later: keep none of it resident now
        except FormatError as exc:  # named as the client knows it, not as the journal's copy (witness/<job>.wtns)
            raise FormatError(shown, exc.problem, exc.section) from None

    if isinstance(witness, (str, os.PathLike)):
        with open_witness_file(witness, header, identity) as source:
            return journal.submit(circuit, priority, source, request_id, check=check)
    return journal.submit(circuit, priority, bytes(witness), request_id, check=check)
