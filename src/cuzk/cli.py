"""The `cuzk` command line. Subcommands keep snarkjs's argument order so scripts switch easily."""

from __future__ import annotations

import gc
import os
import sys
import time

from .cli_args import add_arguments, arg, client_options, parse_plain, priority_option, seconds

# Imports stay inside the commands: a one-shot `cuzk prove` on a local daemon pays for every module it loads, on each
# proof (argparse, pathlib, dataclasses and typing alone cost it ~60 ms of CPU on two cores).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from pathlib import Path

    from .client_base import ProofResult


def check_outputs(*paths: str | os.PathLike, inputs: tuple[str | os.PathLike | None, ...] = ()) -> None:
    """Refuse, before any work, output files that could not be written, or that are one of the command's ``inputs`` or
    another of its outputs (writing would destroy the input; as root no permission stops it): one line each, as for
    unreadable inputs."""
    taken = [(os.fspath(p), "it is the input") for p in inputs if p is not None]
    for path in map(os.fspath, paths):
        parent = os.path.dirname(path) or "."
        if os.path.isdir(path):
            raise ValueError(f"{path}: cannot write: it is a directory")
        if not os.path.isdir(parent):
            raise ValueError(f"{path}: cannot write: no such directory {parent}")
        if not os.access(path if os.path.exists(path) else parent, os.W_OK):
            raise ValueError(f"{path}: cannot write: permission denied")
        for other, role in taken:
            if _same_file(path, other):
                raise ValueError(f"{path}: cannot write: {role} {other}")
        taken.append((path, "it is also the output"))


def _same_file(a: str, b: str) -> bool:
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


class Steps:
    """A live line on stderr naming the step a long local command is in, with the time it has run (rich, transient);
    only on a terminal, and not with --quiet / --no-progress."""

    def __init__(self, enabled: bool):
        self._progress = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=True)
            self._task = self._progress.add_task("starting", total=None)
            self._progress.start()

    def step(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=text)

    def __enter__(self) -> Steps:
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


def _cmd_prove(args: argparse.Namespace) -> int:
    def witness():  # imported only here: cuzk.formats imports numba, which a daemon's client never needs
        from .formats.wtns import read_wtns

        return read_wtns(args.wtns)

    return _prove_here_or_on_daemon(args, witness)


def _prove_here_or_on_daemon(args: argparse.Namespace, load_witness, witness_bytes=None) -> int:
    """``prove`` and ``fullprove``: on the daemon ``--daemon`` names, else on this machine's daemon where one runs (or
    ``--keep-daemon`` starts one), else in this process. ``witness_bytes()`` is what the daemon proves (None: the
    daemon reads the witness file ``args.wtns``); ``load_witness()`` what this process proves."""
    check_outputs(args.proof, args.public,  # first: fullprove's witness is calculated later, when asked for
                  inputs=tuple(getattr(args, name, None) for name in ("zkey", "wtns", "input", "wasm", "r1cs")))
    explicit, started = args.daemon is not None, False
    if not explicit:
        args.daemon, started = _running_local_daemon(args)
    if args.daemon:
        from .client_base import DaemonUnavailable

        try:
            result = prove_with_daemon(args, witness_bytes and witness_bytes(), wait=explicit or started)
        except DaemonUnavailable:
            if explicit:
                raise
            result = None  # the socket outlived its daemon (or is another user's): prove here
        if result is not None:
            if args.verbose:
                _print_timings(result.timings, f"daemon {result.job_id}")
                _print_round_trip(result, args.started_at)
            args.answered_by_daemon = True
            return 0
    return _prove_in_process(args, load_witness)


