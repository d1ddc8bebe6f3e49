"""Build (once) and cache the benchmark ladder: synthetic circuits of 2^16, 2^18, 2^20 (2^22, 2^24) constraints.

Each rung is a directory ``<cache>/<curve>/2^k/`` holding ``circuit.r1cs``, ``witness.wtns``,
``public.json``, a test-only ``circuit.zkey`` from ``cuzk setup`` and its
``verification_key.json``, plus ``rung.json`` recording the parameters and how long each
step took. A rung whose ``rung.json`` matches the requested parameters is reused as is;
a rung that would not fit in the free disk space (estimated from its size) or in memory
(``synthesize`` and ``setup`` refuse such sizes up front) is skipped with a message.

    .venv/bin/python benchmarks/ladder.py                         # 2^16, 2^18, 2^20 on BN254
    .venv/bin/python benchmarks/ladder.py --sizes 16,18,20,22,24 --curve bls12-381 --prove

``--prove`` also proves each rung once with ``cuzk prove`` (and verifies the proof with
snarkjs when it is installed), recording the time. The cache defaults to
``<repo>/.bench-cache/ladder`` (git-ignored); ``--dir`` or ``CUZK_LADDER_DIR`` move it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from cuzk.circuits.synthetic import TERMS_PER_CONSTRAINT, SyntheticError, synthesize, write_synthetic
from cuzk.curves import Curve, curve_by_name
from cuzk.formats.json_io import write_public, write_vkey
from cuzk.formats.zkey import read_zkey
from cuzk.prover.setup import SetupError, setup
from cuzk.prover.verify import vkey_from_zkey

REPO = Path(__file__).resolve().parents[1]
SNARKJS = REPO / "tests" / "oracle" / "node_modules" / ".bin" / "snarkjs"
N_PUBLIC = 2
SEED = 20240601


def estimated_bytes(curve: Curve, n: int) -> int:
    """Disk a rung of n constraints takes: r1cs terms, witness, and the key's sections."""
    fr, g1 = curve.Fr.n8, 2 * curve.Fq.n8
    terms = TERMS_PER_CONSTRAINT * n
    r1cs = terms * (4 + fr) + 12 * n
    wtns = n * fr
    domain = 1 << (n + N_PUBLIC).bit_length()
    zkey = 4 * n * g1 + n * 2 * g1 + domain * g1 + 0.4 * terms * (12 + fr)  # A, B1, C, (IC); B2; H; A/B coefficients
    return int(r1cs + wtns + zkey)


def build_rung(curve: Curve, log_n: int, root: Path, prove: bool, backend: str) -> dict:
    rung = root / curve.name / f"2^{log_n}"
    n = 1 << log_n
    wanted = {"curve": curve.name, "constraints": n, "public": N_PUBLIC, "seed": SEED}
    record_path = rung / "rung.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    if {k: record.get(k) for k in wanted} != wanted:
        record = dict(wanted)
    rung.mkdir(parents=True, exist_ok=True)

    if "synth_s" not in record:
        t = time.perf_counter()
        circuit = synthesize(curve, n, N_PUBLIC, seed=SEED)
        write_synthetic(rung, circuit)
        write_public(rung / "public.json", circuit.public_signals)
        record["synth_s"] = round(time.perf_counter() - t, 2)
        record.pop("setup_s", None)
        del circuit
        _save(record_path, record)
    if "setup_s" not in record:
        t = time.perf_counter()
        result = setup(rung / "circuit.r1cs", rung / "circuit.zkey")
        write_vkey(rung / "verification_key.json", vkey_from_zkey(read_zkey(rung / "circuit.zkey")))
        record["setup_s"] = round(time.perf_counter() - t, 2)
        record["setup_phases_s"] = {k: round(v, 2) for k, v in result.timings.items()}
        record["domain"] = result.domain_size
        record["zkey_bytes"] = (rung / "circuit.zkey").stat().st_size
        record.pop("prove_s", None)
        _save(record_path, record)
    if prove and "prove_s" not in record:
        t = time.perf_counter()
        cmd = [sys.executable, "-m", "cuzk.cli", "prove", "--backend", backend, "--verbose",
               str(rung / "circuit.zkey"), str(rung / "witness.wtns"), str(rung / "proof.json"), str(rung / "proof_public.json")]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"cuzk prove failed on {rung}: {res.stderr.strip()}")
        record["prove_s"] = round(time.perf_counter() - t, 2)
        record["prove_backend"] = backend
        record["prove_phases"] = res.stderr.strip().splitlines()[-1]
        if SNARKJS.exists():
            check = subprocess.run([str(SNARKJS), "groth16", "verify", str(rung / "verification_key.json"), str(rung / "proof_public.json"), str(rung / "proof.json")],
                                   capture_output=True, text=True)  # fmt: skip
            record["snarkjs_verified"] = check.returncode == 0 and "OK" in check.stdout + check.stderr
        _save(record_path, record)
    return record


def _save(path: Path, record: dict) -> None:
    path.write_text(json.dumps(record, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16,18,20", help="log2 of the constraint counts (default 16,18,20)")
    ap.add_argument("--curve", default="bn254")
    ap.add_argument("--dir", default=os.environ.get("CUZK_LADDER_DIR", str(REPO / ".bench-cache" / "ladder")))
    ap.add_argument("--prove", action="store_true", help="also prove each rung once and record the time")
    ap.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    args = ap.parse_args(argv)
    curve = curve_by_name(args.curve)
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    for log_n in (int(s) for s in args.sizes.split(",")):
        rung = root / curve.name / f"2^{log_n}"
        need = estimated_bytes(curve, 1 << log_n)
        have = shutil.disk_usage(root).free
        if not (rung / "rung.json").exists() and need > 0.9 * have:
            print(f"2^{log_n}: skipped, needs ~{need / 2**30:.1f} GiB and {have / 2**30:.1f} GiB are free", flush=True)
            continue
        try:
            record = build_rung(curve, log_n, root, args.prove, args.backend)
        except (SyntheticError, SetupError) as exc:  # e.g. more memory than this machine has
            print(f"2^{log_n}: skipped, {exc}", flush=True)
            continue
        shown = {k: v for k, v in record.items() if k.endswith("_s") or k in ("snarkjs_verified", "prove_phases")}
        print(f"2^{log_n}: {rung}  {json.dumps(shown)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
