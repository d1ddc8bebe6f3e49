"""One-shot proving: `cuzk prove` started once per proof, as scripts call a prover, against rapidsnark on the same circuits.

Usage: .venv/bin/python benchmarks/oneshot.py [--repeat N] [--rapidsnark PATH] [--backend B] [--synthetic LOG2 ...]
                                              [--no-daemon] [--client-python PYTHON] [circuit_dir ...]

Defaults to the BN254 circuits of ../shared/corpus (rapidsnark proves BN254 only) and the
static rapidsnark build in ../shared/peers (or $RAPIDSNARK; without one only cuzk's times are
shown). Each round runs the provers back to back on one circuit, so all see the same load on a
shared machine: rapidsnark, `cuzk prove --local` (a fresh process that imports numba, loads its
cached kernels and reads the key) and, unless --no-daemon, the same plain `cuzk prove` command
line while a local `cuzk daemon` runs (the process only imports the client of the daemon's
local HTTP socket; the daemon has the kernels loaded and the key resident). The table shows medians and the ratios cuzk ÷
rapidsnark (below 1: cuzk is faster), the CPU seconds of each process (rusage: rapidsnark's two
threads, the `cuzk prove` client of the daemon, whose proof's CPU is the daemon's), and splits the
local run's wall time into cuzk's own phase timings (`--verbose`) and the rest: interpreter
start-up, imports, numba's cache loads. Under each circuit's row, the daemon call of median wall
time is split into measured parts that add up to it (`call_breakdown`: the client's start-up,
its work before the request and after the answer, its exit, the transport, and the daemon's
job phases), from the timeline `cuzk prove --verbose` prints, beside a bare interpreter's start
and exit. Where `curl` is installed, the same proof is also asked of the daemon by curl on its
local HTTP socket (`POST /v1/prove/<key>`, the .wtns as the body; the answer is one JSON
document, proof and publicSignals, as rapidsnark's proverServer answers): what a client that is
not a Python process pays, shown apart from the `cuzk prove` ratio.
`--synthetic 16` adds a synthetic circuit of 2^16 constraints with a test-only cuzk key
(rapidsnark reads snarkjs-format keys, so it proves the same file). Every proof of every round
is checked with cuzk's verifier against the key's verification key, so a fast wrong proof
cannot win. Both provers get the same OpenMP wait policy (cuzk's PASSIVE unless the
environment sets one; on a busy machine rapidsnark's Poseidon proofs gain from it too). The daemon is the one `cuzk prove --keep-daemon` starts (the first call's time is
printed apart). Times are wall seconds; on a shared machine compare the ratios, which the runs of
one round share.

The package's .pyc files are written first (`compileall`): pip does that at install, while an
environment with PYTHONDONTWRITEBYTECODE would otherwise compile every module at each start.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("CUZK_CORPUS") or REPO.parent / "shared" / "corpus")  # env: a worktree elsewhere, as tests/conftest.py
RAPIDSNARK = Path(os.environ.get("RAPIDSNARK") or REPO.parent / "shared" / "peers" / "rapidsnark")
sys.path.insert(0, str(REPO / "src"))  # this checkout's cuzk, here as in the provers it starts
from cuzk.addresses import SOCKET_NAME  # noqa: E402  (after the path above)
from cuzk.local_client import local_http_socket  # noqa: E402


class Run(NamedTuple):
    wall: float  # seconds
    cpu: float  # seconds, user + system, the process's own
    stderr: str
    started_at: float  # time.time() just before the process was started
    ended_at: float  # time.time() once it was reaped


def run_seconds(argv: list[str], env: dict[str, str]) -> Run:
    """One run of ``argv``: its wall and CPU seconds, stderr, and when it started and ended on the wall clock."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started_at, t = time.time(), time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall, ended_at = time.perf_counter() - t, time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return Run(wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done.stderr, started_at, ended_at)


def phase_seconds(stderr: str) -> float:
    """The sum of the phase times `cuzk prove --verbose` prints ("total N ms")."""
    found = re.search(r"total ([0-9.]+) ms", stderr)
    return float(found.group(1)) / 1000 if found else float("nan")


