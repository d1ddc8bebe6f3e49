"""Build the benchmark circuits of benchmarks/circuits/ (SHA-256 of 64 bytes, a 7-round Poseidon chain, a 2^16
Merkle batch): the circuits issue 17 times rapidsnark on, larger than ../shared/corpus holds.

Usage: .venv/bin/python benchmarks/make_circuits.py [--out DIR] [name ...]

Each circuit is compiled by circom 2 (the circom2 npm package of tests/oracle: `npm ci --prefix tests/oracle`), its
witness computed from a fixed input by `cuzk wtns calculate`, and its key made by `cuzk setup` without a ptau, so the
key is for testing only; it is a snarkjs-format zkey, which rapidsnark reads as well. Each folder then holds what
benchmarks/oneshot.py takes (circuit.zkey, witness.wtns, verification_key.json) beside circuit.r1cs, circuit.wasm and
input.json. What a folder already holds is kept (copy circuit.r1cs and circuit.wasm to a machine without node and
the rest is made there); the default place is .bench-cache/circuits/ (git-ignored). Prints the folders, one per line,
for `oneshot.py $(make_circuits.py)`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = Path(__file__).resolve().parent / "circuits"
ORACLE = REPO / "tests" / "oracle" / "node_modules"
CIRCOM = ORACLE / ".bin" / "circom2"
CUZK = [sys.executable, "-m", "cuzk.cli"]
# circom's simplification where its default (--O1, which keeps the linear constraints) does not give the size wanted
FLAGS = {"merkle_batch": ("--O2",)}


def _bits_msb_first(data: bytes) -> list[int]:
    return [(byte >> (7 - k)) & 1 for byte in data for k in range(8)]


def _field_words(tag: str, count: int) -> list[str]:
    """Deterministic values below 2^248 (inside both curves' scalar fields), as decimal strings."""
    return [str(int.from_bytes(hashlib.sha256(f"{tag}/{i}".encode()).digest()[:31], "big")) for i in range(count)]


def inputs(name: str) -> dict:
    if name == "sha256_64B":
        return {"in": _bits_msb_first(bytes(range(64)))}
    if name == "poseidon_chain_7":
        seed, key = _field_words("poseidon", 2)
        return {"seed": seed, "key": key}
    if name == "merkle_batch":
        paths, depth = 16, 16
        return {"leaves": _field_words("leaf", paths),
                "siblings": [_field_words(f"sibling/{p}", depth) for p in range(paths)],
                "index_bits": [[(p * 2654435761 >> level) & 1 for level in range(depth)] for p in range(paths)]}
    raise ValueError(f"no input for circuit {name!r}")


def build(name: str, out: Path) -> Path:
    """Each step runs only where its output is missing, so a folder holding circuit.r1cs and circuit.wasm (copied to
    a machine without node) needs no circom."""
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    if not ((d / "circuit.r1cs").exists() and (d / "circuit.wasm").exists()):
        _compile(SOURCES / f"{name}.circom", d)
    if not (d / "input.json").exists():
        (d / "input.json").write_text(json.dumps(inputs(name)))
    if not (d / "witness.wtns").exists():
        subprocess.run([*CUZK, "wtns", "calculate", str(d / "circuit.wasm"), str(d / "input.json"),
                        str(d / "witness.wtns")], check=True)
    if not (d / "verification_key.json").exists():  # written last by setup: the folder is complete
        subprocess.run([*CUZK, "setup", "--quiet", "--name", f"{name} benchmark (testing only)",
                        str(d / "circuit.r1cs"), str(d / "circuit.zkey")], check=True)
    return d


def _compile(source: Path, d: Path) -> None:
    if not CIRCOM.exists():
        raise SystemExit("circom2 is not installed: npm ci --prefix tests/oracle")
    # circom2 runs in a WASI sandbox that resolves paths below its working directory only: run it from /.
    subprocess.run([str(CIRCOM), str(source), "--r1cs", "--wasm", "-l", str(ORACLE), "-o", str(d.resolve()),
                    *FLAGS.get(source.stem, ())],
                   cwd="/", check=True, stdout=subprocess.DEVNULL)
    js = d / f"{source.stem}_js"
    (js / f"{source.stem}.wasm").rename(d / "circuit.wasm")
    (d / f"{source.stem}.r1cs").rename(d / "circuit.r1cs")  # after the wasm: both present means compiled
    shutil.rmtree(js)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="circuits of benchmarks/circuits/ (default: all)")
    ap.add_argument("--out", type=Path, default=REPO / ".bench-cache" / "circuits")
    args = ap.parse_args(argv)
    for name in args.names or sorted(p.stem for p in SOURCES.glob("*.circom")):
        print(build(name, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
