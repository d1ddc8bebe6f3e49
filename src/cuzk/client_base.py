"""What every client of the daemon shares, whatever its transport: the errors, the results, riding over a daemon
restart, and how a witness travels.

``cuzk.client.Client`` speaks gRPC (every call, any listener); ``cuzk.local_client.LocalHttpClient`` speaks HTTP/JSON
on the local daemon's unix socket (``prove`` only). This module imports nothing but the standard library, so that a
one-shot ``cuzk prove`` on a local daemon pays for neither grpc nor protobuf; nor, for the same reason, for
dataclasses, typing or pathlib (~40 ms of CPU on two cores, a third of a small circuit's whole proof).
"""

from __future__ import annotations

import os
import stat
import sys
import time

from .addresses import absolute_path
from .json_text import dumps_like_snarkjs, loads, write_text

TYPE_CHECKING = False  # typing's own constant costs its import: type checkers treat this name alike
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar

    T = TypeVar("T")
Witness = bytes | bytearray | memoryview | str | os.PathLike

# Opens the daemon's refusal of a witness path (a TCP listener, the setting off, a file it cannot open), so that a
# client can tell it apart and send the witness bytes instead.
WITNESS_PATH_REFUSED = "witness_path refused"


class DaemonError(ValueError):
    """The daemon refused a request; ``code`` is the gRPC status name ("NOT_FOUND", ...) on either transport."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class DaemonUnavailable(ConnectionError):
    """No daemon answers at the address (not started, restarting for longer than the timeout, wrong address)."""


class AwaitTimeout(TimeoutError):
    """The job did not finish within the timeout; it is still queued or running."""


class RequestTooLarge(DaemonError):
    pass


class JobFailed(DaemonError):
    """The job ran and failed (unsatisfied witness, witness for another circuit...)."""


class JobCancelled(DaemonError):
    pass


class Unanswered(Exception):
    """One attempt of a call reached no daemon (nothing listening, or the engine restarting); the message says why.
    Raised by a transport's attempt, handled by ``ClientBase._call``."""


class ProofResult:
    """A job's outcome as a client sees it: its proof (snarkjs's JSON text) and public signals once DONE, else the
    error. A value: its fields are set once, here (a plain class, not a dataclass, for the import's sake).

    ``round_trip`` (where the transport tells, the local HTTP socket's): when this client sent the request that was
    answered and when the answer came (``time.time()``), and the seconds the daemon spent on it — what ``cuzk prove
    --verbose`` splits a call's time by."""

    __slots__ = ("job_id", "state", "circuit", "request_id", "proof_json", "public_signals", "error", "timings",
                 "round_trip")

    def __init__(self, job_id: str, state: str, circuit: str = "", request_id: str = "", proof_json: str = "",
                 public_signals: list[str] | None = None, error: str = "", timings: dict[str, float] | None = None,
                 round_trip: tuple[float, float, float] | None = None):
        self.job_id, self.state, self.circuit, self.request_id = job_id, state, circuit, request_id
        self.proof_json, self.error = proof_json, error
        self.public_signals = [] if public_signals is None else public_signals
        self.timings = {} if timings is None else timings
        self.round_trip = round_trip

    def __repr__(self) -> str:
        return f"ProofResult({', '.join(f'{name}={getattr(self, name)!r}' for name in self.__slots__)})"

    @property
    def proof(self) -> dict[str, Any]:
        return loads(self.proof_json)

    def public_json(self) -> str:
        return dumps_like_snarkjs(self.public_signals)

    def write(self, proof_path: str | os.PathLike, public_path: str | os.PathLike) -> None:
        """Write proof.json and public.json as snarkjs does."""
        write_text(proof_path, dumps_like_snarkjs(self.proof))
        write_text(public_path, self.public_json())

    def checked(self) -> ProofResult:
        """This result, or the JobFailed / JobCancelled its state means."""
        if self.state == "FAILED":
            raise JobFailed("FAILED", f"job {self.job_id} failed: {self.error}")
        if self.state == "CANCELLED":
            raise JobCancelled("CANCELLED", f"job {self.job_id} was cancelled")
        return self


def is_key_path(key: str | os.PathLike) -> bool:
    """A path (contains a slash, or ends in .zkey, or is an existing file), else a registered name."""
    text = os.fspath(key)
    return isinstance(key, os.PathLike) or "/" in text or text.endswith(".zkey") or os.path.isfile(text)


