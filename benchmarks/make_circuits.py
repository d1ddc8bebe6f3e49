"""Build the benchmark circuits of benchmarks/circuits/ (SHA-256 of 64 bytes, a 7-round Poseidon chain, a 2^16
Merkle batch): the circuits issue 17 times rapidsnark on, larger than ../shared/corpus holds.

Usage: .venv/bin/python benchmarks/make_circuits.py [--out DIR] [name ...]

Each circuit is compiled by circom 2 (the circom2 npm package of tests/oracle: `npm ci --prefix tests/oracle`), its
witness computed from a fixed input by `cuzk wtns calculate`, and its key made by `cuzk setup` without a ptau, so the
key is for testing only; it is a snarkjs-format zkey, which rapidsnark reads as well. Each folder then holds what
benchmarks/oneshot.py takes (circuit.zkey, witness.wtns, verification_key.json) beside circuit.r1cs, circuit.wasm and
input.json. Folders already built are kept; the default place is .bench-cache/circuits/ (git-ignored). Prints the
folders, one per line, for `oneshot.py $(make_circuits.py)`.
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
CUZK = Path(sys.executable).with_name("cuzk")


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
    d = out / name
    if (d / "verification_key.json").exists():
        return d
    if not CIRCOM.exists():
        raise SystemExit("circom2 is not installed: npm ci --prefix tests/oracle")
    source = SOURCES / f"{name}.circom"
    work = out / f"{name}.building"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # circom2 runs in a WASI sandbox that resolves paths below its working directory only: run it from /.
    subprocess.run([str(CIRCOM), str(source), "--r1cs", "--wasm", "-l", str(ORACLE), "-o", str(work.resolve())],
                   cwd="/", check=True, stdout=subprocess.DEVNULL)
    (work / f"{name}.r1cs").rename(work / "circuit.r1cs")
    (work / f"{name}_js" / f"{name}.wasm").rename(work / "circuit.wasm")
    shutil.rmtree(work / f"{name}_js")
    (work / "input.json").write_text(json.dumps(inputs(name)))
    subprocess.run([str(CUZK), "wtns", "calculate", str(work / "circuit.wasm"), str(work / "input.json"),
                    str(work / "witness.wtns")], check=True)
    subprocess.run([str(CUZK), "setup", "--quiet", "--name", f"{name} benchmark (testing only)",
                    str(work / "circuit.r1cs"), str(work / "circuit.zkey")], check=True)
    work.rename(d)
    return d


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
