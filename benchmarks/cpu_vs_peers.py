"""Prove the same circuits with cuzk (CPU backend, JIT warm) and with `snarkjs groth16 prove`, print times and ratios.

Usage: .venv/bin/python benchmarks/cpu_vs_peers.py [circuit_dir ...]
Defaults to every circuit of ../shared/corpus. Each tool's proof is checked with
snarkjs, so a fast wrong proof cannot win. groth16py (arkworks, GPL: a benchmark-only
dependency, `pip install '.[bench]'`) proves BN254 circuits from the same .zkey and .wtns
when it is installed; its proof comes back as Ethereum bytes and is not re-checked here.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SNARKJS = REPO / "tests" / "oracle" / "node_modules" / ".bin" / "snarkjs"


def snarkjs_prove_seconds(d: Path, out: Path) -> float:
    t = time.perf_counter()
    subprocess.run([str(SNARKJS), "groth16", "prove", str(d / "circuit.zkey"), str(d / "witness.wtns"), str(out / "sj_proof.json"), str(out / "sj_public.json")], check=True, capture_output=True)
    return time.perf_counter() - t


def snarkjs_accepts(d: Path, public: Path, proof: Path) -> bool:
    res = subprocess.run([str(SNARKJS), "groth16", "verify", str(d / "verification_key.json"), str(public), str(proof)], capture_output=True, text=True)
    return res.returncode == 0 and "OK" in res.stdout


def groth16py_prove_seconds(d: Path) -> float | None:
    """Median of 3 arkworks proofs (after one warm-up), or None where groth16py is absent or the curve is not BN254."""
    try:
        import groth16py
    except ImportError:
        return None
    if "bls12381" in (d / "verification_key.json").read_text():
        return None
    pk, _ = groth16py.import_zkey(str(d / "circuit.zkey"))
    groth16py.prove_wtns(pk, str(d / "witness.wtns"))
    times = []
    for _ in range(3):
        t = time.perf_counter()
        groth16py.prove_wtns(pk, str(d / "witness.wtns"))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    from cuzk.backends import get_backend
    from cuzk.formats.json_io import write_proof, write_public
    from cuzk.formats.wtns import read_wtns
    from cuzk.formats.zkey import read_zkey
    from cuzk.prover.groth16 import prove

    dirs = [Path(a) for a in argv] or sorted(p for p in (REPO.parent / "shared" / "corpus").iterdir() if (p / "circuit.zkey").exists())
    backend = get_backend("cpu")
    print(f"{'circuit':28} {'cuzk s':>8} {'snarkjs s':>10} {'cuzk/snarkjs':>13} {'groth16py s':>12} {'cuzk/groth16py':>15}  verified")
    for d in dirs:
        zkey, witness = read_zkey(d / "circuit.zkey"), read_wtns(d / "witness.wtns")
        prove(backend, zkey, witness)  # JIT warm-up
        cuzk_times = []
        for _ in range(3):
            t = time.perf_counter()
            proof = prove(backend, zkey, witness)
            cuzk_times.append(time.perf_counter() - t)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            write_proof(out / "proof.json", proof)
            write_public(out / "public.json", proof.public_signals)
            ok = snarkjs_accepts(d, out / "public.json", out / "proof.json")
            sj = statistics.median(snarkjs_prove_seconds(d, out) for _ in range(3))
            ok = ok and snarkjs_accepts(d, out / "sj_public.json", out / "sj_proof.json")
        c = statistics.median(cuzk_times)
        ark = groth16py_prove_seconds(d)
        ark_cols = f"{ark:12.3f} {c / ark:15.2f}" if ark else f"{'-':>12} {'-':>15}"
        print(f"{d.name:28} {c:8.3f} {sj:10.3f} {c / sj:13.2f} {ark_cols}  {'yes' if ok else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