def wait_options(wait: bool) -> dict:
    """A command-line client's ``restart_grace`` and ``on_wait``: with ``wait``, a minute's patience with a daemon that
    does not answer (its supervisor restarting it), saying so on stderr; else none."""
    if not wait:
        return {"restart_grace": 0.0, "on_wait": None}
    return {"restart_grace": 60.0, "on_wait": lambda message: print(message, file=sys.stderr, flush=True)}


class ClientBase:
    """A client's transport-neutral half. ``address``: ``unix:PATH`` or ``HOST:PORT`` (already normalised).

    ``restart_grace`` bounds how long a retrying call keeps trying while nothing answers (the supervisor restarting
    the engine takes seconds, not minutes); ``on_wait`` is told (once per call) when a call starts waiting."""

    def __init__(self, address: str, *, restart_grace: float = 60.0, on_wait: Callable[[str], None] | None = None):
        self.address = address
        self.restart_grace = restart_grace
        self.on_wait = on_wait
        self._answered = False  # a daemon has answered this client once: an unanswered call waits for its restart
        self.sends_witness_paths = address.startswith("unix:")

    def _call(self, attempt: Callable[[float | None], T], *, timeout: float | None, retry: bool) -> T:
        """``attempt(seconds left)`` once, or (``retry``) again while it raises ``Unanswered``, within the grace."""
        deadline = None if timeout is None else time.monotonic() + timeout
        unavailable_since: float | None = None
        delay = 0.05
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                answer = attempt(remaining)
            except Unanswered as exc:
                now = time.monotonic()
                if not self._answered and self._no_socket():
                    raise DaemonUnavailable(f"no cuzk daemon answers at {self.address}: the socket file does not exist "
                                            "(start one with `cuzk daemon`, or give its address with --daemon)") from None
                if retry:
                    if unavailable_since is None and self.on_wait is not None:
                        self.on_wait(f"waiting for the cuzk daemon at {self.address}: nothing answers yet (restarting?); "
                                     f"giving up after {self.restart_grace:g} s")
                    unavailable_since = unavailable_since or now
                    give_up_at = unavailable_since + self.restart_grace
                    if deadline is not None:
                        give_up_at = min(give_up_at, deadline)
                    if now < give_up_at:
                        time.sleep(min(delay, give_up_at - now))
                        delay = min(delay * 2, 1.0)
                        continue
                raise DaemonUnavailable(f"no cuzk daemon answers at {self.address}: {exc}") from None
            except AwaitTimeout:
                self._answered = True
                if unavailable_since is not None:
                    # the time ran out while the daemon was still not answering: that, not a slow daemon, is the news
                    raise DaemonUnavailable(f"no cuzk daemon answers at {self.address}: nothing answered within the "
                                            "timeout") from None
                raise
            except DaemonError:
                self._answered = True
                raise
            self._answered = True
            return answer

    def _no_socket(self) -> bool:
        """A unix address whose socket file is missing: no daemon was ever there (a restarting one leaves its file)."""
        return self.address.startswith("unix:") and not os.path.exists(self.address[5:])

    def _with_witness(self, witness: Witness | None, input: Mapping[str, Any] | str | None, send: Callable[[dict[str, Any]], T]) -> T:
        """``send`` the request's witness fields: ``input_json`` (the circuit's input), else ``witness_path`` and
        ``witness_identity`` (device, inode, size, mtime_ns) on a local daemon, else (or when it refuses the path)
        ``witness`` (the bytes)."""
        if (witness is None) == (input is None):
            raise ValueError("give a witness or the circuit's input (input=), not both or neither")
        if input is not None:
            return send({"input_json": input if isinstance(input, str) else dumps_like_snarkjs(input)})
        if isinstance(witness, (bytes, bytearray, memoryview)):
            return send({"witness": bytes(witness)})
        path = absolute_path(witness)
        try:
            st = os.stat(path)  # the daemon proves this very file, or refuses (another file at the path on its side)
        except OSError as exc:
            raise FileNotFoundError(f"{path}: cannot open: {exc.strerror}") from None
        if stat.S_ISDIR(st.st_mode):
            raise FileNotFoundError(f"{path}: cannot open: it is a directory")
        if self.sends_witness_paths and stat.S_ISREG(st.st_mode):  # a pipe's bytes are read here and sent
            try:
                return send({"witness_path": path,
                             "witness_identity": (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)})
            except DaemonError as exc:
                if exc.code != "FAILED_PRECONDITION" or not str(exc).startswith(WITNESS_PATH_REFUSED):
                    raise
                self.sends_witness_paths = False  # the daemon cannot read our files: bytes from now on
        with open(path, "rb") as f:
            return send({"witness": f.read()})
