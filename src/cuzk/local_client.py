"""``cuzk prove`` on a daemon of this machine over its local HTTP socket: one HTTP/1.0 exchange on a unix socket, in
place of gRPC.

A one-shot ``cuzk prove`` spends more time importing grpc and protobuf (~70 ms of CPU) than a small circuit's proof
takes on a warm daemon, so where the daemon serves its local HTTP socket (beside its unix gRPC socket; the name is
``local_http_socket``'s) the CLI proves through this client, which imports nothing outside the standard library. It
keeps what ``cuzk.client.Client.prove`` guarantees (``client_base.ClientBase``: the same errors, a request id that
makes a retry across a daemon restart prove once, the witness sent as its path with the file's identity, or as bytes
where the daemon refuses the path) and does nothing else: every other call is gRPC's.

The exchange is written on the socket rather than ``http.client``: importing http.client (its email parser and
ssl) cost ~20-25 ms of a one-shot call's ~90 ms on two cores, more than the daemon's whole answer on a small circuit.
For the same reason the socket is ``_socket``'s (the C module the ``socket`` module wraps: its enums, selectors and
wrappers cost ~4 ms more to import, for nothing this one exchange uses), and the URL is written as it is where every
character of it is plain, percent-encoded by ``urllib.parse`` (imported only then: ~4 ms) otherwise.
The peer is always cuzk's own daemon (``server/http.py``, http.server: one request per connection, every answer with
its Content-Length), so the request is written as it is and the answer read up to its announced length; an answer
that is not such a response is reported as the daemon's error, never trusted.
"""

from __future__ import annotations

import _socket
import os
import time

from .addresses import absolute_path
from .json_text import dumps_like_snarkjs, loads
from .client_base import (
    AwaitTimeout,
    ClientBase,
    DaemonError,
    JobCancelled,
    JobFailed,
    ProofResult,
    RequestTooLarge,
    Unanswered,
    Witness,
    is_key_path,
)

PROVE_PATH = "/v1/prove/"
# The gRPC status names the daemon's HTTP answers stand for, so that a caller sees one DaemonError.code on both.
CODE_FOR_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 412: "FAILED_PRECONDITION", 500: "INTERNAL",
                   507: "RESOURCE_EXHAUSTED"}
# What a URL carries as it is (RFC 3986's unreserved characters): a key path or option made of these alone needs no
# urllib.parse.
URL_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
WAIT_FOREVER_S = 1e9  # the daemon's wait when the caller gives no timeout (its own default is 600 s)
SLACK_S = 5.0  # the socket's timeout exceeds the daemon's wait, so that its clearer answer wins


def local_http_socket(grpc_socket: str | os.PathLike) -> str:
    """The local HTTP socket of the daemon whose unix gRPC socket is ``grpc_socket`` (``cuzk.sock`` → ``cuzk.http.sock``)."""
    return os.path.splitext(grpc_socket)[0] + ".http.sock"


def url_quote(text: str) -> str:
    """``urllib.parse.quote(text, safe="")``, without its import where ``text`` is plain but for slashes."""
    if URL_PLAIN.issuperset(text.replace("/", "")):
        return text.replace("/", "%2F")
    from urllib.parse import quote

    return quote(text, safe="")


def url_query(fields: dict[str, object]) -> str:
    """``urllib.parse.urlencode(fields)``, without its import where every value is plain."""
    values = {name: str(value) for name, value in fields.items()}
    if all(URL_PLAIN.issuperset(value) for value in values.values()):
        return "&".join(f"{name}={value}" for name, value in values.items())
    from urllib.parse import urlencode

    return urlencode(values)