def _running_local_daemon(args: argparse.Namespace) -> tuple[str | None, bool]:
    """Where a plain ``cuzk prove`` goes to the daemon on this machine: its unix socket (where ``cuzk status`` would
    look) exists, and nothing asks for in-process proving (``--local``, ``--backend``, ``--r1cs``, ``--no-verify``).
    The daemon has the kernels loaded and keeps the key resident, which a one-shot process pays for on every proof.
    With ``--keep-daemon`` a missing daemon is started there first (:func:`_start_local_daemon`); the address, and
    whether this call started it."""
    in_process = args.local or args.backend != "auto" or args.r1cs or not args.verify
    if args.keep_daemon and in_process:
        raise ValueError("--keep-daemon proves on a local daemon: leave out --local, --backend, --r1cs and --no-verify")
    if args.keep_daemon and not args.idle_exit > 0:
        raise ValueError(f"--idle-exit takes a positive number of seconds, got {args.idle_exit:g}")
    if in_process:
        return None, False
    from .addresses import ConfigError, address_without_config

    try:
        address = address_without_config(args.config, os.environ)
        if address is None:  # the configuration names it: read that (dataclasses, TOML: ~40 ms more)
            from .config import client_target

            address, _ = client_target(None, args.config)
    except ConfigError:  # a broken daemon configuration is the daemon's business, not a local proof's
        if args.keep_daemon:
            raise
        return None, False
    if not address.startswith("unix:"):
        if args.keep_daemon:
            raise ValueError(f"--keep-daemon starts a daemon on a unix socket, but clients are pointed at {address}")
        return None, False
    started = not os.path.exists(address[5:]) and args.keep_daemon
    if started:
        _start_local_daemon(address, args.idle_exit, args.config)
    return (address if os.path.exists(address[5:]) else None), started


def prove_with_daemon(args: argparse.Namespace, witness: bytes | None = None, *, wait: bool = True) -> ProofResult:
    """``cuzk prove --daemon ADDR <zkey> <wtns> <proof.json> <public.json>`` (or ``fullprove --daemon``, whose witness,
    calculated here, comes as ``witness``); the zkey may also be a registered name. ``wait``: ride over a daemon
    restart (saying so on stderr), else fail at once."""
    if args.r1cs:
        raise ValueError("--r1cs applies to local proving; give the daemon the key's r1cs in its config ([engine.r1cs])")
    with _prove_client(args, wait=wait) as client:  # a local daemon reads a witness file itself
        result = client.prove(args.zkey, args.wtns if witness is None else witness, priority=args.priority,
                              timeout=args.timeout)
    result.write(args.proof, args.public)
    return result


def _prove_client(args: argparse.Namespace, *, wait: bool):
    """The client of the daemon at ``args.daemon``: on a unix socket whose daemon serves its local HTTP socket,
    ``LocalHttpClient`` (no grpc import, the largest part of a one-shot call on a small circuit), else the gRPC one."""
    from .addresses import normalize_address

    address = normalize_address(args.daemon)
    if address.startswith("unix:"):
        from .client_base import wait_options
        from .local_client import LocalHttpClient

        local = LocalHttpClient(address, **wait_options(wait))
        if local.available:
            return local
    from .server.commands import grpc_client

    return grpc_client(args, wait=wait)


KEEP_DAEMON_IDLE_S = 900.0  # how long a daemon that `cuzk prove --keep-daemon` started waits for the next proof


