"""``POST /v1/prove/{key}`` on the daemon's HTTP listener: proofs for clients without gRPC (curl, scripts),
the way rapidsnark's proverServer is used.

The body is ``{"input": {...}}`` (the circuit's input, for a key registered with its .wasm) or
the .wtns file itself (``Content-Type: application/octet-stream``); ``priority`` and
``request_id`` may ride along in the JSON (or the query, with a .wtns body), ``?timeout_s=``
bounds the wait. The answer is ``{"proof": ..., "publicSignals": [...]}`` in snarkjs's layout
(proof.json and public.json in one document), the job id in ``X-Cuzk-Job-Id``, the phase
timings (seconds, JSON) in ``X-Cuzk-Timings`` (the job's, and ``answer``: its finish — the
journal's commit of its result — to this answer), and the seconds the daemon spent on the
request (body read to answer) in ``X-Cuzk-Request-Seconds``, so a client can tell the
transport's share of its round trip. The same bearer token as the TCP gRPC
listeners guards it (over TLS when the daemon has a certificate); a daemon without a token
does not prove over HTTP at all.

The local HTTP socket (beside the unix gRPC socket; ``cuzk.local_client``) needs no token: as
for the unix gRPC socket, the file's permissions are the access control. There, as there, a
key may be an absolute .zkey path (registered under it), and the JSON body may name the
witness file instead of carrying it: ``{"witness_path": ..., "witness_identity": {"device",
"inode", "size", "mtime_ns"}}``.

Status codes: 400 the request's own fault (bad JSON, input the circuit rejects, a witness of
another circuit, a job that failed on its witness), 401 no or wrong token, 403 proving over
HTTP is off, 404 unknown key, 409 the job was cancelled, 411/413 body length missing or over
``max_request``, 412 a witness path refused (the client sends the bytes instead), 503 the
daemon is shutting down, 504 not done within the timeout (the job keeps running), 507 the job could never fit in the memory budget, 500 an internal error.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..client_base import WITNESS_PATH_REFUSED
from ..engine import AwaitTimeout, Engine, EngineStopped, FileIdentity, WitnessFileError
from ..engine.admission import JobTooLarge
from ..engine.jobs import JobError, JobRecord, JobState, UnknownJobError
from ..engine.tracker import REQUEST_ERRORS
from ..json_text import dumps_like_snarkjs
from ..keys.errors import UnknownKeyError
from ..memory.budget import Reservation
from ..witness import parse_input_json
from .auth import bearer_matches
from .local_paths import KeyPaths, submit_witness_path

log = logging.getLogger("cuzk.http")

PROVE_PREFIX = "/v1/prove/"
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def error(status: int, message: str) -> Answer:
    return Answer(status, dumps_like_snarkjs({"error": message}).encode())


REQUEST_FIELDS = ("input", "priority", "request_id")
LOCAL_FIELDS = ("witness_path", "witness_identity")  # the local socket's: a file on the daemon's own machine


class HttpProver:
    def __init__(self, engine: Engine, token: str | None, max_request: int, *, local: KeyPaths | None = None,
                 witness_paths: bool = True):
        """``local``: this prover serves the local HTTP socket (no token; key and witness paths, keys registered through
        these ``KeyPaths``, witness paths only while ``witness_paths``)."""
        self.engine = engine
        self.token = token
        self.max_request = max_request
        self.local = local
        self.witness_paths = witness_paths

    def authorize(self, authorization: str | None) -> Answer | None:
        """None when the caller may prove; else the refusal (checked before the body is read)."""
        if self.local is not None:
            return None  # the socket file's permissions let the caller in
        if self.token is None:
            return error(403, "proving over HTTP is off: the daemon has no token (set token or token_file)")
        if authorization is None or not bearer_matches(authorization, self.token):
            return error(401, "missing or wrong bearer token (send 'Authorization: Bearer <token>')")
        return None

    def body_length(self, content_length: str | None) -> int | Answer:
        """The body's length, or the refusal of a body that is unannounced or larger than the daemon takes."""
        if content_length is None or not content_length.isdigit():
            return error(411, "send the body with a Content-Length")
        n = int(content_length)
        if n > self.max_request:
            return error(413, f"the body is {n} bytes, more than the daemon's max_request of {self.max_request}")
        return n

    def prove(self, key: str, content_type: str, body: bytes, query: dict[str, list[str]]) -> Answer:
        started, started_at = time.perf_counter(), time.time()
        try:
            timeout = float(query.get("timeout_s", [DEFAULT_TIMEOUT_S])[0])
            if not timeout > 0:
                raise ValueError
            timeout = min(timeout, threading.TIMEOUT_MAX)  # a longer wait (inf) is no bound, and overflows the wait
        except ValueError:
            return error(400, f"timeout_s must be a positive number of seconds, got {query['timeout_s'][0]!r}")
        try:
            if self.local is not None and key.startswith("/"):
                key = self.local.name_for(key)
            self.engine.check_fits(key)  # UnknownKeyError, JobTooLarge before any witness is calculated
            if content_type.split(";")[0].strip() == "application/octet-stream":
                options = {name: query[name][0] for name in ("priority", "request_id") if name in query}
                job_id = self.engine.submit(key, body, options.get("priority", "normal"), options.get("request_id"))
            else:
                # Held from the parse to the witness: the parsed body is the request's largest host memory
                with self.engine.witnesses.reserve(key, len(body)) as reservation:
                    request = _json_request(body, REQUEST_FIELDS + (LOCAL_FIELDS if self.local else ()))
                    job_id = self._submit_json(key, request, reservation)
            record = self.engine.await_result(job_id, timeout)
        except Exception as exc:  # noqa: BLE001 — each kind is answered with its status; the daemon keeps serving
            return answer_for(exc)
        # From the job's finish (or this request, for a job finished before it came) to now: the result's commit and
        # the wake-up of this request's thread.
        answer_s = max(0.0, time.time() - max(record.finished_at or started_at, started_at))
        return _answer_for_record(record, answer_s, started)

    def _submit_json(self, key: str, request: dict[str, Any], reservation: Reservation) -> str:
        priority, request_id = request.get("priority", "normal"), request.get("request_id")
        if "witness_path" not in request:
            if not isinstance(request.get("input"), dict):
                raise JobError('request body: expected {"input": {<signal>: <value>, ...}} (or the .wtns file as '
                               "application/octet-stream)")
            return self.engine.submit_input(key, request["input"], priority, request_id, reservation)
        identity = request.get("witness_identity")
        try:
            identity = None if identity is None else FileIdentity(**{f: int(identity[f]) for f in FileIdentity._fields})
        except (TypeError, KeyError, ValueError):
            raise JobError(f"request body: witness_identity takes {', '.join(FileIdentity._fields)}, "
                           f"got {identity!r}") from None
        return submit_witness_path(self.engine, key, request["witness_path"], identity, priority, request_id,
                                   paths_taken=self.witness_paths)