# `cuzk prove --verbose` on a daemon: its job's phases ("[daemon <job>] intake 1.0 ms  queue ...  total N ms") and its
# own timeline ("[client] main at T: request sent +A ms, answered +B ms (in the daemon C ms), written +D ms").
DAEMON_LINE = re.compile(r"^\[daemon [^]]*\] (.*)  total [0-9.]+ ms$", re.M)
CLIENT_LINE = re.compile(r"^\[client\] main at ([0-9.]+): request sent \+([0-9.]+) ms, answered \+([0-9.]+) ms "
                         r"\(in the daemon ([0-9.]+) ms\), written \+([0-9.]+) ms$", re.M)
PROVING = ("ntt", "msm", "blind")  # the daemon's phases shown together as "prove"


def call_breakdown(run: Run) -> dict[str, float] | None:
    """Where one `cuzk prove --verbose` call on a daemon spent its wall time (seconds), from the client's timeline and
    the daemon's phases, every part measured; None when the call did not print them (an older daemon, gRPC):

    - client start-up: the process started → cuzk's ``main`` (the interpreter, its imports);
    - client to request: ``main`` → the request sent (arguments, finding the daemon, the client's imports);
    - transport: the round trip less the daemon's own time on the request;
    - daemon: its job's phases (intake, queue, key_load, check, synthesize, prove = ntt + msm + blind, verify, answer:
      the result's commit and the wake-up) and the rest of its time on the request ("daemon other": hand-offs between
      its threads, journaling the start, the HTTP handler);
    - client after answer: the answer read → proof.json and public.json written;
    - client exit: the interpreter's teardown, until the process was reaped."""
    client, daemon = CLIENT_LINE.search(run.stderr), DAEMON_LINE.search(run.stderr)
    if client is None or daemon is None:
        return None
    main_at = float(client.group(1))
    sent, answered, served, written = (float(client.group(i)) / 1000 for i in range(2, 6))
    phases = {name: float(ms) / 1000 for name, ms in re.findall(r"(\w+) ([0-9.]+) ms", daemon.group(1))}
    parts = {"client start-up": main_at - run.started_at, "client to request": sent}
    parts["transport"] = answered - sent - served
    named: dict[str, float] = {}  # in the daemon's order, ntt + msm + blind as one "prove"
    for name, seconds in phases.items():
        shown = "prove" if name in PROVING else name
        named[shown] = named.get(shown, 0.0) + seconds
    parts.update({f"daemon {name}": seconds for name, seconds in named.items()})
    parts["daemon other"] = served - sum(named.values())
    parts["client after answer"] = written - answered
    parts["client exit"] = run.ended_at - (main_at + written)
    return parts


