#!/bin/bash
# snarkjs-checks the proofs a test run kept where node was missing ($CUZK_UNVERIFIED_DIR, e.g. the GPU machine):
#   scripts/verify_unverified.sh DIR    — every DIR/NNNN/{verification_key,public,proof}.json; exits 1 if any is rejected.
set -u
dir=${1:?usage: $0 DIR}
snarkjs="$(dirname "$0")/../tests/oracle/node_modules/.bin/snarkjs"
ok=0 bad=0
for d in "$dir"/*/; do
  if "$snarkjs" groth16 verify "$d/verification_key.json" "$d/public.json" "$d/proof.json" 2>&1 | grep -q "OK"; then
    ok=$((ok + 1))
  else
    bad=$((bad + 1)); echo "REJECTED: $d"
  fi
done
echo "snarkjs accepted $ok, rejected $bad"
[ "$bad" -eq 0 ]
