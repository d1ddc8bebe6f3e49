#!/usr/bin/env bash
# Regenerate the committed gRPC/protobuf modules from src/cuzk/server/proto/cuzk.proto.
# Needs grpcio-tools (the `test` extra); users of the package need only grpcio + protobuf.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m grpc_tools.protoc -I src --python_out=src --pyi_out=src --grpc_python_out=src src/cuzk/server/proto/cuzk.proto
