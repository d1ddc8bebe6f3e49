"""One-shot proving: `cuzk prove` started once per proof, as scripts call a prover, against rapidsnark on the same circuits.

Usage: .venv/bin/python benchmarks/oneshot.py [--repeat N] [--rapidsnark PATH] [--synthetic LOG2 ...] [--with-daemon] [circuit_dir ...]

Defaults to the BN254 circuits of ../shared/corpus (rapidsnark proves BN254 only) and the
static rapidsnark build in ../shared/peers (or $RAPIDSNARK). Each round runs the two
provers back to back on one circuit, so both see the same load on a shared machine; the
table shows medians and the ratio cuzk ÷ rapidsnark (below 1: cuzk is faster), and splits
cuzk's wall time into its own phase timings (`--verbose`) and the rest: interpreter and
module imports, numba's cache loads, argument parsing. `--synthetic 16` adds a synthetic
circuit of 2^16 constraints with a test-only cuzk key (rapidsnark reads snarkjs-format keys,
so it proves the same file). Both proofs of every round are checked with cuzk's verifier
against the key's verification key, so a fast wrong proof cannot win. `--with-daemon` also starts
`cuzk daemon` and times the same `cuzk prove` command line once it finds the daemon's socket
(the daemon keeps the kernels loaded and the key resident). Times are wall seconds; on a
shared machine compare the ratios, which both provers' runs of one round share.

The package's .pyc files are written first (`compileall`): pip does that at install, while an
environment with PYTHONDONTWRITEBYTECODE would otherwise compile every module at each start.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
RAPIDSNARK = Path(os.environ.get("RAPIDSNARK") or REPO.parent / "shared" / "peers" / "rapidsnark")
sys.path.insert(0, str(REPO / "src"))  # this checkout's cuzk, here as in the provers it starts


def run_seconds(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return wall, done.stderr


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


def start_daemon(data_dir: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`cuzk daemon` on a socket in ``data_dir``, once its JIT warm-up is done; the process and the socket address."""
    import urllib.error
    import urllib.request

    socket = f"unix:{data_dir}/cuzk.sock"
    proc = subprocess.Popen([sys.executable, "-m", "cuzk.cli", "daemon", "--data-dir", str(data_dir), "--listen", socket,
                             "--http", "127.0.0.1:0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, info = time.monotonic() + 1800, data_dir / "run" / "daemon.json"
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            http = json.loads(info.read_text())["http"]
            with urllib.request.urlopen(f"http://{http}/healthz", timeout=5):
                return proc, socket  # 200: serving
        except (OSError, ValueError, KeyError, urllib.error.HTTPError):
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the daemon in {data_dir} did not start serving")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("circuits", nargs="*", type=Path, help="directories holding circuit.zkey, witness.wtns, verification_key.json")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per circuit (default 5); medians are shown")
    parser.add_argument("--rapidsnark", type=Path, default=RAPIDSNARK, help="the rapidsnark prover binary")
    parser.add_argument("--synthetic", type=int, action="append", default=[], metavar="LOG2", help="add a 2^LOG2 synthetic circuit")
    parser.add_argument("--with-daemon", action="store_true", help="also time `cuzk prove` with a local daemon running")
    args = parser.parse_args(argv)
    if not args.rapidsnark.is_file():
        raise SystemExit(f"no rapidsnark at {args.rapidsnark} (build iden3/rapidsnark, then pass --rapidsnark or set $RAPIDSNARK)")
    compileall.compile_dir(REPO / "src" / "cuzk", quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
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
        cuzk = [sys.executable, "-m", "cuzk.cli", "prove", "--backend", "cpu", "--verbose"]  # in this process (no daemon)
        # Once each first: numba's cache and the page cache are warm for the measured rounds, as for a script's Nth proof.
        for d in dirs:
            run_seconds([*cuzk, "--local", str(d / "circuit.zkey"), str(d / "witness.wtns"), str(proof), str(public)], env)
        daemon = start_daemon(out / "daemon", env) if args.with_daemon else None
        daemon_env = {**env, "CUZK_DAEMON": daemon[1]} if daemon else None
        print(f"{'circuit':<22} {'rapidsnark':>10} {'cuzk':>8} {'ratio':>6}   cuzk's phases / the rest (start-up)"
              + ("   cuzk via daemon, ratio" if daemon else ""))
        try:
            for d in dirs:
                files = [str(d / "circuit.zkey"), str(d / "witness.wtns"), str(proof), str(public)]
                peer, ours, phases, served = [], [], [], []
                for _ in range(args.repeat):
                    wall, _ = run_seconds([str(args.rapidsnark), *files], env)
                    assert verifies(d, proof, public), f"rapidsnark's proof of {d.name} does not verify"
                    peer.append(wall)
                    wall, stderr = run_seconds([*cuzk, "--local", *files], env)
                    assert verifies(d, proof, public), f"cuzk's proof of {d.name} does not verify"
                    ours.append(wall)
                    phases.append(phase_seconds(stderr))
                    if daemon:
                        wall, _ = run_seconds([sys.executable, "-m", "cuzk.cli", "prove", *files], daemon_env)
                        assert verifies(d, proof, public), f"the daemon's proof of {d.name} does not verify"
                        served.append(wall)
                p, o, ph = statistics.median(peer), statistics.median(ours), statistics.median(phases)
                line = f"{d.name:<22} {p:>9.3f}s {o:>7.3f}s {o / p:>6.2f}   {ph:.3f} s / {o - ph:.3f} s"
                if daemon:
                    line += f"   {statistics.median(served):.3f} s, {statistics.median(served) / p:.2f}"
                print(line, flush=True)
        finally:
            if daemon:
                daemon[0].terminate()
                daemon[0].wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
