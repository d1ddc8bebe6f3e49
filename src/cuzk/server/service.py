"""The gRPC service: a thin adapter from cuzk.proto to the in-process ``Engine``.

Each engine exception becomes a status code whose message is the exception's own (they
name what is wrong); the mapping is ``status_for``. A key may be named (registered in the
config or earlier) or given by path; a path is registered under its resolved path as the
name, so jobs for it replay after a restart like any other.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from ..engine import AwaitTimeout, Engine, EngineStopped, FileIdentity, WitnessFileError
from ..engine.jobs import JobError, JobRecord, UnknownJobError
from ..engine.journal import RequestIdConflict
from ..engine.tracker import REQUEST_ERRORS
from ..keys.errors import KeyInUseError, UnknownKeyError
from ..proto import priority_from_pb, priority_to_pb, state_from_pb, state_to_pb
from ..proto import cuzk_pb2 as pb
from ..proto import cuzk_pb2_grpc as pb_grpc
from .local_paths import KeyPaths, submit_witness_path

log = logging.getLogger("cuzk.server")

# How often a long await looks up from the engine to see whether its caller went away.
AWAIT_SLICE_S = 1.0


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status (and message) an engine exception is answered with."""
    if isinstance(exc, (UnknownKeyError, UnknownJobError, FileNotFoundError)):
        return grpc.StatusCode.NOT_FOUND, str(exc)
    if isinstance(exc, RequestIdConflict):
        return grpc.StatusCode.ALREADY_EXISTS, str(exc)
    if isinstance(exc, (KeyInUseError, WitnessFileError)):
        return grpc.StatusCode.FAILED_PRECONDITION, str(exc)
    if isinstance(exc, EngineStopped):
        return grpc.StatusCode.UNAVAILABLE, f"{exc} (the engine is restarting; retry)"
    if isinstance(exc, TimeoutError):
        return grpc.StatusCode.DEADLINE_EXCEEDED, str(exc)
    if isinstance(exc, REQUEST_ERRORS):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


# Characters of an error message sent in a gRPC status: it travels in the trailers, which a client refuses past its
# metadata limit (8 KiB soft, 16 KiB hard by default; non-ASCII percent-encoded, up to 3 bytes a character), so an error
# quoting a request's 100 KB value reached the client as RESOURCE_EXHAUSTED "Stream removed" instead of itself.
MAX_STATUS_MESSAGE = 2000


def capped(message: str) -> str:
    """``message``, cut to ``MAX_STATUS_MESSAGE`` characters where longer, saying how much was left out."""
    if len(message) <= MAX_STATUS_MESSAGE:
        return message
    return f"{message[:MAX_STATUS_MESSAGE]}… ({len(message) - MAX_STATUS_MESSAGE} more characters)"


