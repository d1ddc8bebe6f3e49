"""One-shot proving: `cuzk prove` started once per proof, as scripts call a prover, against rapidsnark on the same circuits.

Usage: .venv/bin/python benchmarks/oneshot.py [--repeat N] [--rapidsnark PATH] [--backend B] [--synthetic LOG2 ...]
                                              [--no-daemon] [circuit_dir ...]

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
start-up, imports, numba's cache loads.
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
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("CUZK_CORPUS") or REPO.parent / "shared" / "corpus")  # env: a worktree elsewhere, as tests/conftest.py
RAPIDSNARK = Path(os.environ.get("RAPIDSNARK") or REPO.parent / "shared" / "peers" / "rapidsnark")
sys.path.insert(0, str(REPO / "src"))  # this checkout's cuzk, here as in the provers it starts


def run_seconds(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system, the process's own) and stderr of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done.stderr


def phase_seconds(stderr: str) -> float:
    """The sum of the phase times `cuzk prove --verbose` prints ("total N ms")."""
    found = re.search(r"total ([0-9.]+) ms", stderr)
    return float(found.group(1)) / 1000 if found else float("nan")


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
        # `cuzk prove` as the `cuzk` script pip writes runs it, its `import re` included (`python -m` would add runpy's
        # imports, ~5 ms a call).
        cuzk = [sys.executable, "-c", "import re, sys; from cuzk.cli import run; "
                "sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', 'cuzk'); sys.exit(run())", "prove"]
        local = [*cuzk, "--local", "--verbose", *(["--backend", args.backend] if args.backend != "auto" else [])]
        # Once each first: numba's cache and the page cache are warm for the measured rounds, as for a script's Nth proof.
        for d in dirs:
            run_seconds([*local, str(d / "circuit.zkey"), str(d / "witness.wtns"), str(proof), str(public)], env)
        # The daemon a script gets from `cuzk prove --keep-daemon`, in a data directory (and socket) of the run's own.
        daemon_env = {**env, "CUZK_DATA_DIR": str(out / "daemon"), "CUZK_HTTP": "127.0.0.1:0"} if args.daemon else None
        for i, d in enumerate(dirs if daemon_env else []):  # the daemon's first proof of a key reads it: a script's Nth does not
            wall, _, _ = run_seconds([*cuzk, "--keep-daemon", str(d / "circuit.zkey"), str(d / "witness.wtns"), str(proof), str(public)],
                                  daemon_env)
            if i == 0:
                print(f"the first `cuzk prove --keep-daemon` (starting the daemon, its proof during the JIT warm-up): {wall:.2f} s")
        print(f"{'circuit':<22} {'rapidsnark':>10} {'cuzk':>7} {'ratio':>6}  {'daemon':>7} {'ratio':>6}   "
              "CPU s: rapidsnark, daemon's client   local: phases / the rest")
        try:
            for d in dirs:
                files = [str(d / "circuit.zkey"), str(d / "witness.wtns"), str(proof), str(public)]
                peer_s, ours, phases, served, peer_cpu, client_cpu = [], [], [], [], [], []
                for _ in range(args.repeat):
                    if peer is not None:
                        wall, cpu, _ = run_seconds([str(peer), *files], env)
                        peer_s.append(wall)
                        peer_cpu.append(cpu)
                        assert verifies(d, proof, public), f"rapidsnark's proof of {d.name} does not verify"
                    wall, _, stderr = run_seconds([*local, *files], env)
                    assert verifies(d, proof, public), f"cuzk's proof of {d.name} does not verify"
                    ours.append(wall)
                    phases.append(phase_seconds(stderr))
                    if daemon_env:
                        wall, cpu, _ = run_seconds([*cuzk, *files], daemon_env)
                        served.append(wall)
                        client_cpu.append(cpu)
                        assert verifies(d, proof, public), f"the daemon's proof of {d.name} does not verify"
                p = statistics.median(peer_s) if peer_s else None
                o, ph = statistics.median(ours), statistics.median(phases)
                v = statistics.median(served) if served else None
                cpus = "  ".join(f"{statistics.median(c):.3f}" if c else "    -" for c in (peer_cpu, client_cpu))

                def cell(t: float | None, width: int) -> str:
                    return f"{t:>{width - 1}.3f}s" if t is not None else f"{'-':>{width}}"

                def ratio(t: float | None) -> str:
                    return f"{t / p:>6.2f}" if t is not None and p else f"{'-':>6}"

                print(f"{d.name:<22} {cell(p, 10)} {cell(o, 7)} {ratio(o)}  {cell(v, 7)} {ratio(v)}   {cpus:>30}   "
                      f"{ph:.3f} s / {o - ph:.3f} s", flush=True)
        finally:
            if daemon_env:
                stop_daemon(out / "daemon")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