def _exchange(path: str, request_head: bytes, body: bytes, timeout: float | None) -> tuple[int, dict[str, str], bytes]:
    """Send a request (its head, then its body: a witness's bytes are never copied into one buffer) on the unix socket
    at ``path`` and read the answer: (status, headers by lower-case name, body of
    the Content-Length the answer announces, else up to the end of the stream). ``Unanswered`` when no daemon takes it
    or the connection ends before a whole answer."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(request_head)
        sock.sendall(body)
        received, head, status, headers, length = b"", None, 0, {}, None
        while chunk := sock.recv(1 << 16):
            received += chunk
            if head is None and b"\r\n\r\n" in received:
                head, _, received = received.partition(b"\r\n\r\n")
                status_line, *header_lines = head.decode("latin-1").split("\r\n")
                version, _, rest = status_line.partition(" ")
                if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
                    raise DaemonError("UNKNOWN", f"{path} answered with something other than HTTP: {status_line[:80]!r}")
                status = int(rest[:3])
                for line in header_lines:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                announced = headers.get("content-length", "")
                length = int(announced) if announced.isdigit() else None
            if length is not None and len(received) >= length:
                break
    finally:
        sock.close()
    if head is None:  # the daemon went away before it answered (a restart): the retry proves once, by the request id
        raise Unanswered("the connection ended before a whole answer")
    if length is not None and len(received) != length:
        raise Unanswered(f"the answer ended after {len(received)} of its {length} bytes")
    return status, headers, received


class LocalHttpClient(ClientBase):
    """Proofs from the daemon at ``unix:GRPC_SOCKET`` through its local HTTP socket (``available`` says whether it has
    one)."""

    def __init__(self, address: str, *, restart_grace: float = 60.0, on_wait=None):
        super().__init__("unix:" + local_http_socket(address.removeprefix("unix:")), restart_grace=restart_grace,
                         on_wait=on_wait)

    @property
    def available(self) -> bool:
        """The daemon has a local HTTP socket this user may connect to (a gRPC socket an operator opened to a group
        leaves this one the daemon's own: such a caller uses gRPC)."""
        return os.access(self.address[5:], os.W_OK)

    def __enter__(self) -> LocalHttpClient:
        return self

    def __exit__(self, *exc) -> None:
        pass  # one connection per request: nothing stays open

    def prove(self, key: str | os.PathLike, witness: Witness, *, priority: str = "normal", request_id: str | None = None,
              timeout: float | None = None) -> ProofResult:
        """Submit and wait in one request, as ``Client.prove``; retried across a daemon restart, never proving twice."""
        request_id = request_id or f"prove-{os.urandom(16).hex()}"  # as Client.prove's (uuid's import costs ~2 ms)
        key_text = absolute_path(key) if is_key_path(key) else os.fspath(key)
        url = PROVE_PATH + url_quote(key_text)

        def send(fields: dict) -> ProofResult:
            if "witness" in fields:
                body, content_type, options = fields["witness"], "application/octet-stream", {"priority": priority,
                                                                                               "request_id": request_id}
            else:
                device, inode, size, mtime_ns = fields["witness_identity"]
                identity = {"device": device, "inode": inode, "size": size, "mtime_ns": mtime_ns}
                body = dumps_like_snarkjs({"witness_path": fields["witness_path"], "witness_identity": identity,
                                           "priority": priority, "request_id": request_id}).encode()
                content_type, options = "application/json", {}

            def attempt(left: float | None) -> ProofResult:
                wait = WAIT_FOREVER_S if left is None else max(0.001, left - SLACK_S)
                return self._post(f"{url}?{url_query({**options, 'timeout_s': wait})}", body, content_type,
                                  None if left is None else left)

            return self._call(attempt, timeout=None if timeout is None else timeout + SLACK_S, retry=True)

        return self._with_witness(witness, None, send).checked()

    def _post(self, url: str, body: bytes, content_type: str, timeout: float | None) -> ProofResult:
        head = (f"POST {url} HTTP/1.0\r\nHost: localhost\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        sent_at = time.time()
        try:
            status, headers, payload = _exchange(self.address[5:], head, body, timeout)
        except TimeoutError:
            raise AwaitTimeout("the daemon did not answer in time") from None
        except (ConnectionError, FileNotFoundError) as exc:  # nothing listening, the socket file gone, the daemon gone
            raise Unanswered(exc.strerror or str(exc)) from None
        answered_at = time.time()
        job_id, timings = headers.get("x-cuzk-job-id", ""), headers.get("x-cuzk-timings")
        try:
            document = loads(payload)
        except ValueError:  # not the prove endpoint's JSON (another server on the socket?): its text is the news
            document = {"error": f"HTTP {status}: {payload[:200].decode(errors='replace')}"}
        if status == 200:
            try:
                round_trip = (sent_at, answered_at, float(headers["x-cuzk-request-seconds"]))
            except (KeyError, ValueError):  # a daemon from before the header
                round_trip = None
            return ProofResult(job_id=job_id, state="DONE", proof_json=dumps_like_snarkjs(document["proof"]),
                               public_signals=document["publicSignals"], timings=loads(timings or "{}"),
                               round_trip=round_trip)
        message = document.get("error", payload.decode(errors="replace"))
        if status == 503:
            raise Unanswered(message)
        if status == 504:
            raise AwaitTimeout(message)
        if status == 409 and job_id:
            raise JobCancelled("CANCELLED", message)
        if status in (400, 500) and job_id:  # the job ran and failed: the message is "job <id> failed: ..."
            raise JobFailed("FAILED", message)
        if status == 413:
            raise RequestTooLarge("RESOURCE_EXHAUSTED", f"{message}; raise max_request in its config")
        raise DaemonError(CODE_FOR_STATUS.get(status, f"HTTP {status}"), message)