def _rpc(method: Callable) -> Callable:
    """Answer any exception the method raises with ``status_for``'s code instead of a bare INTERNAL."""

    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except Exception as exc:
            code, message = status_for(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("%s failed", method.__name__)
            context.abort(code, capped(message))

    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


def proof_result(record: JobRecord) -> pb.ProofResult:
    return pb.ProofResult(
        job_id=record.job_id, state=state_to_pb(record.state), circuit=record.circuit, request_id=record.request_id or "",
        proof_json=json.dumps(record.proof) if record.proof is not None else "",
        public_signals=record.public_signals or [], error=record.error or "", timings=record.timings)


class CuzkService(pb_grpc.CuzkServicer):
    def __init__(self, engine: Engine, status: Callable[[], dict[str, Any]], metrics_text: Callable[[], str], *,
                 witness_paths: bool = True):
        """``witness_paths``: take a witness file's path in place of its bytes (set only for the unix socket)."""
        self.engine = engine
        self._status = status
        self._metrics_text = metrics_text
        self.key_paths = KeyPaths(engine)
        self.witness_paths = witness_paths

    def without_witness_paths(self) -> CuzkService:
        """This service for the TCP listeners: a remote client's path names nothing here, and reading files
        for it would lend it the daemon's own file access."""
        view = copy.copy(self)  # shares the engine and its key paths
        view.witness_paths = False
        return view

    # -- keys ---------------------------------------------------------------------------------

    def _key_name(self, ref: pb.KeyRef) -> str:
        kind = ref.WhichOneof("ref")
        if kind == "name":
            return ref.name
        if kind == "path":
            return self.key_paths.name_for(ref.path)
        raise JobError("the request names no key: set key.name or key.path")

    def _key_entry(self, name: str) -> dict[str, Any]:
        for entry in self.engine.keys.status():
            if entry["name"] == name:
                return entry
        raise UnknownKeyError(name, self.engine.keys.names())

    # -- jobs ---------------------------------------------------------------------------------

    def _submit(self, request: pb.SubmitProofRequest) -> tuple[str, bool]:
        circuit = self._key_name(request.key)
        identity = None
        started = time.time()
        source = request.WhichOneof("witness_source")
        if source == "input_json":
            job_id = self.engine.submit_input(circuit, request.input_json, priority_from_pb(request.priority),
                                              request.request_id or None)
            return job_id, bool(request.request_id) and self.engine.get(job_id).submitted_at < started
        if source == "witness_path":
            if request.HasField("witness_identity"):
                i = request.witness_identity
                identity = FileIdentity(i.device, i.inode, i.size, i.mtime_ns)
            job_id = submit_witness_path(self.engine, circuit, request.witness_path, identity,
                                         priority_from_pb(request.priority), request.request_id or None,
                                         paths_taken=self.witness_paths)
        else:
            witness = request.witness  # each read of a bytes field copies it (upb): tens of ms for a large witness
            if not witness:
                raise JobError("the request carries no witness (.wtns bytes, witness_path or input_json)")
            job_id = self.engine.submit(circuit, witness, priority_from_pb(request.priority), request.request_id or None)
        deduplicated = bool(request.request_id) and self.engine.get(job_id).submitted_at < started
        return job_id, deduplicated

    def _await(self, job_id: str, timeout_s: float, context) -> JobRecord:
        """Wait in slices, so a caller that gave up frees its thread within a slice."""
        limits = [t for t in (timeout_s if timeout_s > 0 else None, context.time_remaining()) if t is not None]
        deadline = time.monotonic() + min(limits) if limits else None
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                record = self.engine.get(job_id)
                if record.finished:
                    return record
                raise TimeoutError(f"job {job_id} is still {record.state.value} after {timeout_s or min(limits):g} s "
                                   "(it keeps running; await it again)")
            try:
                return self.engine.await_result(job_id, AWAIT_SLICE_S if left is None else min(left, AWAIT_SLICE_S))
            except AwaitTimeout:
                if not context.is_active():
                    raise TimeoutError("the caller went away") from None

    @_rpc
    def SubmitProof(self, request, context):
        job_id, deduplicated = self._submit(request)
        return pb.SubmitProofResponse(job_id=job_id, deduplicated=deduplicated)

    @_rpc
    def AwaitProof(self, request, context):
        return proof_result(self._await(request.job_id, request.timeout_s, context))

    @_rpc
    def Prove(self, request, context):
        job_id, _ = self._submit(request.submit)
        return proof_result(self._await(job_id, request.timeout_s, context))

    @_rpc
    def CancelProof(self, request, context):
        cancelled = self.engine.cancel(request.job_id)
        return pb.CancelProofResponse(cancelled=cancelled, state=state_to_pb(self.engine.get(request.job_id).state))

    @_rpc
    def ListJobs(self, request, context):
        states = [state_from_pb(s) for s in request.states if s != pb.JOB_STATE_UNSPECIFIED] or None
        records = self.engine.list_jobs(states=states, limit=request.limit or 1_000_000)
        return pb.ListJobsResponse(jobs=[pb.JobInfo(
            job_id=r.job_id, circuit=r.circuit, priority=priority_to_pb(r.priority), state=state_to_pb(r.state),
            submitted_at=r.submitted_at, started_at=r.started_at or 0.0, finished_at=r.finished_at or 0.0,
            error=r.error or "", request_id=r.request_id or "", attempts=r.attempts) for r in records])

    # -- keys and status ----------------------------------------------------------------------

    @_rpc
    def PreloadKey(self, request, context):
        name = self._key_name(request.key)
        self.engine.preload(name)
        return pb.KeyResponse(key_json=json.dumps(self._key_entry(name)))

    @_rpc
    def EvictKey(self, request, context):
        name = self._key_name(request.key)
        freed = self.engine.evict(name)
        return pb.KeyResponse(key_json=json.dumps({**self._key_entry(name), "freed_bytes": freed}))

    @_rpc
    def GetStatus(self, request, context):
        return pb.GetStatusResponse(status_json=json.dumps(self._status(), default=str))

    @_rpc
    def GetMetrics(self, request, context):
        return pb.GetMetricsResponse(text=self._metrics_text())