def _json_request(body: bytes, known: tuple[str, ...]) -> dict[str, Any]:
    request = parse_input_json(body, source="request body", shape='{"input": {<signal>: <value>, ...}}')
    unknown = sorted(set(request) - set(known))
    if unknown:
        raise JobError(f"request body: unknown field(s) {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
    return request


def answer_for(exc: Exception) -> Answer:
    """The HTTP answer to an exception from the engine: the request's own errors are 4xx, anything else a 500."""
    if isinstance(exc, (UnknownKeyError, UnknownJobError, FileNotFoundError)):
        return error(404, str(exc))
    if isinstance(exc, WitnessFileError) and str(exc).startswith(WITNESS_PATH_REFUSED):
        return error(412, str(exc))
    if isinstance(exc, JobTooLarge):
        return error(507, str(exc))
    if isinstance(exc, EngineStopped):
        return error(503, f"{exc} (the daemon is shutting down or restarting; retry)")
    if isinstance(exc, AwaitTimeout):
        return error(504, f"{exc}; it keeps running")
    if isinstance(exc, REQUEST_ERRORS):
        return error(400, str(exc))
    log.exception("HTTP prove failed")
    return error(500, f"internal error: {type(exc).__name__}: {exc}")


def _answer_for_record(record: JobRecord, answer_s: float, started: float) -> Answer:
    """The answer to a request that waited for ``record``; ``started``: the request's ``perf_counter`` at its start."""
    job = (("X-Cuzk-Job-Id", record.job_id),)
    if record.state is JobState.DONE:
        body = dumps_like_snarkjs({"proof": record.proof, "publicSignals": record.public_signals})
        timings = json.dumps({**(record.timings or {}), "answer": answer_s})
        return Answer(200, body.encode(), headers=job + (("X-Cuzk-Timings", timings),
                                                         ("X-Cuzk-Request-Seconds", f"{time.perf_counter() - started:.6f}")))
    if record.state is JobState.CANCELLED:
        return Answer(409, error(409, f"job {record.job_id} was cancelled").body, headers=job)
    status = 500 if (record.error or "").startswith("internal error") else 400
    return Answer(status, error(status, f"job {record.job_id} failed: {record.error}").body, headers=job)
