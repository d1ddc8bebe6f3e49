"""Python client for the cuzk daemon.

    from cuzk.client import Client
    with Client("unix:/var/lib/cuzk/cuzk.sock") as c:
        result = c.prove("sha256", Path("w.wtns"))  # a path, or the .wtns bytes
        Path("proof.json").write_text(result.proof_json)

The daemon restarts its engine after a crash (an OOM kill included) and replays every job
it had accepted, so the client rides over a restart: calls that cannot do harm twice
(await, status, cancel, and submit with a ``request_id``) retry on UNAVAILABLE until their
timeout; ``prove`` always sends a ``request_id`` for that reason. Every daemon error
becomes a ``DaemonError`` (a ValueError, except the connection and timeout kinds) whose
message is the daemon's own.

A key registered with its circom .wasm takes the circuit's input instead of a witness
(``input=``: a dict, or input.json text); the daemon calculates the witness.

A witness may be given as bytes or as a path. On a unix socket the client sends the path and
the daemon copies the file itself, sparing two protobuf copies of a large witness under each
side's GIL. The file's identity (device, inode, size, mtime) goes with the path, so a daemon
that sees another file there refuses it; when the daemon refuses the path for any reason
(another mount namespace, ``witness_paths = false``) the client sends the bytes instead, and
keeps doing so on that connection.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import grpc

from .client_base import (
    AwaitTimeout,
    ClientBase,
    DaemonError,
    DaemonUnavailable,
    JobCancelled,
    JobFailed,
    ProofResult,
    RequestTooLarge,
    Unanswered,
    Witness,
    is_key_path,
)
from .addresses import absolute_path, normalize_address
from .engine.jobs import JobState, Priority
from .proto import priority_from_pb, priority_to_pb, state_from_pb, state_to_pb
from .proto import cuzk_pb2 as pb
from .proto import cuzk_pb2_grpc as pb_grpc

__all__ = ["Client", "key_ref", "AwaitTimeout", "DaemonError", "DaemonUnavailable", "JobCancelled", "JobFailed", "JobInfo",
           "ProofResult", "RequestTooLarge"]  # the errors and the proof's result: client_base's, named here too


@dataclass(frozen=True)
class JobInfo:
    """A job as ``list_jobs`` reports it (gRPC only)."""

    job_id: str
    circuit: str
    priority: str
    state: str
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    error: str
    request_id: str
    attempts: int


# Responses are small (a proof, a status document); requests carry the witness.
MAX_RESPONSE_BYTES = 64 << 20
MAX_REQUEST_BYTES = (1 << 31) - 1  # gRPC takes a 32-bit int
T = TypeVar("T")


def key_ref(key: str | os.PathLike) -> pb.KeyRef:
    """A path (``is_key_path``) or else a registered name."""
    text = os.fspath(key)
    return pb.KeyRef(path=absolute_path(text)) if is_key_path(key) else pb.KeyRef(name=text)


def _state_name(value: int) -> str:
    return state_from_pb(value).name


def _result(msg: pb.ProofResult) -> ProofResult:
    return ProofResult(job_id=msg.job_id, state=_state_name(msg.state), circuit=msg.circuit, request_id=msg.request_id,
                       proof_json=msg.proof_json, public_signals=list(msg.public_signals), error=msg.error,
                       timings=dict(msg.timings))


def _read_pem(path: str | os.PathLike) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the TLS CA file {path}: {exc.strerror}") from exc
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise ValueError(f"TLS CA file {path} holds no PEM certificate")
    return data


class Client(ClientBase):
    """One connection to a daemon at ``address`` (``unix:PATH``, a socket path, or ``HOST:PORT`` with a token).

    ``restart_grace`` bounds how long a retrying call keeps trying while nothing answers
    (the supervisor restarting the engine takes seconds, not minutes).
    """

    def __init__(self, address: str, token: str | None = None, *, restart_grace: float = 60.0,
                 tls_ca: str | os.PathLike | bytes | bool | None = None, on_wait: Callable[[str], None] | None = None):
        """``tls_ca``: connect over TLS (to a daemon with ``tls_cert``), trusting this PEM file (or PEM bytes) of CA
        certificates, or the system's roots when True. Unix sockets are always plain. ``on_wait``: told (once per
        call) when a call starts waiting for a daemon that does not answer."""
        super().__init__(normalize_address(address), restart_grace=restart_grace, on_wait=on_wait)
        # The token is sent as call metadata on every call (the daemon checks it on TCP listeners).
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        options = [("grpc.max_receive_message_length", MAX_RESPONSE_BYTES), ("grpc.max_send_message_length", MAX_REQUEST_BYTES)]
        if tls_ca and not self.address.startswith("unix:"):
            roots = None if tls_ca is True else tls_ca if isinstance(tls_ca, bytes) else _read_pem(tls_ca)
            self._channel = grpc.secure_channel(self.address, grpc.ssl_channel_credentials(root_certificates=roots), options=options)
        else:
            self._channel = grpc.insecure_channel(self.address, options=options)
        self._stub = pb_grpc.CuzkStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- calls ------------------------------------------------------------------------------

    def _rpc(self, fn: Callable[..., T], request: Any | Callable[[float | None], Any], *, timeout: float | None, retry: bool) -> T:
        """One RPC (``request`` may be built from the time left), through ``ClientBase._call``'s retries."""
        def attempt(remaining: float | None) -> T:
            message = request(remaining) if callable(request) else request
            try:
                return fn(message, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    raise Unanswered(exc.details() or "unavailable") from None
                raise self._error(exc) from None

        return self._call(attempt, timeout=timeout, retry=retry)

    def _error(self, exc: grpc.RpcError) -> Exception:
        code, details = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return AwaitTimeout(details if details and details != "Deadline Exceeded" else "the daemon did not answer in time")
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
            return RequestTooLarge(code.name, f"request too large for the daemon ({details}); raise max_request in its config")
        return DaemonError(code.name, details)

    @staticmethod
    def _witness_fields(fields: dict[str, Any]) -> dict[str, Any]:
        """``ClientBase._with_witness``'s fields as SubmitProofRequest's."""
        if "witness_identity" in fields:
            device, inode, size, mtime_ns = fields["witness_identity"]
            fields = {**fields, "witness_identity": pb.FileIdentity(device=device, inode=inode, size=size, mtime_ns=mtime_ns)}
        return fields

    def submit(self, key: str | os.PathLike, witness: Witness | None = None, *, input: Mapping[str, Any] | str | None = None,
               priority: Priority | str | int = Priority.NORMAL, request_id: str | None = None,
               timeout: float | None = 60.0) -> tuple[str, bool]:
        """Queue a proof (``witness``: the .wtns bytes or its path; or ``input``: the circuit's input, for a key registered
        with its .wasm); returns (job_id, deduplicated). Durable on the daemon once this returns."""
        def send(fields: dict[str, Any]) -> pb.SubmitProofResponse:
            req = pb.SubmitProofRequest(key=key_ref(key), priority=priority_to_pb(priority), request_id=request_id or "",
                                        **self._witness_fields(fields))
            return self._rpc(self._stub.SubmitProof, req, timeout=timeout, retry=bool(request_id))

        resp = self._with_witness(witness, input, send)
        return resp.job_id, resp.deduplicated

    def await_proof(self, job_id: str, timeout: float | None = None, *, check: bool = True) -> ProofResult:
        """Wait for a job; raises AwaitTimeout when it is not done in ``timeout`` (it keeps running).

        With ``check`` a failed or cancelled job raises JobFailed / JobCancelled.
        """
        # The RPC deadline is a little longer than the daemon's own wait, so its clearer message wins.
        slack = 5.0
        request = lambda left: pb.AwaitProofRequest(job_id=job_id, timeout_s=0.0 if left is None else max(0.001, left - slack))  # noqa: E731
        result = _result(self._rpc(self._stub.AwaitProof, request, timeout=None if timeout is None else timeout + slack, retry=True))
        return result.checked() if check else result

    def prove(self, key: str | os.PathLike, witness: Witness | None = None, *, input: Mapping[str, Any] | str | None = None,
              priority: Priority | str | int = Priority.NORMAL, request_id: str | None = None,
              timeout: float | None = None) -> ProofResult:
        """Submit and wait in one call; retried across a daemon restart (a request_id is always sent, so never twice)."""
        request_id = request_id or f"prove-{uuid.uuid4().hex}"
        slack = 5.0

        def send(fields: dict[str, Any]) -> pb.ProofResult:
            submit = pb.SubmitProofRequest(key=key_ref(key), priority=priority_to_pb(priority), request_id=request_id,
                                           **self._witness_fields(fields))
            request = lambda left: pb.ProveRequest(submit=submit, timeout_s=0.0 if left is None else max(0.001, left - slack))  # noqa: E731
            return self._rpc(self._stub.Prove, request, timeout=None if timeout is None else timeout + slack, retry=True)

        return _result(self._with_witness(witness, input, send)).checked()

    def cancel(self, job_id: str, timeout: float | None = 30.0) -> tuple[bool, str]:
        """Returns (cancelled, state): False when the job had already finished."""
        resp = self._rpc(self._stub.CancelProof, pb.CancelProofRequest(job_id=job_id), timeout=timeout, retry=True)
        return resp.cancelled, _state_name(resp.state)

    def status(self, timeout: float | None = 30.0) -> dict[str, Any]:
        resp = self._rpc(self._stub.GetStatus, pb.GetStatusRequest(), timeout=timeout, retry=False)
        return json.loads(resp.status_json)

    def metrics(self, timeout: float | None = 30.0) -> str:
        return self._rpc(self._stub.GetMetrics, pb.GetMetricsRequest(), timeout=timeout, retry=False).text

    def preload(self, key: str | os.PathLike, timeout: float | None = None) -> dict[str, Any]:
        resp = self._rpc(self._stub.PreloadKey, pb.KeyRequest(key=key_ref(key)), timeout=timeout, retry=True)
        return json.loads(resp.key_json)

    def evict(self, key: str | os.PathLike, timeout: float | None = 60.0) -> dict[str, Any]:
        resp = self._rpc(self._stub.EvictKey, pb.KeyRequest(key=key_ref(key)), timeout=timeout, retry=True)
        return json.loads(resp.key_json)

    def list_jobs(self, states: list[str] | None = None, limit: int = 0, timeout: float | None = 30.0) -> list[JobInfo]:
        req = pb.ListJobsRequest(states=[state_to_pb(JobState(s.lower())) for s in states or []], limit=limit)
        resp = self._rpc(self._stub.ListJobs, req, timeout=timeout, retry=False)
        return [JobInfo(job_id=j.job_id, circuit=j.circuit, priority=priority_from_pb(j.priority).name,
                        state=_state_name(j.state), submitted_at=j.submitted_at, started_at=j.started_at or None,
                        finished_at=j.finished_at or None, error=j.error, request_id=j.request_id, attempts=j.attempts)
                for j in resp.jobs]