def print_breakdown(calls: list[Run], python_alone: float) -> None:
    """The daemon call of median wall time, split by ``call_breakdown`` (its parts add up to its wall time), and the
    interpreter's own start and exit beside them (``python_alone``: a bare `python -c "import sys"`, median)."""
    call = sorted(calls, key=lambda run: run.wall)[(len(calls) - 1) // 2]
    parts = call_breakdown(call)
    if parts is None:
        print(f"{'':<22} (the daemon's call printed no timeline to split its {call.wall * 1000:.1f} ms by)")
        return
    shown = ", ".join(f"{name} {seconds * 1000:.1f}" for name, seconds in parts.items())
    print(f"{'':<22} the median daemon call, {call.wall * 1000:.1f} ms = {shown} ms "
          f"(python alone starts and exits in {python_alone * 1000:.1f} ms)", flush=True)


def verifies(d: Path, proof: Path, public: Path) -> bool:
    from cuzk.formats.json_io import read_proof, read_public, read_vkey
    from cuzk.prover.verify import verify

    vkey = read_vkey(d / "verification_key.json")
    return verify(vkey, read_public(public, curve=vkey.curve), read_proof(proof, curve=vkey.curve))


def synthetic_circuit(log2: int, out: Path) -> Path:
    """A synthetic BN254 circuit of 2^log2 constraints with a test-only key and its verification key."""
    from cuzk.circuits.synthetic import synthesize, write_synthetic
    from cuzk.curves import BN254
    from cuzk.formats.json_io import write_vkey
    from cuzk.formats.zkey import read_zkey
    from cuzk.prover.setup import setup
    from cuzk.prover.verify import vkey_from_zkey

    d = out / f"synthetic_2^{log2}"
    r1cs, _ = write_synthetic(d, synthesize(BN254, 1 << log2, 1, seed=log2))
    setup(r1cs, d / "circuit.zkey")
    write_vkey(d / "verification_key.json", vkey_from_zkey(read_zkey(d / "circuit.zkey")))
    return d


def curl_prove(curl: str, socket: Path, d: Path, answer: Path) -> list[str]:
    """curl's command asking the daemon on its local HTTP socket to prove ``d``'s witness with its key (by path)."""
    from cuzk.local_client import PROVE_PATH, url_quote

    return [curl, "-sS", "--fail-with-body", "--unix-socket", str(socket), "-H", "Content-Type: application/octet-stream",
            "--data-binary", f"@{d / 'witness.wtns'}", "-o", str(answer),
            f"http://localhost{PROVE_PATH}{url_quote(str((d / 'circuit.zkey').resolve()))}"]


def answer_verifies(d: Path, answer: Path, out: Path) -> bool:
    """The daemon's HTTP answer (proof and publicSignals in one document) checked as the files snarkjs writes."""
    doc = json.loads(answer.read_text())
    (out / "curl_proof.json").write_text(json.dumps(doc["proof"]))
    (out / "curl_public.json").write_text(json.dumps(doc["publicSignals"]))
    return verifies(d, out / "curl_proof.json", out / "curl_public.json")


def stop_daemon(data_dir: Path) -> None:
    """SIGTERM to the supervisor of the daemon in ``data_dir`` (the benchmark's own), then wait until it is gone."""
    from cuzk.engine.supervisor import SupervisorState

    pid = SupervisorState.load(data_dir).supervisor_pid
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
        while Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":  # not our child: no wait()
            time.sleep(0.1)
    except (ProcessLookupError, FileNotFoundError):  # gone (and reaped by whoever adopted it)
        pass


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("circuits", nargs="*", type=Path, help="directories holding circuit.zkey, witness.wtns, verification_key.json")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per circuit (default 5); medians are shown")
    parser.add_argument("--rapidsnark", type=Path, default=RAPIDSNARK, help="the rapidsnark prover binary (skipped where absent)")
    parser.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"], help="cuzk's backend (default auto, as `cuzk prove`)")
    parser.add_argument("--synthetic", type=int, action="append", default=[], metavar="LOG2", help="add a 2^LOG2 synthetic circuit")
    parser.add_argument("--no-daemon", dest="daemon", action="store_false", help="leave out `cuzk prove` through a local daemon")
    parser.add_argument("--client-python", type=Path, metavar="PYTHON",
                        help="the interpreter of the `cuzk prove` calls a daemon answers, and of the bare-interpreter "
                             "row (default: this one). Such a call imports only the standard library, so a venv made "
                             "with `python3 -m venv --without-pip` runs it: a user's own environment, without the "
                             "system site-packages' .pth hooks (on the GPU image numba-cuda's costs ~36 ms a start)")
    args = parser.parse_args(argv)
    peer = args.rapidsnark if args.rapidsnark.is_file() else None
    if peer is None:
        print(f"no rapidsnark at {args.rapidsnark} (build iden3/rapidsnark, then pass --rapidsnark or set $RAPIDSNARK): "
              "cuzk's times only", file=sys.stderr)
    compileall.compile_dir(REPO / "src" / "cuzk", quiet=1)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "CUZK_DAEMON")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # cuzk's default (ff/parallel.py), given to rapidsnark's OpenMP too
    if not env.get("NUMBA_CACHE_DIR"):  # the daemon's kernels where the one-shot CLI keeps them: warm for both
        from cuzk.config import ENV_PREFIX, default_data_dir
        from cuzk.jit_cache import cache_dir

        env["NUMBA_CACHE_DIR"] = str(cache_dir(env.get(ENV_PREFIX + "DATA_DIR") or default_data_dir()))
    with tempfile.TemporaryDirectory(prefix="cuzk-oneshot-") as tmp:
        out = Path(tmp)
        dirs = args.circuits or [p for p in sorted(CORPUS.iterdir()) if (p / "circuit.zkey").exists()
                                 and "bls12381" not in (p / "verification_key.json").read_text()]
        dirs += [synthetic_circuit(log2, out) for log2 in args.synthetic]
        proof, public = out / "proof.json", out / "public.json"
        # `cuzk prove` as the installed `cuzk` command runs it: bin/cuzk (`python -m` would add runpy's imports, ~5 ms a call).
        launcher = str(REPO / "bin" / "cuzk")
        cuzk = [sys.executable, launcher, "prove"]
        client_python = str(args.client_python or sys.executable)
        client = [client_python, launcher, "prove"]  # the calls the daemon answers
        python_alone = [client_python, "-c", "import sys"]  # the interpreter's own start and exit, cuzk's command without cuzk
        local = [*cuzk, "--local", "--verbose", *(["--backend", args.backend] if args.backend != "auto" else [])]
        # Once each first: numba's cache and the page cache are warm for the measured rounds, as for a script's Nth proof.
        for d in dirs:
            run_seconds([*local, str(d / "circuit.zkey"), str(d / "witness.wtns"), str(proof), str(public)], env)
        # The daemon a script gets from `cuzk prove --keep-daemon`, in a data directory (and socket) of the run's own.
        daemon_env = {**env, "CUZK_DATA_DIR": str(out / "daemon"), "CUZK_HTTP": "127.0.0.1:0"} if args.daemon else None
        for i, d in enumerate(dirs if daemon_env else []):  # the daemon's first proof of a key reads it: a script's Nth does not
            first = run_seconds([*cuzk, "--keep-daemon", str(d / "circuit.zkey"), str(d / "witness.wtns"), str(proof), str(public)],
                                daemon_env)
            if i == 0:
                print(f"the first `cuzk prove --keep-daemon` (starting the daemon, its proof during the JIT warm-up): {first.wall:.2f} s")
        if daemon_env and args.client_python:
            print(f"the calls the daemon answers run on {client_python}")
        curl = shutil.which("curl") if daemon_env else None
        daemon_socket = Path(local_http_socket(out / "daemon" / SOCKET_NAME))
        print(f"{'circuit':<22} {'rapidsnark':>10} {'cuzk':>7} {'ratio':>6}  {'daemon':>7} {'ratio':>6}   "
              "CPU s: rapidsnark, daemon's client   local: phases / the rest")
        try:
            for d in dirs:
                files = [str(d / "circuit.zkey"), str(d / "witness.wtns"), str(proof), str(public)]
                peer_s, ours, phases, served, peer_cpu, client_cpu, bare, curled = [], [], [], [], [], [], [], []
                for _ in range(args.repeat):
                    if peer is not None:
                        run = run_seconds([str(peer), *files], env)
                        peer_s.append(run.wall)
                        peer_cpu.append(run.cpu)
                        assert verifies(d, proof, public), f"rapidsnark's proof of {d.name} does not verify"
                    run = run_seconds([*local, *files], env)
                    assert verifies(d, proof, public), f"cuzk's proof of {d.name} does not verify"
                    ours.append(run.wall)
                    phases.append(phase_seconds(run.stderr))
                    if daemon_env:
                        run = run_seconds([*client, "--verbose", *files], daemon_env)
                        served.append(run)
                        client_cpu.append(run.cpu)
                        assert verifies(d, proof, public), f"the daemon's proof of {d.name} does not verify"
                        bare.append(run_seconds(python_alone, env).wall)
                    if curl:
                        answer = out / "answer.json"
                        curled.append(run_seconds(curl_prove(curl, daemon_socket, d, answer), env).wall)
                        assert answer_verifies(d, answer, out), f"the daemon's HTTP answer for {d.name} does not verify"
                p = statistics.median(peer_s) if peer_s else None
                o, ph = statistics.median(ours), statistics.median(phases)
                v = statistics.median(run.wall for run in served) if served else None
                cpus = "  ".join(f"{statistics.median(c):.3f}" if c else "    -" for c in (peer_cpu, client_cpu))

                def cell(t: float | None, width: int) -> str:
                    return f"{t:>{width - 1}.3f}s" if t is not None else f"{'-':>{width}}"

                def ratio(t: float | None) -> str:
                    return f"{t / p:>6.2f}" if t is not None and p else f"{'-':>6}"

                print(f"{d.name:<22} {cell(p, 10)} {cell(o, 7)} {ratio(o)}  {cell(v, 7)} {ratio(v)}   {cpus:>30}   "
                      f"{ph:.3f} s / {o - ph:.3f} s", flush=True)
                if served:
                    print_breakdown(served, statistics.median(bare))
                if curled:
                    c = statistics.median(curled)
                    print(f"{'':<22} curl on the daemon's local HTTP socket: {c:.3f} s{f', x{c / p:.2f} rapidsnark' if p else ''}",
                          flush=True)
        finally:
            if daemon_env:
                stop_daemon(out / "daemon")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