def _start_local_daemon(address: str, idle_s: float, config: str | None) -> None:
    """Start ``cuzk daemon --listen ADDRESS --idle-exit IDLE_S`` in a session of its own (it outlives this process; its
    log is the socket's path with ``.log``) and return once its socket exists. Its first proofs wait for its JIT
    warm-up; the next calls find it running, with the kernels loaded and the key resident. Calls that find no daemon
    at the same moment take turns on a lock file beside the socket, so one starts it and the others find it."""
    import fcntl
    import subprocess
    from pathlib import Path

    socket = Path(address[5:])
    socket.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = socket.with_suffix(".log")
    with open(socket.with_suffix(".start-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, after the socket exists
        if socket.exists():
            return
        argv = [sys.executable, "-m", "cuzk.cli", "daemon", "--listen", address, "--idle-exit", f"{idle_s:g}",
                *(["--config", config] if config else [])]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        print(f"started a cuzk daemon (pid {proc.pid}, log {log_path}) that stops after {idle_s:g} s without a proof",
              file=sys.stderr)
        deadline, delay = time.monotonic() + 120.0, 0.005
        while not socket.exists():  # the engine process binds it once its imports are done (about a second)
            if proc.poll() is not None:
                raise OSError(f"the cuzk daemon this prove started exited ({proc.returncode}) before listening; see {log_path}")
            if time.monotonic() > deadline:
                raise OSError(f"the cuzk daemon this prove started (pid {proc.pid}) did not listen within 120 s; see {log_path}")
            time.sleep(delay)
            delay = min(2 * delay, 0.1)


def _cmd_fullprove(args: argparse.Namespace) -> int:
    import functools

    from .formats.wtns import Witness, wtns_bytes
    from .witness import WitnessCalculator, read_input_json

    @functools.cache  # once, whether the daemon proves it or this process does after all
    def witness() -> Witness:
        _use_wasm_cache()
        calculator = WitnessCalculator(args.wasm)
        return Witness(None, calculator.curve, calculator.calculate(read_input_json(args.input), log=print))

    return _prove_here_or_on_daemon(args, witness, lambda: wtns_bytes(witness().curve, witness().values))


def _cmd_wtns_calculate(args: argparse.Namespace) -> int:
    from .formats.wtns import write_wtns
    from .witness import WitnessCalculator, read_input_json

    check_outputs(args.wtns, inputs=(args.wasm, args.input))
    _use_wasm_cache()
    calculator = WitnessCalculator(args.wasm)
    write_wtns(args.wtns, calculator.curve, calculator.calculate(read_input_json(args.input), log=print))
    return 0


def _prove_in_process(args: argparse.Namespace, load_witness) -> int:
    """Prove in this process (``prove`` reads a witness, ``fullprove`` calculates one) and write proof and public signals.

    No cyclic garbage collection meanwhile: importing numba and loading its cached kernels allocate hundreds of
    thousands of objects, and the collector's passes over them cost a one-shot prove ~0.2 s on two cores; they free
    almost nothing (the peak RSS is the same within 1 MiB), and the proof's arrays are freed by reference counting."""
    _use_jit_cache()
    collecting = gc.isenabled()
    gc.disable()
    try:
        with Steps(args.progress) as steps:
            steps.step("loading the key and the witness")
            return _prove_locally(args, load_witness, steps)
    finally:
        if collecting:
            gc.enable()


def _prove_locally(args: argparse.Namespace, load_witness, steps: Steps) -> int:
    from .backends import get_backend
    from .formats.json_io import write_proof, write_public
    from .formats.r1cs import read_r1cs
    from .formats.zkey import read_zkey
    from .prover.groth16 import prove
    from .prover.verify import VerifyInputError, prepare_zkey, verify

    t0 = time.perf_counter()
    zkey = read_zkey(args.zkey)
    witness = load_witness()
    r1cs = read_r1cs(args.r1cs) if args.r1cs else None
    backend = get_backend(args.backend)
    t_load = time.perf_counter() - t0
    steps.step(f"proving: 2^{zkey.domain_size.bit_length() - 1} domain on the {backend.name} backend")
    proof = prove(backend, zkey, witness, r1cs=r1cs)
    timings = {"load": t_load, **proof.timings}
    if args.verify:
        steps.step("verifying the proof")
        t = time.perf_counter()
        try:
            ok, why = verify(prepare_zkey(zkey, single_proof=True), proof.public_signals, proof), "corrupted key or wrong witness?"
        except VerifyInputError as exc:  # a proof point off its curve: only bases off theirs give one
            ok, why = False, f"{exc}: the key {args.zkey} is corrupt"
        timings["verify"] = time.perf_counter() - t
        if not ok:
            print(f"error: the proof does not verify against the key's verification data; nothing written ({why})",
                  file=sys.stderr)
            return 1
    write_proof(args.proof, proof)
    write_public(args.public, proof.public_signals)
    if args.verbose:
        _print_timings(timings, backend.name)
    return 0


def _print_timings(timings: dict[str, float], source: str) -> None:
    """One line of phase times on stderr, for ``--verbose`` (a local prove, a daemon's job, a setup)."""
    total = sum(timings.values())
    parts = "  ".join(f"{k} {v * 1000:.1f} ms" for k, v in timings.items())
    print(f"[{source}] {parts}  total {total * 1000:.1f} ms", file=sys.stderr)


def _print_round_trip(result: ProofResult, started_at: float) -> None:
    """For ``--verbose`` on a daemon: this process's own timeline from ``main`` (``started_at``, ``time.time()``,
    printed whole so that whoever started the process can add the time before it: interpreter and imports), the
    request's round trip, and the daemon's own time on the request, where the transport tells them."""
    now = time.time()
    if result.round_trip is None:
        trip = "round trip not told by this transport"
    else:
        sent, answered, served = result.round_trip
        trip = (f"request sent +{(sent - started_at) * 1000:.1f} ms, answered +{(answered - started_at) * 1000:.1f} ms "
                f"(in the daemon {served * 1000:.1f} ms)")
    print(f"[client] main at {started_at:.6f}: {trip}, written +{(now - started_at) * 1000:.1f} ms", file=sys.stderr)


VERIFY_UNREADABLE = 2  # the files could not be read or do not fit together: nothing was verified (1 means invalid)


def _cmd_verify(args: argparse.Namespace) -> int:
    from .formats.json_io import read_proof, read_public, read_vkey
    from .prover.verify import VerifyInputError, prepare_vkey, verify

    try:
        vkey = read_vkey(args.vkey)
        # The curve comes from the verification key: other provers' files (rapidsnark's) name none.
        public = read_public(args.public, curve=vkey.curve, n_public=vkey.n_public)
        proof = read_proof(args.proof, curve=vkey.curve)
        t = time.perf_counter()
        # What the readers leave to the verifier (a key point at infinity or outside its subgroup, a proof point outside
        # its subgroup) is named with its file, as the readers' errors are.
        try:
            key = prepare_vkey(vkey)
        except VerifyInputError as exc:
            raise VerifyInputError(f"{args.vkey}: {exc}") from None
        try:
            ok = verify(key, public, proof)
        except VerifyInputError as exc:  # the key and the signals are checked by now: a proof point
            raise VerifyInputError(f"{args.proof}: {exc}") from None
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return VERIFY_UNREADABLE
    if args.verbose:
        print(f"verify {(time.perf_counter() - t) * 1000:.1f} ms", file=sys.stderr)
    print("OK: proof is valid" if ok else "INVALID: proof does not verify")
    return 0 if ok else 1


def _cmd_export_vkey(args: argparse.Namespace) -> int:
    from .formats.json_io import write_vkey
    from .formats.zkey import read_zkey
    from .prover.verify import vkey_from_zkey

    check_outputs(args.vkey, inputs=(args.zkey,))
    write_vkey(args.vkey, vkey_from_zkey(read_zkey(args.zkey)))
    return 0


def _cmd_setup(args: argparse.Namespace) -> int:
    from pathlib import Path

    if len(args.paths) > 2:
        raise ValueError(f"setup takes <circuit.r1cs> [<pot.ptau>] <out.zkey>, got {1 + len(args.paths)} paths")
    if len(args.paths) == 2 and args.ptau is not None:
        raise ValueError(f"the ptau is given twice: {args.paths[0]} and --ptau {args.ptau}")
    ptau, zkey_path = (args.paths if len(args.paths) == 2 else (args.ptau, args.paths[0]))
    vkey_path = Path(args.vkey) if args.vkey else Path(zkey_path).with_name("verification_key.json")
    check_outputs(zkey_path, vkey_path, inputs=(args.r1cs, ptau))
    with Steps(args.progress) as steps:
        steps.step("setup: reading the circuit" + (" and the powers of tau" if ptau else ""))
        return _setup(args, ptau, zkey_path, vkey_path, steps)


def _setup(args: argparse.Namespace, ptau: str | None, zkey_path: str, vkey_path: Path, steps: Steps) -> int:
    from .curves import curve_by_name
    from .formats.json_io import write_vkey
    from .formats.r1cs import read_r1cs
    from .formats.zkey import read_zkey
    from .memory.commands import check_memory
    from .memory.units import format_size
    from .prover.setup import setup
    from .prover.verify import vkey_from_zkey

    t = time.perf_counter()
    _, plan, _, _ = check_memory(args.memory_budget)  # the engine's budget: cgroup limit (or less) minus the margin
    budget_source = (f"the memory budget (ceiling {format_size(plan.ceiling_bytes)} from {plan.ceiling_source}, "
                     f"less a {format_size(plan.margin_bytes)} margin)")
    r1cs = read_r1cs(args.r1cs)
    if args.curve and curve_by_name(args.curve).r != r1cs.curve.r:
        print(f"error: {args.r1cs} is a {r1cs.curve.name} circuit, not {args.curve}", file=sys.stderr)
        return 1
    steps.step(f"setup: {r1cs.n_constraints} constraints ({r1cs.curve.name})")
    result = setup(r1cs, zkey_path, ptau=ptau, name=args.name, backend=args.backend,
                   memory_budget=plan.total_bytes, memory_budget_source=budget_source)
    steps.step("setup: writing the verification key")
    write_vkey(vkey_path, vkey_from_zkey(read_zkey(zkey_path)))
    print(f"wrote {zkey_path} and {vkey_path}: {result.curve.name}, {result.n_constraints} constraints, "
          f"{result.n_public} public, domain 2^{result.domain_size.bit_length() - 1}, {result.backend}, {time.perf_counter() - t:.1f} s")
    if result.test_only:
        print("WARNING: no --ptau given, so the toxic waste was sampled on this machine: the key is for TESTING ONLY "
              f"(its contribution is named {result.contribution_name!r})")
    if args.verbose:
        _print_timings(result.timings, "setup")
    return 0


def _size(text: str) -> int:
    import argparse

    from .memory.units import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    """An integer, also written 2^k (constraint counts are usually powers of two)."""
    import argparse

    base, _, exponent = text.partition("^")
    try:
        return int(base) ** int(exponent) if exponent else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (use e.g. 1000000 or 2^20)") from None


def _cmd_circuit_synth(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .circuits.synthetic import synthesize, write_synthetic
    from .curves import curve_by_name
    from .formats.json_io import write_public

    t = time.perf_counter()
    circuit = synthesize(curve_by_name(args.curve), args.constraints, args.public, seed=args.seed)
    r1cs_path, wtns_path = write_synthetic(args.out, circuit)
    write_public(Path(args.out) / "public.json", circuit.public_signals)
    r1cs = circuit.r1cs
    print(f"wrote {r1cs_path} and {wtns_path}: {r1cs.curve.name}, {r1cs.n_constraints} constraints, {r1cs.n_wires} wires, "
          f"{r1cs.A.nnz + r1cs.B.nnz + r1cs.C.nnz} terms, {time.perf_counter() - t:.1f} s")
    return 0


PROGRESS_OPTION = arg("--quiet", "-q", "--no-progress", dest="progress", action="store_false",
                      help="no live progress line (it is shown only on a terminal anyway)")

# What `prove` and `fullprove` share: how to prove here, and the daemon to prove on instead.
PROVING_OPTIONS = (
    arg("--r1cs", help="the circuit's .r1cs: reject an unsatisfied witness before proving"),
    arg("--backend", default="auto", choices=["auto", "cpu", "cuda"]),
    arg("--no-verify", dest="verify", action="store_false", help="skip the self-check of the proof"),
    arg("--verbose", "-v", action="store_true", help="print the time of each phase"),
    PROGRESS_OPTION,
    *client_options(daemon_help="prove on the daemon at ADDR (unix:PATH, socket path, HOST:PORT) instead of locally"),
    priority_option(help_text="with --daemon: the job's priority"),
    arg("--timeout", type=seconds, help="with --daemon: seconds to wait for the proof"),
)

# Where a plain `prove` or `fullprove` proves: this machine's daemon, which may be started for it, or this process.
LOCAL_DAEMON_OPTIONS = (
    arg("--local", action="store_true",
        help="prove in this process even when a daemon runs on this machine (by default its unix socket, where `cuzk "
             "status` looks, gets the proof when it exists and neither --backend, --r1cs nor --no-verify is given)"),
    arg("--keep-daemon", action="store_true",
        help="when no daemon runs on this machine, start one (`cuzk daemon --idle-exit`) that proves this and later "
             "calls: for scripts that prove once per call"),
    arg("--idle-exit", type=float, default=KEEP_DAEMON_IDLE_S, metavar="SECONDS",
        help=f"the daemon --keep-daemon starts stops after this long without a proof (default {KEEP_DAEMON_IDLE_S:g})"),
)

PROVE_ARGUMENTS = (arg("zkey"), arg("wtns"), arg("proof"), arg("public"), *PROVING_OPTIONS, *LOCAL_DAEMON_OPTIONS)
FULLPROVE_ARGUMENTS = (arg("input"), arg("wasm"), arg("zkey"), arg("proof"), arg("public"), *PROVING_OPTIONS,
                       *LOCAL_DAEMON_OPTIONS)


def _add_external(module: str, adder: str):
    """The parser adder ``adder`` of ``module``, imported when the parser is built."""
    def add(sub: argparse._SubParsersAction) -> None:
        from importlib import import_module

        getattr(import_module(module, __package__), adder)(sub)

    return add


def _add_prove_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prove", help="prove a witness: cuzk prove <zkey> <wtns> <proof.json> <public.json>")
    add_arguments(p, PROVE_ARGUMENTS)
    p.set_defaults(func=_cmd_prove)


def _add_fullprove_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fullprove", help="calculate the witness and prove: cuzk fullprove <input.json> <circuit.wasm> <zkey> "
                                         "<proof.json> <public.json>")
    add_arguments(p, FULLPROVE_ARGUMENTS)
    p.set_defaults(func=_cmd_fullprove)


def _add_wtns_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("wtns", help="witness utilities")
    wsub = p.add_subparsers(dest="wtns_command", required=True)
    w = wsub.add_parser("calculate", help="cuzk wtns calculate <circuit.wasm> <input.json> <witness.wtns>",
                        description="Run circom's witness generator (the .wasm of circom --wasm) on an input.json, as "
                                    "snarkjs wtns calculate does.")
    w.add_argument("wasm")
    w.add_argument("input")
    w.add_argument("wtns")
    w.set_defaults(func=_cmd_wtns_calculate)


def _add_verify_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="verify a proof: cuzk verify <vkey.json> <public.json> <proof.json>",
                       description="Exit status: 0 the proof is valid, 1 it is invalid, 2 the files could not be read "
                                   "or do not fit together (nothing was verified).")
    p.add_argument("vkey")
    p.add_argument("public")
    p.add_argument("proof")
    p.add_argument("--verbose", "-v", action="store_true")
    p.set_defaults(func=_cmd_verify)


def _add_zkey_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("zkey", help="zkey utilities")
    zsub = p.add_subparsers(dest="zkey_command", required=True)
    e = zsub.add_parser("export", help="snarkjs's spelling: cuzk zkey export verificationkey <zkey> <vkey.json>")
    esub = e.add_subparsers(dest="export_command", required=True)
    for e in (zsub.add_parser("export-vkey", help="cuzk zkey export-vkey <zkey> <vkey.json>"),
              esub.add_parser("verificationkey", help="the same as cuzk zkey export-vkey <zkey> <vkey.json>")):
        e.add_argument("zkey")
        e.add_argument("vkey")
        e.set_defaults(func=_cmd_export_vkey)


def _add_setup_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("setup", help="Groth16 setup: cuzk setup <circuit.r1cs> [<pot.ptau>] <out.zkey> (snarkjs's order)")
    p.add_argument("r1cs")
    p.add_argument("paths", nargs="+", metavar="[PTAU] ZKEY",
                   help="the output key, after the powers-of-tau file as snarkjs takes them (or give the ptau with --ptau)")
    p.add_argument("--ptau", help="a snarkjs powers-of-tau file prepared for phase 2; without one the key is for testing only")
    p.add_argument("--curve", help="fail unless the circuit is over this curve (bn254 or bls12-381)")
    p.add_argument("--vkey", help="where to write the verification key (default: verification_key.json beside the zkey)")
    p.add_argument("--name", help="the name recorded in the key's contribution")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"],
                   help="where the fixed-base points of a test-only key are computed (default: the GPU when there is one)")
    p.add_argument("--memory-budget", type=_size, help="cap the memory budget (e.g. 16GiB); the real limit still wins if lower")
    p.add_argument("--verbose", "-v", action="store_true", help="print the time of each phase")
    add_arguments(p, (PROGRESS_OPTION,))
    p.set_defaults(func=_cmd_setup)


