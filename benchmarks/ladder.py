"""Build (once) and cache the benchmark ladder: synthetic circuits on domains of 2^16, 2^18, 2^20 (2^22, 2^24).

Rung 2^k has 2^k − public − 1 constraints, the most a 2^k domain holds (snarkjs sizes the
domain for constraints + public inputs + 1), as circuits are sized in practice: exactly 2^k
constraints would double every NTT and the H section for a handful of rows.

Each rung is a directory ``<cache>/<curve>/2^k/`` holding ``circuit.r1cs``, ``witness.wtns``,
``public.json``, a test-only ``circuit.zkey`` from ``cuzk setup`` and its
``verification_key.json``, plus ``rung.json`` recording the parameters and how long each
step took. A rung whose ``rung.json`` matches the requested parameters is reused as is;
a rung that would not fit in the free disk space (estimated from its size) or in memory
(``synthesize`` and ``setup`` refuse such sizes up front) is skipped with a message.

    .venv/bin/python benchmarks/ladder.py                         # 2^16, 2^18, 2^20 on BN254
    .venv/bin/python benchmarks/ladder.py --sizes 16,18,20,22,24 --curve bls12-381 --prove
    python3 benchmarks/ladder.py --sizes 16,18,20,22,24 --prove --backend cuda --dir /tmp/ladder --time-budget 480

``--prove`` also proves each rung once with ``cuzk prove`` (which checks its proof with
cuzk's verifier; snarkjs verifies it too where installed), recording the time. ``--backend`` picks where both setup
(its fixed-base points) and proving run. ``--time-budget`` stops before a rung whose
predicted time (the last rung of 2^20 or more, scaled by size) would overrun it, so one
bounded command builds as far as it can. With ``--prove``, a warm-up proof of the bundled
2^10 example runs beside the first rung's synthesis and setup: on a fresh machine it pays
the one-off compilation of the prover and verifier (numba, NVRTC; minutes, single-threaded)
while the other cores work, and the first rung's proof waits for it, so no proving time
includes it (the first rung's setup time still includes setup's own compilation). A table
of the times ends the output. The cache defaults to ``<repo>/.bench-cache/ladder`` (git-ignored); ``--dir`` or ``CUZK_LADDER_DIR``
move it.
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

from cuzk.bench.workload import example_dir
from cuzk.circuits.synthetic import TERMS_PER_CONSTRAINT, SyntheticError, synthesize, write_synthetic
from cuzk.curves import Curve, curve_by_name
from cuzk.formats.json_io import write_public, write_vkey
from cuzk.formats.zkey import read_zkey
from cuzk.memory.commands import check_memory
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


def start_warm_up(backend: str, root: Path) -> subprocess.Popen:
    """Prove (and self-verify) the bundled example in the background: it fills the compilation caches."""
    ex = example_dir()
    cmd = [sys.executable, "-m", "cuzk.cli", "prove", "--backend", backend, str(ex / "circuit.zkey"), str(ex / "witness.wtns"),
           str(root / "warm_up_proof.json"), str(root / "warm_up_public.json")]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish_warm_up(warm_up: subprocess.Popen | None) -> None:
    if warm_up is None or warm_up.returncode is not None:
        return
    t = time.perf_counter()
    _, err = warm_up.communicate()
    status = "done" if warm_up.returncode == 0 else f"failed ({err.strip().splitlines()[-1] if err.strip() else warm_up.returncode})"
    print(f"warm-up proof {status}; waited {time.perf_counter() - t:.0f} s for it", flush=True)


def build_rung(curve: Curve, log_n: int, root: Path, prove: bool, backend: str, memory_budget: int | None = None,
               warm_up: subprocess.Popen | None = None) -> dict:
    rung = root / curve.name / f"2^{log_n}"
    n = (1 << log_n) - N_PUBLIC - 1
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
        result = setup(rung / "circuit.r1cs", rung / "circuit.zkey", backend=backend, memory_budget=memory_budget)
        record["setup_s"] = round(time.perf_counter() - t, 2)
        record["setup_backend"] = result.backend
        write_vkey(rung / "verification_key.json", vkey_from_zkey(read_zkey(rung / "circuit.zkey")))
        record["setup_phases_s"] = {k: round(v, 2) for k, v in result.timings.items()}
        record["domain"] = result.domain_size
        record["zkey_bytes"] = (rung / "circuit.zkey").stat().st_size
        record.pop("prove_s", None)
        _save(record_path, record)
    if prove and "prove_s" not in record:
        finish_warm_up(warm_up)
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


def predicted_seconds(records: dict[int, dict], log_n: int) -> float | None:
    """A rung's time from the largest built rung of 2^20 or more, scaled linearly with size (None: no such rung).

    Smaller rungs are not used: their time is mostly one-off compilation (numba, NVRTC).
    """
    base = max((k for k in records if k >= 20 and k < log_n), default=None)
    if base is None:
        return None
    return records[base]["total_s"] * 2.0 ** (log_n - base)


def _table(curve: Curve, records: dict[int, dict]) -> str:
    rows = [("rung", "synth s", "setup s", "on", "prove s", "on", "snarkjs", "zkey GiB")]
    for log_n, r in sorted(records.items()):
        rows.append((f"{curve.name} 2^{log_n}", str(r.get("synth_s", "")), str(r.get("setup_s", "")), r.get("setup_backend", "cpu"),
                     str(r.get("prove_s", "-")), r.get("prove_backend", "-"), str(r.get("snarkjs_verified", "-")),
                     f"{r.get('zkey_bytes', 0) / 2**30:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16,18,20", help="log2 of the constraint counts (default 16,18,20)")
    ap.add_argument("--curve", default="bn254")
    ap.add_argument("--dir", default=os.environ.get("CUZK_LADDER_DIR", str(REPO / ".bench-cache" / "ladder")))
    ap.add_argument("--prove", action="store_true", help="also prove each rung once and record the time")
    ap.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"], help="for setup and proving (default auto)")
    ap.add_argument("--time-budget", type=float, help="seconds: build no rung predicted to end after this (from the start)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    curve = curve_by_name(args.curve)
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    _, plan, _, _ = check_memory()
    records: dict[int, dict] = {}
    warm_up = start_warm_up(args.backend, root) if args.prove else None
    for log_n in (int(s) for s in args.sizes.split(",")):
        rung = root / curve.name / f"2^{log_n}"
        need = estimated_bytes(curve, 1 << log_n)
        have = shutil.disk_usage(root).free
        if not (rung / "rung.json").exists() and need > 0.9 * have:
            print(f"2^{log_n}: skipped, needs ~{need / 2**30:.1f} GiB and {have / 2**30:.1f} GiB are free", flush=True)
            continue
        predicted = predicted_seconds(records, log_n)
        elapsed = time.perf_counter() - started
        if args.time_budget is not None and predicted is not None and elapsed + predicted > args.time_budget:
            print(f"2^{log_n}: skipped, predicted {predicted:.0f} s and {args.time_budget - elapsed:.0f} s of the time budget are left", flush=True)
            break
        t = time.perf_counter()
        try:
            record = build_rung(curve, log_n, root, args.prove, args.backend, plan.total_bytes, warm_up)
        except (SyntheticError, SetupError) as exc:  # e.g. more memory than the budget allows
            print(f"2^{log_n}: skipped, {exc}", flush=True)
            continue
        except (RuntimeError, MemoryError) as exc:  # cuzk prove failed (its self-check included), or no VRAM: say so, go on
            print(f"2^{log_n}: FAILED, {exc}", flush=True)
            continue
        records[log_n] = {**record, "total_s": time.perf_counter() - t}
        shown = {k: v for k, v in record.items() if k.endswith("_s") or k in ("snarkjs_verified", "prove_phases", "setup_backend")}
        print(f"2^{log_n}: {rung}  {json.dumps(shown)}", flush=True)
    finish_warm_up(warm_up)
    print(_table(curve, records), flush=True)
    print(f"total {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
