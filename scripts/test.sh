#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need from this repo's own files, then runs pytest.
# Extra arguments go to pytest (e.g. `scripts/test.sh -m slow`).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: installing Node.js from Debian (needed for the snarkjs test oracle)" >&2
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
extras=test
case " $* " in *cluster*) extras=test,cluster ;; esac  # the Ray tests (-m cluster) need Ray
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$extras]" 2>&1 | grep -v '^WARNING: Location' || true
# The pinned protobuf generator's own venv, so tests/test_proto.py can check the committed modules against it.
[ -x .gen-proto-venv/bin/python ] || scripts/gen_proto.sh "$(mktemp -d)" 2>&1 | grep -v '^WARNING: Location' || true
{ [ -x tests/oracle/node_modules/.bin/snarkjs ] && [ -x tests/oracle/node_modules/.bin/circom2 ]; } \
  || npm ci --prefix tests/oracle --no-audit --no-fund --loglevel=error
# Compile (and cache on disk) the numba kernels once, in one process, before tests start
# daemons that would otherwise each compile them cold and race for the cache: the cache under
# .cache, the one tests/conftest.py gives the tests and their daemons.
ex=src/cuzk/examples/synthetic_bn254
CUZK_DATA_DIR="$PWD/.cache" .venv/bin/cuzk prove "$ex/circuit.zkey" "$ex/witness.wtns" "${TMPDIR:-/tmp}/cuzk-warmup-proof.json" "${TMPDIR:-/tmp}/cuzk-warmup-public.json"
exec .venv/bin/python -m pytest "$@"
