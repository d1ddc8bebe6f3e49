#!/usr/bin/env bash
# Regenerate the bundled example that `cuzk bench` runs when given no key
# (src/cuzk/examples/synthetic_bn254/): a synthetic BN254 circuit of 1000 constraints
# (domain 2^10) made with cuzk's own tools, and a Groth16 key from cuzk's own setup.
# The key's toxic waste was sampled on the machine that ran this: it is for TESTING ONLY.
set -euo pipefail
cd "$(dirname "$0")/.."
CUZK=${CUZK:-.venv/bin/cuzk}
OUT=src/cuzk/examples/synthetic_bn254
rm -rf "$OUT"
"$CUZK" circuit synth --constraints 1000 --public 2 --curve bn254 --seed 20260101 --out "$OUT"
"$CUZK" setup "$OUT/circuit.r1cs" "$OUT/circuit.zkey" --curve bn254 --name "cuzk bundled example (testing only)"
du -cb "$OUT"/*