def _add_circuit_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("circuit", help="circuit utilities")
    csub = p.add_subparsers(dest="circuit_command", required=True)
    c = csub.add_parser("synth", help="cuzk circuit synth --constraints N --public M --curve bn254 --out DIR")
    c.add_argument("--constraints", type=_count, required=True, help="exact number of constraints (e.g. 2^20)")
    c.add_argument("--public", type=_count, default=1, help="number of public inputs (default 1)")
    c.add_argument("--curve", default="bn254", help="bn254 or bls12-381 (default bn254)")
    c.add_argument("--out", required=True, help="directory for circuit.r1cs, witness.wtns and public.json")
    c.add_argument("--seed", type=int, help="make the same circuit and witness again")
    c.set_defaults(func=_cmd_circuit_synth)


# Each command's name(s) and what adds its parser. `main` builds only the parser of the command named (a daemon
# client's `cuzk prove` then skips ~15 ms of parsers and their modules); help and unknown names get all of them.
COMMANDS = (
    (("prove",), _add_prove_command),
    (("fullprove",), _add_fullprove_command),
    (("wtns",), _add_wtns_command),
    (("verify",), _add_verify_command),
    (("zkey",), _add_zkey_command),
    (("setup",), _add_setup_command),
    (("circuit",), _add_circuit_command),
    (("memcheck", "memprobe"), _add_external(".memory.commands", "add_memory_commands")),
    (("daemon", "submit", "await", "cancel", "keys", "jobs", "status", "top"),
     _add_external(".server.commands", "add_daemon_commands")),
    (("cluster",), _add_external(".cluster.serve", "add_cluster_commands")),
    (("bench",), _add_external(".bench.command", "add_bench_command")),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `cuzk` parser: every command's, or only ``command``'s when it names one."""
    import argparse

    class PrintVersion(argparse.Action):
        """``--version``: the installed package's version, looked up only when asked (~10 ms of a one-shot prove)."""

        def __init__(self, option_strings, dest, **kwargs):
            super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print cuzk's version and exit")

        def __call__(self, parser, namespace, values, option_string=None):
            from . import __version__

            print(f"cuzk {__version__}")
            parser.exit()

    parser = argparse.ArgumentParser(prog="cuzk", description="Groth16 prover for circom/snarkjs circuits (BN254, BLS12-381)")
    parser.add_argument("--version", action=PrintVersion)
    sub = parser.add_subparsers(dest="command", required=True)
    adders = [add for names, add in COMMANDS if command in names] or [add for _, add in COMMANDS]
    for add in adders:
        add(sub)
    return parser


# Commands that compile nothing here: the daemon's clients, `cuzk daemon` (its kernels live under its own data
# directory) and `cuzk prove`/`fullprove` (which decide once they know whether they prove here or on a daemon).
WITHOUT_JIT = {"daemon", "submit", "await", "cancel", "status", "keys", "jobs", "top", "prove", "fullprove"}


def _data_dir() -> str:
    """This machine's data directory for a command without a config: $CUZK_DATA_DIR, else the default one."""
    from .addresses import ENV_PREFIX, default_data_dir

    return os.environ.get(ENV_PREFIX + "DATA_DIR") or default_data_dir()


def _use_jit_cache() -> None:
    """numba's cache under the data directory, before numba is imported."""
    from .jit_cache import use_cache_dir

    use_cache_dir(_data_dir())


def _use_wasm_cache() -> None:
    """wasmtime's compiled circuits under the data directory, as the daemon keeps them."""
    from .witness.wasm import use_cache_dir

    use_cache_dir(_data_dir())


def _plain_prove(argv: list[str]):
    """The arguments of a ``cuzk prove`` or ``fullprove`` command line in the plain forms ``cli_args.parse_plain``
    reads, as the parser's namespace, without building the parser (argparse's imports and parsers cost a one-shot call
    on a local daemon ~15 ms); None for any other command line, which the parser reads."""
    table, func = {"prove": (PROVE_ARGUMENTS, _cmd_prove), "fullprove": (FULLPROVE_ARGUMENTS, _cmd_fullprove)}.get(
        argv[0] if argv else "", ((), None))
    values = parse_plain(argv[1:], table) if func else None
    if values is None:
        return None
    from types import SimpleNamespace

    return SimpleNamespace(command=argv[0], func=func, **values)


def main(argv: list[str] | None = None) -> int:
    return _main(argv)[0]


def _main(argv: list[str] | None) -> tuple[int, argparse.Namespace]:
    """:func:`main`'s exit status, and the command's arguments (what it did: ``answered_by_daemon``)."""
    started_at = time.time()  # --verbose shows a daemon call's timeline from here
    argv = sys.argv[1:] if argv is None else argv
    args = _plain_prove(argv) or build_parser(argv[0] if argv else None).parse_args(argv)
    args.started_at, args.answered_by_daemon = started_at, False
    if args.command not in WITHOUT_JIT:
        _use_jit_cache()
    return _command_status(args), args


def _command_status(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader went away (`cuzk memcheck | head`): stop quietly, as a shell tool does
        import signal

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush into the closed pipe
        return 128 + signal.SIGPIPE
    except (ValueError, OSError) as exc:
        # Every expected failure (bad file, wrong curve, unsatisfied witness, I/O) is one line.
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """The ``cuzk`` executable: :func:`main`, then exit with its status. The objects left are frozen first: the
    interpreter's teardown otherwise collects every object numba and numpy made, ~0.4 s after a one-shot prove on two
    cores (~30 ms after a daemon client's call), to free memory the process is about to give back whole. A prove
    the daemon answered leaves without the teardown at all (~3 ms of a one-shot call on two cores): its files are
    written and closed and its connection to the daemon closed, so all that is left is memory the process gives back
    whole."""
    code, args = _main(None)
    if args.answered_by_daemon:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
