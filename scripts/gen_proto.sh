#!/usr/bin/env bash
# Regenerate the committed gRPC/protobuf modules from src/cuzk/proto/cuzk.proto
# (into src, or into the directory given, which is how tests/test_proto.py checks them).
# Needs grpcio-tools (the `test` extra); users of the package need only grpcio + protobuf.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${1:-src}
"$PY" -m grpc_tools.protoc -I src --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" src/cuzk/proto/cuzk.proto
